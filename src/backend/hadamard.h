// The orthonormal Walsh-Hadamard transform over blocks of a row (Hadamard-rotated weights,
// onebit.hadamard_q4_0): H_b / sqrt(b) in Sylvester order is symmetric and its own inverse, so a
// matrix W whose columns were rotated per block (W H) and an input rotated the same way (x H) give
// x W^T = (x H)(W H)^T. Rotating spreads outliers over their block, which 4-bit blocks quantize
// better (QuaRot, Ashkboos et al. 2024; SpinQuant).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

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

// The same for float rows and blocks of 32 (the activations of a rotated weight's products): the
// five butterfly stages in any order give the same transform (each acts on one bit of the index);
// with AVX2, the 32 floats in four registers, the three short stages by in-register permutes.
inline void hadamard_rotate32(float* x, int64_t n) {
  for (int64_t b0 = 0; b0 < n; b0 += 32) {
    float* v = x + b0;
#if defined(__AVX2__)
    __m256 r[4] = {_mm256_loadu_ps(v), _mm256_loadu_ps(v + 8), _mm256_loadu_ps(v + 16), _mm256_loadu_ps(v + 24)};
    const auto pair = [](__m256& a, __m256& b) {
      const __m256 s = _mm256_add_ps(a, b), d = _mm256_sub_ps(a, b);
      a = s;
      b = d;
    };
    pair(r[0], r[2]), pair(r[1], r[3]);  // stride 16
    pair(r[0], r[1]), pair(r[2], r[3]);  // stride 8
    const __m256 scale = _mm256_set1_ps(0.17677669529663687f);
    for (__m256& q : r) {
      __m256 p = _mm256_permute2f128_ps(q, q, 1);  // stride 4: lower half a + b, upper a - b
      q = _mm256_blend_ps(_mm256_add_ps(q, p), _mm256_sub_ps(p, q), 0xF0);
      p = _mm256_permute_ps(q, 0x4E);  // stride 2
      q = _mm256_blend_ps(_mm256_add_ps(q, p), _mm256_sub_ps(p, q), 0xCC);
      p = _mm256_permute_ps(q, 0xB1);  // stride 1
      q = _mm256_mul_ps(_mm256_blend_ps(_mm256_add_ps(q, p), _mm256_sub_ps(p, q), 0xAA), scale);
    }
    for (int i = 0; i < 4; ++i) _mm256_storeu_ps(v + 8 * i, r[i]);
#else
    hadamard_rotate(v, 32, 32);
#endif
  }
}

}  // namespace onebit
