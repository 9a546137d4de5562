// The wgmma prompt GEMM with its warpgroups specialized and its tiles brought by the bulk tensor
// copy engine (TMA) (ONEBIT_CUDA_WG_WS=1; included by cuda_backend.cu after gemm_wgmma.cuh, whose
// tiles, descriptors and row windows it reuses): the same product as gemm_wgmma_kernel /
// gemm_wgmma_deq_kernel<T> (the same fp16 values, the same sums), with no block barrier in the
// main loop. Nsight Compute put the F16 GEMM at 63% of the L2's throughput and 42% of the SMs'
// with 8 warps an SM: neither saturated, the block waiting on its own __syncthreads and copies
// (docs/cuda.md). The structure of CUTLASS's warp-specialized Hopper GEMMs:
//   - 3 warpgroups (384 threads) per 128 activation rows x 128 weight rows: warpgroup 0 the
//     producer, 1 and 2 the consumers (activation rows 64 (w - 1) ..: wgmma m64n128k16 as before);
//   - S stages of [activation tile, weight tile] (16 KiB each, the 128-byte swizzle the tensor
//     maps name, which is the one wgmma's descriptors read), each with a `full` mbarrier and an
//     `empty` one (the consumers' 256 threads arrive);
//   - F16 weights in place: producer thread 0 alone, per step: waits for `empty` of the stage's
//     previous use, arms `full` with the 32 KiB the two tiles bring, issues both tensor copies
//     (rows past n or m and columns past k arrive as zeros);
//   - other types: thread 0 arms `full` with the activation tile's 16 KiB and issues its tensor
//     copy; producer thread t copies weight row t's window (WgRaw<T>) by cp.async into a ring of
//     D + 1 raw slots, and D steps behind waits for it, decodes the row's two chunks into the
//     weight tile, fences them to the async proxy and arrives on `full` (128 arrivals);
//   - consumers: wait for `full`, issue the step's 4 wgmma, wait for the previous step's, arrive
//     on `empty` of the previous step's stage.
// (A first version fed everything by cp.async from the producer's 128 threads, waiting two steps
// behind: correct, and 1.17-1.38x slower than gemm_wgmma_kernel. This one, on an H100: F16
// 1.06-1.10x faster than gemm_wgmma_kernel<1>, the dequantizing types 1.06-1.23x slower than
// gemm_wgmma_deq_kernel: 128 decoding threads a block against 256; docs/cuda.md.)
// k % 32 == 0 (k % 8 for F16), as the kernels it replaces; the tensor maps: ws_encode_map.
#pragma once

#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemm_wgmma.cuh"

namespace onebit::cuda_detail {

inline constexpr int kWsThreads = 384;  // producer warpgroup + 2 consumer warpgroups
inline constexpr int kWsF16 = -1;       // the T of F16 weights read in place (sg.b)
inline constexpr int kWsBehind = 2;     // D: steps between a producer's copies and its arrival on `full`

// The kernel's tensor maps (a __grid_constant__ parameter): the fp16 activations and, for F16
// weights in place, each product's weight rows; boxes of 128 rows x 64 columns.
struct WsMaps {
  CUtensorMap x;
  CUtensorMap w[GemmSegs::kMax];
};

inline constexpr size_t kWsSmemMax = 232448;  // a block's dynamic shared memory on sm_90 (227 KiB)
template <int T>
__host__ __device__ constexpr size_t ws_raw_bytes() {
  if constexpr (T < 0) {
    return 0;
  } else {
    return size_t(kWsBehind + 1) * wg_raw_stage_bytes<T>();
  }
}
// Stages: 6 for F16 in place (no raw slots), else 4 where they fit beside the raw slots (3 for F32).
template <int T>
__host__ __device__ constexpr int ws_stages() {
  if constexpr (T < 0) {
    return 6;
  } else {
    return size_t(4) * 2 * kWgTileBytes + ws_raw_bytes<T>() + 64 + 1024 <= kWsSmemMax ? 4 : 3;
  }
}
// The dynamic shared memory: stages, raw slots, 2 S mbarriers, alignment slack.
template <int T>
__host__ __device__ constexpr size_t ws_smem_bytes() {
  return size_t(ws_stages<T>()) * 2 * kWgTileBytes + ws_raw_bytes<T>() + 16 * size_t(ws_stages<T>()) + 1024;
}

// ---- mbarriers (PTX ISA "Parallel Synchronization and Communication Instructions: mbarrier") ----

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile(
      "{\n"
      ".reg .b64 st;\n"
      "mbarrier.arrive.shared::cta.b64 st, [%0];\n"
      "}\n" ::"r"(bar)
      : "memory");
}
// Adds bytes to the transaction count the current phase waits for (the tensor copies that
// complete on it), with this thread's arrival or without.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile(
      "{\n"
      ".reg .b64 st;\n"
      "mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n"
      "}\n" ::"r"(bar),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// The box of `map` at (column c0, row c1) into shared memory at dst, completing on mbarrier bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int32_t c0, int32_t c1,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// Until the phase of parity `parity` of the mbarrier has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

// out[nn, mm] = scale[nn] * sum_e a[nn, e] w[mm, e] for the products of sg, T = kWsF16 (F16
// weights in place, maps.w) or the weight type dequantized (sg.w / sg.w_stride), the activations
// by maps.x; grid as gemm_wgmma_kernel, ws_smem_bytes<T>() of dynamic shared memory.
template <int T>
__global__ void __launch_bounds__(kWsThreads, 1)
    gemm_wgmma_ws_kernel(const GemmSegs sg, const __grid_constant__ WsMaps maps, int64_t n, int64_t k,
                         const float* __restrict__ scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kDeq = T >= 0;
  constexpr int TR = kDeq ? T : kQ8_0;  // the raw window's type (unused for F16 in place)
  using R = WgRaw<TR>;
  // D <= S - 2: at turn s the producer waits for the consumers to have taken step s - S + 1,
  // whose `full` it arrived on at turn s - S + 1 + D, which must be an earlier turn.
  constexpr int S = ws_stages<T>(), D = S - 2 < kWsBehind ? S - 2 : kWsBehind, RS = D + 1;
  static_assert(D >= 1 && D <= S - 2, "the producer arrives for a step before it waits for its stage's next use");
  static_assert(ws_smem_bytes<T>() <= kWsSmemMax, "fits a block's shared memory");
  extern __shared__ __align__(16) uint8_t wg_smem_raw[];
  // [S stages of (activation tile, weight tile)][RS raw stages of 128 slots][S full, S empty].
  uint32_t s0;
  uint8_t* smem = wg_smem(wg_smem_raw, s0);
  uint8_t* rbuf = smem + S * 2 * kWgTileBytes;
  const uint32_t bars = s0 + uint32_t(S * 2 * kWgTileBytes + ws_raw_bytes<T>());
  auto full = [&](int st) { return bars + 8u * uint32_t(st); };
  auto empty = [&](int st) { return bars + 8u * uint32_t(S + st); };
  const int tid = int(threadIdx.x), wg = tid / 128;
  if (tid == 0) {
    for (int st = 0; st < S; ++st) {
      mbar_init(full(st), kDeq ? 128 : 1);
      mbar_init(empty(st), 256);
    }
    // The initialized barriers, to the async proxy the tensor copies complete through.
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const WgBlock bk = wg_block(sg);
  const int64_t steps = (k + kWgK - 1) / kWgK;
  if (wg == 0) {
    if constexpr (!kDeq) {
      // ---- producer, F16 in place: thread 0 brings both tiles of every step ----
      if (tid == 0) {
        const CUtensorMap* mw = &maps.w[bk.seg];
        for (int64_t s = 0; s < steps; ++s) {
          const int st = int(s % S);
          if (s >= S) mbar_wait(empty(st), uint32_t((s / S - 1) & 1));  // step s - S's wgmma are done
          const uint32_t xs = s0 + uint32_t(st) * 2 * kWgTileBytes;
          mbar_arrive_expect_tx(full(st), 2 * kWgTileBytes);
          tma_load_2d(xs, &maps.x, int32_t(kWgK * s), int32_t(bk.n0), full(st));
          tma_load_2d(xs + kWgTileBytes, mw, int32_t(kWgK * s), int32_t(bk.m0), full(st));
        }
      }
    } else {
      // ---- producer, dequantizing: thread t, weight row t of the tile; thread 0 the activations ----
      const int t = tid;
      const bool w_row_in = bk.m0 + t < bk.m;
      const uint8_t* __restrict__ wrow =
          sg.w[bk.seg] + (w_row_in ? size_t(bk.m0 + t) * sg.w_stride[bk.seg] : 0);
      auto slot_of = [&](int64_t s) { return rbuf + int(s % RS) * wg_raw_stage_bytes<TR>() + t * R::kSlot; };
      for (int64_t s = 0; s < steps + D; ++s) {
        if (s < steps) {
          const int st = int(s % S);
          if (s >= S) mbar_wait(empty(st), uint32_t((s / S - 1) & 1));  // step s - S's wgmma are done
          if (t == 0) {  // before this thread's arrival for step s (D turns later): the phase waits for it
            mbar_expect_tx(full(st), kWgTileBytes);
            tma_load_2d(s0 + uint32_t(st) * 2 * kWgTileBytes, &maps.x, int32_t(kWgK * s), int32_t(bk.n0),
                        full(st));
          }
          if (w_row_in) wg_copy_window<TR, 1>(slot_of(s), wrow, k, s, 0);  // step s's window of row t
        }
        cp_async_commit();  // one group per turn (empty past the last step): the wait counts groups
        if (s >= D) {
          cp_async_wait<D>();  // step s - D's window (this thread's copies) has landed
          const int64_t sd = s - D;
          const int st = int(sd % S);
          // Row t's chunks 2 sd and 2 sd + 1 from its slot into the stage's weight tile.
          uint8_t* ws = smem + st * 2 * kWgTileBytes + kWgTileBytes;
#pragma unroll
          for (int h = 0; h < 2; ++h) wg_decode_to_tile<TR>(ws, t, slot_of(sd), wrow, w_row_in, k, sd, h);
          fence_proxy_async();  // this thread's stores, to the tensor cores' proxy
          mbar_arrive(full(st));
        }
      }
    }
  } else {
    // ---- consumers: warpgroup cw, activation rows 64 cw .. of the tile ----
    const int cw = wg - 1;
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) d[i] = 0.f;
    for (int64_t s = 0; s < steps; ++s) {
      const int st = int(s % S);
      mbar_wait(full(st), uint32_t((s / S) & 1));
      const uint32_t xs = s0 + uint32_t(st) * 2 * kWgTileBytes;
      wg_mma_step(d, xs + uint32_t(cw) * 64 * 128, xs + kWgTileBytes);
      wg_wait<1>();  // step s - 1's group is done: its stage is free
      wg_fence_operand(d);
      if (s > 0) mbar_arrive(empty(int((s - 1) % S)));
    }
    wg_finish(d, bk, cw, n, scale);
  }
#endif
}

// ---- host: the tensor maps ----

// cuTensorMapEncodeTiled from the driver (through the runtime's entry point: no link to libcuda),
// or null where the driver has none.
using WsEncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                   CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                   CUtensorMapFloatOOBfill);
inline WsEncodeTiled ws_encode_fn() {
  static const WsEncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return WsEncodeTiled(nullptr);
    }
    return reinterpret_cast<WsEncodeTiled>(p);
  }();
  return fn;
}

// map over a rows x cols K-major fp16 matrix at base (ld halves a row; base 16-byte aligned, ld a
// multiple of 8): boxes of 128 rows x 64 columns in the 128-byte swizzle, out-of-range elements
// read as zeros. False where the driver refuses it.
inline bool ws_encode_map(CUtensorMap* map, const __half* base, int64_t rows, int64_t cols, int64_t ld) {
  const WsEncodeTiled encode = ws_encode_fn();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld) * sizeof(__half)};
  const cuuint32_t box[2] = {cuuint32_t(kWgK), cuuint32_t(kWgRows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<__half*>(base), dims, strides, box,
                elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace onebit::cuda_detail
