// The progress display; see progress.h.
#include "bench/progress.h"

#include <unistd.h>

#include <cstdio>

namespace onebit {

bool Progress::stderr_is_tty() { return ::isatty(STDERR_FILENO) == 1; }

void Progress::write_status(const std::string& line) {
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  line_shown_ = true;
}

void Progress::status(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (quiet_ || !tty_) return;
  write_status(line);
}

void Progress::step(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (quiet_) return;
  if (tty_) {
    write_status(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

void Progress::note(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_ && line_shown_) std::fputs("\r\033[K", stderr);
  line_shown_ = false;
  std::fprintf(stderr, "%s\n", line.c_str());
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_ && line_shown_) std::fputs("\r\033[K", stderr);
  line_shown_ = false;
  std::fflush(stderr);
}

}  // namespace onebit
