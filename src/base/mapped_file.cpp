// POSIX implementation of MappedFile.
#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace onebit {

Result<MappedFile> MappedFile::open(const std::string& path) {
  // A FIFO or a device would block the open or never end: refused before opening.
  struct stat before {};
  if (::stat(path.c_str(), &before) == 0 && !S_ISREG(before.st_mode)) {
    return make_error("'" + path + "' is not a regular file (" +
                      (S_ISDIR(before.st_mode) ? "a directory" : S_ISFIFO(before.st_mode) ? "a FIFO" :
                       S_ISCHR(before.st_mode) || S_ISBLK(before.st_mode) ? "a device" : S_ISSOCK(before.st_mode) ? "a socket" : "special") +
                      "); give the path of a .gguf file");
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return make_error("cannot open '" + path + "': " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::string err = std::strerror(errno);
    ::close(fd);
    return make_error("cannot stat '" + path + "': " + err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error("'" + path + "' is not a regular file");
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string err = std::strerror(errno);
      ::close(fd);
      return make_error("cannot map '" + path + "': " + err);
    }
    f.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace onebit
