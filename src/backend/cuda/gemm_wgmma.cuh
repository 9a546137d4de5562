// Prompt products on Hopper's warpgroup tensor-core instructions (wgmma, PTX ISA "Asynchronous
// warpgroup level matrix multiply-accumulate"; sm_90a only), included by cuda_backend.cu: the same
// product as gemm_f16_kernel (out[n, m] = scale[n] * a[n, :] . b[m, :], both operands fp16 and
// K-major, the same fp16 inputs from gemm_prep_x_kernel and dequant_f16_kernel, fp32 sums), with
// the multiply read straight from shared memory by the tensor cores instead of through ldmatrix
// and mma.sync per warp:
//   - a block of 2 warpgroups (256 threads) per 128 activation rows x 128 weight rows; warpgroup
//     w the activation rows 64 w .. 64 w + 63 against all 128 weight rows: wgmma m64n128k16
//     (A = activations, B = weights), 64 fp32 sums per thread in registers;
//   - k in steps of 64 (one 128-byte row per tile row: the 128-byte swizzle's width) through a
//     4-stage cp.async pipeline; the 16-byte chunk c of tile row r is stored at r * 128 +
//     16 (c ^ r % 8) (the 128-byte swizzle, a function of the shared address, hence 1024-byte
//     aligned tiles), which both keeps the cp.async stores and the tensor cores' reads free of
//     bank conflicts and is the layout the descriptors name (wg_desc);
//   - per step: the stage's copies waited for, made visible to the tensor cores' async proxy
//     (fence.proxy.async), the block synchronized, the copies of step + 3 issued, then 4 wgmma
//     (k 16 each: the descriptors' start 32 bytes further) committed and waited for.
// Rows past m or n and columns past k load zeros; k % 8 == 0, lda and ldb multiples of 8 and
// 16-byte aligned bases (as gemm_f16_kernel).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/gemm_f16.cuh"

namespace onebit::cuda_detail {

inline constexpr int kWgRows = 128;  // activation rows (2 warpgroups x 64) and weight rows per block
inline constexpr int kWgK = 64, kWgStages = 4, kWgThreads = 256;
inline constexpr int kWgTileBytes = kWgRows * kWgK * 2;  // 16 KiB: 128 rows of 128 bytes
inline constexpr size_t kWgSmemBytes = size_t(kWgStages) * 2 * kWgTileBytes + 1024;  // + alignment slack
// gemm_wgmma_deq_kernel: the activation stages and two weight buffers.
inline constexpr size_t kWgDeqSmemBytes = size_t(kWgStages + 2) * kWgTileBytes + 1024;

// Whether this build's device code has the wgmma kernel (compiled for sm_90a): written by
// wgmma_probe_kernel.
__global__ void wgmma_probe_kernel(int* has) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *has = 1;
#else
  *has = 0;
#endif
}

// The shared-memory matrix descriptor of a K-major fp16 operand tile of 128-byte rows in the
// 128-byte swizzle: start address / 16 (bits 0-13), leading byte offset 16 / 16 (bits 16-29; not
// used when the instruction's k extent, 32 bytes, lies within one swizzle row), stride byte
// offset 1024 / 16 (bits 32-45: from one group of 8 rows to the next), swizzle mode 1 = 128 bytes
// (bits 62-63).
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
  return uint64_t((saddr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(64) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Shared-memory writes of the generic proxy (cp.async, plain stores) made visible to the async
// proxy that wgmma reads through.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// d += A . B^T for A = 64 x 16 (descriptor da), B = 128 x 16 (db), both K-major; d: the m64n128
// f32 accumulator fragment (warp w of the warpgroup rows 16 w + g and + 8, d[4 j + e] column
// 8 j + 2 t + e % 2, row + 8 for e >= 2; lane = 4 g + t).
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t da, uint64_t db) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(1));
#endif
}

// Pins the accumulators in registers across the asynchronous wgmma: the compiler may not move
// their reads or writes over this point (CUTLASS's warpgroup_fence_operand).
__device__ __forceinline__ void wg_fence_operand(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d += the warpgroup's 64 activation rows (tile at xs) . the 128 weight rows (tile at ws)^T over
// one k-step: 4 wgmma of k 16 (each descriptor's start 32 bytes further), issued and committed,
// not waited for.
__device__ __forceinline__ void wg_mma_step(float (&d)[64], uint32_t xs, uint32_t ws) {
  wg_fence_operand(d);
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < kWgK / 16; ++kk) wgmma_m64n128k16(d, wg_desc(xs + 32 * kk), wg_desc(ws + 32 * kk));
  wg_commit();
}

// out[nn, mm] = scale[nn] * d for a warpgroup's m64n128 fragment d: activation rows r0 + 16 warp
// + g (+ 8 for d[4 j + 2 ..]), weight rows m0 + 8 j + 2 t + e % 2; rows past n or m skipped.
__device__ __forceinline__ void wg_store(const float (&d)[64], float* __restrict__ out, size_t o_stride, int64_t r0,
                                         int64_t n, int64_t m0, int64_t m, const float* __restrict__ scale) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t nn = r0 + 16 * warp + g + 8 * h;
    if (nn >= n) continue;
    const float sc = scale[nn];
    float* orow = out + size_t(nn) * o_stride;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t mm = m0 + 8 * j + 2 * t + e;
        if (mm < m) orow[mm] = d[4 * j + 2 * h + e] * sc;
      }
  }
}

// 16 bytes (8 consecutive k of one row) at chunk c of row r of a 128-byte-row tile in the 128-byte swizzle.
__device__ __forceinline__ uint32_t wg_swz(int r, int c) { return uint32_t(r * 128 + ((c ^ (r % 8)) << 4)); }

// The dynamic shared memory from its first 1024-byte boundary (the swizzle's alignment): the
// generic pointer, and its shared-window address in s0.
__device__ __forceinline__ uint8_t* wg_smem(uint8_t* raw_base, uint32_t& s0) {
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(raw_base));
  const uint32_t pad = (1024 - raw % 1024) % 1024;
  s0 = raw + pad;
  return raw_base + pad;
}

// Rows r0 .. r0 + 127 (those below rows) x k-step s of a K-major fp16 matrix (ld halves a row) into
// a 128-byte-row tile in the 128-byte swizzle by cp.async; past rows or k: zeros. 1024 16-byte
// chunks: thread tid of the block's 256 takes chunks tid, tid + 256, ..
__device__ __forceinline__ void wg_load_tile(uint8_t* tile, const __half* __restrict__ src, int64_t ld, int64_t r0,
                                             int64_t rows, int64_t k, int64_t s) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int chunk = int(threadIdx.x) + kWgThreads * i, row = chunk / 8, c = chunk % 8;
    const int64_t col = kWgK * s + 8 * c;
    const bool in = r0 + row < rows && col < k;
    cp_async16(tile + wg_swz(row, c), src + (in ? size_t(r0 + row) * size_t(ld) + size_t(col) : 0), in);
  }
}

// The block's product of sg (blockIdx.y: its weight tile) and first activation row (blockIdx.x).
struct WgBlock {
  int seg;
  int64_t m0, m, n0;
  float* out;
  size_t o_stride;
};
__device__ __forceinline__ WgBlock wg_block(const GemmSegs& sg) {
  WgBlock bk;
  bk.seg = gemm_seg(sg, int(blockIdx.y), bk.m0);
  bk.m = sg.m[bk.seg], bk.out = sg.out[bk.seg], bk.o_stride = sg.o_stride[bk.seg];
  bk.n0 = int64_t(blockIdx.x) * kWgRows;
  return bk;
}

// out[nn, mm] = scale[nn] * sum_e a[nn, e] b[mm, e] for mm < m, nn < n, per product of sg (as
// gemm_f16_kernel). Block (x, y): activation rows 128 x .., weight rows 128 (y - tile0) .. (the
// blocks of one weight tile run side by side: its rows come from DRAM about once);
// kWgSmemBytes of dynamic shared memory.
__global__ void __launch_bounds__(kWgThreads, 1) gemm_wgmma_kernel(const GemmSegs sg, const __half* __restrict__ a,
                                                                 int64_t lda, int64_t n, int64_t k,
                                                                 const float* __restrict__ scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) uint8_t wg_smem_raw[];
  // Stages of [activation tile, weight tile], 16 KiB each.
  uint32_t s0;
  uint8_t* smem = wg_smem(wg_smem_raw, s0);
  const int wg = int(threadIdx.x) / 128;
  const WgBlock bk = wg_block(sg);
  const int64_t steps = (k + kWgK - 1) / kWgK;
  auto load_step = [&](int stage, int64_t s) {
    uint8_t* xs = smem + stage * 2 * kWgTileBytes;
    wg_load_tile(xs, a, lda, bk.n0, n, k, s);
    wg_load_tile(xs + kWgTileBytes, sg.b[bk.seg], sg.ldb[bk.seg], bk.m0, bk.m, k, s);
  };
#pragma unroll
  for (int s = 0; s < kWgStages - 1; ++s) {
    if (s < steps) load_step(s, s);
    cp_async_commit();  // one group per step, empty past the end: the wait below counts groups
  }
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.f;
  for (int64_t s = 0; s < steps; ++s) {
    cp_async_wait<kWgStages - 2>();  // step s's group has landed (this thread's copies) ...
    fence_proxy_async();             // ... visible to the tensor cores ...
    __syncthreads();                 // ... everyone's; step s - 1's wgmma are done (waited below)
    if (s + kWgStages - 1 < steps) load_step(int((s + kWgStages - 1) % kWgStages), s + kWgStages - 1);
    cp_async_commit();
    const uint32_t xs = s0 + uint32_t(s % kWgStages) * 2 * kWgTileBytes;
    const uint32_t ws = xs + kWgTileBytes;
    wg_mma_step(d, xs + uint32_t(wg) * 64 * 128, ws);
    wg_wait0();
    wg_fence_operand(d);
  }
  cp_async_wait<0>();
  wg_store(d, bk.out, bk.o_stride, bk.n0 + 64 * wg, n, bk.m0, bk.m, scale);
#endif
}

// The same product with the weights read as stored (type T, sg.w / sg.w_stride) and dequantized
// in the block: each value exactly deq<T>'s float (load_chunk / decode_chunk), rounded to fp16 as
// dequant_f16_kernel does, so the same sums as dequantizing first (no slab written and read
// back). The activations through the cp.async stages as above; the weight tile in two buffers:
// thread tid dequantizes the 32-element chunk tid % 2 of weight row tid / 2 of each k-step.
// While step s's wgmma run, chunk s + 1 (loaded during step s - 1) is decoded into the other
// buffer and chunk s + 2's bytes are loaded. k % 32 == 0.
template <int T>
__global__ void __launch_bounds__(kWgThreads, 1) gemm_wgmma_deq_kernel(const GemmSegs sg, const __half* __restrict__ a,
                                                                     int64_t lda, int64_t n, int64_t k,
                                                                     const float* __restrict__ scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) uint8_t wg_smem_raw[];
  // [activation stages, 16 KiB each][2 weight buffers, 16 KiB each].
  uint32_t s0;
  uint8_t* smem = wg_smem(wg_smem_raw, s0);
  uint8_t* wbuf = smem + kWgStages * kWgTileBytes;
  const int tid = int(threadIdx.x), wg = tid / 128;
  const WgBlock bk = wg_block(sg);
  const int64_t steps = (k + kWgK - 1) / kWgK;
  auto load_x = [&](int stage, int64_t s) { wg_load_tile(smem + stage * kWgTileBytes, a, lda, bk.n0, n, k, s); };
  // This thread's weight row and chunk within a step.
  const int wr = tid / 2, wc = tid % 2;
  const bool w_row_in = bk.m0 + wr < bk.m;
  const uint8_t* __restrict__ wrow = sg.w[bk.seg] + (w_row_in ? size_t(bk.m0 + wr) * sg.w_stride[bk.seg] : 0);
  ChunkRaw<T> rawc;
  auto load_w = [&](int64_t s) {
    const int64_t c = 2 * s + wc;
    if (w_row_in && 32 * c < k) load_chunk<T>(wrow, c, k, rawc);
  };
  auto store_w = [&](int buf, int64_t s) {
    const int64_t c = 2 * s + wc;
    float v[32];
    if (w_row_in && 32 * c < k) {
      decode_chunk<T>(rawc, c, v);
    } else {
#pragma unroll
      for (int i = 0; i < 32; ++i) v[i] = 0.f;
    }
    uint8_t* ws = wbuf + buf * kWgTileBytes;
#pragma unroll
    for (int q = 0; q < 4; ++q) store_half8(reinterpret_cast<__half*>(ws + wg_swz(wr, 4 * wc + q)), v + 8 * q);
  };
#pragma unroll
  for (int s = 0; s < kWgStages - 1; ++s) {
    if (s < steps) load_x(s, s);
    cp_async_commit();
  }
  load_w(0);
  store_w(0, 0);
  if (steps > 1) load_w(1);
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.f;
  for (int64_t s = 0; s < steps; ++s) {
    cp_async_wait<kWgStages - 2>();
    fence_proxy_async();  // this thread's activation copies and weight stores, to the tensor cores
    __syncthreads();      // everyone's; step s - 1's wgmma are done
    if (s + kWgStages - 1 < steps) load_x(int((s + kWgStages - 1) % kWgStages), s + kWgStages - 1);
    cp_async_commit();
    const uint32_t xs = s0 + uint32_t(s % kWgStages) * kWgTileBytes;
    const uint32_t ws = s0 + uint32_t(kWgStages + s % 2) * kWgTileBytes;
    wg_mma_step(d, xs + uint32_t(wg) * 64 * 128, ws);
    if (s + 1 < steps) {
      store_w(int((s + 1) % 2), s + 1);  // the other buffer: last read by step s - 1's wgmma
      if (s + 2 < steps) load_w(s + 2);
    }
    wg_wait0();
    wg_fence_operand(d);
  }
  cp_async_wait<0>();
  wg_store(d, bk.out, bk.o_stride, bk.n0 + 64 * wg, n, bk.m0, bk.m, scale);
#endif
}

}  // namespace onebit::cuda_detail
