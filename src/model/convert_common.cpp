// Shared parts of the Hugging Face converters (convert_common.h).
#include "model/convert_common.h"

#include <cstring>
#include <filesystem>

#include "base/fp16.h"
#include "gguf/quants.h"

namespace onebit {
namespace {

// Output row h*hd + 2j + t takes input row h*hd + t*hd/2 + j.
int64_t permuted_source_row(int64_t row, int64_t head_dim) {
  const int64_t h = row / head_dim, w = row % head_dim;
  return h * head_dim + (w % 2) * (head_dim / 2) + w / 2;
}

}  // namespace

void encode_row(GgmlType type, const float* row, int64_t cols, uint8_t* dst) {
  if (type == GgmlType::kF32) {
    std::memcpy(dst, row, size_t(cols) * 4);
  } else if (type == GgmlType::kF16 || type == GgmlType::kBF16) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint16_t b = type == GgmlType::kF16 ? fp32_to_fp16(row[c]) : fp32_to_bf16(row[c]);
      std::memcpy(dst + 2 * c, &b, 2);
    }
  } else {
    quantize_row_reference(type, row, dst, cols);
  }
}

Result<OutTensor> encode_tensor(const SafetensorsTensor& t, const std::string& name, GgmlType type,
                                int64_t permute_head_dim) {
  OutTensor out{name, type, {}, {}};
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  const int64_t rows = cols == 0 ? 0 : t.n_elements() / cols;
  out.ne = t.shape.size() >= 2 ? std::vector<uint64_t>{uint64_t(cols), uint64_t(rows)} : std::vector<uint64_t>{uint64_t(cols)};
  if (permute_head_dim > 0 && rows % permute_head_dim != 0) {
    return make_error("convert: " + t.name + " has " + std::to_string(rows) + " rows, not a multiple of head_dim " +
                      std::to_string(permute_head_dim));
  }
  ONEBIT_ASSIGN_OR_RETURN(uint64_t row_bytes, row_size(type, cols));
  out.bytes.resize(row_bytes * rows);
  std::vector<float> row(cols);  // [cols]
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = permute_head_dim > 0 ? permuted_source_row(r, permute_head_dim) : r;
    for (int64_t c = 0; c < cols; ++c) row[c] = t.at(src * cols + c);
    encode_row(type, row.data(), cols, out.bytes.data() + r * row_bytes);
  }
  return out;
}

Result<GgmlType> storage_type(const std::string& hf_name, const SafetensorsTensor& t, GgmlType out_type,
                              ConvertReport& report) {
  if (t.shape.empty() || t.shape.size() > 2) {
    return make_error("convert: tensor " + hf_name + " has " + std::to_string(t.shape.size()) +
                      " dimensions; expected 1 or 2");
  }
  if (t.shape.size() == 1) return GgmlType::kF32;
  if (out_type == GgmlType::kQ8_0 && t.shape.back() % kQK8_0 != 0) {
    report.warnings.push_back(hf_name + ": " + std::to_string(t.shape.back()) +
                              " columns do not fill q8_0 blocks; stored as f16");
    return GgmlType::kF16;
  }
  return out_type;
}

uint32_t llama_file_type(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ8_0: return 7;
    default: return 32;
  }
}

std::string dir_name(const std::string& dir) {
  std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

Status write_tensors(GgufWriter& w, const std::vector<OutTensor>& tensors, const std::string& path,
                     ConvertReport& report) {
  for (const OutTensor& t : tensors) {
    ONEBIT_TRY(w.add_tensor(t.name, static_cast<uint32_t>(t.type), t.ne, t.bytes));
    report.n_bytes += t.bytes.size();
  }
  report.n_tensors = static_cast<int>(tensors.size());
  return w.write_file(path);
}

}  // namespace onebit
