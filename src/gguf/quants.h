// Block layouts of ggml's quantized tensor types, their dequantization to float and ggml's
// reference quantizers. ggml/src/ggml-common.h and ggml-quants.c are the spec; see docs/quants.md.
// Scalar, written for clarity: this is the oracle that SIMD kernels are tested against.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "gguf/ggml_type.h"

namespace onebit {

inline constexpr int kQK4_0 = 32;  // elements per block of the "legacy" types
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK8_1 = 32;
inline constexpr int kQK_K = 256;       // elements per K-quant super-block (ggml's default build)
inline constexpr int kKScaleSize = 12;  // bytes of packed 6-bit scales and mins in Q4_K / Q5_K

// Half-precision fields hold raw IEEE binary16 bits (base/fp16.h converts them).
// Element order within each block is given in docs/quants.md.

// y = d * (q - 8), q a 4-bit code. Elements 0..15 are the low nibbles of qs, 16..31 the high.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];  // [16]
};
static_assert(sizeof(BlockQ4_0) == 18);

// y = d * q + m.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_1 / 2];  // [16]
};
static_assert(sizeof(BlockQ4_1) == 20);

// y = d * (q - 16), q 5 bits: low 4 in qs as in Q4_0, bit 4 of element j is bit j of qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];           // 32 high bits, little-endian
  uint8_t qs[kQK5_0 / 2];  // [16]
};
static_assert(sizeof(BlockQ5_0) == 22);

// y = d * q + m, q 5 bits packed as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];  // [16]
};
static_assert(sizeof(BlockQ5_1) == 24);

// y = d * q, q signed 8-bit.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];  // [32]
};
static_assert(sizeof(BlockQ8_0) == 34);

// Activations for Q4_1/Q5_1 dot products: y = d * q, and s = d * sum(q) (as half).
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK8_1];  // [32]
};
static_assert(sizeof(BlockQ8_1) == 36);

// Super-block of 8 sub-blocks of 32: y = d * sc[j] * q - dmin * m[j], q 4 bits, sc and m 6 bits
// packed in `scales` (read them with get_scale_min_k4).
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];  // [12]
  uint8_t qs[kQK_K / 2];        // [4 chunks of 64 elements][32 bytes]
};
static_assert(sizeof(BlockQ4_K) == 144);

// As Q4_K with a fifth bit per element in qh.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];  // [12]
  uint8_t qh[kQK_K / 8];        // [32]: bit 2c (2c+1) of qh[l] is element 64c+l (64c+32+l)
  uint8_t qs[kQK_K / 2];        // [4 chunks][32]
};
static_assert(sizeof(BlockQ5_K) == 176);

// Super-block of 16 sub-blocks of 16: y = d * scales[j] * (q - 32), q 6 bits (4 in ql, 2 in qh).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // [2 halves of 128 elements][64]
  uint8_t qh[kQK_K / 4];      // [2 halves][32]
  int8_t scales[kQK_K / 16];  // [16]
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Activations for K-quant dot products: y = d * q; bsums[j] = sum of qs[16j .. 16j+15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];           // [256]
  int16_t bsums[kQK_K / 16];  // [16]
};
static_assert(sizeof(BlockQ8_K) == 292);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block, unpacked from `q` (the 12
// scale bytes); ggml's get_scale_min_k4. Layout in docs/quants.md.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// True for the types dequantize_row accepts: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
// Q4_K, Q5_K, Q6_K, Q8_K.
bool can_dequantize(GgmlType type);
// True for the types quantize_row_reference accepts (the same set as can_dequantize).
bool can_quantize(GgmlType type);

// Bytes taken by `n` elements of `type`. Errors (naming the type, n and the fix) when the type has
// no known block layout, n is negative or not a multiple of the block size, or the size overflows.
Result<uint64_t> row_size(GgmlType type, int64_t n);

// Decodes n elements of `type` from `src` (any alignment) into dst[n]. Element order is ggml's.
// CHECKs can_dequantize(type) and that n is a non-negative multiple of the block size: callers
// validate outside input first (row_size does). Allocation-free; src and dst must not overlap.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Encodes src[n] as `type` into `dst` (row_size(type, n) bytes, any alignment), bit-identical to
// ggml's quantize_row_<type>_ref (what llama-quantize writes without an importance matrix).
// Same CHECKs as dequantize_row. Non-finite inputs give unspecified codes but never UB or a crash.
void quantize_row_reference(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace onebit
