// `1bit quantize`: re-encodes a GGUF model's matrices to another type, or to the K-quant mixes
// Q4_K_M / Q5_K_M with llama.cpp's per-tensor rules (llama_tensor_get_type in llama-quant.cpp).
// Uses the reference quantizers (gguf/quants.h), so files match what llama-quantize writes
// without an importance matrix. Knows nothing of backends.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "gguf/ggml_type.h"

namespace onebit {

// A target: one type for every matrix, or a llama.cpp mix.
enum class QuantMix { kNone, kQ4_K_M, kQ5_K_M };
struct QuantTarget {
  GgmlType type = GgmlType::kQ8_0;  // the base type (kQ4_K / kQ5_K for the mixes)
  QuantMix mix = QuantMix::kNone;
};

// Parses "q4_0", "Q8_0", "f16", "q6_K", "Q4_K_M", "q5_k_m" (case-insensitive); nullopt otherwise.
std::optional<QuantTarget> parse_quant_target(std::string_view name);

struct QuantizeOptions {
  std::string in_path, out_path;  // out replaced atomically
  QuantTarget target;
  int n_threads = 0;              // 0: all hardware threads
  int32_t hadamard = 0;           // 32: rotate the multiplied matrices per 32-block along the input
                                  // before encoding them (model/rotation.h) and stamp
                                  // onebit.hadamard_q4_0 = 32; 0: no rotation
  // Called after each tensor with (tensors done, total, name, type written); may be empty.
  std::function<void(int, int, std::string_view, GgmlType)> progress;
};

// The type a tensor gets under `target` (norms, biases and other 1-D tensors stay F32;
// output.weight gets Q6_K unless the target is Q8_0 or a float; Q4_K_M / Q5_K_M give Q6_K to
// attn_v and ffn_down in llama.cpp's use_more_bits layers). Exposed for tests.
GgmlType quant_type_for(const QuantTarget& target, std::string_view name, int n_dims, int64_t n_cols,
                        int layer_idx, int n_layers, bool tied_output);

// Writes the quantized model. Errors name the input, the tensor and the type.
Status quantize_model(const QuantizeOptions& options);

}  // namespace onebit
