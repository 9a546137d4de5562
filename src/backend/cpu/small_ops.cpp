// The CPU backend's memory-light kernels (AVX2, the build baseline): activation quantization, norms,
// SwiGLU, softmax, F16 rounding of K/V rows and the vector primitives attention is built from
// (over contiguous F32 rows, or F32 / F16 pool rows through an index list). They touch each element
// once or twice, so wider targets would not change the step time (attention's value sums, which
// widen each value row per pair of heads, have a 512-bit version in attention_kernels_impl.h); the
// table picker lives here too.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_kernels.h"
#include "base/check.h"
#include "base/fp16.h"

namespace onebit::cpu {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}
inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// exp(x) for 8 floats: 2^n * p(r), n = round(x / ln 2), r = x - n ln 2 in two parts (Cody-Waite),
// p the degree-7 Taylor polynomial (|r| <= ln2/2 gives rel. error < 1e-8 before rounding).
// Inputs are clamped to [-87.3, 88.3] so that 2^n stays a normal float.
inline __m256 exp_ps(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723212e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// 32 floats * inv_d -> 32 int8 in element order, and their sum.
inline int32_t round_pack32(const float* x, float inv_d, int8_t* out) {
  const __m256 id = _mm256_set1_ps(inv_d);
  __m256i i[4];
  for (int j = 0; j < 4; ++j) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), id);
    i[j] = _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  const int32_t sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3])));
  // packs interleave 128-bit lanes; the dword permute restores element order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
  const __m256i ordered = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ordered);
  return sum;
}

inline float abs_max(const float* x, int64_t n) {
  __m256 m = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + i)));
  return hmax(m);
}

// Elements of a K/V row as float: F32 as is, F16 widened by F16C (exact).
struct F32Elems {
  using T = float;
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float load1(const float* p) { return *p; }
};
struct F16Elems {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float load1(const uint16_t* p) { return _cvtsh_ss(*p); }
};

// Where key j's row starts: j rows apart (a contiguous cache), or at the pool row rows[j].
template <class E>
struct StridedRows {
  const typename E::T* base;
  int64_t stride;  // elements between rows
  const typename E::T* operator()(int64_t j) const { return base + j * stride; }
};
template <class E>
struct IndexedRows {
  const typename E::T* base;
  int64_t stride;
  const int32_t* rows;  // [n_keys]
  const typename E::T* operator()(int64_t j) const { return base + int64_t(rows[j]) * stride; }
};

// dot(a, b) over n: two 8-lane accumulators over 16s, one 8, then scalar (dot_f32's arithmetic).
template <class E>
inline float dot_t(const float* a, const typename E::T* b, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), E::load8(b + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), E::load8(b + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), E::load8(b + i), a0);
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += a[i] * E::load1(b + i);
  return s;
}

// y[i] += a * x[i] (axpy_f32's arithmetic).
template <class E>
inline void axpy_t(float a, const typename E::T* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, E::load8(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * E::load1(x + i);
}

// Lane g of the result = the sum of the lanes of a[g] (8 horizontal sums at once).
inline __m256 hsum8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// dot_heads_keys over key rows found by `rows` (hd % 8 == 0), NH heads known at compile time: the
// head loops unrolled, no branch on the head count per key (9% of a one-thread onebit-20m step at
// position 800 on a Zen 5, docs/bench.md).
template <int NH, class E, class Rows>
void dot_heads_keys_n(const float* q, int64_t hd, const Rows& rows, int64_t n_keys, float scale, float* scores,
                      int64_t scores_stride) {
  const __m256 sv = _mm256_set1_ps(scale);
  alignas(32) float lanes[8];
  for (int64_t j = 0; j < n_keys; ++j) {
    const typename E::T* kj = rows(j);
    __m256 acc[8];
    for (int g = 0; g < 8; ++g) acc[g] = _mm256_setzero_ps();
    for (int64_t c = 0; c < hd; c += 8) {
      const __m256 kv = E::load8(kj + c);
      for (int g = 0; g < NH; ++g) acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * hd + c), kv, acc[g]);
    }
    _mm256_store_ps(lanes, _mm256_mul_ps(hsum8(acc), sv));
    for (int g = 0; g < NH; ++g) scores[g * scores_stride + j] = lanes[g];
  }
}

// dot_heads_keys over key rows found by `rows` (hd % 8 == 0, 1 <= n_heads <= 8).
template <class E, class Rows>
void dot_heads_keys_t(const float* q, int n_heads, int64_t hd, const Rows& rows, int64_t n_keys, float scale,
                      float* scores, int64_t scores_stride) {
  ONEBIT_DCHECK(n_heads >= 1 && n_heads <= 8 && hd % 8 == 0);
  switch (n_heads) {
    case 1: return dot_heads_keys_n<1, E>(q, hd, rows, n_keys, scale, scores, scores_stride);
    case 2: return dot_heads_keys_n<2, E>(q, hd, rows, n_keys, scale, scores, scores_stride);
    case 3: return dot_heads_keys_n<3, E>(q, hd, rows, n_keys, scale, scores, scores_stride);
    case 4: return dot_heads_keys_n<4, E>(q, hd, rows, n_keys, scale, scores, scores_stride);
    case 5: return dot_heads_keys_n<5, E>(q, hd, rows, n_keys, scale, scores, scores_stride);
    case 6: return dot_heads_keys_n<6, E>(q, hd, rows, n_keys, scale, scores, scores_stride);
    case 7: return dot_heads_keys_n<7, E>(q, hd, rows, n_keys, scale, scores, scores_stride);
    default: return dot_heads_keys_n<8, E>(q, hd, rows, n_keys, scale, scores, scores_stride);
  }
}

// weighted_sum_heads over value rows found by `rows` (hd % 8 == 0).
template <class E, class Rows>
void weighted_sum_heads_t(const float* p, int n_heads, int64_t p_stride, const Rows& rows, int64_t n_keys,
                          int64_t hd, float* out) {
  ONEBIT_DCHECK(hd % 8 == 0);
  for (int g = 0; g < n_heads; g += 2) {
    const bool pair = g + 1 < n_heads;
    const float* pa = p + g * p_stride;
    const float* pb = pair ? pa + p_stride : pa;
    for (int64_t d0 = 0; d0 < hd;) {
      const int n_vec = int(std::min<int64_t>(4, (hd - d0) / 8));  // 8-float vectors in this block
      __m256 acc_a[4], acc_b[4];
      for (int c = 0; c < 4; ++c) acc_a[c] = acc_b[c] = _mm256_setzero_ps();
      for (int64_t j = 0; j < n_keys; ++j) {
        const typename E::T* vj = rows(j) + d0;
        const __m256 wa = _mm256_set1_ps(pa[j]), wb = _mm256_set1_ps(pb[j]);
        for (int c = 0; c < n_vec; ++c) {
          const __m256 x = E::load8(vj + 8 * c);
          acc_a[c] = _mm256_fmadd_ps(wa, x, acc_a[c]);
          if (pair) acc_b[c] = _mm256_fmadd_ps(wb, x, acc_b[c]);
        }
      }
      for (int c = 0; c < n_vec; ++c) {
        _mm256_storeu_ps(out + g * hd + d0 + 8 * c, acc_a[c]);
        if (pair) _mm256_storeu_ps(out + (g + 1) * hd + d0 + 8 * c, acc_b[c]);
      }
      d0 += 8 * n_vec;
    }
  }
}

// Any hd: the kernels above for multiples of 8, else one head at a time with dot_t / axpy_t (the
// arithmetic of CpuBackend::attention's fallback).
template <class E, class Rows>
void dot_heads_keys_any(const float* q, int n_heads, int64_t hd, const Rows& rows, int64_t n_keys, float scale,
                        float* scores, int64_t scores_stride) {
  if (hd % 8 == 0) return dot_heads_keys_t<E>(q, n_heads, hd, rows, n_keys, scale, scores, scores_stride);
  for (int g = 0; g < n_heads; ++g) {
    for (int64_t j = 0; j < n_keys; ++j) scores[g * scores_stride + j] = dot_t<E>(q + g * hd, rows(j), hd) * scale;
  }
}
template <class E, class Rows>
void weighted_sum_heads_any(const float* p, int n_heads, int64_t p_stride, const Rows& rows, int64_t n_keys,
                            int64_t hd, float* out) {
  if (hd % 8 == 0) return weighted_sum_heads_t<E>(p, n_heads, p_stride, rows, n_keys, hd, out);
  for (int g = 0; g < n_heads; ++g) {
    std::memset(out + g * hd, 0, size_t(hd) * sizeof(float));
    for (int64_t j = 0; j < n_keys; ++j) axpy_t<E>(p[g * p_stride + j], rows(j), out + g * hd, hd);
  }
}

}  // namespace

namespace {
// ActQ8 blocks with codes in -levels..levels (127: Q8; 7: the 4-bit grid).
void quantize_act_symmetric(const float* x, ActQ8* y, int64_t k, float levels) {
  for (int64_t b = 0; b < k / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    const float amax = abs_max(xb, kQK8_0);
    const float d = amax / levels;
    const int32_t sum = round_pack32(xb, amax != 0.0f ? levels / amax : 0.0f, y[b].qs);
    y[b].d = d;
    y[b].s = d * float(sum);
  }
}
}  // namespace

void quantize_act_q8(const float* x, ActQ8* y, int64_t k) { quantize_act_symmetric(x, y, k, 127.0f); }
void quantize_act_q4(const float* x, ActQ8* y, int64_t k) { quantize_act_symmetric(x, y, k, 7.0f); }

void quantize_act_q8k(const float* x, BlockQ8_K* y, int64_t k) {
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    const float amax = abs_max(xb, kQK_K);
    const float inv_d = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = amax / 127.0f;
    for (int c = 0; c < kQK_K / 32; ++c) round_pack32(xb + 32 * c, inv_d, y[b].qs + 32 * c);
    for (int j = 0; j < kQK_K / 16; ++j) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y[b].qs + 16 * j));
      const __m256i w = _mm256_cvtepi8_epi16(q);
      y[b].bsums[j] = static_cast<int16_t>(hsum_i32(_mm256_madd_epi16(w, _mm256_set1_epi16(1))));
    }
  }
}

double sum_squares(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  double s = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += double(x[i]) * x[i];
  return s;
}

void scale_mul(const float* x, float scale, const float* w, float* y, int64_t n) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(w + i)));
  }
  for (; i < n; ++i) y[i] = (x[i] * scale) * w[i];
}

void add_rows(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; ++i) y[i] = a[i] + b[i];
}

void swiglu_row(const float* g, const float* u, float* y, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), gv))));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
  }
  for (; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

float exp_sub_sum(float* x, float m, int64_t n) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float s = hsum(acc);
  for (; i < n; ++i) s += x[i] = std::exp(x[i] - m);
  return s;
}

void softmax_row(const float* x, float* y, int64_t n) {
  if (n <= 0) return;
  __m256 mv = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  float m = hmax(mv);
  for (; i < n; ++i) m = std::max(m, x[i]);
  if (y != x) std::memmove(y, x, size_t(n) * sizeof(float));
  const float sum = exp_sub_sum(y, m, n);
  scale_f32(1.0f / sum, y, n);
}

float dot_f32(const float* a, const float* b, int64_t n) { return dot_t<F32Elems>(a, b, n); }

void axpy_f32(float a, const float* x, float* y, int64_t n) { axpy_t<F32Elems>(a, x, y, n); }

void dot_heads_keys(const float* q, int n_heads, int64_t hd, const float* k, int64_t k_stride, int64_t n_keys,
                    float scale, float* scores, int64_t scores_stride) {
  const StridedRows<F32Elems> rows{k, k_stride};
  dot_heads_keys_t<F32Elems>(q, n_heads, hd, rows, n_keys, scale, scores, scores_stride);
}

void weighted_sum_heads(const float* p, int n_heads, int64_t p_stride, const float* v, int64_t v_stride,
                        int64_t n_keys, int64_t hd, float* out) {
  const StridedRows<F32Elems> rows{v, v_stride};
  weighted_sum_heads_t<F32Elems>(p, n_heads, p_stride, rows, n_keys, hd, out);
}

void dot_heads_keys_rows(const float* q, int n_heads, int64_t hd, const KvRows& k, int64_t n_keys, float scale,
                         float* scores, int64_t scores_stride) {
  if (k.f16) {
    const IndexedRows<F16Elems> rows{static_cast<const uint16_t*>(k.base), k.stride, k.rows};
    dot_heads_keys_any<F16Elems>(q, n_heads, hd, rows, n_keys, scale, scores, scores_stride);
  } else {
    const IndexedRows<F32Elems> rows{static_cast<const float*>(k.base), k.stride, k.rows};
    dot_heads_keys_any<F32Elems>(q, n_heads, hd, rows, n_keys, scale, scores, scores_stride);
  }
}

void weighted_sum_heads_rows(const float* p, int n_heads, int64_t p_stride, const KvRows& v, int64_t n_keys,
                             int64_t hd, float* out) {
  if (v.f16) {
    const IndexedRows<F16Elems> rows{static_cast<const uint16_t*>(v.base), v.stride, v.rows};
    weighted_sum_heads_any<F16Elems>(p, n_heads, p_stride, rows, n_keys, hd, out);
  } else {
    const IndexedRows<F32Elems> rows{static_cast<const float*>(v.base), v.stride, v.rows};
    weighted_sum_heads_any<F32Elems>(p, n_heads, p_stride, rows, n_keys, hd, out);
  }
}

void fp32_to_fp16_row(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void scale_f32(float a, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

const DotTable& dot_table(CpuIsa isa) {
  ONEBIT_CHECK_MSG(cpu_isa_supported(isa), "dot_table: ISA not supported by this CPU");
  switch (isa) {
    case CpuIsa::kAvx2: return dot_table_avx2();
    case CpuIsa::kAvxVnni: return dot_table_avx_vnni();
    case CpuIsa::kAvx512: return dot_table_avx512();
    case CpuIsa::kAvx512Vnni: return dot_table_avx512_vnni();
  }
  return dot_table_avx2();
}

}  // namespace onebit::cpu
