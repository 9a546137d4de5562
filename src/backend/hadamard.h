// The orthonormal Walsh-Hadamard transform over blocks of a row (Hadamard-rotated weights,
// onebit.hadamard_q4_0): H_b / sqrt(b) in Sylvester order is symmetric and its own inverse, so a
// matrix W whose columns were rotated per block (W H) and an input rotated the same way (x H) give
// x W^T = (x H)(W H)^T. Rotating spreads outliers over their block, which 4-bit blocks quantize
// better (QuaRot, Ashkboos et al. 2024; SpinQuant).
#pragma once

#include <cmath>
#include <cstdint>

namespace onebit {

// x[0 .. n) rotated in place per block of `block` elements (a power of two dividing n).
template <typename T>
void hadamard_rotate(T* x, int64_t n, int64_t block) {
  const T scale = T(1) / std::sqrt(T(block));
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    T* v = x + b0;
    for (int64_t len = 1; len < block; len *= 2) {
      for (int64_t i = 0; i < block; i += 2 * len) {
        for (int64_t j = i; j < i + len; ++j) {
          const T a = v[j], c = v[j + len];
          v[j] = a + c;
          v[j + len] = a - c;
        }
      }
    }
    for (int64_t j = 0; j < block; ++j) v[j] *= scale;
  }
}

}  // namespace onebit
