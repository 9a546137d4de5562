// Prompt-sized products on tensor cores (included by cuda_backend.cu):
//   out[n, m] = x[n, k] . w[m, k]^T   for n > 4 activation rows (prompts, decode batches),
// weights of every type but F32 and BF16 (those keep the float tiles: F32 would lose bits in fp16,
// BF16 could overflow it); 5-64 rows of F16 / Q4_0 / Q8_0 weights with panel copies take
// panel_mma.cuh instead. Per block a 128 (weight rows) x 64 (activation rows) output tile; per
// 64-wide k-step the weight tile is dequantized (load_chunk / decode_chunk: each value exactly
// deq<T>'s float) and the activation tile converted, both rounded to fp16 into shared memory; 8
// warps, each 32 x 32 outputs as 2 x 4 mma.sync m16n8k16 (fp16 in, fp32 accumulate), fragments by
// ldmatrix. The next k-step's bytes are loaded into registers while this one multiplies. The
// error against the float path: two fp16 roundings per product (~2^-12 relative each), nmse ~1e-7
// on random data. Each activation row is first divided by a power of two that puts its largest
// value at 2^13..2^14 (mma_row_scale_kernel; the sums are multiplied back): no row overflows fp16
// or loses bits to its subnormals, whatever its magnitude.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/dequant.cuh"

namespace onebit::cuda_detail {

inline constexpr int kMmaM = 128, kMmaN = 64, kMmaK = 64, kMmaThreads = 256;
// Shared tiles' row stride in halves: 72 (144 bytes, 16-byte aligned), so that a warp's fragment
// loads (rows g = 0..7, 4-byte columns t = 0..3) fall in 32 distinct banks (36 g + t mod 32).
inline constexpr int kMmaLd = kMmaK + 8;

// c += a . b for one 16 x 8 x 16 tile (PTX ISA, "mma.m16n8k16" fragment layouts: lane = 4g + t;
// a: rows g, g + 8 x k 2t, 2t + 1, 2t + 8, 2t + 9; b: k 2t, 2t + 1, 2t + 8, 2t + 9 x column g;
// c: rows g, g + 8 x columns 2t, 2t + 1).
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as fp16 (round to nearest) in one word, `lo` in the low half (the lower k index).
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Four 8 x 8 fp16 matrices from shared memory (PTX "ldmatrix"): lane l gives the address of row
// l % 8 of matrix l / 8 (16 bytes); each lane gets, per matrix, the two halves at row l / 4,
// columns 2 (l % 4) .. + 1: the mma fragment layout.
__device__ __forceinline__ void ldmatrix_x4(const __half* p, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(a));
}

// 8 consecutive floats as fp16 into 16 bytes of shared memory.
__device__ __forceinline__ void store_half8(__half* dst, const float* v) {
  *reinterpret_cast<uint4*>(dst) = make_uint4(pack_half2(v[0], v[1]), pack_half2(v[2], v[3]),
                                              pack_half2(v[4], v[5]), pack_half2(v[6], v[7]));
}

// The power of two that brings a row's largest |x| into [2^13, 2^14) (1 for a zero or non-finite
// row), so that x / scale never overflows fp16 (65504) nor falls into its subnormals; dividing and
// multiplying back by a power of two is exact. The whole block's threads call it (at most 256);
// part holds a float per warp.
__device__ __forceinline__ float row_pow2_scale(const float* __restrict__ xr, int64_t k, float* part) {
  float m = 0.f;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) m = fmaxf(m, fabsf(xr[i]));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = m;
  __syncthreads();
  float amax = 0.f;
  for (int w = 0; w < int(blockDim.x / 32); ++w) amax = fmaxf(amax, part[w]);
  return amax > 0.f && isfinite(amax) ? ldexpf(1.f, ilogbf(amax) - 13) : 1.f;
}

// scale[r] = row_pow2_scale of row r. A block of 256 threads per row.
__global__ void __launch_bounds__(256) mma_row_scale_kernel(const float* __restrict__ x, size_t x_stride, int64_t k,
                                                            float* __restrict__ scale) {
  __shared__ float part[8];
  const float s = row_pow2_scale(x + size_t(blockIdx.x) * x_stride, k, part);
  if (threadIdx.x == 0) scale[blockIdx.x] = s;
}

// x_vec: x's rows start 16-byte aligned and k % 16 == 0, so a thread's 16 activations of a k-step
// are four float4 loads, all inside k or all past it. scale: mma_row_scale_kernel's, per x row.
// Cut along k (few output tiles: a decode batch of 16 rows makes 16-44 tiles of a small model's
// matrices for 132 multiprocessors): block z of gridDim.z takes k-steps [steps z / Z, steps (z + 1)
// / Z) and writes its unscaled sums to part[z][n][m]; mma_split_sum_kernel adds the slices in
// order. part nullptr (gridDim.z 1): the block writes out.
template <int T>
__global__ void __launch_bounds__(kMmaThreads) matmul_mma_kernel(const uint8_t* __restrict__ w, size_t w_stride,
                                                                 const float* __restrict__ x, size_t x_stride,
                                                                 float* __restrict__ out, size_t o_stride, int64_t m,
                                                                 int64_t n, int64_t k, bool x_vec,
                                                                 const float* __restrict__ scale,
                                                                 float* __restrict__ part) {
  __shared__ __align__(16) __half ws[kMmaM * kMmaLd];  // [128 weight rows][k-step]
  __shared__ __align__(16) __half xs[kMmaN * kMmaLd];  // [64 activation rows][k-step]
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int wm = warp % 4, wn = warp / 4;  // the warp's outputs: weight rows 32 wm .., activations 32 wn ..
  const int64_t m0 = int64_t(blockIdx.x) * kMmaM, n0 = int64_t(blockIdx.y) * kMmaN;
  // Staging per k-step: thread tid dequantizes chunk tid % 2 of weight row tid / 2, and converts
  // activations 16 (tid % 4) .. + 15 of row tid / 4.
  const int w_row = tid / 2, w_chunk = tid % 2, x_row = tid / 4, x_col = 16 * (tid % 4);
  const uint8_t* wr = m0 + w_row < m ? w + size_t(m0 + w_row) * w_stride : nullptr;
  const float* xr = n0 + x_row < n ? x + size_t(n0 + x_row) * x_stride : nullptr;
  const float x_inv = xr != nullptr ? 1.f / scale[n0 + x_row] : 1.f;  // exact: a power of two
  ChunkRaw<T> raw;
  float xv[16];
  bool w_in = false;
  auto load_step = [&](int64_t k0) {
    const int64_t c = k0 / 32 + w_chunk;
    w_in = wr != nullptr && 32 * c < k;
    if (w_in) load_chunk<T>(wr, c, k, raw);
    if (x_vec) {
      const bool in = xr != nullptr && k0 + x_col < k;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 f = in ? *reinterpret_cast<const float4*>(xr + k0 + x_col + 4 * q) : make_float4(0.f, 0.f, 0.f, 0.f);
        xv[4 * q] = f.x, xv[4 * q + 1] = f.y, xv[4 * q + 2] = f.z, xv[4 * q + 3] = f.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int64_t e = k0 + x_col + i;
        xv[i] = xr != nullptr && e < k ? xr[e] : 0.f;
      }
    }
  };
  float acc[2][4][4] = {};
  const int64_t steps = (k + kMmaK - 1) / kMmaK;
  const int64_t kb = kMmaK * (steps * blockIdx.z / gridDim.z), kz = kMmaK * (steps * (blockIdx.z + 1) / gridDim.z);
  const int64_t ke = kz < k ? kz : k;
  if (kb < ke) load_step(kb);
  for (int64_t k0 = kb; k0 < ke; k0 += kMmaK) {
    {
      float v[32];
      if (w_in) {
        decode_chunk<T>(raw, k0 / 32 + w_chunk, v);
      } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) v[i] = 0.f;
      }
      __half* dst = ws + w_row * kMmaLd + 32 * w_chunk;
#pragma unroll
      for (int q = 0; q < 4; ++q) store_half8(dst + 8 * q, v + 8 * q);
#pragma unroll
      for (int i = 0; i < 16; ++i) xv[i] *= x_inv;
      __half* xd = xs + x_row * kMmaLd + x_col;
      store_half8(xd, xv);
      store_half8(xd + 8, xv + 8);
    }
    __syncthreads();
    if (k0 + kMmaK < ke) load_step(k0 + kMmaK);  // in flight while this step multiplies
#pragma unroll
    for (int kk = 0; kk < kMmaK; kk += 16) {
      uint32_t a[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        // matrices: rows 0-7 / 8-15 x k 0-7, then x k 8-15 (a[0..3] of the fragment)
        const __half* p = ws + (32 * wm + 16 * i + (lane % 8) + 8 * ((lane / 8) % 2)) * kMmaLd + kk + 8 * (lane / 16);
        ldmatrix_x4(p, a[i][0], a[i][1], a[i][2], a[i][3]);
      }
#pragma unroll
      for (int j = 0; j < 4; j += 2) {
        // matrices: activation rows of tile j x k 0-7, x k 8-15, then tile j + 1's
        const __half* p = xs + (32 * wn + 8 * (j + lane / 16) + lane % 8) * kMmaLd + kk + 8 * ((lane / 8) % 2);
        uint32_t b[4];
        ldmatrix_x4(p, b[0], b[1], b[2], b[3]);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma_16816(acc[i][j], a[i], b[0], b[1]);
          mma_16816(acc[i][j + 1], a[i], b[2], b[3]);
        }
      }
    }
    __syncthreads();
  }
  // acc[i][j][2h + e]: weight row 32 wm + 16 i + g + 8 h, activation row 32 wn + 8 j + 2 t + e.
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t mm = m0 + 32 * wm + 16 * i + g + 8 * h, nn = n0 + 32 * wn + 8 * j + 2 * t + e;
          if (mm >= m || nn >= n) continue;
          if (part != nullptr) {
            part[(size_t(blockIdx.z) * size_t(n) + size_t(nn)) * size_t(m) + size_t(mm)] = acc[i][j][2 * h + e];
          } else {
            out[size_t(nn) * o_stride + size_t(mm)] = acc[i][j][2 * h + e] * scale[nn];
          }
        }
}

// out[nn, mm] = scale[nn] * (the sum over the z slices of part[z][nn][mm], in order).
__global__ void __launch_bounds__(256) mma_split_sum_kernel(const float* __restrict__ part, int slices, int64_t n,
                                                            int64_t m, const float* __restrict__ scale,
                                                            float* __restrict__ out, size_t o_stride) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * m) return;
  const int64_t nn = idx / m, mm = idx % m;
  float s = 0.f;
  for (int z = 0; z < slices; ++z) s += part[size_t(z) * size_t(n * m) + size_t(idx)];
  out[size_t(nn) * o_stride + size_t(mm)] = s * scale[nn];
}

// Whether a weight of type `type` takes the tensor-core path for n activation rows.
// min_rows: the fewest activation rows the backend sends to the tensor cores (5 by default).
inline bool mma_matmul_applies(int type, int64_t n, int64_t min_rows) {
  return n >= min_rows && type != kF32 && type != kBF16;
}

}  // namespace onebit::cuda_detail
