// Panel kernels (panels.h): 8 weight rows at a time against 1..kMaxDotRows activation rows, for
// Q4_0 and Q8_0 panels with Q8 activations. Included by dot_kernels_impl.h (compiled per SIMD
// target; needs its dot_u8s8 and half helpers). No std:: code in here.
//
// Per 32-element block, for each activation row: P[row] = sum(u * y) over the block by 4-byte
// lanes, with u the codes as unsigned bytes (Q4_0: nibbles 0..15; Q8_0: code + 128 with VNNI, or
// |code| against sign(y, code) with AVX2's maddubs, which would saturate on 255 * 127 pairs).
// The code offset meets the activation block's sum once:
//   dot = dw * (da * P - offset * s)   with s = da * sum(y), offset 8 (Q4_0) or 128 (Q8_0 + 128).

// Independent integer accumulators per activation row: vpdpbusd has a latency of ~5 cycles, so a
// single chain of 8 per block would bound one decode thread at ~4 bytes of weights per cycle.
// Fewer activation rows, more chains (the register budget: 16 ymm on AVX2).
template <int NX>
inline constexpr int kChains = NX == 1 ? 4 : NX == 2 ? 2 : 1;

// 4 activation bytes y[i .. i+3] broadcast to every 32-bit lane.
inline __m256i bcast4(const int8_t* y) {
  int32_t v;
  std::memcpy(&v, y, 4);
  return _mm256_set1_epi32(v);
}

template <int NX>
inline void panel_finish_block(const uint8_t* blk, int64_t b, const void* act, size_t stride,
                               const __m256i* p, float offset, __m256* acc) {
  const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
  for (int r = 0; r < NX; ++r) {
    const ActQ8& a = act_q8(act, stride, r)[b];
    const __m256 t = _mm256_fmsub_ps(_mm256_cvtepi32_ps(p[r]), _mm256_set1_ps(a.d), _mm256_set1_ps(offset * a.s));
    acc[r] = _mm256_fmadd_ps(dw, t, acc[r]);
  }
}

template <int NX>
void panel_q4_0(int64_t k, const void* panel, const void* act, size_t stride, float* out, size_t os) {
  constexpr int64_t kBlock = 8 * sizeof(BlockQ4_0);  // 144 bytes: d[8], codes[128]
  const uint8_t* blk = static_cast<const uint8_t*>(panel);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 32; ++b, blk += kBlock) {
    for (int l = 0; l < kBlock; l += 64) prefetch_ahead(blk + l);
    constexpr int C = kChains<NX>;
    __m256i p[C][NX];
    for (int j = 0; j < C; ++j)
      for (int r = 0; r < NX; ++r) p[j][r] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * c));
      const __m256i lo = _mm256_and_si256(raw, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      for (int r = 0; r < NX; ++r) {
        const int8_t* y = act_q8(act, stride, r)[b].qs;
        __m256i& p_lo = p[(2 * c) % C][r];
        p_lo = dot_u8s8(p_lo, lo, bcast4(y + 4 * c));
        __m256i& p_hi = p[(2 * c + 1) % C][r];
        p_hi = dot_u8s8(p_hi, hi, bcast4(y + 16 + 4 * c));
      }
    }
    for (int j = 1; j < C; ++j)
      for (int r = 0; r < NX; ++r) p[0][r] = _mm256_add_epi32(p[0][r], p[j][r]);
    panel_finish_block<NX>(blk, b, act, stride, p[0], 8.0f, acc);
  }
  for (int r = 0; r < NX; ++r) _mm256_storeu_ps(out + r * os, acc[r]);
}

template <int NX>
void panel_q8_0(int64_t k, const void* panel, const void* act, size_t stride, float* out, size_t os) {
  constexpr int64_t kBlock = 8 * sizeof(BlockQ8_0);  // 272 bytes: d[8], codes[256]
  const uint8_t* blk = static_cast<const uint8_t*>(panel);
  __m256 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 32; ++b, blk += kBlock) {
    for (int l = 0; l < kBlock; l += 64) prefetch_ahead(blk + l);
    constexpr int C = kChains<NX>;
    __m256i p[C][NX];
    for (int j = 0; j < C; ++j)
      for (int r = 0; r < NX; ++r) p[j][r] = _mm256_setzero_si256();
    for (int c = 0; c < 8; ++c) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * c));
#if ONEBIT_DOT_VNNI
      const __m256i u = _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));  // code + 128
      for (int r = 0; r < NX; ++r) {
        p[c % C][r] = dot_u8s8(p[c % C][r], u, bcast4(act_q8(act, stride, r)[b].qs + 4 * c));
      }
#else
      const __m256i u = _mm256_sign_epi8(w, w);
      for (int r = 0; r < NX; ++r) {
        p[c % C][r] = dot_u8s8(p[c % C][r], u, _mm256_sign_epi8(bcast4(act_q8(act, stride, r)[b].qs + 4 * c), w));
      }
#endif
    }
    for (int j = 1; j < C; ++j)
      for (int r = 0; r < NX; ++r) p[0][r] = _mm256_add_epi32(p[0][r], p[j][r]);
    panel_finish_block<NX>(blk, b, act, stride, p[0], ONEBIT_DOT_VNNI ? 128.0f : 0.0f, acc);
  }
  for (int r = 0; r < NX; ++r) _mm256_storeu_ps(out + r * os, acc[r]);
}

template <int NX> struct PQ4_0 { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { panel_q4_0<NX>(k, w, a, s, o, os); } };
template <int NX> struct PQ8_0 { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { panel_q8_0<NX>(k, w, a, s, o, os); } };
