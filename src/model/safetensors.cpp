// Safetensors parsing with full validation (the format: huggingface/safetensors README).
#include "model/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "base/fp16.h"

namespace onebit {
namespace {

Error st_error(const std::string& path, const std::string& msg) {
  return make_error("safetensors: " + path + ": " + msg);
}

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit is 100 MB

Result<SafetensorsDtype> parse_dtype(const std::string& s) {
  if (s == "F32") return SafetensorsDtype::kF32;
  if (s == "F16") return SafetensorsDtype::kF16;
  if (s == "BF16") return SafetensorsDtype::kBF16;
  return make_error("dtype " + s + " is not supported; supported: F32, F16, BF16");
}

size_t dtype_bytes(SafetensorsDtype d) { return d == SafetensorsDtype::kF32 ? 4 : 2; }

}  // namespace

int64_t SafetensorsTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float SafetensorsTensor::at(int64_t i) const {
  const uint8_t* p = data.data() + i * static_cast<int64_t>(dtype_bytes(dtype));
  if (dtype == SafetensorsDtype::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == SafetensorsDtype::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

Status SafetensorsCheckpoint::add_file(const std::string& path) {
  auto map = MappedFile::open(path);
  if (!map.ok()) return st_error(path, map.message());
  auto owned = std::make_unique<MappedFile>(std::move(*map));
  const uint8_t* base = owned->data();
  const uint64_t size = owned->size();
  if (size < 8) return st_error(path, "file of " + std::to_string(size) + " bytes is too short for the header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);
  if (header_len > kMaxHeaderBytes || header_len > size - 8) {
    return st_error(path, "header length " + std::to_string(header_len) + " exceeds the file (" +
                              std::to_string(size) + " bytes) or the 100 MB limit");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(base + 8, base + 8 + header_len);
  } catch (const std::exception& e) {
    return st_error(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) return st_error(path, "header is not a JSON object");
  const uint64_t data_start = 8 + header_len, data_size = size - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string& name = it.key();
    const auto& e = it.value();
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets") ||
        !e["dtype"].is_string() || !e["shape"].is_array() || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      return st_error(path, "tensor " + name + ": needs dtype (string), shape (array) and data_offsets ([begin, end])");
    }
    SafetensorsTensor t;
    t.name = name;
    auto dt = parse_dtype(e["dtype"].get<std::string>());
    if (!dt.ok()) return st_error(path, "tensor " + name + ": " + dt.message());
    t.dtype = *dt;
    uint64_t n = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40)) {
        return st_error(path, "tensor " + name + ": shape entries must be integers in 0..2^40");
      }
      t.shape.push_back(d.get<int64_t>());
      n *= d.get<uint64_t>();
      if (n > (1ull << 40)) return st_error(path, "tensor " + name + ": more than 2^40 elements");
    }
    const auto& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return st_error(path, "tensor " + name + ": data_offsets must be non-negative integers");
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return st_error(path, "tensor " + name + ": data_offsets [" + std::to_string(begin) + ", " +
                                std::to_string(end) + "] outside the data section of " +
                                std::to_string(data_size) + " bytes");
    }
    if (end - begin != n * dtype_bytes(t.dtype)) {
      return st_error(path, "tensor " + name + ": " + std::to_string(end - begin) + " bytes for " +
                                std::to_string(n) + " elements of " + e["dtype"].get<std::string>());
    }
    t.data = {base + data_start + begin, static_cast<size_t>(end - begin)};
    if (tensors_.count(name)) return st_error(path, "tensor " + name + " appears in more than one file");
    tensors_.emplace(name, std::move(t));
  }
  maps_.push_back(std::move(owned));
  return ok_status();
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open_file(const std::string& path) {
  SafetensorsCheckpoint c;
  ONEBIT_TRY(c.add_file(path));
  return c;
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    const fs::path single = fs::path(dir) / "model.safetensors";
    if (!fs::exists(single)) {
      return make_error("safetensors: " + dir + " has neither model.safetensors nor model.safetensors.index.json");
    }
    return open_file(single.string());
  }
  nlohmann::json j;
  try {
    std::ifstream in(index);
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return st_error(index.string(), std::string("not valid JSON: ") + e.what());
  }
  if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
    return st_error(index.string(), "no weight_map object");
  }
  std::set<std::string> files;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
      return st_error(index.string(), "weight_map entry " + name + " must name a file in the same directory");
    }
    files.insert(file.get<std::string>());
  }
  SafetensorsCheckpoint c;
  for (const auto& f : files) ONEBIT_TRY(c.add_file((fs::path(dir) / f).string()));
  return c;
}

const SafetensorsTensor* SafetensorsCheckpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace onebit
