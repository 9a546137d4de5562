// Hugging Face checkpoint (config.json + safetensors + tokenizer.json) -> GGUF, for llama, qwen2
// and qwen3, laid out as llama.cpp's convert_hf_to_gguf.py lays them out (tensor names, metadata
// keys, llama q/k row permutation). The `1bit convert` command calls convert_hf.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/ggml_type.h"

namespace onebit {

struct ConvertOptions {
  std::string hf_dir;                     // holds config.json, model.safetensors[.index.json]
  std::string out_path;                   // the GGUF to write (replaced atomically)
  GgmlType out_type = GgmlType::kF16;     // matrices: kF32, kF16, kBF16 or kQ8_0; vectors stay F32
};

struct ConvertReport {
  std::string architecture;               // "llama", "qwen2", "qwen3"
  int n_tensors = 0;
  uint64_t n_bytes = 0;                   // tensor data written
  std::vector<std::string> warnings;      // e.g. a tokenizer that could not be converted
};

// Converts. Errors name the file, the config field or tensor, the value and what is supported;
// nothing is written on error.
Result<ConvertReport> convert_hf(const ConvertOptions& options);

}  // namespace onebit
