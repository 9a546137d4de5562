// Private to quants.cpp and quants_k.cpp: helpers that reproduce ggml's scalar arithmetic bit for
// bit, and the per-type entry points of the K-quants. Not for use outside src/gguf/quants*.cpp.
#pragma once

#include <bit>
#include <climits>
#include <cstdint>
#include <cstring>

#include "gguf/quants.h"

// ggml's reference quantizers evaluate one IEEE operation at a time (ggml-base is compiled without
// FMA). Fusing a*b+c into one rounding would change the bytes we write, so contraction is off for
// every file that includes this header (GCC contracts by default even in ISO C++ mode).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace onebit::quants_detail {

static_assert(std::endian::native == std::endian::little, "block layouts are little-endian");

// Copies block i of a packed array at any alignment (file data need not be aligned for Block).
template <typename Block>
inline Block load_block(const void* src, int64_t i) {
  Block b;
  std::memcpy(&b, static_cast<const uint8_t*>(src) + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

template <typename Block>
inline void store_block(void* dst, int64_t i, const Block& b) {
  std::memcpy(static_cast<uint8_t*>(dst) + i * static_cast<int64_t>(sizeof(Block)), &b, sizeof(Block));
}

// ggml's MAX/MIN macros (not std::max/min: the NaN behaviour differs and must match).
inline float ggml_max(float a, float b) { return a > b ? a : b; }
inline int ggml_min(int a, int b) { return a < b ? a : b; }
inline int ggml_max(int a, int b) { return a > b ? a : b; }

// ggml's nearest_int: round half to even through the float adder (exact for |v| < 2^22). Outside
// that range (and for NaN) it returns what ggml's bit trick returns instead of being undefined.
inline int nearest_int(float v) {
  const float biased = v + 12582912.f;  // 1.5 * 2^23
  const int bits = std::bit_cast<int>(biased);
  return (bits & 0x007fffff) - 0x00400000;
}

// A C cast float -> int as x86's cvttss2si performs it: truncation toward zero, and INT_MIN for
// NaN or out-of-range values (where C leaves the conversion undefined). ggml's quantizers cast
// to int8_t/uint8_t, which GCC compiles to this instruction followed by taking the low byte.
inline int trunc_to_int(float v) {
  if (v > -2147483904.f && v < 2147483648.f) return static_cast<int>(v);
  return INT_MIN;
}

// K-quant entry points (quants_k.cpp). n_blocks blocks; src/dst at any alignment.
void dequantize_q4_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q5_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q6_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q8_k(const void* src, float* dst, int64_t n_blocks);
void quantize_q4_k(const float* src, void* dst, int64_t n_blocks);
void quantize_q5_k(const float* src, void* dst, int64_t n_blocks);
void quantize_q6_k(const float* src, void* dst, int64_t n_blocks);
void quantize_q8_k(const float* src, void* dst, int64_t n_blocks);

}  // namespace onebit::quants_detail
