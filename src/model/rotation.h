// Hadamard-rotated files (`1bit quantize --hadamard 32`, onebit.hadamard_q4_0 = 32): which tensors
// the rotation covers, shared by the quantizer (which rotates them) and the loader (which marks
// them so the backend rotates their inputs: Tensor::in_rotation, backend/hadamard.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "gguf/gguf_reader.h"

namespace onebit {

inline constexpr std::string_view kHadamardKey = "onebit.hadamard_q4_0";

// The matrices the forward multiplies (every 2-D, or 3-D stacked, tensor named *.weight) whose
// input width is a multiple of `block`; not token_embd (read by rows, also when it serves as the
// tied output) nor ssm_conv1d (a convolution).
bool rotated_by_hadamard(std::string_view name, int n_dims, int64_t n_cols, int32_t block);

// The file's rotation block: onebit.hadamard_q4_0, 0 when absent. Errors name any other value
// than 32.
Result<int32_t> hadamard_block(const GgufFile& file);

}  // namespace onebit
