// Random-weight models of any shape, for benchmarks at realistic sizes: a Hugging Face config.json
// (llama / qwen2 / qwen3) and a tokenizer (a GGUF's tokenizer.* keys or a tokenizer.json) -> a GGUF
// laid out as `1bit convert` lays out real checkpoints. Knows nothing of backends.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "gguf/ggml_type.h"

namespace onebit {

struct RandomModelOptions {
  std::string config_path;               // HF config.json
  std::string tokenizer_path;            // *.gguf (its tokenizer.* keys) or tokenizer.json
  std::string out_path;                  // the GGUF to write (replaced atomically)
  GgmlType out_type = GgmlType::kF16;    // matrices: kF32, kF16, kBF16 or kQ8_0; norms stay F32
  uint64_t seed = 1;                     // same seed, same weights
  float init_std = 0.02f;                // HF initializer_range
};

// Writes the model. Matrices are N(0, init_std); an optional config key "output_init_std" (a 1bit
// extension, not an HF key) gives output.weight (token_embd.weight when tied) its own std, for
// logits as spread as a trained model's. Errors name the config key, the tokenizer or the path (and
// the allowed values); a tokenizer whose size differs from the config's vocab_size is an error.
Status write_random_model(const RandomModelOptions& options);

}  // namespace onebit
