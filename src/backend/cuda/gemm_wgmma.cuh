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
//     (fence.proxy.async), the block synchronized, the copies of a later step issued into the
//     stage whose wgmma are done, then 4 wgmma (k 16 each: the descriptors' start 32 bytes
//     further) committed; with F = 1 (the default) the previous step's group is then waited
//     for, so one group stays in flight while the block synchronizes and issues copies (the
//     accumulators are shared: wgmma of one shape on them complete in order); F = 0 waits for the
//     step's own group (the first version, kept for ONEBIT_CUDA_WG_INFLIGHT=0).
// Rows past m or n and columns past k load zeros; k % 8 == 0, lda and ldb multiples of 8 and
// 16-byte aligned bases (as gemm_f16_kernel).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/dequant.cuh"
#include "backend/cuda/gemm_f16.cuh"

namespace onebit::cuda_detail {

inline constexpr int kWgRows = 128;  // activation rows (2 warpgroups x 64) and weight rows per block
inline constexpr int kWgK = 64, kWgThreads = 256;
inline constexpr int kWgTileBytes = kWgRows * kWgK * 2;  // 16 KiB: 128 rows of 128 bytes
inline constexpr int kWgStages = 4;  // cp.async stages
// Steps loaded ahead of the one multiplied with F wgmma groups left in flight: every stage but the
// one multiplied and those still read by wgmma in flight.
__host__ __device__ constexpr int wg_ahead(int in_flight) { return kWgStages - 1 - in_flight; }
// gemm_wgmma_kernel: the stages of [activation tile, weight tile] (+ alignment slack).
inline constexpr size_t kWgSmemBytes = size_t(kWgStages) * 2 * kWgTileBytes + 1024;

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
// Waits until at most N of this warpgroup's committed wgmma groups are pending.
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
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

// A GEMM block's end: its wgmma groups and copies drained, warpgroup wg's fragment stored (its 64
// activation rows from bk.n0 + 64 wg).
__device__ __forceinline__ void wg_finish(float (&d)[64], const WgBlock& bk, int wg, int64_t n,
                                          const float* __restrict__ scale) {
  wg_wait<0>();
  wg_fence_operand(d);
  cp_async_wait<0>();
  wg_store(d, bk.out, bk.o_stride, bk.n0 + 64 * wg, n, bk.m0, bk.m, scale);
}

// out[nn, mm] = scale[nn] * sum_e a[nn, e] b[mm, e] for mm < m, nn < n, per product of sg (as
// gemm_f16_kernel). Block (x, y): activation rows 128 x .., weight rows 128 (y - tile0) .. (the
// blocks of one weight tile run side by side: its rows come from DRAM about once);
// F wgmma groups in flight (the header), kWgSmemBytes of dynamic shared memory.
template <int F>
__global__ void __launch_bounds__(kWgThreads, 1) gemm_wgmma_kernel(const GemmSegs sg, const __half* __restrict__ a,
                                                                 int64_t lda, int64_t n, int64_t k,
                                                                 const float* __restrict__ scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(F == 0 || F == 1, "one wgmma group in flight at most");
  constexpr int S = kWgStages, P = wg_ahead(F);
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
  for (int s = 0; s < P; ++s) {
    if (s < steps) load_step(s, s);
    cp_async_commit();  // one group per step, empty past the end: the wait below counts groups
  }
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.f;
  for (int64_t s = 0; s < steps; ++s) {
    cp_async_wait<P - 1>();  // step s's group has landed (this thread's copies) ...
    fence_proxy_async();     // ... visible to the tensor cores ...
    __syncthreads();         // ... everyone's; step s - 1 - F's wgmma are done (waited below)
    // Into the stage of step s - 1 - F (s + P = s - 1 - F mod S), free now.
    if (s + P < steps) load_step(int((s + P) % S), s + P);
    cp_async_commit();
    const uint32_t xs = s0 + uint32_t(s % S) * 2 * kWgTileBytes;
    const uint32_t ws = xs + kWgTileBytes;
    wg_mma_step(d, xs + uint32_t(wg) * 64 * 128, ws);
    wg_wait<F>();
    wg_fence_operand(d);
  }
  wg_finish(d, bk, wg, n, scale);
#endif
}

// ---- the same product, the weights dequantized in the block ----
//
// The weights read as stored (type T, sg.w / sg.w_stride) and dequantized in the block: each value
// exactly deq<T>'s float (load_chunk / decode_chunk), rounded to fp16 as dequant_f16_kernel does,
// so the same sums as dequantizing first (no slab written and read back). The bytes a k-step
// needs of each weight row (its window, WgRaw<T>) come by 16-byte cp.async copies of the
// 16-byte-aligned span around it, in the activations' commit groups and as many steps ahead, into a
// row slot of an odd number of 16-byte units (rows spread over the banks); each thread decodes
// its chunk from the slot into the fp16 weight tile (the 128-byte swizzle) while the previous
// step's wgmma run. (Its first version loaded each chunk with 2-byte global loads, blocks being
// only 2-byte aligned: a warp's load touched 16 rows, the L1 served 16-32 lines per instruction
// for 9-37 instructions a chunk, and an 8B prompt's Q4_0 GEMM took 2x the F16 one; docs/cuda.md.)

// The window of a row's bytes k-step s (64 elements: chunks 2 s and 2 s + 1) reads, [lo, lo + kBytes):
// for 32-element blocks the two blocks, for K-quants the super-block (header and codes), for float
// types the 64 values; kSlot: the slot, 16 bytes x an odd count, holding the 16-byte-aligned span.
template <int T>
struct WgRaw {
  static constexpr int kBlock = T == kQ8_0 ? 34 : T == kQ4_0 ? 18 : T == kQ4_1 ? 20 : T == kQ5_0 ? 22
                                : T == kQ5_1 ? 24 : T == kQ4_K ? 144 : T == kQ5_K ? 176 : T == kQ6_K ? 210
                                : T == kF32 ? 4 : 2;  // bytes a block (super-block; element for float types)
  static constexpr bool kSuper = T == kQ4_K || T == kQ5_K || T == kQ6_K;
  static constexpr bool kFloat = T == kF32 || T == kF16 || T == kBF16;
  static constexpr int kBytes = kSuper ? kBlock : kFloat ? 64 * kBlock : 2 * kBlock;
  static constexpr int kUnits = (kBytes + 15 + 15) / 16;  // 16-byte units of the span, at most
  static constexpr int kSlot = 16 * (kUnits | 1);
  // Row bytes for k elements, and the window's start for step s.
  __device__ static int64_t row_bytes(int64_t k) { return kSuper ? kBlock * (k / 256) : kFloat ? kBlock * k : kBlock * (k / 32); }
  __device__ static int64_t lo(int64_t s) { return kSuper ? int64_t(kBlock) * (s >> 2) : kFloat ? 64 * kBlock * s : 2 * kBlock * s; }
};
template <int T>
__host__ __device__ constexpr size_t wg_raw_stage_bytes() { return size_t(kWgRows) * WgRaw<T>::kSlot; }
// Step s's window of weight row wrow (k elements) into its slot: the 16-byte units from the one
// holding byte lo(s) to the one holding the window's (or the row's) last byte; this thread copies
// units u0, u0 + DU, ...
template <int T, int DU>
__device__ __forceinline__ void wg_copy_window(uint8_t* slot, const uint8_t* wrow, int64_t k, int64_t s, int u0) {
  using R = WgRaw<T>;
  const int64_t row_end = R::row_bytes(k), lo = R::lo(s);
  const int64_t hi = lo + R::kBytes < row_end ? lo + R::kBytes : row_end;
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(wrow + lo) & ~uintptr_t(15);
  const int units = int((reinterpret_cast<uintptr_t>(wrow + hi) - 1 - a0) / 16 + 1);
#pragma unroll
  for (int u = u0; u < R::kUnits; u += DU)
    if (u < units) cp_async16(slot + 16 * u, reinterpret_cast<const void*>(a0 + 16 * u), true);
}
// Chunk 2 s + h of weight row wrow, decoded from step s's window in slot (wg_copy_window's) to
// halves in row r, columns 4 h .. 4 h + 3 of the swizzled weight tile ws; zeros for a row outside
// the matrix (row_in false) or a chunk past k.
template <int T>
__device__ __forceinline__ void wg_decode_to_tile(uint8_t* ws, int r, const uint8_t* slot, const uint8_t* wrow,
                                                  bool row_in, int64_t k, int64_t s, int h) {
  const int64_t c = 2 * s + h;
  float v[32];
  if (row_in && 32 * c < k) {
    const uintptr_t a0 = reinterpret_cast<uintptr_t>(wrow + WgRaw<T>::lo(s)) & ~uintptr_t(15);
    // The row as load_chunk addresses it, moved so that the window lands in the slot.
    const uint8_t* vrow = slot - (a0 - reinterpret_cast<uintptr_t>(wrow));
    ChunkRaw<T> rawc;
    load_chunk<T>(vrow, c, k, rawc);
    decode_chunk<T>(rawc, c, v);
  } else {
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = 0.f;
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) store_half8(reinterpret_cast<__half*>(ws + wg_swz(r, 4 * h + q)), v + 8 * q);
}
// gemm_wgmma_deq_kernel<T>: kWgStages activation stages, 3 weight buffers, 3 raw stages.
inline constexpr int kWgRawStages = 3;
template <int T>
__host__ __device__ constexpr size_t wg_deq_smem_bytes() {
  return size_t(kWgStages + 3) * kWgTileBytes + kWgRawStages * wg_raw_stage_bytes<T>() + 1024;
}

// out as gemm_wgmma_kernel<1> with the weights of type T dequantized in the block: commit group
// g holds the activation tile of step g and the weight windows of step g + 1 (group 0 also
// step 0's), P = 2 steps ahead; kWgRawStages = P + 1 raw stages (step s's windows in
// stage s % 3: the one issued at step s is step s + 3's, into the stage step s's windows left,
// decoded during step s - 1). Per step: wait for group s, synchronize, issue group s + 2, the
// wgmma of step s, decode step s + 1's chunks from their stage into weight buffer (s + 1) % 3,
// wait for step s - 1's wgmma. Thread tid: row tid / 2 of the tile, copies its window's units
// tid % 2, + 2, .. and decodes chunk tid % 2. k % 32 == 0; wg_deq_smem_bytes<T>() of dynamic
// shared memory.
template <int T>
__global__ void __launch_bounds__(kWgThreads, 1) gemm_wgmma_deq_kernel(const GemmSegs sg, const __half* __restrict__ a,
                                                                      int64_t lda, int64_t n, int64_t k,
                                                                      const float* __restrict__ scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using R = WgRaw<T>;
  constexpr int S = kWgStages, P = wg_ahead(1), W = 3, RS = kWgRawStages;
  static_assert(RS == P + 1, "a raw stage for each step in flight and the one decoded");
  extern __shared__ __align__(16) uint8_t wg_smem_raw[];
  // [S activation stages][W weight buffers][RS raw stages of 128 slots], the first two 16 KiB each.
  uint32_t s0;
  uint8_t* smem = wg_smem(wg_smem_raw, s0);
  uint8_t* wbuf = smem + S * kWgTileBytes;
  uint8_t* rbuf = wbuf + W * kWgTileBytes;
  const int tid = int(threadIdx.x), wg = tid / 128;
  const WgBlock bk = wg_block(sg);
  const int64_t steps = (k + kWgK - 1) / kWgK;
  const int wr = tid / 2, wc = tid % 2;
  const bool w_row_in = bk.m0 + wr < bk.m;
  const uint8_t* __restrict__ wrow = sg.w[bk.seg] + (w_row_in ? size_t(bk.m0 + wr) * sg.w_stride[bk.seg] : 0);
  auto load_x = [&](int stage, int64_t s) { wg_load_tile(smem + stage * kWgTileBytes, a, lda, bk.n0, n, k, s); };
  auto slot_of = [&](int64_t s) { return rbuf + int(s % RS) * wg_raw_stage_bytes<T>() + wr * R::kSlot; };
  // Step s's window of this thread's row into its slot of stage s % RS (units wc, wc + 2, ..).
  auto load_raw = [&](int64_t s) {
    if (w_row_in && s < steps) wg_copy_window<T, 2>(slot_of(s), wrow, k, s, wc);
  };
  // Step s's chunk 2 s + wc of this thread's row, decoded from its slot into weight buffer buf.
  auto store_w = [&](int buf, int64_t s) {
    wg_decode_to_tile<T>(wbuf + buf * kWgTileBytes, wr, slot_of(s), wrow, w_row_in, k, s, wc);
  };
  // Group 0: step 0's activations and windows, step 1's windows; group g < P: step g's
  // activations, step g + 1's windows.
  load_raw(0);
#pragma unroll
  for (int g = 0; g < P; ++g) {
    if (g < steps) load_x(g, g);
    load_raw(g + 1);
    cp_async_commit();
  }
  cp_async_wait<P - 1>();
  __syncthreads();
  store_w(0, 0);
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.f;
  for (int64_t s = 0; s < steps; ++s) {
    cp_async_wait<P - 1>();  // group s: step s's activations, step s + 1's windows
    fence_proxy_async();     // this thread's activation copies and weight stores, to the tensor cores
    __syncthreads();         // everyone's; step s - 2's wgmma are done, step s's windows decoded
    if (s + P < steps) load_x(int((s + P) % S), s + P);
    load_raw(s + P + 1);  // into stage (s + 3) % 3 = s % 3: step s's windows, decoded in step s - 1
    cp_async_commit();
    const uint32_t xs = s0 + uint32_t(s % S) * kWgTileBytes;
    const uint32_t ws = s0 + uint32_t(S + s % W) * kWgTileBytes;
    wg_mma_step(d, xs + uint32_t(wg) * 64 * 128, ws);
    if (s + 1 < steps) store_w(int((s + 1) % W), s + 1);  // the buffer step s - 2's wgmma read
    wg_wait<1>();
    wg_fence_operand(d);
  }
  wg_finish(d, bk, wg, n, scale);
#endif
}

}  // namespace onebit::cuda_detail
