// Reader of Hugging Face safetensors files (one file, or shards listed by an index JSON):
// memory-mapped, every header field validated before use. Format: 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}}, then the data. Knows no models.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"

namespace onebit {

enum class SafetensorsDtype { kF32, kF16, kBF16 };

// One tensor: a view of its bytes in the mapped file (row-major, little-endian).
struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;         // row-major, outermost first
  std::span<const uint8_t> data;
  int64_t n_elements() const;
  // Element i converted to float (exact for every supported dtype).
  float at(int64_t i) const;
};

// A checkpoint: the tensors of one or more safetensors files. Immutable; the maps stay alive as
// long as this object.
class SafetensorsCheckpoint {
 public:
  // Opens `dir`/model.safetensors, or the shards named by `dir`/model.safetensors.index.json.
  // Errors name the file, the tensor and the field (bad header, offsets past the end, a dtype
  // other than F32/F16/BF16, a size that does not match the shape).
  static Result<SafetensorsCheckpoint> open_dir(const std::string& dir);
  // Opens one file.
  static Result<SafetensorsCheckpoint> open_file(const std::string& path);

  // nullptr when absent.
  const SafetensorsTensor* find(const std::string& name) const;
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }

 private:
  Status add_file(const std::string& path);
  std::vector<std::unique_ptr<MappedFile>> maps_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

}  // namespace onebit
