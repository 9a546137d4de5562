// GgufWriter (gguf_writer.h): encodes metadata and tensor infos, pads as ggml does, and writes
// through a temporary file. Mirrors gguf_write_out in ggml's src/gguf.cpp.
#include "gguf/gguf_writer.h"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/check.h"
#include "base/checked_math.h"

namespace onebit {
namespace {

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const size_t old = out.size();
  out.resize(old + n);
  if (n > 0) std::memcpy(out.data() + old, p, n);
}

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

std::vector<uint8_t> tagged(GgufValueType t) {
  std::vector<uint8_t> out;
  put<uint32_t>(out, static_cast<uint32_t>(t));
  return out;
}

template <typename T>
std::vector<uint8_t> scalar(GgufValueType t, T v) {
  auto out = tagged(t);
  put(out, v);
  return out;
}

// The value's bytes after its type tag; for arrays: element type, count, elements.
void encode_body(const GgufValue& v, std::vector<uint8_t>& out) {
  switch (v.type) {
    case GgufValueType::kString:
      put_string(out, v.str);
      return;
    case GgufValueType::kArray:
      put<uint32_t>(out, static_cast<uint32_t>(v.array_type));
      put<uint64_t>(out, v.array_count);
      if (v.array_type == GgufValueType::kString) {
        for (auto s : v.strings) put_string(out, s);
      } else if (v.array_type == GgufValueType::kArray) {
        for (const auto& e : v.array_nested) encode_body(e, out);
      } else {
        put_bytes(out, v.raw.data(), v.raw.size());
      }
      return;
    default:
      put_bytes(out, v.raw.data(), v.raw.size());
  }
}

std::string num(uint64_t v) { return std::to_string(v); }

Status check_key(std::string_view key) {
  bool printable = !key.empty() && key.size() <= kGgufMaxKeyBytes;
  for (char c : key) printable = printable && c >= 0x20 && c < 0x7f;
  if (printable) return ok_status();
  return make_error("gguf writer: key '" + std::string(key.substr(0, 80)) + "' (" + num(key.size()) +
                    " bytes) is invalid; keys are 1 to 65535 bytes of printable ASCII");
}

}  // namespace

void GgufWriter::set_encoded(std::string_view key, std::vector<uint8_t> value) {
  for (auto& e : kv_) {
    if (e.key == key) {
      e.value = std::move(value);
      return;
    }
  }
  kv_.push_back({std::string(key), std::move(value)});
}

void GgufWriter::set_uint8(std::string_view k, uint8_t v) { set_encoded(k, scalar(GgufValueType::kUint8, v)); }
void GgufWriter::set_int8(std::string_view k, int8_t v) { set_encoded(k, scalar(GgufValueType::kInt8, v)); }
void GgufWriter::set_uint16(std::string_view k, uint16_t v) { set_encoded(k, scalar(GgufValueType::kUint16, v)); }
void GgufWriter::set_int16(std::string_view k, int16_t v) { set_encoded(k, scalar(GgufValueType::kInt16, v)); }
void GgufWriter::set_uint32(std::string_view k, uint32_t v) { set_encoded(k, scalar(GgufValueType::kUint32, v)); }
void GgufWriter::set_int32(std::string_view k, int32_t v) { set_encoded(k, scalar(GgufValueType::kInt32, v)); }
void GgufWriter::set_uint64(std::string_view k, uint64_t v) { set_encoded(k, scalar(GgufValueType::kUint64, v)); }
void GgufWriter::set_int64(std::string_view k, int64_t v) { set_encoded(k, scalar(GgufValueType::kInt64, v)); }
void GgufWriter::set_float32(std::string_view k, float v) { set_encoded(k, scalar(GgufValueType::kFloat32, v)); }
void GgufWriter::set_float64(std::string_view k, double v) { set_encoded(k, scalar(GgufValueType::kFloat64, v)); }
void GgufWriter::set_bool(std::string_view k, bool v) {
  set_encoded(k, scalar(GgufValueType::kBool, static_cast<uint8_t>(v ? 1 : 0)));
}

void GgufWriter::set_string(std::string_view key, std::string_view v) {
  auto out = tagged(GgufValueType::kString);
  put_string(out, v);
  set_encoded(key, std::move(out));
}

void GgufWriter::set_raw_array(std::string_view key, GgufValueType type, uint64_t count, const void* data,
                               size_t n_bytes) {
  auto out = tagged(GgufValueType::kArray);
  put<uint32_t>(out, static_cast<uint32_t>(type));
  put<uint64_t>(out, count);
  put_bytes(out, data, n_bytes);
  set_encoded(key, std::move(out));
}

void GgufWriter::set_bool_array(std::string_view key, const std::vector<bool>& values) {
  std::vector<uint8_t> bytes(values.begin(), values.end());
  set_raw_array(key, GgufValueType::kBool, bytes.size(), bytes.data(), bytes.size());
}

void GgufWriter::set_string_array(std::string_view key, std::span<const std::string_view> values) {
  auto out = tagged(GgufValueType::kArray);
  put<uint32_t>(out, static_cast<uint32_t>(GgufValueType::kString));
  put<uint64_t>(out, values.size());
  for (auto s : values) put_string(out, s);
  set_encoded(key, std::move(out));
}

void GgufWriter::set_string_array(std::string_view key, std::span<const std::string> values) {
  std::vector<std::string_view> views(values.begin(), values.end());
  set_string_array(key, std::span<const std::string_view>(views));
}

void GgufWriter::set_value(std::string_view key, const GgufValue& v) {
  auto out = tagged(v.type);
  encode_body(v, out);
  set_encoded(key, std::move(out));
}

void GgufWriter::copy_metadata(const GgufFile& f) {
  for (const auto& kv : f.metadata()) set_value(kv.key, kv.value);
}

bool GgufWriter::remove(std::string_view key) {
  for (auto it = kv_.begin(); it != kv_.end(); ++it) {
    if (it->key == key) {
      kv_.erase(it);
      return true;
    }
  }
  return false;
}

Status GgufWriter::add_tensor(std::string_view name, uint32_t raw_type, std::span<const uint64_t> ne,
                              std::span<const uint8_t> data) {
  const std::string where = "gguf writer: tensor '" + std::string(name.substr(0, 80)) + "'";
  if (name.empty() || name.size() > kGgufMaxTensorNameBytes) {
    return make_error(where + ": name is " + num(name.size()) + " bytes; it must be 1 to " +
                      num(kGgufMaxTensorNameBytes));
  }
  for (const auto& t : tensors_)
    if (t.name == name) return make_error(where + ": a tensor of that name was already added");
  if (ne.empty() || ne.size() > kGgufMaxDims) {
    return make_error(where + ": has " + num(ne.size()) + " dimensions; it must have 1 to " + num(kGgufMaxDims));
  }
  const auto traits = ggml_type_traits(raw_type);
  if (!traits) return make_error(where + ": unknown tensor type " + num(raw_type));
  std::optional<uint64_t> n = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] == 0 || ne[d] > static_cast<uint64_t>(INT64_MAX)) {
      return make_error(where + ": ne[" + num(d) + "] = " + num(ne[d]) + "; it must be 1 to 2^63-1");
    }
    if (n) n = checked_mul(*n, ne[d]);
  }
  if (!n || *n > static_cast<uint64_t>(INT64_MAX)) return make_error(where + ": holds more than 2^63 elements");
  if (ne[0] % traits->block_elems != 0) {
    return make_error(where + ": ne[0] = " + num(ne[0]) + " is not a multiple of the " + std::string(traits->name) +
                      " block size " + num(traits->block_elems));
  }
  auto bytes = checked_mul(*n / traits->block_elems, traits->block_bytes);
  if (!bytes || *bytes != data.size()) {
    return make_error(where + ": data is " + num(data.size()) + " bytes; " + std::string(traits->name) +
                      " with these dimensions needs " + (bytes ? num(*bytes) : std::string("over 2^64")));
  }
  tensors_.push_back({std::string(name), raw_type, std::vector<uint64_t>(ne.begin(), ne.end()), data});
  return ok_status();
}

Status GgufWriter::add_tensor(const GgufTensorInfo& t) {
  return add_tensor(t.name, t.raw_type, std::span<const uint64_t>(t.ne, t.n_dims), {t.data, t.n_bytes});
}

Result<std::vector<uint8_t>> GgufWriter::encode_metadata(uint64_t& alignment) const {
  alignment = kGgufDefaultAlignment;
  std::vector<uint8_t> out;
  put_bytes(out, "GGUF", 4);
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kv_.size());
  for (const auto& e : kv_) {
    ONEBIT_TRY(check_key(e.key));
    if (e.key == "general.alignment") {
      uint32_t type = 0, a = 0;
      if (e.value.size() == 8) {
        std::memcpy(&type, e.value.data(), 4);
        std::memcpy(&a, e.value.data() + 4, 4);
      }
      if (type != static_cast<uint32_t>(GgufValueType::kUint32) || a == 0 || !std::has_single_bit(a)) {
        return make_error("gguf writer: general.alignment must be a uint32 power of two greater than 0");
      }
      alignment = a;
    }
    put_string(out, e.key);
    put_bytes(out, e.value.data(), e.value.size());
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(out, d);
    put<uint32_t>(out, t.raw_type);
    put<uint64_t>(out, offset);
    offset += *checked_align_up(t.data.size(), alignment);  // sizes came from a mapped buffer
  }
  return out;
}

Result<std::vector<uint8_t>> GgufWriter::write_to_memory() const {
  uint64_t alignment = 0;
  ONEBIT_ASSIGN_OR_RETURN(std::vector<uint8_t> out, encode_metadata(alignment));
  if (!tensors_.empty()) out.resize(*checked_align_up(out.size(), alignment), 0);
  for (const auto& t : tensors_) {
    put_bytes(out, t.data.data(), t.data.size());
    out.resize(*checked_align_up(out.size(), alignment), 0);
  }
  return out;
}

namespace {

// Writes `n` bytes or reports errno; a short write without errno is reported as "disk full?".
bool write_all(std::FILE* f, const void* p, size_t n) { return n == 0 || std::fwrite(p, 1, n, f) == n; }

}  // namespace

Status GgufWriter::write_file(const std::string& path) const {
  uint64_t alignment = 0;
  ONEBIT_ASSIGN_OR_RETURN(std::vector<uint8_t> meta, encode_metadata(alignment));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return make_error("gguf writer: cannot create '" + tmp + "' to write '" + path + "': " + std::strerror(errno) +
                      " (check that the directory exists and is writable)");
  }
  static const uint8_t kZeros[256] = {};
  uint64_t pos = meta.size();
  bool ok = write_all(f, meta.data(), meta.size());
  auto pad = [&]() {
    const uint64_t n = *checked_align_up(pos, alignment) - pos;  // pos is a real file offset
    for (uint64_t left = n; ok && left > 0;) {
      const size_t chunk = left < sizeof(kZeros) ? static_cast<size_t>(left) : sizeof(kZeros);
      ok = write_all(f, kZeros, chunk);
      left -= chunk;
    }
    pos += n;
  };
  if (!tensors_.empty()) pad();
  for (const auto& t : tensors_) {
    if (!ok) break;
    ok = write_all(f, t.data.data(), t.data.size());
    pos += t.data.size();
    pad();
  }
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    std::remove(tmp.c_str());
    return make_error("gguf writer: writing '" + path + "' failed: " +
                      std::strerror(ok ? errno : write_errno) + " (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::remove(tmp.c_str());
    return make_error("gguf writer: cannot rename '" + tmp + "' to '" + path + "': " + err);
  }
  return ok_status();
}

}  // namespace onebit
