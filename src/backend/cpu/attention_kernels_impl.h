// Attention's value sums on 512-bit registers (DotTable::attn_sum), for head sizes that are
// multiples of 16. dot_avx512*.cpp include this under their target pragma, after
// dot_kernels_impl.h. The AVX2 kernel (small_ops.cpp, weighted_sum_heads_rows) keeps two heads x
// 32 dimensions in 8-lane registers and widens each value row once per two heads; this one keeps
// four heads x 64 dimensions in 16-lane registers, widening each value row once per four heads:
// 2.5x faster on a Zen 5 (kernel_bench attn_values: 4.2 against 10.5 us). Same contract: each
// value row's weight added key by key, in key order, so the bits are the same whatever the
// layout, batch or thread count (on one ISA). The key dots stay on the AVX2 kernel: a 16-lane
// version, whose per-key sums of 8 heads cost more to reduce, measured no faster.
namespace onebit::cpu {
namespace ONEBIT_DOT_NS {
namespace {

// 16 elements of a K/V row as floats (F16 widened exactly).
inline __m512 kv_load16(const void* base, int64_t at, bool f16) {
  if (f16) {
    // (the masked form: GCC 12 warns of the plain one's undefined pass-through operand)
    return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + at)));
  }
  return _mm512_loadu_ps(static_cast<const float*>(base) + at);
}

// Element offset of key j's row: rows[j] * stride, or j * stride without a row list.
inline int64_t kv_row_at(const KvRows& r, int64_t j) { return (r.rows != nullptr ? int64_t(r.rows[j]) : j) * r.stride; }

// out[g * hd + d] = sum_j p[g * ps + j] * value j [d] for G heads, dimensions d0 .. d0 + 16 NV - 1.
template <int G, int NV>
void attn_sum_block(const float* p, int64_t ps, const KvRows& v, int64_t n_keys, int64_t hd, int64_t d0, float* out) {
  __m512 acc[G][NV];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NV; ++c) acc[g][c] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n_keys; ++j) {
    const int64_t at = kv_row_at(v, j) + d0;
    __m512 x[NV];
    for (int c = 0; c < NV; ++c) x[c] = kv_load16(v.base, at + 16 * c, v.f16);
    for (int g = 0; g < G; ++g) {
      const __m512 w = _mm512_set1_ps(p[g * ps + j]);
      for (int c = 0; c < NV; ++c) acc[g][c] = _mm512_fmadd_ps(w, x[c], acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(out + g * hd + d0 + 16 * c, acc[g][c]);
}

template <int G>
void attn_sum_heads(const float* p, int64_t ps, const KvRows& v, int64_t n_keys, int64_t hd, float* out) {
  int64_t d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64) attn_sum_block<G, 4>(p, ps, v, n_keys, hd, d0, out);
  switch ((hd - d0) / 16) {
    case 3: return attn_sum_block<G, 3>(p, ps, v, n_keys, hd, d0, out);
    case 2: return attn_sum_block<G, 2>(p, ps, v, n_keys, hd, d0, out);
    case 1: return attn_sum_block<G, 1>(p, ps, v, n_keys, hd, d0, out);
    default: return;
  }
}

// DotTable::attn_sum: hd % 16 == 0, any n_heads (four at a time).
void attn_sum(const float* p, int n_heads, int64_t p_stride, const KvRows& v, int64_t n_keys, int64_t hd, float* out) {
  int g = 0;
  for (; g + 4 <= n_heads; g += 4) attn_sum_heads<4>(p + g * p_stride, p_stride, v, n_keys, hd, out + g * hd);
  switch (n_heads - g) {
    case 3: return attn_sum_heads<3>(p + g * p_stride, p_stride, v, n_keys, hd, out + g * hd);
    case 2: return attn_sum_heads<2>(p + g * p_stride, p_stride, v, n_keys, hd, out + g * hd);
    case 1: return attn_sum_heads<1>(p + g * p_stride, p_stride, v, n_keys, hd, out + g * hd);
    default: return;
  }
}

}  // namespace
}  // namespace ONEBIT_DOT_NS
}  // namespace onebit::cpu
