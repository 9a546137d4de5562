// What the Hugging Face converters (convert_hf: models, convert_drafters: MTP / DFlash heads)
// share: encoding a safetensors tensor as a GGUF type, the storage-type rule, llama's file type
// code, and writing the tensors out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/ggml_type.h"
#include "gguf/gguf_writer.h"
#include "model/convert_hf.h"
#include "model/safetensors.h"

namespace onebit {

struct OutTensor {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> ne;  // ggml order: [cols] or [cols, rows]
  std::vector<uint8_t> bytes;
};

// Writes one row of `cols` floats as `type` at dst (row_size(type, cols) bytes): f32 as is, f16 /
// bf16 rounded, a quantized type by ggml's reference quantizer.
void encode_row(GgmlType type, const float* row, int64_t cols, uint8_t* dst);

// Encodes t ([rows, cols], row-major) as `type` (f32, f16, bf16 or a quantized type by ggml's
// reference quantizer). permute_head_dim > 0: rows permuted per head as llama.cpp's
// LlamaModel.permute (HF rotate_half halves -> GGUF "normal" RoPE pairs).
Result<OutTensor> encode_tensor(const SafetensorsTensor& t, const std::string& name, GgmlType type,
                                int64_t permute_head_dim = 0);

// The type tensor `hf_name` is stored as: F32 when 1-D, else out_type, or F16 with a warning in
// `report` when its rows do not fill q8_0 blocks. An error for tensors of 0 or more than 2 dims.
Result<GgmlType> storage_type(const std::string& hf_name, const SafetensorsTensor& t, GgmlType out_type,
                              ConvertReport& report);

// llama_ftype of a whole-file type: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32.
uint32_t llama_file_type(GgmlType t);

// The name of directory `dir` ("dir/" names the same directory): general.name of a conversion.
std::string dir_name(const std::string& dir);

// Adds `tensors` to w, counts them into report, writes the file at path.
Status write_tensors(GgufWriter& w, const std::vector<OutTensor>& tensors, const std::string& path,
                     ConvertReport& report);

}  // namespace onebit
