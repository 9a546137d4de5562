// Products of 5..64 activation rows on the panel copies, on tensor cores (included by
// cuda_backend.cu after the panel formats, PanelSegs and load helpers; not a standalone header):
//   out[n, m] = x[n, k] . w[m, k]^T   for F16 / Q4_0 / Q8_0 weights with whole panel copies, k % 32 == 0,
// the sizes of batched decode and of speculative verification. matmul_mma_kernel (mma_matmul.cuh)
// reads each weight block as 18- or 34-byte pieces per thread with one k-step in flight, which left
// a 9-64-row step of TinyLlama Q4_0 at 2-4x a one-row step; here the weights stream as the one-row
// panel kernels read them (a warp a 32-row panel group, one coalesced 16-byte load per lane and
// piece, several 32-element chunks in flight in registers), and each chunk goes through tensor cores:
//   - x first becomes fp16 rows divided by their power-of-two scale (gemm_prep_x_kernel, as the
//     GEMM's), staged per block through shared memory by cp.async, two stages in flight;
//   - lane l decodes its row's chunk (32 values, each exactly deq<T>'s float rounded to fp16: the
//     same values as matmul_mma_kernel's tiles) into its warp's 32 x 32 tile in shared memory;
//   - ldmatrix gives the warp its weight fragments (2 m16 tiles x 2 k16 steps) and the x fragments
//     (NT n8 tiles), mma.sync m16n8k16 adds into fp32 sums: 32 weight rows x 8 NT activation rows.
// A block is 8 warps, 8 consecutive panel groups of one product (256 weight rows: x's bytes are read
// once per 256 rows); gridDim.y cuts k into slices when the blocks are few (a small model's products
// have 2-44 blocks for 132 multiprocessors): slice z writes its sums to part (layout of
// mma_split_sum_kernel, per product at part_off[seg]) and mma_split_sum_kernel adds the slices in
// order (deterministic). Same error budget as the tensor-core paths (two fp16 roundings per product).
#pragma once

// Where products' partial sums start in part (floats), per product of a launch.
struct PartOffsets {
  size_t off[Products::kMax];
};

inline constexpr int kTcWarps = 8, kTcThreads = kTcWarps * 32;
inline constexpr int kTcRowsMax = 64;  // activation rows: NT = 2, 4 or 8 n8 tiles
inline constexpr int kTcTileLd = 40;   // a warp's weight tile: 32 rows of 32 halves + 8 (80 bytes: no bank conflicts)
inline constexpr int kTcStageCells = 512;  // a stage of x: n_pad rows x SC chunks, n_pad * SC = 512 (32 KiB)

template <int T>
struct TcFmt {
  static constexpr int UC = 32 / PanelFmt<T>::E;  // panel units per 32-element chunk (F16: 4)
  static constexpr int Q = UC * PanelFmt<T>::CH;   // 16-byte pieces a lane holds per chunk
  static constexpr int P = T == kQ4_0 ? 4 : T == kQ8_0 ? 2 : 1;  // chunks per register buffer (two buffers)
};

// Shared memory of panel_mma_kernel for NT n8 tiles: two x stages and the warps' tiles.
template <int NT>
constexpr size_t panel_mma_smem_bytes() {
  constexpr int sc = kTcStageCells / (8 * NT);
  return (size_t(2) * (8 * NT) * (32 * sc + 8) + size_t(kTcWarps) * 32 * kTcTileLd) * sizeof(__half);
}

// The lane's pieces of chunk c (units c * UC ..) of a panel group (base: the group's first unit
// + 16 * lane) and its tail (the block scale), or nothing past c1.
template <int T>
__device__ __forceinline__ void tc_load_chunk(const uint8_t* __restrict__ base, int64_t c, int64_t c1,
                                              uint4 (&q)[TcFmt<T>::Q], uint32_t& tail) {
  using F = PanelFmt<T>;
  constexpr size_t UB = panel_unit_bytes<T>();
  if (c >= c1) return;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int v = 0; v < TcFmt<T>::UC; ++v) {
    const uint8_t* ub = base + size_t(c * TcFmt<T>::UC + v) * UB;
#pragma unroll
    for (int ch = 0; ch < F::CH; ++ch) q[v * F::CH + ch] = __ldg(reinterpret_cast<const uint4*>(ub + 512 * ch));
    if constexpr (F::TAIL) {
      if (v == 0) tail = __ldg(reinterpret_cast<const uint16_t*>(ub - 16 * lane + 512 * F::CH + 2 * lane));
    }
  }
}

// Two 4-bit or 8-bit fields as a half2 through the exponent: (bits | 0x6400) is 1024 + field.
__device__ __forceinline__ __half2 tc_h2(uint32_t bits) {
  const uint32_t v = bits | 0x64006400u;
  return *reinterpret_cast<const __half2*>(&v);
}

// The lane's row of the chunk as 32 fp16 values (each deq<T>'s float rounded to fp16: the offset
// removed exactly, one rounding of the product by the scale) into row `lane` of the warp's tile.
template <int T>
__device__ __forceinline__ void tc_store_row(const uint4 (&q)[TcFmt<T>::Q], uint32_t tail, __half* row) {
  uint4* dst = reinterpret_cast<uint4*>(row);
  if constexpr (T == kF16) {
#pragma unroll
    for (int v = 0; v < 4; ++v) dst[v] = q[v];
  } else if constexpr (T == kQ4_0) {
    // byte j of the 16: element j (low nibble) and j + 16 (high nibble)
    const __half2 d = __half2half2(__ushort_as_half(uint16_t(tail)));
    const __half2 off = __float2half2_rn(1032.f);  // 1024 + 8
    uint32_t lo[8], hi[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = word_of(q[0], i);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t pair = __byte_perm(w, 0, h == 0 ? 0x4140 : 0x4342);  // bytes 4i + 2h, + 1 in the 16-bit halves
        __half2 a = __hmul2(__hsub2(tc_h2(pair & 0x000F000Fu), off), d);
        __half2 b = __hmul2(__hsub2(tc_h2((pair >> 4) & 0x000F000Fu), off), d);
        lo[2 * i + h] = *reinterpret_cast<uint32_t*>(&a);
        hi[2 * i + h] = *reinterpret_cast<uint32_t*>(&b);
      }
    }
    dst[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    dst[1] = make_uint4(lo[4], lo[5], lo[6], lo[7]);
    dst[2] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    dst[3] = make_uint4(hi[4], hi[5], hi[6], hi[7]);
  } else {  // Q8_0: 32 signed bytes in order, the sign bit flipped: 1024 + 128 + q
    const __half2 d = __half2half2(__ushort_as_half(uint16_t(tail)));
    const __half2 off = __float2half2_rn(1152.f);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      uint32_t o[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t w = word_of(q[c], i) ^ 0x80808080u;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t pair = __byte_perm(w, 0, h == 0 ? 0x4140 : 0x4342);
          __half2 a = __hmul2(__hsub2(tc_h2(pair), off), d);
          o[2 * i + h] = *reinterpret_cast<uint32_t*>(&a);
        }
      }
      dst[2 * c] = make_uint4(o[0], o[1], o[2], o[3]);
      dst[2 * c + 1] = make_uint4(o[4], o[5], o[6], o[7]);
    }
  }
}

// One chunk through the tensor cores: the warp's tile (32 weight rows x 32) against x's stage
// columns xc .. xc + 31 (xs: n_pad rows of xld halves).
template <int NT>
__device__ __forceinline__ void tc_chunk_mma(const __half* tile, const __half* xs, int xld, int xc,
                                             float (&acc)[2][NT][4]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    uint32_t a[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const __half* p = tile + (16 * i + (lane % 8) + 8 * ((lane / 8) % 2)) * kTcTileLd + 16 * s + 8 * (lane / 16);
      ldmatrix_x4(p, a[i][0], a[i][1], a[i][2], a[i][3]);
    }
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      const __half* p = xs + (8 * (j + lane / 16) + lane % 8) * xld + xc + 16 * s + 8 * ((lane / 8) % 2);
      uint32_t b[4];
      ldmatrix_x4(p, b[0], b[1], b[2], b[3]);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        mma_16816(acc[i][j], a[i], b[0], b[1]);
        mma_16816(acc[i][j + 1], a[i], b[2], b[3]);
      }
    }
  }
}

// xh: x as fp16 (n rows of k halves, gemm_prep_x_kernel), scale its rows' powers of two. Block
// (bx, z): product seg (s.first in blocks of 8 groups), its groups 8 (bx - first) .., chunks
// [z * C / Z, (z + 1) * C / Z) of the C = k / 32.
template <int T, int NT>
__global__ void __launch_bounds__(kTcThreads, 1) panel_mma_kernel(PanelSegs s, const __half* __restrict__ xh,
                                                                  int n, int64_t k, int64_t n_units,
                                                                  const float* __restrict__ scale,
                                                                  float* __restrict__ part, PartOffsets po) {
  using TF = TcFmt<T>;
  constexpr int NP = 8 * NT, SC = kTcStageCells / NP, XLD = 32 * SC + 8, P = TF::P;
  static_assert(SC % (2 * P) == 0, "a stage holds whole pairs of register buffers");
  extern __shared__ float4 tc_smem[];
  __half* xs0 = reinterpret_cast<__half*>(tc_smem);
  __half* tile = xs0 + 2 * NP * XLD + (threadIdx.x / 32) * 32 * kTcTileLd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int seg = 0;
  while (seg + 1 < s.n && blockIdx.x >= s.first[seg + 1]) ++seg;
  const int64_t g = int64_t(blockIdx.x - s.first[seg]) * kTcWarps + warp;  // the warp's panel group
  const bool active = 32 * g < s.m[seg];
  const uint8_t* base = s.panel[seg] + size_t(active ? g : 0) * size_t(n_units) * panel_unit_bytes<T>() + 16 * lane;
  const int64_t chunks = k / 32, Z = gridDim.y;
  const int64_t c0 = chunks * blockIdx.y / Z, c1 = chunks * (blockIdx.y + 1) / Z;
  const int64_t cw1 = active ? c1 : c0;  // the warp's weight chunks end (none when idle)

  // x stage st (chunks c0 + st SC ..) into buffer st % 2: 16-byte pieces, rows past n and chunks
  // past c1 as zeros.
  auto stage = [&](int64_t st) {
    __half* xs = xs0 + (st % 2) * NP * XLD;
    const int64_t cs = c0 + st * SC;
    for (int i = threadIdx.x; i < NP * SC * 4; i += kTcThreads) {
      const int r = i / (SC * 4), piece = i % (SC * 4);
      const int64_t e = 32 * cs + 8 * piece;
      const bool in = r < n && cs + piece / 4 < c1;
      cp_async16(xs + r * XLD + 8 * piece, in ? xh + size_t(r) * size_t(k) + e : xh, in);
    }
  };

  uint4 qa[P][TF::Q], qb[P][TF::Q];
  uint32_t ta[P] = {}, tb[P] = {};
#pragma unroll
  for (int i = 0; i < P; ++i) tc_load_chunk<T>(base, c0 + i, cw1, qa[i], ta[i]);
#pragma unroll
  for (int i = 0; i < P; ++i) tc_load_chunk<T>(base, c0 + P + i, cw1, qb[i], tb[i]);
  float acc[2][NT][4] = {};
  const int64_t stages = (c1 - c0 + SC - 1) / SC;
  if (stages > 0) stage(0);
  cp_async_commit();
  for (int64_t st = 0; st < stages; ++st) {
    if (st + 1 < stages) stage(st + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const __half* xs = xs0 + (st % 2) * NP * XLD;
    const int64_t cs = c0 + st * SC, ce = cs + SC < cw1 ? cs + SC : cw1;
    for (int64_t c = cs; c < ce; c += 2 * P) {
#pragma unroll
      for (int i = 0; i < P; ++i) {
        if (c + i < ce) {
          tc_store_row<T>(qa[i], ta[i], tile + lane * kTcTileLd);
          __syncwarp();
          tc_chunk_mma<NT>(tile, xs, XLD, int(32 * (c + i - cs)), acc);
          __syncwarp();
        }
      }
#pragma unroll
      for (int i = 0; i < P; ++i) tc_load_chunk<T>(base, c + 2 * P + i, cw1, qa[i], ta[i]);
#pragma unroll
      for (int i = 0; i < P; ++i) {
        if (c + P + i < ce) {
          tc_store_row<T>(qb[i], tb[i], tile + lane * kTcTileLd);
          __syncwarp();
          tc_chunk_mma<NT>(tile, xs, XLD, int(32 * (c + P + i - cs)), acc);
          __syncwarp();
        }
      }
#pragma unroll
      for (int i = 0; i < P; ++i) tc_load_chunk<T>(base, c + 3 * P + i, cw1, qb[i], tb[i]);
    }
    __syncthreads();  // every warp done with this buffer before stage st + 2 fills it
  }
  if (!active) return;
  // acc[i][j][2h + e]: weight row 32 g + 16 i + lq + 8 h (lq = lane / 4), activation row 8 j + 2 (lane % 4) + e.
  const int64_t m = s.m[seg];
  float* o = s.out[seg];
  float* pz = part != nullptr ? part + po.off[seg] + size_t(blockIdx.y) * size_t(n) * size_t(m) : nullptr;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t mm = 32 * g + 16 * i + lane / 4 + 8 * h;
          const int nn = 8 * j + 2 * (lane % 4) + e;
          if (mm >= m || nn >= n) continue;
          if (pz != nullptr) {
            pz[size_t(nn) * size_t(m) + size_t(mm)] = acc[i][j][2 * h + e];
          } else {
            o[size_t(nn) * s.o_stride[seg] + size_t(mm)] = acc[i][j][2 * h + e] * scale[nn];
          }
        }
}
