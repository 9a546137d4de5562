// Paged attention of prompt rows on tensor cores (included by cuda_backend.cu), flash-attention 2
// style: a block of 4 warps per (query head, tile of 64 consecutive batch rows), warp w the tile's
// rows 16 w .. 16 w + 15. A tile runs here only when its rows are one sequence's consecutive
// positions (flash_tile_uniform: a prompt chunk); other tiles (decode rows, a tile across two
// sequences) are left to attention_kernel, which skips the tiles taken here. Per tile of 64 keys
// (through the sequence's block table into shared memory as fp16): S = Q K^T by mma.sync m16n8k16
// (Q as fp16 fragments held in registers, fp32 sums), the causal mask, the online softmax in fp32
// (exp2 of the scaled scores), then O += P V with P rounded to fp16 (the S fragments become the
// A fragments of P V) and V's fragments by ldmatrix.trans. Error against the float path: fp16
// roundings of q, k, v (F32 pools) and p, ~2^-12 relative each: nmse ~1e-7 on random data.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/kernel_args.cuh"
#include "backend/cuda/mma_matmul.cuh"

namespace onebit::cuda_detail {

inline constexpr int kFlashRows = 64, kFlashKeys = 64, kFlashWarps = 4;

// Whether batch rows [r0, r0 + 64) (those below n) are one valid sequence's consecutive positions:
// the same answer in every warp that asks (each computes it; call with the whole warp).
__device__ __forceinline__ bool flash_tile_uniform(const int32_t* __restrict__ seq_ids,
                                                   const int32_t* __restrict__ positions, int64_t n, int64_t r0,
                                                   int64_t n_seqs, int64_t max_blocks, int32_t block_size) {
  const int lane = threadIdx.x % 32;
  const int32_t seq0 = seq_ids[r0], pos0 = positions[r0];
  const int64_t rows = n - r0 < kFlashRows ? n - r0 : kFlashRows;
  bool ok = seq0 >= 0 && seq0 < n_seqs && pos0 >= 0 && (int64_t(pos0) + rows - 1) / block_size < max_blocks;
  for (int64_t rr = lane; rr < rows; rr += 32) ok = ok && seq_ids[r0 + rr] == seq0 && positions[r0 + rr] == pos0 + rr;
  return __all_sync(0xffffffffu, ok);
}

// ldmatrix with transposition: each lane gets, per matrix, the halves at column l / 4, rows
// 2 (l % 4) .. + 1 (the B fragment of a row-major k x n tile).
__device__ __forceinline__ void ldmatrix_x4_trans(const __half* p, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                  uint32_t& r3) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(a));
}

// HD: head_dim (64 or 128); F16: the pools' type. Grid (query heads, tiles of 64 rows), 128 threads.
template <int HD, bool F16>
__global__ void __launch_bounds__(kFlashWarps * 32) flash_attn_kernel(AttnArgs a) {
  constexpr int LD = HD + 8;        // shared row stride in halves: 8 ldmatrix rows in 8 bank groups
  constexpr int CH = HD / 8;        // 16-byte chunks (8 halves) per key row
  constexpr int KC = HD / 16;       // k-chunks of Q K^T
  constexpr int DT = HD / 8;        // 8-wide output tiles of P V
  __shared__ __align__(16) __half ks[kFlashKeys * LD];
  __shared__ __align__(16) __half vs[kFlashKeys * LD];
  const int h = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t r0 = int64_t(blockIdx.y) * kFlashRows;
  if (!flash_tile_uniform(a.seq_ids, a.positions, a.n_rows, r0, a.n_seqs, a.max_blocks, a.block_size)) return;
  const int32_t seq = a.seq_ids[r0], pos0 = a.positions[r0];
  const int64_t rows = a.n_rows - r0 < kFlashRows ? a.n_rows - r0 : kFlashRows;
  const int64_t n_keys = int64_t(pos0) + rows;  // keys of the tile's last row
  const int64_t kv_off = int64_t(h / a.group) * HD;
  const int32_t* table = a.tables + size_t(seq) * a.table_stride;

  // This thread's query rows: 16 warp + g and + 8 (of the tile); their fragments of Q as fp16.
  const int64_t qa = r0 + 16 * warp + g, qb = qa + 8;
  uint32_t qf[KC][4];
  {
    const float* pa = a.q + size_t(qa < a.n_rows ? qa : r0) * a.q_stride + int64_t(h) * HD;
    const float* pb = a.q + size_t(qb < a.n_rows ? qb : r0) * a.q_stride + int64_t(h) * HD;
#pragma unroll
    for (int c = 0; c < KC; ++c) {
      const int d = 16 * c + 2 * t;
      qf[c][0] = pack_half2(pa[d], pa[d + 1]);
      qf[c][1] = pack_half2(pb[d], pb[d + 1]);
      qf[c][2] = pack_half2(pa[d + 8], pa[d + 9]);
      qf[c][3] = pack_half2(pb[d + 8], pb[d + 9]);
    }
  }
  const int64_t pos_a = int64_t(pos0) + (qa - r0), pos_b = pos_a + 8;  // causal limits (rows past n: unused)
  const float sl2 = a.scale * 1.4426950408889634f;                      // scores in log2 units
  float o[DT][4] = {};
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;  // l: this thread's part of the row sums

  for (int64_t k0 = 0; k0 < n_keys; k0 += kFlashKeys) {
    // Stage keys k0 .. + 63 (zeros past n_keys or a bad block, flagged).
    for (int idx = tid; idx < kFlashKeys * CH; idx += kFlashWarps * 32) {
      const int key = idx / CH, c = idx % CH;
      const int64_t j = k0 + key;
      uint4 kq = make_uint4(0, 0, 0, 0), vq = kq;
      if (j < n_keys) {
        const int32_t blk = table[j / a.block_size];
        if (blk < 0 || (int64_t(blk) + 1) * a.block_size > a.n_pool_rows) {
          atomicOr(a.err, kErrBlockTable);
        } else {
          const size_t off = size_t(int64_t(blk) * a.block_size + j % a.block_size) * a.kv_stride;
          if constexpr (F16) {
            kq = *reinterpret_cast<const uint4*>(a.k + off + size_t(kv_off + 8 * c) * 2);
            vq = *reinterpret_cast<const uint4*>(a.v + off + size_t(kv_off + 8 * c) * 2);
          } else {
            const float4* kf = reinterpret_cast<const float4*>(a.k + off + size_t(kv_off + 8 * c) * 4);
            const float4* vf = reinterpret_cast<const float4*>(a.v + off + size_t(kv_off + 8 * c) * 4);
            const float4 k1 = kf[0], k2 = kf[1], v1 = vf[0], v2 = vf[1];
            kq = make_uint4(pack_half2(k1.x, k1.y), pack_half2(k1.z, k1.w), pack_half2(k2.x, k2.y), pack_half2(k2.z, k2.w));
            vq = make_uint4(pack_half2(v1.x, v1.y), pack_half2(v1.z, v1.w), pack_half2(v2.x, v2.y), pack_half2(v2.z, v2.w));
          }
        }
      }
      *reinterpret_cast<uint4*>(ks + key * LD + 8 * c) = kq;
      *reinterpret_cast<uint4*>(vs + key * LD + 8 * c) = vq;
    }
    __syncthreads();
    if (k0 <= int64_t(pos0) + 16 * warp + 15) {  // a key of this tile is visible to one of the warp's rows
      // S = Q K^T: s[j][e] row g (e < 2) / g + 8 (e >= 2), key k0 + 8 j + 2 t + e % 2.
      float s[kFlashKeys / 8][4] = {};
#pragma unroll
      for (int c = 0; c < KC; ++c)
#pragma unroll
        for (int j = 0; j < kFlashKeys / 8; j += 2) {
          const __half* p = ks + (8 * (j + lane / 16) + lane % 8) * LD + 16 * c + 8 * ((lane / 8) % 2);
          uint32_t b[4];
          ldmatrix_x4(p, b[0], b[1], b[2], b[3]);
          mma_16816(s[j], qf[c], b[0], b[1]);
          mma_16816(s[j + 1], qf[c], b[2], b[3]);
        }
      float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
      for (int j = 0; j < kFlashKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t key = k0 + 8 * j + 2 * t + (e & 1);
          const float v = key <= (e < 2 ? pos_a : pos_b) ? s[j][e] * sl2 : -INFINITY;
          s[j][e] = v;
          if (e < 2) mx_a = fmaxf(mx_a, v); else mx_b = fmaxf(mx_b, v);
        }
      for (int o2 = 1; o2 < 4; o2 <<= 1) {
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, o2));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, o2));
      }
      const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
      // A row with no visible key yet keeps m = -inf: its p and corrections are 0 / 1.
      const float ca = mn_a == -INFINITY ? 1.f : exp2f(m_a - mn_a), cb = mn_b == -INFINITY ? 1.f : exp2f(m_b - mn_b);
      m_a = mn_a, m_b = mn_b;
      l_a *= ca, l_b *= cb;
#pragma unroll
      for (int d = 0; d < DT; ++d) o[d][0] *= ca, o[d][1] *= ca, o[d][2] *= cb, o[d][3] *= cb;
#pragma unroll
      for (int j = 0; j < kFlashKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float mm = e < 2 ? m_a : m_b;
          const float p = s[j][e] == -INFINITY ? 0.f : exp2f(s[j][e] - mm);
          s[j][e] = p;
          if (e < 2) l_a += p; else l_b += p;
        }
      // O += P V, P in 16-key chunks c: A fragments from s[2c], s[2c + 1].
#pragma unroll
      for (int c = 0; c < kFlashKeys / 16; ++c) {
        const uint32_t pa[4] = {pack_half2(s[2 * c][0], s[2 * c][1]), pack_half2(s[2 * c][2], s[2 * c][3]),
                                pack_half2(s[2 * c + 1][0], s[2 * c + 1][1]),
                                pack_half2(s[2 * c + 1][2], s[2 * c + 1][3])};
#pragma unroll
        for (int d = 0; d < DT; d += 2) {
          // matrices: keys 16c .. + 7 x columns 8d .., keys 16c + 8 .. x 8d .., then columns 8 (d + 1) ..
          const __half* p = vs + (16 * c + lane % 8 + 8 * ((lane / 8) % 2)) * LD + 8 * (d + lane / 16);
          uint32_t b[4];
          ldmatrix_x4_trans(p, b[0], b[1], b[2], b[3]);
          mma_16816(o[d], pa, b[0], b[1]);
          mma_16816(o[d + 1], pa, b[2], b[3]);
        }
      }
    }
    __syncthreads();
  }
  for (int o2 = 1; o2 < 4; o2 <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, o2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, o2);
  }
  // o[d][e]: row g (e < 2) / g + 8, column 8 d + 2 t + e % 2.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t r = half == 0 ? qa : qb;
    if (r >= a.n_rows) continue;
    const float inv = 1.f / (half == 0 ? l_a : l_b);
    float* orow = a.out + size_t(r) * a.o_stride + int64_t(h) * HD;
#pragma unroll
    for (int d = 0; d < DT; ++d) {  // scalar stores: any output stride
      orow[8 * d + 2 * t] = o[d][2 * half] * inv;
      orow[8 * d + 2 * t + 1] = o[d][2 * half + 1] * inv;
    }
  }
}

}  // namespace onebit::cuda_detail
