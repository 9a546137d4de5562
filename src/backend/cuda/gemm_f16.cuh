// Prompt products as a plain fp16 GEMM (included by cuda_backend.cu), for batches of many rows
// (gemm_applies: 128+ rows for F16 weights, 384+ for the others), where matmul_mma_kernel's per-tile dequantization and
// its one-buffer k-loop leave the tensor cores idle most of the time:
//   1. gemm_prep_x_kernel: each activation row divided by its power-of-two scale (the same rule as
//      mma_row_scale_kernel: largest |x| into [2^13, 2^14)) and rounded to fp16, a[n, k];
//   2. the weights as fp16 b[m, k]: F16 weights as they are (16-byte aligned rows), every other type
//      dequantized (each value exactly deq<T>'s float, then rounded to fp16) by dequant_f16_kernel
//      into a scratch slab of at most gemm_slab_rows_ rows at a time;
//   3. gemm_f16_kernel: out[n, m] = scale[n] * a . b^T, 128 x 128 output tiles, 32-wide k-steps
//      through a 4-stage cp.async pipeline (the loads of step s + 3 in flight while step s
//      multiplies), 8 warps of 64 x 32 outputs each as 4 x 4 mma.sync m16n8k16 (fp16 in, fp32 sums),
//      fragments by ldmatrix.
// The same two fp16 roundings per product as matmul_mma_kernel, so the same error budget (nmse ~1e-7
// on random data); the sums run in another order. Requires k % 32 == 0 (every weight type's rows
// are whole 32-blocks; F16 weights of other widths keep matmul_mma_kernel).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/dequant.cuh"
#include "backend/cuda/mma_matmul.cuh"

namespace onebit::cuda_detail {

inline constexpr int kGemmM = 128, kGemmN = 128, kGemmK = 32, kGemmStages = 4, kGemmThreads = 256;
// Shared tiles' row stride in halves: 40 (80 bytes, 16-byte aligned): ldmatrix's 8 row addresses of
// a phase fall at 80 r mod 128 = 0, 80, 32, 112, 64, 16, 96, 48: eight distinct 16-byte bank groups.
inline constexpr int kGemmLd = kGemmK + 8;
inline constexpr int kGemmStageHalves = (kGemmM + kGemmN) * kGemmLd;
inline constexpr size_t kGemmSmemBytes = size_t(kGemmStages) * kGemmStageHalves * sizeof(__half);  // 80 KiB

// 16 bytes global -> shared without registers (PTX "cp.async.cg"); in == false: zeros (src-size 0,
// nothing read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool in) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(in ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// The weight side of one GEMM launch: up to three products of the same activations (q, k and v;
// gate and up), each its fp16 weight rows b[i] (ldb[i] halves apart), its m[i] rows and its output
// (out[i], o_stride[i] floats a row); blocks tile0[i] .. tile0[i + 1] - 1 along x are product i's
// 128-row tiles.
// gemm_wgmma_deq_kernel reads the weights as stored instead: w[i], w_stride[i] bytes a row.
struct GemmSegs {
  static constexpr int kMax = 3;
  const __half* b[kMax];
  int64_t ldb[kMax];
  const uint8_t* w[kMax];
  size_t w_stride[kMax];
  float* out[kMax];
  size_t o_stride[kMax];
  int64_t m[kMax];
  int32_t tile0[kMax + 1];
  int32_t n = 0;
};

// The product block x belongs to and its first weight row.
__device__ __forceinline__ int gemm_seg(const GemmSegs& sg, int bx, int64_t& m0) {
  int i = 0;
  while (i + 1 < sg.n && bx >= sg.tile0[i + 1]) ++i;
  m0 = int64_t(bx - sg.tile0[i]) * 128;
  return i;
}

// a[r, :] = fp16(x[r, :] / scale[r]), scale[r] = row_pow2_scale (exact: a power of two). A block of
// 256 threads per row; k % 8 == 0, lda % 8 == 0.
__global__ void __launch_bounds__(256) gemm_prep_x_kernel(const float* __restrict__ x, size_t x_stride, int64_t k,
                                                          __half* __restrict__ a, int64_t lda,
                                                          float* __restrict__ scale) {
  __shared__ float part[8];
  const float* xr = x + size_t(blockIdx.x) * x_stride;
  const float s = row_pow2_scale(xr, k, part);
  if (threadIdx.x == 0) scale[blockIdx.x] = s;
  const float inv = 1.f / s;
  __half* ar = a + size_t(blockIdx.x) * size_t(lda);
  for (int64_t i = 8 * int64_t(threadIdx.x); i < k; i += 8 * int64_t(blockDim.x)) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = xr[i + j] * inv;
    store_half8(ar + i, v);
  }
}

// b[r, :] = fp16(deq<T>(w row r)) for rows [0, rows): a thread per 32-element chunk; k % 32 == 0.
template <int T>
__global__ void __launch_bounds__(256) dequant_f16_kernel(const uint8_t* __restrict__ w, size_t w_stride, int64_t rows,
                                                          int64_t k, __half* __restrict__ b, int64_t ldb) {
  const int64_t chunks = k / 32, idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t r = idx / chunks, c = idx % chunks;
  if (r >= rows) return;
  ChunkRaw<T> raw;
  load_chunk<T>(w + size_t(r) * w_stride, c, k, raw);
  float v[32];
  decode_chunk<T>(raw, c, v);
  __half* dst = b + size_t(r) * size_t(ldb) + 32 * c;
#pragma unroll
  for (int q = 0; q < 4; ++q) store_half8(dst + 8 * q, v + 8 * q);
}

// out[nn, mm] = scale[nn] * sum_e a[nn, e] b[mm, e] for mm < m, nn < n, per product of sg (b, m,
// out of the block's). a: n x k, b: m x k, fp16, rows lda / ldb halves apart (multiples of 8, 16-byte
// aligned bases), k % 32 == 0. Block (x, y): weight rows 128 (x - tile0) .., activation rows
// 128 y ..; kGemmSmemBytes of dynamic shared memory.
__global__ void __launch_bounds__(kGemmThreads, 2) gemm_f16_kernel(const GemmSegs sg, const __half* __restrict__ a,
                                                                   int64_t lda, int64_t n, int64_t k,
                                                                   const float* __restrict__ scale) {
  extern __shared__ __align__(16) __half gemm_smem[];  // [stage][128 weight rows, then 128 activation rows][40]
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int wm = warp % 2, wn = warp / 2;  // the warp's outputs: weight rows 64 wm .., activations 32 wn ..
  int64_t m0;
  const int seg = gemm_seg(sg, int(blockIdx.x), m0);
  const __half* __restrict__ b = sg.b[seg];
  const int64_t ldb = sg.ldb[seg], m = sg.m[seg];
  float* __restrict__ out = sg.out[seg];
  const size_t o_stride = sg.o_stride[seg];
  const int64_t n0 = int64_t(blockIdx.y) * kGemmN;
  const int64_t steps = k / kGemmK;
  // Staging: 512 16-byte chunks per tile and step (128 rows x 4); thread tid takes chunks tid and
  // tid + 256 of both tiles (row chunk / 4, column 8 (chunk % 4)); rows past m or n load zeros.
  auto load_step = [&](int stage, int64_t s) {
    __half* ws = gemm_smem + stage * kGemmStageHalves;
    __half* xs = ws + kGemmM * kGemmLd;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int chunk = tid + kGemmThreads * i, row = chunk / 4, col = 8 * (chunk % 4);
      const bool w_in = m0 + row < m, x_in = n0 + row < n;
      cp_async16(ws + row * kGemmLd + col, b + size_t(w_in ? m0 + row : 0) * size_t(ldb) + kGemmK * s + col, w_in);
      cp_async16(xs + row * kGemmLd + col, a + size_t(x_in ? n0 + row : 0) * size_t(lda) + kGemmK * s + col, x_in);
    }
  };
#pragma unroll
  for (int s = 0; s < kGemmStages - 1; ++s) {
    if (s < steps) load_step(s, s);
    cp_async_commit();  // one group per step, empty past the end: the wait below counts groups
  }
  float acc[4][4][4] = {};
  for (int64_t s = 0; s < steps; ++s) {
    cp_async_wait<kGemmStages - 2>();  // step s's group has landed (this thread's copies) ...
    __syncthreads();                   // ... everyone's, and step s - 1's tiles are no longer read
    if (s + kGemmStages - 1 < steps) load_step(int((s + kGemmStages - 1) % kGemmStages), s + kGemmStages - 1);
    cp_async_commit();
    const __half* ws = gemm_smem + int(s % kGemmStages) * kGemmStageHalves;
    const __half* xs = ws + kGemmM * kGemmLd;
#pragma unroll
    for (int kk = 0; kk < kGemmK; kk += 16) {
      uint32_t fa[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // matrices: rows 0-7 / 8-15 x k 0-7, then x k 8-15 (fa[i][0..3] of the fragment)
        const __half* p = ws + (64 * wm + 16 * i + (lane % 8) + 8 * ((lane / 8) % 2)) * kGemmLd + kk + 8 * (lane / 16);
        ldmatrix_x4(p, fa[i][0], fa[i][1], fa[i][2], fa[i][3]);
      }
#pragma unroll
      for (int j = 0; j < 4; j += 2) {
        // matrices: activation rows of tile j x k 0-7, x k 8-15, then tile j + 1's
        const __half* p = xs + (32 * wn + 8 * (j + lane / 16) + lane % 8) * kGemmLd + kk + 8 * ((lane / 8) % 2);
        uint32_t fb[4];
        ldmatrix_x4(p, fb[0], fb[1], fb[2], fb[3]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          mma_16816(acc[i][j], fa[i], fb[0], fb[1]);
          mma_16816(acc[i][j + 1], fa[i], fb[2], fb[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  // acc[i][j][2h + e]: weight row 64 wm + 16 i + g + 8 h, activation row 32 wn + 8 j + 2 t + e.
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t nn = n0 + 32 * wn + 8 * j + 2 * t + e;
      if (nn >= n) continue;
      const float sc = scale[nn];
      float* orow = out + size_t(nn) * o_stride;
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t mm = m0 + 64 * wm + 16 * i + g + 8 * h;
          if (mm < m) orow[mm] = acc[i][j][2 * h + e] * sc;
        }
    }
}

}  // namespace onebit::cuda_detail
