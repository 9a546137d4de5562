// GGUF v3 writer: metadata and tensors, laid out as ggml's gguf writer (gguf_write_out) and
// gguf-py lay them out, so read -> write -> read of such a file is byte-identical. Knows no models.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_reader.h"

namespace onebit {

// Collects metadata (in insertion order) and tensors, then writes a GGUF v3 file.
// Layout: header, key-values, tensor infos, zero padding to the alignment, then each tensor's
// bytes padded with zeros to the alignment. The padding after the tensor infos is written only
// when there is at least one tensor (as gguf-py does for vocab-only files; ggml always pads).
// The alignment is general.alignment when set (a uint32 power of two), else 32.
// Not thread-safe; tensor data is referenced, not copied, and must outlive write_*().
class GgufWriter {
 public:
  // Scalar setters. Setting a key that exists replaces its value in place (its position is kept).
  void set_uint8(std::string_view key, uint8_t v);
  void set_int8(std::string_view key, int8_t v);
  void set_uint16(std::string_view key, uint16_t v);
  void set_int16(std::string_view key, int16_t v);
  void set_uint32(std::string_view key, uint32_t v);
  void set_int32(std::string_view key, int32_t v);
  void set_uint64(std::string_view key, uint64_t v);
  void set_int64(std::string_view key, int64_t v);
  void set_float32(std::string_view key, float v);
  void set_float64(std::string_view key, double v);
  void set_bool(std::string_view key, bool v);
  void set_string(std::string_view key, std::string_view v);

  // Array setters: numeric element types follow T (uint8_t ... double); bools one byte each.
  template <typename T>
  void set_array(std::string_view key, std::span<const T> values);
  void set_bool_array(std::string_view key, const std::vector<bool>& values);
  void set_string_array(std::string_view key, std::span<const std::string_view> values);
  void set_string_array(std::string_view key, std::span<const std::string> values);

  // Copies a value the reader parsed, keeping its type exactly (nested arrays included).
  void set_value(std::string_view key, const GgufValue& v);
  // Copies every metadata entry of `f` in file order (general.alignment included).
  void copy_metadata(const GgufFile& f);
  // Removes a key; returns false when it was absent.
  bool remove(std::string_view key);

  // Adds a tensor; `ne` in ggml order (ne[0] innermost), 1 to 4 dims. `data` must hold exactly
  // the type's byte size and stay alive until the write. Errors name the tensor and the value.
  Status add_tensor(std::string_view name, uint32_t raw_type, std::span<const uint64_t> ne,
                    std::span<const uint8_t> data);
  // Adds a tensor the reader parsed (name, type, dims, and a view of its bytes).
  Status add_tensor(const GgufTensorInfo& t);

  // The whole file in memory. Errors: a bad general.alignment or an invalid key.
  Result<std::vector<uint8_t>> write_to_memory() const;
  // Writes `path` through a temporary file in the same directory, then renames it over `path`.
  // Errors name the path and the system's reason; the temporary file is removed on failure.
  Status write_file(const std::string& path) const;

  size_t n_kv() const { return kv_.size(); }
  size_t n_tensors() const { return tensors_.size(); }

 private:
  struct Entry {
    std::string key;
    std::vector<uint8_t> value;  // u32 type tag followed by the encoded value
  };
  struct Tensor {
    std::string name;
    uint32_t raw_type = 0;
    std::vector<uint64_t> ne;
    std::span<const uint8_t> data;
  };
  void set_encoded(std::string_view key, std::vector<uint8_t> value);
  void set_raw_array(std::string_view key, GgufValueType type, uint64_t count, const void* data, size_t n_bytes);
  // Header, key-values and tensor infos (no padding); fails on a bad key or alignment.
  Result<std::vector<uint8_t>> encode_metadata(uint64_t& alignment) const;

  std::vector<Entry> kv_;
  std::vector<Tensor> tensors_;
};

// The GgufValueType a C++ numeric type maps to (for set_array).
template <typename T>
constexpr GgufValueType gguf_type_of() {
  if constexpr (std::is_same_v<T, uint8_t>) return GgufValueType::kUint8;
  else if constexpr (std::is_same_v<T, int8_t>) return GgufValueType::kInt8;
  else if constexpr (std::is_same_v<T, uint16_t>) return GgufValueType::kUint16;
  else if constexpr (std::is_same_v<T, int16_t>) return GgufValueType::kInt16;
  else if constexpr (std::is_same_v<T, uint32_t>) return GgufValueType::kUint32;
  else if constexpr (std::is_same_v<T, int32_t>) return GgufValueType::kInt32;
  else if constexpr (std::is_same_v<T, uint64_t>) return GgufValueType::kUint64;
  else if constexpr (std::is_same_v<T, int64_t>) return GgufValueType::kInt64;
  else if constexpr (std::is_same_v<T, float>) return GgufValueType::kFloat32;
  else {
    static_assert(std::is_same_v<T, double>, "set_array takes integers, float or double");
    return GgufValueType::kFloat64;
  }
}

template <typename T>
void GgufWriter::set_array(std::string_view key, std::span<const T> values) {
  set_raw_array(key, gguf_type_of<T>(), values.size(), values.data(), values.size_bytes());
}

}  // namespace onebit
