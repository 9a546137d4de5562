// GGUF (v2, v3, little-endian) reader: maps a file and validates every field before use.
// Spec: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md. Knows nothing of models.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "gguf/ggml_type.h"

namespace onebit {

// GGUF metadata value types (numeric values as stored in the file).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// The spec's name of a value type ("uint32", "string", "array"); "type<N>" when unknown.
std::string_view gguf_value_type_name(GgufValueType t);
// Size in bytes of a scalar value type; 0 for kString, kArray and unknown types.
size_t gguf_value_type_size(GgufValueType t);
// True when `raw` is one of the 13 value types of GGUF v2/v3.
bool gguf_value_type_known(uint32_t raw);

// Limits the reader enforces beyond the spec (see docs/gguf.md).
inline constexpr int kGgufMaxArrayDepth = 8;          // arrays nested deeper are refused
// Nested-array elements per file: each costs ~100 bytes of GgufValue for 12 file bytes, so this
// bounds memory; ggml refuses nested arrays altogether, so no real file comes near it.
inline constexpr uint64_t kGgufMaxNestedElements = uint64_t{1} << 20;
inline constexpr uint64_t kGgufMaxKeyBytes = 65535;   // the spec's key length limit
inline constexpr uint64_t kGgufMaxTensorNameBytes = 63;  // ggml's GGML_MAX_NAME - 1
inline constexpr uint32_t kGgufMaxDims = 4;           // ggml's GGML_MAX_DIMS
inline constexpr uint64_t kGgufDefaultAlignment = 32;

// One metadata value. Strings and array payloads point into the mapped file (no copies).
// For an array, `array_type` is the element type and `array_count` its length; scalar elements
// are at `raw` (little-endian, packed), string elements are in `strings`. Nested arrays are
// allowed by the spec; each element is a parsed kArray value in `array_nested` (depth-limited).
// For every array `raw` spans the whole encoded payload after the element type and count.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  std::span<const uint8_t> raw;          // scalar bytes, or the packed array payload
  std::string_view str;                  // kString
  GgufValueType array_type = GgufValueType::kUint8;
  uint64_t array_count = 0;
  std::vector<std::string_view> strings; // kArray of kString
  std::vector<GgufValue> array_nested;   // kArray of kArray

  // Scalar accessors: nullopt-free by design; callers check `type` (or use GgufFile's typed get).
  bool is_integer() const;
  bool is_float() const;
  int64_t as_int() const;       // any integer or bool type; CHECKs type
  uint64_t as_uint() const;     // any integer or bool type; CHECKs type
  double as_float() const;      // float or integer types; CHECKs type
  bool as_bool() const;         // kBool; CHECKs type

  // Element i of a numeric array (0 <= i < array_count), converted; CHECKs type and range.
  int64_t array_int(uint64_t i) const;
  double array_float(uint64_t i) const;
};

struct GgufKeyValue {
  std::string_view key;
  GgufValue value;
};

// One entry of the tensor directory. `data` points into the mapped file and holds `n_bytes`.
struct GgufTensorInfo {
  std::string_view name;
  uint32_t n_dims = 0;
  uint64_t ne[4] = {1, 1, 1, 1};  // ggml order: ne[0] is the innermost (contiguous) dimension
  uint32_t raw_type = 0;          // GgmlType value as stored
  uint64_t offset = 0;            // relative to the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;

  GgmlType type() const { return static_cast<GgmlType>(raw_type); }
};

// A parsed, validated GGUF file. Immutable after open; safe to read from many threads.
// The mapping (or the caller's buffer for from_memory) must outlive every view handed out.
class GgufFile {
 public:
  // Maps and validates `path`. Errors name the file, the field and the value.
  static Result<GgufFile> open(const std::string& path);
  // Validates a buffer the caller keeps alive (tests, fuzzing). `name` is used in messages.
  static Result<GgufFile> from_memory(std::span<const uint8_t> bytes, std::string name = "<memory>");

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Start of the tensor data section (end of metadata rounded up to the alignment). A file with
  // no tensors may stop before that padding; data_offset() is then the file size.
  uint64_t data_offset() const { return data_offset_; }
  std::span<const uint8_t> bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

  const std::vector<GgufKeyValue>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  // Lookup by exact key / tensor name; nullptr when absent.
  const GgufValue* find(std::string_view key) const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // Typed getters for outside-input use: an error names the key, the expected and found type.
  Result<std::string> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;      // any integer type
  Result<uint64_t> get_uint(std::string_view key) const;    // any non-negative integer
  Result<double> get_float(std::string_view key) const;     // float or integer types
  Result<bool> get_bool(std::string_view key) const;
  // Array getters; the element type must match (numeric arrays accept any numeric element).
  Result<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Result<std::vector<float>> get_float_array(std::string_view key) const;

 private:
  GgufFile() = default;
  std::shared_ptr<MappedFile> map_;  // null for from_memory
  std::span<const uint8_t> bytes_;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  friend class GgufParser;
};

}  // namespace onebit
