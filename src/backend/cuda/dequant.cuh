// Dequantization on the device, shared by the CUDA backend's kernels (included by
// cuda_backend.cu and mma_matmul.cuh): deq<T>(row, e) decodes element e of a row exactly as
// gguf/quants.cpp does (the same float operations, each rounded alone: __fmul_rn / __fadd_rn, so
// no fused multiply-add changes a bit); load_chunk<T> / decode_chunk<T> the 32 elements of one
// chunk at once, each value as deq<T> gives it, for the tensor-core tiles.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "gguf/ggml_type.h"

namespace onebit::cuda_detail {

inline constexpr int kF32 = int(GgmlType::kF32), kF16 = int(GgmlType::kF16), kBF16 = int(GgmlType::kBF16),
              kQ4_0 = int(GgmlType::kQ4_0), kQ4_1 = int(GgmlType::kQ4_1), kQ5_0 = int(GgmlType::kQ5_0),
              kQ5_1 = int(GgmlType::kQ5_1), kQ8_0 = int(GgmlType::kQ8_0), kQ4_K = int(GgmlType::kQ4_K),
              kQ5_K = int(GgmlType::kQ5_K), kQ6_K = int(GgmlType::kQ6_K);

// ---- dequantization of one element ----

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Element e of a row of type T (all block offsets are even, so 16-bit fields are aligned).
template <int T>
__device__ __forceinline__ float deq(const uint8_t* __restrict__ row, int64_t e) {
  if constexpr (T == kF32) {
    return reinterpret_cast<const float*>(row)[e];
  } else if constexpr (T == kF16) {
    return h2f(reinterpret_cast<const uint16_t*>(row)[e]);
  } else if constexpr (T == kBF16) {
    return __uint_as_float(uint32_t(reinterpret_cast<const uint16_t*>(row)[e]) << 16);
  } else if constexpr (T == kQ8_0) {
    const uint8_t* b = row + 34 * (e >> 5);
    return __fmul_rn(float(int8_t(b[2 + (e & 31)])), h2f(ld_u16(b)));
  } else if constexpr (T == kQ4_0) {
    const uint8_t* b = row + 18 * (e >> 5);
    const int l = int(e & 31);
    const int byte = b[2 + (l & 15)];
    const int q = l < 16 ? (byte & 15) : (byte >> 4);
    return __fmul_rn(float(q - 8), h2f(ld_u16(b)));
  } else if constexpr (T == kQ4_1) {
    const uint8_t* b = row + 20 * (e >> 5);
    const int l = int(e & 31);
    const int byte = b[4 + (l & 15)];
    const int q = l < 16 ? (byte & 15) : (byte >> 4);
    return __fadd_rn(__fmul_rn(float(q), h2f(ld_u16(b))), h2f(ld_u16(b + 2)));
  } else if constexpr (T == kQ5_0) {
    const uint8_t* b = row + 22 * (e >> 5);
    const int l = int(e & 31);
    const int byte = b[6 + (l & 15)];
    const int hb = (b[2 + (l >> 3)] >> (l & 7)) & 1;
    const int q = (l < 16 ? (byte & 15) : (byte >> 4)) | (hb << 4);
    return __fmul_rn(float(q - 16), h2f(ld_u16(b)));
  } else if constexpr (T == kQ5_1) {
    const uint8_t* b = row + 24 * (e >> 5);
    const int l = int(e & 31);
    const int byte = b[8 + (l & 15)];
    const int hb = (b[4 + (l >> 3)] >> (l & 7)) & 1;
    const int q = (l < 16 ? (byte & 15) : (byte >> 4)) | (hb << 4);
    return __fadd_rn(__fmul_rn(float(q), h2f(ld_u16(b))), h2f(ld_u16(b + 2)));
  } else if constexpr (T == kQ4_K) {
    const uint8_t* b = row + 144 * (e >> 8);
    const int j = int(e >> 5) & 7, l = int(e & 31);
    const int byte = b[16 + 32 * (j >> 1) + l];
    const int q = (j & 1) ? (byte >> 4) : (byte & 15);
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    const float d1 = __fmul_rn(h2f(ld_u16(b)), float(sc)), m1 = __fmul_rn(h2f(ld_u16(b + 2)), float(m));
    return __fsub_rn(__fmul_rn(d1, float(q)), m1);
  } else if constexpr (T == kQ5_K) {
    const uint8_t* b = row + 176 * (e >> 8);
    const int j = int(e >> 5) & 7, l = int(e & 31);
    const int byte = b[48 + 32 * (j >> 1) + l];
    const int q = ((j & 1) ? (byte >> 4) : (byte & 15)) + (((b[16 + l] >> j) & 1) << 4);
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    const float d1 = __fmul_rn(h2f(ld_u16(b)), float(sc)), m1 = __fmul_rn(h2f(ld_u16(b + 2)), float(m));
    return __fsub_rn(__fmul_rn(d1, float(q)), m1);
  } else if constexpr (T == kQ6_K) {
    const uint8_t* b = row + 210 * (e >> 8);
    const int t = int(e >> 5) & 7, l = int(e & 31);
    const int h = t >> 2, s = t & 3;
    const int lowbyte = b[64 * h + l + 32 * (s & 1)];
    const int low = s < 2 ? (lowbyte & 15) : (lowbyte >> 4);
    const int hi = (b[128 + 32 * h + l] >> (2 * s)) & 3;
    const int q = (low | (hi << 4)) - 32;
    const int sc = int8_t(b[192 + 8 * h + l / 16 + 2 * s]);
    return __fmul_rn(__fmul_rn(h2f(ld_u16(b + 208)), float(sc)), float(q));
  } else {
    static_assert(T < 0, "unsupported type");
    return 0.f;
  }
}

// One 32-element chunk c of a row of type T in two steps, so that a kernel can issue the loads of
// its next chunk before working on this one: load_chunk<T> reads the chunk's bytes (2-byte loads:
// blocks are only 2-byte aligned) into ChunkRaw<T>, decode_chunk<T> turns them into the 32 floats,
// each exactly deq<T>'s value (zero past k).
template <int T>
inline constexpr int kChunkWords = T == kQ8_0 ? 17 : T == kQ4_0 || T == kQ4_1 || T == kQ5_0 || T == kQ5_1 ? 12
                                   : T == kQ4_K ? 21 : T == kQ5_K ? 37 : T == kQ6_K ? 34 : 32;

template <int T>
struct ChunkRaw {
  uint32_t w[kChunkWords<T>];
};

template <int T>
__device__ __forceinline__ void load_chunk(const uint8_t* __restrict__ row, int64_t c, int64_t k, ChunkRaw<T>& r) {
  if constexpr (T == kQ8_0) {
    const uint8_t* b = row + 34 * c;
#pragma unroll
    for (int i = 0; i < 17; ++i) r.w[i] = ld_u16(b + 2 * i);  // d, then qs in pairs
  } else if constexpr (T == kQ4_0 || T == kQ4_1 || T == kQ5_0 || T == kQ5_1) {
    // w[0] d, w[1] m (Q4_1 / Q5_1), w[2..3] qh (Q5_0 / Q5_1), w[4..11] qs in pairs
    constexpr int kQs = T == kQ4_0 ? 2 : T == kQ4_1 ? 4 : T == kQ5_0 ? 6 : 8;
    constexpr int kSize = T == kQ4_0 ? 18 : T == kQ4_1 ? 20 : T == kQ5_0 ? 22 : 24;
    constexpr bool kFive = T == kQ5_0 || T == kQ5_1, kMin = T == kQ4_1 || T == kQ5_1;
    const uint8_t* b = row + kSize * c;
    r.w[0] = ld_u16(b);
    r.w[1] = kMin ? ld_u16(b + 2) : 0u;
    r.w[2] = kFive ? ld_u16(b + (kMin ? 4 : 2)) : 0u;
    r.w[3] = kFive ? ld_u16(b + (kMin ? 6 : 4)) : 0u;
#pragma unroll
    for (int i = 0; i < 8; ++i) r.w[4 + i] = ld_u16(b + kQs + 2 * i);
  } else if constexpr (T == kQ4_K || T == kQ5_K) {
    // w[0] d, w[1] dmin, w[2..4] scale bytes q[j], q[j + 4], q[j - 4] (scale_min_k4), w[5..20] the
    // sub-block's qs in pairs, Q5_K: w[21..36] its qh bytes in pairs
    const uint8_t* b = row + (T == kQ4_K ? 144 : 176) * (c >> 3);
    const int j = int(c & 7);
    r.w[0] = ld_u16(b);
    r.w[1] = ld_u16(b + 2);
    r.w[2] = b[4 + j];
    r.w[3] = b[8 + j];
    r.w[4] = j >= 4 ? b[j] : 0u;
    const uint8_t* qs = b + (T == kQ4_K ? 16 : 48) + 32 * (j >> 1);
#pragma unroll
    for (int i = 0; i < 16; ++i) r.w[5 + i] = ld_u16(qs + 2 * i);
    if constexpr (T == kQ5_K) {
#pragma unroll
      for (int i = 0; i < 16; ++i) r.w[21 + i] = ld_u16(b + 16 + 2 * i);
    }
  } else if constexpr (T == kQ6_K) {
    // w[0] d, w[1] the two sub-block scales, w[2..17] ql in pairs, w[18..33] qh in pairs
    const uint8_t* b = row + 210 * (c >> 3);
    const int t = int(c & 7), h = t >> 2, s = t & 3;
    r.w[0] = ld_u16(b + 208);
    r.w[1] = ld_u16(b + 192 + 8 * h + 2 * s);
    const uint8_t* ql = b + 64 * h + 32 * (s & 1);
    const uint8_t* qh = b + 128 + 32 * h;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      r.w[2 + i] = ld_u16(ql + 2 * i);
      r.w[18 + i] = ld_u16(qh + 2 * i);
    }
  } else {
    // float types: element 32c + i's bits (zero past k)
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int64_t e = 32 * c + i;
      if constexpr (T == kF32) {
        r.w[i] = e < k ? reinterpret_cast<const uint32_t*>(row)[e] : 0u;
      } else {
        r.w[i] = e < k ? reinterpret_cast<const uint16_t*>(row)[e] : 0u;
      }
    }
  }
}

template <int T>
__device__ __forceinline__ void decode_chunk(const ChunkRaw<T>& r, int64_t c, float (&v)[32]) {
  if constexpr (T == kQ8_0) {
    const float d = h2f(uint16_t(r.w[0]));
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      v[2 * i] = __fmul_rn(float(int8_t(r.w[1 + i] & 0xFF)), d);
      v[2 * i + 1] = __fmul_rn(float(int8_t(r.w[1 + i] >> 8)), d);
    }
  } else if constexpr (T == kQ4_0 || T == kQ4_1 || T == kQ5_0 || T == kQ5_1) {
    constexpr bool kFive = T == kQ5_0 || T == kQ5_1, kMin = T == kQ4_1 || T == kQ5_1;
    const float d = h2f(uint16_t(r.w[0]));
    const float m = h2f(uint16_t(r.w[1]));
    const uint32_t qh = r.w[2] | (r.w[3] << 16);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int l = 2 * i + h, byte = int(h ? (r.w[4 + i] >> 8) : (r.w[4 + i] & 0xFF));
        int lo = byte & 15, hi = byte >> 4;
        if constexpr (kFive) {
          lo |= int((qh >> l) & 1u) << 4;
          hi |= int((qh >> (l + 16)) & 1u) << 4;
        }
        if constexpr (kMin) {
          v[l] = __fadd_rn(__fmul_rn(float(lo), d), m);
          v[l + 16] = __fadd_rn(__fmul_rn(float(hi), d), m);
        } else {
          constexpr int kOff = kFive ? 16 : 8;
          v[l] = __fmul_rn(float(lo - kOff), d);
          v[l + 16] = __fmul_rn(float(hi - kOff), d);
        }
      }
    }
  } else if constexpr (T == kQ4_K || T == kQ5_K) {
    const int j = int(c & 7);
    const int q0 = int(r.w[2]), q4 = int(r.w[3]), qm4 = int(r.w[4]);  // q[j], q[j + 4], q[j - 4]
    const int sc = j < 4 ? (q0 & 63) : ((q4 & 0xF) | ((qm4 >> 6) << 4));
    const int mn = j < 4 ? (q4 & 63) : ((q4 >> 4) | ((q0 >> 6) << 4));
    const float d1 = __fmul_rn(h2f(uint16_t(r.w[0])), float(sc)), m1 = __fmul_rn(h2f(uint16_t(r.w[1])), float(mn));
#pragma unroll
    for (int i = 0; i < 16; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int l = 2 * i + h, byte = int(h ? (r.w[5 + i] >> 8) : (r.w[5 + i] & 0xFF));
        int q = (j & 1) ? (byte >> 4) : (byte & 15);
        if constexpr (T == kQ5_K) q += int(((h ? (r.w[21 + i] >> 8) : r.w[21 + i]) >> j) & 1u) << 4;
        v[l] = __fsub_rn(__fmul_rn(d1, float(q)), m1);
      }
    }
  } else if constexpr (T == kQ6_K) {
    const int s = int(c & 3);
    const float d = h2f(uint16_t(r.w[0]));
    const float d0 = __fmul_rn(d, float(int8_t(r.w[1] & 0xFF))), d1 = __fmul_rn(d, float(int8_t(r.w[1] >> 8)));
#pragma unroll
    for (int i = 0; i < 16; ++i) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int l = 2 * i + hh;
        const int lb = int(hh ? (r.w[2 + i] >> 8) : (r.w[2 + i] & 0xFF)), hb = int(hh ? (r.w[18 + i] >> 8) : (r.w[18 + i] & 0xFF));
        const int q = ((s < 2 ? (lb & 15) : (lb >> 4)) | (((hb >> (2 * s)) & 3) << 4)) - 32;
        v[l] = __fmul_rn(l < 16 ? d0 : d1, float(q));
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      if constexpr (T == kF32) {
        v[i] = __uint_as_float(r.w[i]);
      } else if constexpr (T == kF16) {
        v[i] = h2f(uint16_t(r.w[i]));
      } else {
        v[i] = __uint_as_float(r.w[i] << 16);  // BF16
      }
    }
  }
}

}  // namespace onebit::cuda_detail
