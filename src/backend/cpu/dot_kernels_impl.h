// The dot kernels of every weight type, written once and compiled per SIMD target: each
// dot_<target>.cpp sets ONEBIT_DOT_VNNI (0: AVX2 maddubs+madd, 1: AVX-VNNI, 2: AVX-512 VNNI) and
// ONEBIT_DOT_ZMM (1: 512-bit float dots) under its own `#pragma GCC target`, then includes this.
// The integer schemes follow ggml-cpu's x86 vec_dot kernels (arch/x86/quants.c): 4-bit codes as
// unsigned bytes times signed 8-bit activations; the code offset (-8, -16, -32) or the block min is
// applied once per block through the activation block's sum instead of per element.
// Weight rows need only 2-byte alignment (blocks hold uint16 scales; vector loads are unaligned). No std:: code in here: this file is
// compiled for wider targets than the rest of the program.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace onebit::cpu {
namespace ONEBIT_DOT_NS {
namespace {

inline float half(uint16_t h) { return _cvtsh_ss(h); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// acc + sum over groups of 4 of u[i] * s[i] (u unsigned bytes, s signed bytes). Without VNNI,
// maddubs' 16-bit pair sums cannot saturate here: |u| <= 127 and |s| <= 127 in every caller.
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if ONEBIT_DOT_VNNI == 1
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#elif ONEBIT_DOT_VNNI == 2
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// Sum of u[i] * s[i] * scale of its 16-bit pair (scales: 16 x i16, one per pair of bytes).
inline __m256i dot_u8s8_scaled(__m256i u, __m256i s, __m256i scales) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scales);
}

// 16 packed bytes of nibbles -> 32 bytes: low nibbles (elements 0..15) then high (16..31).
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// The 32 bits of qh -> 32 bytes, 0x10 where bit j is set (byte j): bit 4 of each 5-bit code.
inline __m256i unpack_high_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  // Byte j gets byte j/8 of `bits`; OR-ing in every bit but j%8 leaves all-ones iff bit j is set.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i others = _mm256_set1_epi64x(static_cast<long long>(0x7fbfdfeff7fbfdfeULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Software prefetch of the weight stream kPrefetchBytes ahead: at decode one thread streams
// rows back to back and the hardware prefetcher alone leaves it latency-bound on a busy server.
inline constexpr int kPrefetchBytes = 1024;
inline void prefetch_ahead(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

inline const ActQ8* act_q8(const void* act, size_t stride, int r) {
  return reinterpret_cast<const ActQ8*>(static_cast<const uint8_t*>(act) + r * stride);
}
inline const BlockQ8_K* act_q8k(const void* act, size_t stride, int r) {
  return reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(act) + r * stride);
}

// --- 32-element block types ---------------------------------------------------------------
// Q4_0 / Q5_0 (kSigned): codes minus their offset (8, 16) as signed bytes, |q| * sign(y, q) so
// that maddubs' first operand stays unsigned, as ggml's mul_sum_i8_pairs. Q4_1 / Q5_1: unsigned
// codes, and the block min meets the activation block's sum once: dot = dw dx sum(q y) + m s.
// Blocks go in pairs into two accumulators (no loop-carried FMA stall at n_x == 1).
template <class Block, int kBits, bool kSigned>
inline __m256i legacy_codes(const Block& blk) {
  __m256i q = unpack_nibbles(blk.qs);
  if constexpr (kBits == 5) q = _mm256_or_si256(q, unpack_high_bits(blk.qh));
  if constexpr (kSigned) q = _mm256_sub_epi8(q, _mm256_set1_epi8(kBits == 5 ? 16 : 8));
  return q;
}

template <class Block, int kBits, bool kSigned, int NX>
inline void legacy_block(const Block& blk, int64_t b, const void* act, size_t stride, __m256* acc, float* corr) {
  const float dw = half(blk.d);
  const __m256i q = legacy_codes<Block, kBits, kSigned>(blk);
  const __m256i q_u = kSigned ? _mm256_sign_epi8(q, q) : q;
  for (int r = 0; r < NX; ++r) {
    const ActQ8& a = act_q8(act, stride, r)[b];
    __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
    if constexpr (kSigned) y = _mm256_sign_epi8(y, q);
    const __m256i p = dot_u8s8(_mm256_setzero_si256(), q_u, y);
    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), _mm256_cvtepi32_ps(p), acc[r]);
    if constexpr (!kSigned) corr[r] += half(blk.m) * a.s;
  }
}

template <class Block, int kBits, bool kSigned, int NX>
void dot_legacy(int64_t k, const void* w_row, const void* act, size_t stride, float* out, size_t os) {
  const Block* w = static_cast<const Block*>(w_row);
  const int64_t nb = k / 32;
  __m256 acc0[NX], acc1[NX];
  float corr0[NX], corr1[NX];
  for (int r = 0; r < NX; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps(), corr0[r] = corr1[r] = 0.0f;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    prefetch_ahead(&w[b]);
    legacy_block<Block, kBits, kSigned, NX>(w[b], b, act, stride, acc0, corr0);
    legacy_block<Block, kBits, kSigned, NX>(w[b + 1], b + 1, act, stride, acc1, corr1);
  }
  if (b < nb) legacy_block<Block, kBits, kSigned, NX>(w[b], b, act, stride, acc0, corr0);
  for (int r = 0; r < NX; ++r) out[r * os] = hsum(_mm256_add_ps(acc0[r], acc1[r])) + corr0[r] + corr1[r];
}

// Q8_0: signed codes, the same |w| * sign(y, w) scheme.
template <int NX>
inline void q8_0_block(const BlockQ8_0& blk, int64_t b, const void* act, size_t stride, __m256* acc) {
  const float dw = half(blk.d);
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
  const __m256i q_abs = _mm256_sign_epi8(q, q);
  for (int r = 0; r < NX; ++r) {
    const ActQ8& a = act_q8(act, stride, r)[b];
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
    const __m256i p = dot_u8s8(_mm256_setzero_si256(), q_abs, _mm256_sign_epi8(y, q));
    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), _mm256_cvtepi32_ps(p), acc[r]);
  }
}

template <int NX>
void dot_q8_0(int64_t k, const void* w_row, const void* act, size_t stride, float* out, size_t os) {
  const BlockQ8_0* w = static_cast<const BlockQ8_0*>(w_row);
  const int64_t nb = k / 32;
  __m256 acc0[NX], acc1[NX];
  for (int r = 0; r < NX; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    prefetch_ahead(&w[b]);
    q8_0_block<NX>(w[b], b, act, stride, acc0);
    q8_0_block<NX>(w[b + 1], b + 1, act, stride, acc1);
  }
  if (b < nb) q8_0_block<NX>(w[b], b, act, stride, acc0);
  for (int r = 0; r < NX; ++r) out[r * os] = hsum(_mm256_add_ps(acc0[r], acc1[r]));
}

// --- K-quants (super-blocks of 256, Q8_K activations) ---------------------------------------
inline __m256i pair_scales(int lo, int hi) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(hi)), _mm_set1_epi16(static_cast<short>(lo)));
}

// Q4_K / Q5_K: y = d * sc[j] * q - dmin * m[j] over sub-blocks j of 32. The mins meet the
// activation sub-block sums (bsums) once per super-block.
template <bool kFive, int NX>
void dot_q45_k(int64_t k, const void* w_row, const void* act, size_t stride, float* out, size_t os) {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  const Block* w = static_cast<const Block*>(w_row);
  const int64_t nb = k / kQK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[NX];
  float corr[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps(), corr[r] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    for (int l = 0; l < int(sizeof(Block)); l += 64) prefetch_ahead(reinterpret_cast<const char*>(&w[b]) + l);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) get_scale_min_k4(j, w[b].scales, &sc[j], &mn[j]);
    const float d = half(w[b].d), dmin = half(w[b].dmin);
    __m256i hbits = _mm256_setzero_si256();
    if constexpr (kFive) hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh));
    __m256i sumi[NX];
    for (int r = 0; r < NX; ++r) sumi[r] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * c));
      __m256i lo = _mm256_and_si256(raw, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      if constexpr (kFive) {
        const __m256i one = _mm256_set1_epi8(1);
        const __m256i h_lo = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c)), one);
        const __m256i h_hi = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c + 1)), one);
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(h_lo, 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(h_hi, 4));
      }
      const __m256i s_lo = _mm256_set1_epi16(sc[2 * c]), s_hi = _mm256_set1_epi16(sc[2 * c + 1]);
      for (int r = 0; r < NX; ++r) {
        const int8_t* y = act_q8k(act, stride, r)[b].qs + 64 * c;
        const __m256i y_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y));
        const __m256i y_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 32));
        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(dot_u8s8_scaled(lo, y_lo, s_lo),
                                                             dot_u8s8_scaled(hi, y_hi, s_hi)));
      }
    }
    for (int r = 0; r < NX; ++r) {
      const BlockQ8_K& a = act_q8k(act, stride, r)[b];
      int32_t summ = 0;
      for (int j = 0; j < 8; ++j) summ += mn[j] * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
      corr[r] += dmin * a.d * float(summ);
    }
  }
  for (int r = 0; r < NX; ++r) out[r * os] = hsum(acc[r]) - corr[r];
}

// Q6_K: y = d * sc[j] * (q - 32) over sub-blocks j of 16; the -32 meets the bsums once.
template <int NX>
void dot_q6_k(int64_t k, const void* w_row, const void* act, size_t stride, float* out, size_t os) {
  const BlockQ6_K* w = static_cast<const BlockQ6_K*>(w_row);
  const int64_t nb = k / kQK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  __m256 acc[NX];
  float corr[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps(), corr[r] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    for (int l = 0; l < int(sizeof(BlockQ6_K)); l += 64) prefetch_ahead(reinterpret_cast<const char*>(&w[b]) + l);
    const float d = half(w[b].d);
    const int8_t* sc = w[b].scales;
    __m256i sumi[NX];
    for (int r = 0; r < NX; ++r) sumi[r] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[b].ql + 64 * h;
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh + 32 * h));
      // Elements 32t .. 32t+31 of this half: low/high nibbles of ql0/ql1 plus 2 bits of qh.
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
      for (int t = 0; t < 4; ++t) {
        const __m256i scales = pair_scales(sc[8 * h + 2 * t], sc[8 * h + 2 * t + 1]);
        for (int r = 0; r < NX; ++r) {
          const int8_t* y = act_q8k(act, stride, r)[b].qs + 128 * h + 32 * t;
          const __m256i yv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y));
          sumi[r] = _mm256_add_epi32(sumi[r], dot_u8s8_scaled(q[t], yv, scales));
        }
      }
    }
    for (int r = 0; r < NX; ++r) {
      const BlockQ8_K& a = act_q8k(act, stride, r)[b];
      int32_t off = 0;
      for (int j = 0; j < 16; ++j) off += sc[j] * a.bsums[j];
      const float dd = d * a.d;
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
      corr[r] += dd * 32.0f * float(off);
    }
  }
  for (int r = 0; r < NX; ++r) out[r * os] = hsum(acc[r]) - corr[r];
}

// --- float weights (F32 / F16 / BF16) times F32 activations ------------------------------
enum class FloatKind { kF32, kF16, kBF16 };

template <FloatKind kKind>
inline __m256 load8(const void* w, int64_t i) {
  if constexpr (kKind == FloatKind::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    if constexpr (kKind == FloatKind::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}
template <FloatKind kKind>
inline float load1(const void* w, int64_t i) {
  // memcpy, not a typed load: weight rows may sit at any byte offset (a GGUF's tensor data).
  if constexpr (kKind == FloatKind::kF32) {
    float f;
    std::memcpy(&f, static_cast<const float*>(w) + i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, static_cast<const uint16_t*>(w) + i, 2);
  if constexpr (kKind == FloatKind::kF16) return half(h);
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <FloatKind kKind, int NX>
void dot_float(int64_t k, const void* w_row, const void* act, size_t stride, float* out, size_t os) {
  const float* x[NX];
  for (int r = 0; r < NX; ++r) x[r] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + r * stride);
  __m256 acc[NX][2];
  for (int r = 0; r < NX; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m256 w0 = load8<kKind>(w_row, i), w1 = load8<kKind>(w_row, i + 8);
    for (int r = 0; r < NX; ++r) {
      acc[r][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[r] + i), acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[r] + i + 8), acc[r][1]);
    }
  }
  for (int r = 0; r < NX; ++r) {
    float s = hsum(_mm256_add_ps(acc[r][0], acc[r][1]));
    for (int64_t j = i; j < k; ++j) s += load1<kKind>(w_row, j) * x[r][j];
    out[r * os] = s;
  }
}

// Runtime n_x (1..Max; more takes Max) -> the compile-time register tile K<n_x>.
template <template <int> class K, int Max, int N = 1>
void by_rows_up_to(int64_t k, const void* w, const void* act, size_t stride, int n_x, float* out, size_t os) {
  if constexpr (N < Max) {
    if (n_x > N) return by_rows_up_to<K, Max, N + 1>(k, w, act, stride, n_x, out, os);
  }
  K<N>::run(k, w, act, stride, out, os);
}

// Up to kMaxDotRows rows a call, and up to kMaxDualRows (the two-panel kernels).
template <template <int> class K>
void by_rows(int64_t k, const void* w, const void* act, size_t stride, int n_x, float* out, size_t os) {
  by_rows_up_to<K, kMaxDotRows>(k, w, act, stride, n_x, out, os);
}
template <template <int> class K>
void by_rows8(int64_t k, const void* w, const void* act, size_t stride, int n_x, float* out, size_t os) {
  by_rows_up_to<K, kMaxDualRows>(k, w, act, stride, n_x, out, os);
}

// Up to kMaxDualRows for kernels whose registers hold 4 rows' sums: 5..8 rows as 4 + the rest.
template <template <int> class K>
void by_rows8_in_fours(int64_t k, const void* w, const void* act, size_t stride, int n_x, float* out, size_t os) {
  if (n_x > 4) {
    by_rows<K>(k, w, act, stride, 4, out, os);
    act = static_cast<const uint8_t*>(act) + 4 * stride, out += 4 * os, n_x -= 4;
  }
  by_rows<K>(k, w, act, stride, n_x, out, os);
}

template <int NX> struct KQ4_0 { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { dot_legacy<BlockQ4_0, 4, true, NX>(k, w, a, s, o, os); } };
template <int NX> struct KQ4_1 { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { dot_legacy<BlockQ4_1, 4, false, NX>(k, w, a, s, o, os); } };
template <int NX> struct KQ5_0 { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { dot_legacy<BlockQ5_0, 5, true, NX>(k, w, a, s, o, os); } };
template <int NX> struct KQ5_1 { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { dot_legacy<BlockQ5_1, 5, false, NX>(k, w, a, s, o, os); } };
template <int NX> struct KQ8_0 { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { dot_q8_0<NX>(k, w, a, s, o, os); } };
template <int NX> struct KQ4_K { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { dot_q45_k<false, NX>(k, w, a, s, o, os); } };
template <int NX> struct KQ5_K { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { dot_q45_k<true, NX>(k, w, a, s, o, os); } };
template <int NX> struct KQ6_K { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { dot_q6_k<NX>(k, w, a, s, o, os); } };
template <int NX> struct KF32 { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { dot_float<FloatKind::kF32, NX>(k, w, a, s, o, os); } };
template <int NX> struct KF16 { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { dot_float<FloatKind::kF16, NX>(k, w, a, s, o, os); } };
template <int NX> struct KBF16 { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { dot_float<FloatKind::kBF16, NX>(k, w, a, s, o, os); } };

#include "backend/cpu/panel_kernels_impl.h"

DotTable make_table(CpuIsa isa) {
  DotTable t{isa, {}, {}, {}};
  auto set = [&t](GgmlType type, DotFn fn, ActFormat act) {
    t.by_type[static_cast<uint32_t>(type)] = DotKernel{fn, act};
  };
  set(GgmlType::kF32, by_rows<KF32>, ActFormat::kF32);
  set(GgmlType::kF16, by_rows<KF16>, ActFormat::kF32);
  set(GgmlType::kBF16, by_rows<KBF16>, ActFormat::kF32);
  set(GgmlType::kQ4_0, by_rows<KQ4_0>, ActFormat::kQ8);
  set(GgmlType::kQ4_1, by_rows<KQ4_1>, ActFormat::kQ8);
  set(GgmlType::kQ5_0, by_rows<KQ5_0>, ActFormat::kQ8);
  set(GgmlType::kQ5_1, by_rows<KQ5_1>, ActFormat::kQ8);
  set(GgmlType::kQ8_0, by_rows<KQ8_0>, ActFormat::kQ8);
  set(GgmlType::kQ4_K, by_rows<KQ4_K>, ActFormat::kQ8K);
  set(GgmlType::kQ5_K, by_rows<KQ5_K>, ActFormat::kQ8K);
  set(GgmlType::kQ6_K, by_rows<KQ6_K>, ActFormat::kQ8K);
  t.panel_by_type[static_cast<uint32_t>(GgmlType::kQ4_0)] = by_rows<PQ4_0>;
  t.panel_by_type[static_cast<uint32_t>(GgmlType::kQ4_1)] = by_rows<PQ4_1>;
  t.panel_by_type[static_cast<uint32_t>(GgmlType::kQ5_0)] = by_rows<PQ5_0>;
  t.panel_by_type[static_cast<uint32_t>(GgmlType::kQ5_1)] = by_rows<PQ5_1>;
  t.panel_by_type[static_cast<uint32_t>(GgmlType::kQ8_0)] = by_rows<PQ8_0>;
  t.panel_by_type[static_cast<uint32_t>(GgmlType::kQ4_K)] = by_rows<PQ4_K>;
  t.panel_by_type[static_cast<uint32_t>(GgmlType::kQ5_K)] = by_rows<PQ5_K>;
  t.panel_by_type[static_cast<uint32_t>(GgmlType::kQ6_K)] = by_rows<PQ6_K>;
#if ONEBIT_DOT_VNNI == 2
  t.panel2_by_type[static_cast<uint32_t>(GgmlType::kQ4_0)] = by_rows8<P32Panel2<P32::kQ4_0>::K>;
  t.panel2_by_type[static_cast<uint32_t>(GgmlType::kQ4_1)] = by_rows8<P32Panel2<P32::kQ4_1>::K>;
  t.panel2_by_type[static_cast<uint32_t>(GgmlType::kQ5_0)] = by_rows8<P32Panel2<P32::kQ5_0>::K>;
  t.panel2_by_type[static_cast<uint32_t>(GgmlType::kQ5_1)] = by_rows8<P32Panel2<P32::kQ5_1>::K>;
  t.panel2_by_type[static_cast<uint32_t>(GgmlType::kQ8_0)] = by_rows8<P32Panel2<P32::kQ8_0>::K>;
  t.panel2_by_type[static_cast<uint32_t>(GgmlType::kQ4_K)] = by_rows8_in_fours<P2Q4_K>;
  t.panel2_by_type[static_cast<uint32_t>(GgmlType::kQ5_K)] = by_rows8_in_fours<P2Q5_K>;
  t.panel2_by_type[static_cast<uint32_t>(GgmlType::kQ6_K)] = by_rows8_in_fours<P2Q6_K>;
#endif
  return t;
}

}  // namespace
}  // namespace ONEBIT_DOT_NS
}  // namespace onebit::cpu
