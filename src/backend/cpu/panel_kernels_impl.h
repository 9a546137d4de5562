// Panel kernels (panels.h): 8 weight rows at a time against 1..kMaxDotRows activation rows, for
// Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 panels with Q8 activations and Q4_K, Q5_K and Q6_K panels with
// Q8_K activations.
// Included by dot_kernels_impl.h (compiled per SIMD target; needs its dot_u8s8 and half helpers).
// No std:: code in here.
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

// Software prefetch of the panel stream 4 KiB ahead: a panel kernel consumes a cache line in a few
// cycles, and with 1 KiB (the row kernels' distance) one decode thread measured ~20% slower (the
// DRAM latency times one core's bandwidth is ~1.5 KiB in flight; 4-8 KiB measured best).
inline void panel_prefetch(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p) + 4096, _MM_HINT_T0); }

// p[0][r] += p[j][r] for every chain j.
template <int C, int NX>
inline void fold_chains(__m256i (&p)[C][NX]) {
  for (int j = 1; j < C; ++j)
    for (int r = 0; r < NX; ++r) p[0][r] = _mm256_add_epi32(p[0][r], p[j][r]);
}

// 4 activation bytes y[i .. i+3] broadcast to every 32-bit lane.
inline __m256i bcast4(const int8_t* y) {
  int32_t v;
  std::memcpy(&v, y, 4);
  return _mm256_set1_epi32(v);
}

// Bit `Bit` of every byte of hb moved to bit 4 (0x10 or 0): the fifth bit over a nibble (Q5_0,
// Q5_1, Q5_K panels keep it in that byte, bit Bit, of the code's lane).
template <int Bit>
inline __m256i fifth_bit(__m256i hb) {
  const __m256i m = _mm256_set1_epi8(0x10);
  if constexpr (Bit <= 4) return _mm256_and_si256(_mm256_slli_epi16(hb, 4 - Bit), m);
  return _mm256_and_si256(_mm256_srli_epi16(hb, Bit - 4), m);
}

// The 32-element panel types (panels.h): codes as unsigned bytes u, then per block and row
//   dot = dw * (da * P - offset * s) [+ mw * s]   with s = da * sum(y)
// offset 8 (Q4_0), 16 (Q5_0), 128 (Q8_0 + 128 with VNNI; 0 with AVX2's |w| against sign(y, w)),
// 0 for the types with a min mw (Q4_1, Q5_1).
enum class P32 { kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0 };

// Code group c of a nibble panel: 4 codes of each row from the low nibbles (elements 4c .. 4c+3)
// and from the high ones (16 + 4c ..), with their fifth bits from hb for Q5_0 / Q5_1.
template <bool kFive, int C>
inline void nibble_codes(__m256i raw, __m256i hb, __m256i& lo, __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  lo = _mm256_and_si256(raw, m4);
  hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
  if constexpr (kFive) {
    lo = _mm256_or_si256(lo, fifth_bit<2 * C>(hb));
    hi = _mm256_or_si256(hi, fifth_bit<2 * C + 1>(hb));
  }
}

template <P32 kType, int C, int NX, int Chains>
inline void nibble_group(const uint8_t* codes, __m256i hb, int64_t b, const void* act, size_t stride,
                         __m256i (&p)[Chains][NX]) {
  constexpr bool kFive = kType == P32::kQ5_0 || kType == P32::kQ5_1;
  __m256i lo, hi;
  nibble_codes<kFive, C>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * C)), hb, lo, hi);
  for (int r = 0; r < NX; ++r) {
    const int8_t* y = act_q8(act, stride, r)[b].qs;
    __m256i& p_lo = p[(2 * C) % Chains][r];
    p_lo = dot_u8s8(p_lo, lo, bcast4(y + 4 * C));
    __m256i& p_hi = p[(2 * C + 1) % Chains][r];
    p_hi = dot_u8s8(p_hi, hi, bcast4(y + 16 + 4 * C));
  }
}

template <P32 kType, int NX>
void panel_q32(int64_t k, const void* panel, const void* act, size_t stride, float* out, size_t os) {
  constexpr bool kNib = kType != P32::kQ8_0;
  constexpr bool kFive = kType == P32::kQ5_0 || kType == P32::kQ5_1;
  constexpr bool kMin = kType == P32::kQ4_1 || kType == P32::kQ5_1;
  constexpr int64_t kHead = kMin ? 32 : 16;  // d[8], m[8]
  constexpr int64_t kCodes = kNib ? 128 : 256;
  constexpr int64_t kBlock = kHead + kCodes + (kFive ? 32 : 0);
  constexpr float kOffset = kType == P32::kQ4_0 ? 8.0f
                            : kType == P32::kQ5_0 ? 16.0f
                            : kType == P32::kQ8_0 ? (ONEBIT_DOT_VNNI ? 128.0f : 0.0f)
                                                  : 0.0f;
  const uint8_t* blk = static_cast<const uint8_t*>(panel);
  __m256 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 32; ++b, blk += kBlock) {
    for (int l = 0; l < kBlock; l += 64) panel_prefetch(blk + l);
    constexpr int C = kChains<NX>;
    __m256i p[C][NX] = {};
    const uint8_t* codes = blk + kHead;
    if constexpr (!ONEBIT_DOT_VNNI && NX == 1 && (kType == P32::kQ4_0 || kType == P32::kQ4_1)) {
      // Decode without VNNI: the block's 8 maddubs pair sums added in 16 bits (exact: |sum| <=
      // 8 * 2 * 15 * 128), widened once; the empty asms keep one load per code vector and the
      // sums a chain (GCC folds the load into both vpands and reassociates the sums otherwise).
      const int8_t* y = act_q8(act, stride, 0)[b].qs;
      const __m256i m4 = _mm256_set1_epi8(0x0F);
      __m256i s16 = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * c));
        asm("" : "+x"(raw));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(raw, m4), bcast4(y + 4 * c)));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), bcast4(y + 16 + 4 * c)));
        asm("" : "+x"(s16));
      }
      p[0][0] = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
    } else if constexpr (kNib) {
      const __m256i hb = kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + kCodes)) : __m256i{};
      nibble_group<kType, 0, NX, C>(codes, hb, b, act, stride, p);
      nibble_group<kType, 1, NX, C>(codes, hb, b, act, stride, p);
      nibble_group<kType, 2, NX, C>(codes, hb, b, act, stride, p);
      nibble_group<kType, 3, NX, C>(codes, hb, b, act, stride, p);
    } else {
      for (int c = 0; c < 8; ++c) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * c));
#if ONEBIT_DOT_VNNI
        const __m256i u = _mm256_xor_si256(raw, _mm256_set1_epi8(static_cast<char>(0x80)));  // code + 128
#else
        const __m256i u = _mm256_sign_epi8(raw, raw);
#endif
        for (int r = 0; r < NX; ++r) {
          __m256i y = bcast4(act_q8(act, stride, r)[b].qs + 4 * c);
          if (!ONEBIT_DOT_VNNI) y = _mm256_sign_epi8(y, raw);
          p[c % C][r] = dot_u8s8(p[c % C][r], u, y);
        }
      }
    }
    fold_chains<C, NX>(p);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    for (int r = 0; r < NX; ++r) {
      const ActQ8& a = act_q8(act, stride, r)[b];
      const __m256 t = _mm256_fmsub_ps(_mm256_cvtepi32_ps(p[0][r]), _mm256_set1_ps(a.d), _mm256_set1_ps(kOffset * a.s));
      acc[r] = _mm256_fmadd_ps(dw, t, acc[r]);
      if constexpr (kMin) {
        const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
        acc[r] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a.s), acc[r]);
      }
    }
  }
  for (int r = 0; r < NX; ++r) _mm256_storeu_ps(out + r * os, acc[r]);
}

#if ONEBIT_DOT_VNNI == 2
// Two adjacent panels (16 weight rows) in 512-bit registers, for products of several activation
// rows: each 4-byte activation broadcast then feeds 16 rows, not 8. The 256-bit kernel is bound by
// those broadcasts (one load per vpdpbusd of 32 products); on Zen 4, which runs a 512-bit vpdpbusd
// as two 256-bit halves, the same products take half the loads. Every lane does panel_q32's
// arithmetic in its order (integer sums, then the same fmsub / fmadd per block), so the 16 outputs
// have the bits of two panel_q32 calls.
// A two-panel kernel's prefetches for its blocks at ba and bb (panel b starts at b0, P bytes after
// panel a): b's stream 4 KiB ahead (past b's end: the next pair's a); a's the same until that would
// land in b, which b's own stream brings, then 2P further: the next pair's b, whose head otherwise
// starts cold (panels of k = 640 are 5 KiB: the kernel stalled on that head for every pair, and a
// verification step of 2 tokens took longer on these kernels than on panel_q32 twice).
template <int64_t kBlock>
inline void panel2_prefetch(const uint8_t* ba, const uint8_t* bb, const uint8_t* b0, int64_t P) {
  const uint8_t* pa = ba + 4096 >= b0 ? ba + 2 * P : ba;
  for (int l = 0; l < kBlock; l += 64) panel_prefetch(pa + l), panel_prefetch(bb + l);
}

inline __m512i join256(const uint8_t* a, const uint8_t* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}
// 8 fp16 values at a, then 8 at b, as 16 floats.
inline __m512 halves16(const uint8_t* a, const uint8_t* b) {
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1));
}
template <int Bit>
inline __m512i fifth_bit512(__m512i hb) {
  const __m512i m = _mm512_set1_epi8(0x10);
  if constexpr (Bit <= 4) return _mm512_and_si512(_mm512_slli_epi16(hb, 4 - Bit), m);
  return _mm512_and_si512(_mm512_srli_epi16(hb, Bit - 4), m);
}
inline __m512i bcast4_512(const int8_t* y) {
  int32_t v;
  std::memcpy(&v, y, 4);
  return _mm512_set1_epi32(v);
}

template <P32 kType, int NX>
void panel2_q32(int64_t k, const void* panel, const void* act, size_t stride, float* out, size_t os) {
  constexpr bool kNib = kType != P32::kQ8_0;
  constexpr bool kFive = kType == P32::kQ5_0 || kType == P32::kQ5_1;
  constexpr bool kMin = kType == P32::kQ4_1 || kType == P32::kQ5_1;
  constexpr int64_t kHead = kMin ? 32 : 16;
  constexpr int64_t kCodes = kNib ? 128 : 256;
  constexpr int64_t kBlock = kHead + kCodes + (kFive ? 32 : 0);
  constexpr float kOffset = kType == P32::kQ4_0 ? 8.0f : kType == P32::kQ5_0 ? 16.0f : kType == P32::kQ8_0 ? 128.0f : 0.0f;
  const uint8_t* blk_a = static_cast<const uint8_t*>(panel);
  const int64_t P = (k / 32) * kBlock;
  const uint8_t* const b0 = blk_a + P;  // the next panel
  const uint8_t* blk_b = b0;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k / 32; ++b, blk_a += kBlock, blk_b += kBlock) {
    panel2_prefetch<kBlock>(blk_a, blk_b, b0, P);
    __m512i p[NX];
    for (int r = 0; r < NX; ++r) p[r] = _mm512_setzero_si512();
    const uint8_t* ca = blk_a + kHead;
    const uint8_t* cb = blk_b + kHead;
    if constexpr (kNib) {
      const __m512i hb = kFive ? join256(ca + kCodes, cb + kCodes) : _mm512_setzero_si512();
      const auto group = [&](auto c_const) {
        constexpr int C = decltype(c_const)::value;
        const __m512i raw = join256(ca + 32 * C, cb + 32 * C);
        __m512i lo = _mm512_and_si512(raw, m4), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        if constexpr (kFive) {
          lo = _mm512_or_si512(lo, fifth_bit512<2 * C>(hb));
          hi = _mm512_or_si512(hi, fifth_bit512<2 * C + 1>(hb));
        }
        for (int r = 0; r < NX; ++r) {
          const int8_t* y = act_q8(act, stride, r)[b].qs;
          p[r] = _mm512_dpbusd_epi32(p[r], lo, bcast4_512(y + 4 * C));
          p[r] = _mm512_dpbusd_epi32(p[r], hi, bcast4_512(y + 16 + 4 * C));
        }
      };
      group(std::integral_constant<int, 0>{});
      group(std::integral_constant<int, 1>{});
      group(std::integral_constant<int, 2>{});
      group(std::integral_constant<int, 3>{});
    } else {
      for (int c = 0; c < 8; ++c) {
        const __m512i u = _mm512_xor_si512(join256(ca + 32 * c, cb + 32 * c), _mm512_set1_epi8(static_cast<char>(0x80)));
        for (int r = 0; r < NX; ++r) p[r] = _mm512_dpbusd_epi32(p[r], u, bcast4_512(act_q8(act, stride, r)[b].qs + 4 * c));
      }
    }
    const __m512 dw = halves16(blk_a, blk_b);
    for (int r = 0; r < NX; ++r) {
      const ActQ8& a = act_q8(act, stride, r)[b];
      const __m512 t = _mm512_fmsub_ps(_mm512_cvtepi32_ps(p[r]), _mm512_set1_ps(a.d), _mm512_set1_ps(kOffset * a.s));
      acc[r] = _mm512_fmadd_ps(dw, t, acc[r]);
      if constexpr (kMin) acc[r] = _mm512_fmadd_ps(halves16(blk_a + 16, blk_b + 16), _mm512_set1_ps(a.s), acc[r]);
    }
  }
  for (int r = 0; r < NX; ++r) _mm512_storeu_ps(out + r * os, acc[r]);
}
#endif

// --- K-quant panels (Q8_K activations) -------------------------------------------------------
// Per 8-row sub-block group: P = sum(u * y) by lanes (one lane per weight row), then the
// sub-block's integer scale per row (vpmulld) into one int32 sum per row and super-block.
inline __m256i bytes8_u(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
inline __m256i bytes8_s(const uint8_t* p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }

// Q4_K / Q5_K chunk C of super-block b against NX activation rows: each code load feeds
// sub-blocks 2C (low nibbles) and 2C + 1 (high nibbles); adds their scaled sums and mins.
// Per group of 4 codes a row: with VNNI one vpdpbusd, then the sub-block's scale one vpmulld a
// row. At decode without VNNI (kPairSums: AVX2's maddubs gives 16-bit pair sums), the pair sums
// of up to kSpan groups are added in 16 bits (|pair| <= 2 * 31 * 128, so 4 groups of Q5_K codes
// and 8 of Q4_K stay within int16: exact), then widened by one madd against the scale held in
// both 16-bit halves of the row's lane: a madd and an add a group and the vpmulld saved
// (docs/kernels.md). Prompt tiles keep the per-group madd (their 16-bit sums measured slower).
template <bool kFive, int C, int NX>
inline void q45_k_chunk(const uint8_t* blk, int64_t b, const void* act, size_t stride, __m256i* sumi, __m256i* summ) {
  constexpr bool kPairSums = !ONEBIT_DOT_VNNI && NX == 1;
  constexpr int kSpan = kPairSums ? (kFive ? 4 : 8) : 8;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const uint8_t* codes = blk + 160;
  const uint8_t* qh = blk + 1184;  // Q5_K only
  const __m256i sc_lo = bytes8_u(blk + 32 + 16 * C), sc_hi = bytes8_u(blk + 40 + 16 * C);  // sub-blocks 2C, 2C + 1
  __m256i p_lo[NX], p_hi[NX];
  for (int r = 0; r < NX; ++r) p_lo[r] = p_hi[r] = _mm256_setzero_si256();
  for (int g0 = 0; g0 < 8; g0 += kSpan) {
    __m256i s_lo = _mm256_setzero_si256(), s_hi = s_lo;  // kPairSums: the 16-bit pair sums
    for (int g = g0; g < g0 + kSpan; ++g) {
      __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + (8 * C + g) * 32));
      if constexpr (kPairSums) asm("" : "+x"(raw));  // one load for both nibbles, not one folded into each vpand
      __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      if constexpr (kFive) {
        const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + g * 32));
        lo = _mm256_or_si256(lo, fifth_bit<2 * C>(hb));
        hi = _mm256_or_si256(hi, fifth_bit<2 * C + 1>(hb));
      }
      for (int r = 0; r < NX; ++r) {
        const int8_t* y = act_q8k(act, stride, r)[b].qs + 64 * C + 4 * g;
        if constexpr (kPairSums) {
          s_lo = _mm256_add_epi16(s_lo, _mm256_maddubs_epi16(lo, bcast4(y)));
          s_hi = _mm256_add_epi16(s_hi, _mm256_maddubs_epi16(hi, bcast4(y + 32)));
          // Kept chains: GCC otherwise reassociates a span's sums into a tree of all its products
          // and spills them (75 ymm spills a Q4_K super-block; llvm-mca -mcpu=znver3: 120 -> 79 cycles).
          asm("" : "+x"(s_lo), "+x"(s_hi));
        } else {
          p_lo[r] = dot_u8s8(p_lo[r], lo, bcast4(y));
          p_hi[r] = dot_u8s8(p_hi[r], hi, bcast4(y + 32));
        }
      }
    }
    if constexpr (kPairSums) {
      const __m256i w_lo = _mm256_or_si256(sc_lo, _mm256_slli_epi32(sc_lo, 16));
      const __m256i w_hi = _mm256_or_si256(sc_hi, _mm256_slli_epi32(sc_hi, 16));
      sumi[0] = _mm256_add_epi32(sumi[0], _mm256_add_epi32(_mm256_madd_epi16(s_lo, w_lo), _mm256_madd_epi16(s_hi, w_hi)));
    }
  }
  if constexpr (!kPairSums)
    for (int r = 0; r < NX; ++r)
      sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(_mm256_mullo_epi32(p_lo[r], sc_lo), _mm256_mullo_epi32(p_hi[r], sc_hi)));
  for (int half = 0; half < 2; ++half) {
    const int j = 2 * C + half;
    const __m256i mn = bytes8_u(blk + 96 + 8 * j);
    for (int r = 0; r < NX; ++r) {
      const BlockQ8_K& a = act_q8k(act, stride, r)[b];
      summ[r] = _mm256_add_epi32(summ[r], _mm256_mullo_epi32(mn, _mm256_set1_epi32(a.bsums[2 * j] + a.bsums[2 * j + 1])));
    }
  }
}

// Q4_K / Q5_K (kFive): y = d * sc[j] * q - dmin * m[j] per sub-block j of 32; the mins meet the
// activation sub-block sums (bsums) once per super-block. Q5_K's q gets bit j of its qh byte.
template <bool kFive, int NX>
void panel_q45_k(int64_t k, const void* panel, const void* act, size_t stride, float* out, size_t os) {
  constexpr int64_t kBlock = kFive ? 1440 : 1184;
  const uint8_t* blk = static_cast<const uint8_t*>(panel);
  __m256 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / kQK_K; ++b, blk += kBlock) {
    for (int l = 0; l < kBlock; l += 64) panel_prefetch(blk + l);
    __m256i sumi[NX], summ[NX];
    for (int r = 0; r < NX; ++r) sumi[r] = summ[r] = _mm256_setzero_si256();
    q45_k_chunk<kFive, 0, NX>(blk, b, act, stride, sumi, summ);
    q45_k_chunk<kFive, 1, NX>(blk, b, act, stride, sumi, summ);
    q45_k_chunk<kFive, 2, NX>(blk, b, act, stride, sumi, summ);
    q45_k_chunk<kFive, 3, NX>(blk, b, act, stride, sumi, summ);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
    for (int r = 0; r < NX; ++r) {
      const __m256 da = _mm256_set1_ps(act_q8k(act, stride, r)[b].d);
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
      acc[r] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, da), _mm256_cvtepi32_ps(summ[r]), acc[r]);
    }
  }
  for (int r = 0; r < NX; ++r) _mm256_storeu_ps(out + r * os, acc[r]);
}

// Q6_K's high 2 bits of quarter T (bits 2T, 2T + 1 of each qh byte) moved to bits 4-5.
template <int T>
inline __m256i q6_k_high(__m256i hb) {
  const __m256i m2 = _mm256_set1_epi8(0x30);
  if constexpr (T == 0) return _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2);
  if constexpr (T == 1) return _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2);
  if constexpr (T == 2) return _mm256_and_si256(hb, m2);
  return _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2);
}

// Q6_K against NX activation rows: sub-blocks j = 8h + 2T + s and 8h + 2(T + 2) + s (quarters T
// and T + 2 of half h, groups g = 4s .. 4s+3), from one load of their ql bytes and of qh.
template <int T, int NX>
inline void q6_k_quarter_pair(const uint8_t* ql, const uint8_t* qh, const uint8_t* blk, int64_t b, const void* act,
                              size_t stride, int h, int s, __m256i* sumi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i pa[NX], pb[NX];
  for (int r = 0; r < NX; ++r) pa[r] = pb[r] = _mm256_setzero_si256();
  for (int g = 4 * s; g < 4 * s + 4; ++g) {
    const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + (16 * h + 8 * T + g) * 32));
    const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + (8 * h + g) * 32));
    const __m256i ua = _mm256_or_si256(_mm256_and_si256(l, m4), q6_k_high<T>(hb));
    const __m256i ub = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), m4), q6_k_high<T + 2>(hb));
    for (int r = 0; r < NX; ++r) {
      const int8_t* y = act_q8k(act, stride, r)[b].qs + 128 * h + 4 * g;
      pa[r] = dot_u8s8(pa[r], ua, bcast4(y + 32 * T));
      pb[r] = dot_u8s8(pb[r], ub, bcast4(y + 32 * (T + 2)));
    }
  }
  const int ja = 8 * h + 2 * T + s, jb = ja + 4;
  const __m256i sca = bytes8_s(blk + 16 + 8 * ja), scb = bytes8_s(blk + 16 + 8 * jb);
  for (int r = 0; r < NX; ++r) {
    const BlockQ8_K& a = act_q8k(act, stride, r)[b];
    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_mullo_epi32(_mm256_sub_epi32(pa[r], _mm256_set1_epi32(32 * a.bsums[ja])), sca));
    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_mullo_epi32(_mm256_sub_epi32(pb[r], _mm256_set1_epi32(32 * a.bsums[jb])), scb));
  }
}

// Q6_K: y = d * sc[j] * (q - 32) per sub-block j of 16; the -32 meets the bsums per sub-block.
// Element 128h + 32t + 4g + i (t = 0..3) is in ql part t % 2, nibble t / 2, with bits 2t of qh.
template <int NX>
void panel_q6_k(int64_t k, const void* panel, const void* act, size_t stride, float* out, size_t os) {
  constexpr int64_t kBlock = 1680;
  const uint8_t* blk = static_cast<const uint8_t*>(panel);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / kQK_K; ++b, blk += kBlock) {
    for (int l = 0; l < kBlock; l += 64) panel_prefetch(blk + l);
    const uint8_t* ql = blk + 144;
    const uint8_t* qh = blk + 144 + 1024;
    __m256i sumi[NX];
    for (int r = 0; r < NX; ++r) sumi[r] = _mm256_setzero_si256();
    if constexpr (NX == 1) {
      // Decode: each ql/qh load feeds all four quarters (4 independent chains, a third of the loads).
      const BlockQ8_K& a = act_q8k(act, stride, 0)[b];
      for (int h = 0; h < 2; ++h) {
        for (int s = 0; s < 2; ++s) {
          __m256i p[4] = {};
          for (int g = 4 * s; g < 4 * s + 4; ++g) {
            const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + (16 * h + g) * 32));
            const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + (16 * h + 8 + g) * 32));
            const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + (8 * h + g) * 32));
            const int8_t* y = a.qs + 128 * h + 4 * g;
            p[0] = dot_u8s8(p[0], _mm256_or_si256(_mm256_and_si256(l0, m4), q6_k_high<0>(hb)), bcast4(y));
            p[1] = dot_u8s8(p[1], _mm256_or_si256(_mm256_and_si256(l1, m4), q6_k_high<1>(hb)), bcast4(y + 32));
            p[2] = dot_u8s8(p[2], _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), q6_k_high<2>(hb)), bcast4(y + 64));
            p[3] = dot_u8s8(p[3], _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), q6_k_high<3>(hb)), bcast4(y + 96));
          }
          for (int t = 0; t < 4; ++t) {
            const int j = 8 * h + 2 * t + s;
            const __m256i off = _mm256_set1_epi32(32 * a.bsums[j]);
            sumi[0] = _mm256_add_epi32(sumi[0], _mm256_mullo_epi32(_mm256_sub_epi32(p[t], off), bytes8_s(blk + 16 + 8 * j)));
          }
        }
      }
    } else {
      // Prompt: quarters t and t + 2 share their ql bytes (low and high nibbles), all four the qh.
      for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 2; ++s) {
          q6_k_quarter_pair<0, NX>(ql, qh, blk, b, act, stride, h, s, sumi);
          q6_k_quarter_pair<1, NX>(ql, qh, blk, b, act, stride, h, s, sumi);
        }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    for (int r = 0; r < NX; ++r) {
      const __m256 dd = _mm256_mul_ps(d, _mm256_set1_ps(act_q8k(act, stride, r)[b].d));
      acc[r] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(sumi[r]), acc[r]);
    }
  }
  for (int r = 0; r < NX; ++r) _mm256_storeu_ps(out + r * os, acc[r]);
}

#if ONEBIT_DOT_VNNI == 2
// --- K-quant panels in pairs (512-bit registers; see panel2_q32): panel_q45_k's and
// panel_q6_k's arithmetic per lane, so the bits of two calls of theirs. Up to 4 activation rows
// per call (their sums fill the 32 registers).
// 8 bytes at a, then 8 at b, widened to 16 int32 lanes (unsigned / signed).
inline __m512i bytes16_u(const uint8_t* a, const uint8_t* b) {
  return _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                                                 _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b))));
}
inline __m512i bytes16_s(const uint8_t* a, const uint8_t* b) {
  return _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                                                 _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b))));
}

template <bool kFive, int C, int NX>
inline void q45_k_chunk2(const uint8_t* ba, const uint8_t* bb, int64_t b, const void* act, size_t stride,
                         __m512i* sumi, __m512i* summ) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512i p_lo[NX], p_hi[NX];
  for (int r = 0; r < NX; ++r) p_lo[r] = p_hi[r] = _mm512_setzero_si512();
  for (int g = 0; g < 8; ++g) {
    const int64_t at = 160 + (8 * C + g) * 32;
    const __m512i raw = join256(ba + at, bb + at);
    __m512i lo = _mm512_and_si512(raw, m4), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    if constexpr (kFive) {
      const __m512i hb = join256(ba + 1184 + g * 32, bb + 1184 + g * 32);
      lo = _mm512_or_si512(lo, fifth_bit512<2 * C>(hb));
      hi = _mm512_or_si512(hi, fifth_bit512<2 * C + 1>(hb));
    }
    for (int r = 0; r < NX; ++r) {
      const int8_t* y = act_q8k(act, stride, r)[b].qs + 64 * C + 4 * g;
      p_lo[r] = _mm512_dpbusd_epi32(p_lo[r], lo, bcast4_512(y));
      p_hi[r] = _mm512_dpbusd_epi32(p_hi[r], hi, bcast4_512(y + 32));
    }
  }
  for (int half = 0; half < 2; ++half) {
    const int j = 2 * C + half;
    const __m512i sc = bytes16_u(ba + 32 + 8 * j, bb + 32 + 8 * j), mn = bytes16_u(ba + 96 + 8 * j, bb + 96 + 8 * j);
    for (int r = 0; r < NX; ++r) {
      const BlockQ8_K& a = act_q8k(act, stride, r)[b];
      sumi[r] = _mm512_add_epi32(sumi[r], _mm512_mullo_epi32(half ? p_hi[r] : p_lo[r], sc));
      summ[r] = _mm512_add_epi32(summ[r], _mm512_mullo_epi32(mn, _mm512_set1_epi32(a.bsums[2 * j] + a.bsums[2 * j + 1])));
    }
  }
}

template <bool kFive, int NX>
void panel2_q45_k(int64_t k, const void* panel, const void* act, size_t stride, float* out, size_t os) {
  constexpr int64_t kBlock = kFive ? 1440 : 1184;
  const int64_t P = (k / kQK_K) * kBlock;
  const uint8_t* ba = static_cast<const uint8_t*>(panel);
  const uint8_t* const b0 = ba + P;  // the next panel
  const uint8_t* bb = b0;
  __m512 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k / kQK_K; ++b, ba += kBlock, bb += kBlock) {
    panel2_prefetch<kBlock>(ba, bb, b0, P);
    __m512i sumi[NX], summ[NX];
    for (int r = 0; r < NX; ++r) sumi[r] = summ[r] = _mm512_setzero_si512();
    q45_k_chunk2<kFive, 0, NX>(ba, bb, b, act, stride, sumi, summ);
    q45_k_chunk2<kFive, 1, NX>(ba, bb, b, act, stride, sumi, summ);
    q45_k_chunk2<kFive, 2, NX>(ba, bb, b, act, stride, sumi, summ);
    q45_k_chunk2<kFive, 3, NX>(ba, bb, b, act, stride, sumi, summ);
    const __m512 d = halves16(ba, bb), dmin = halves16(ba + 16, bb + 16);
    for (int r = 0; r < NX; ++r) {
      const __m512 da = _mm512_set1_ps(act_q8k(act, stride, r)[b].d);
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(sumi[r]), acc[r]);
      acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, da), _mm512_cvtepi32_ps(summ[r]), acc[r]);
    }
  }
  for (int r = 0; r < NX; ++r) _mm512_storeu_ps(out + r * os, acc[r]);
}

template <int T>
inline __m512i q6_k_high512(__m512i hb) {
  const __m512i m2 = _mm512_set1_epi8(0x30);
  if constexpr (T == 0) return _mm512_and_si512(_mm512_slli_epi16(hb, 4), m2);
  if constexpr (T == 1) return _mm512_and_si512(_mm512_slli_epi16(hb, 2), m2);
  if constexpr (T == 2) return _mm512_and_si512(hb, m2);
  return _mm512_and_si512(_mm512_srli_epi16(hb, 2), m2);
}

template <int T, int NX>
inline void q6_k_quarter_pair2(const uint8_t* ba, const uint8_t* bb, int64_t b, const void* act, size_t stride,
                               int h, int s, __m512i* sumi) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512i pa[NX], pb[NX];
  for (int r = 0; r < NX; ++r) pa[r] = pb[r] = _mm512_setzero_si512();
  for (int g = 4 * s; g < 4 * s + 4; ++g) {
    const int64_t at_l = 144 + (16 * h + 8 * T + g) * 32, at_h = 144 + 1024 + (8 * h + g) * 32;
    const __m512i l = join256(ba + at_l, bb + at_l);
    const __m512i hb = join256(ba + at_h, bb + at_h);
    const __m512i ua = _mm512_or_si512(_mm512_and_si512(l, m4), q6_k_high512<T>(hb));
    const __m512i ub = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), q6_k_high512<T + 2>(hb));
    for (int r = 0; r < NX; ++r) {
      const int8_t* y = act_q8k(act, stride, r)[b].qs + 128 * h + 4 * g;
      pa[r] = _mm512_dpbusd_epi32(pa[r], ua, bcast4_512(y + 32 * T));
      pb[r] = _mm512_dpbusd_epi32(pb[r], ub, bcast4_512(y + 32 * (T + 2)));
    }
  }
  const int ja = 8 * h + 2 * T + s, jb = ja + 4;
  const __m512i sca = bytes16_s(ba + 16 + 8 * ja, bb + 16 + 8 * ja), scb = bytes16_s(ba + 16 + 8 * jb, bb + 16 + 8 * jb);
  for (int r = 0; r < NX; ++r) {
    const BlockQ8_K& a = act_q8k(act, stride, r)[b];
    sumi[r] = _mm512_add_epi32(sumi[r], _mm512_mullo_epi32(_mm512_sub_epi32(pa[r], _mm512_set1_epi32(32 * a.bsums[ja])), sca));
    sumi[r] = _mm512_add_epi32(sumi[r], _mm512_mullo_epi32(_mm512_sub_epi32(pb[r], _mm512_set1_epi32(32 * a.bsums[jb])), scb));
  }
}

template <int NX>
void panel2_q6_k(int64_t k, const void* panel, const void* act, size_t stride, float* out, size_t os) {
  constexpr int64_t kBlock = 1680;
  const int64_t P = (k / kQK_K) * kBlock;
  const uint8_t* ba = static_cast<const uint8_t*>(panel);
  const uint8_t* const b0 = ba + P;  // the next panel
  const uint8_t* bb = b0;
  __m512 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k / kQK_K; ++b, ba += kBlock, bb += kBlock) {
    panel2_prefetch<kBlock>(ba, bb, b0, P);
    __m512i sumi[NX];
    for (int r = 0; r < NX; ++r) sumi[r] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 2; ++s) {
        q6_k_quarter_pair2<0, NX>(ba, bb, b, act, stride, h, s, sumi);
        q6_k_quarter_pair2<1, NX>(ba, bb, b, act, stride, h, s, sumi);
      }
    const __m512 d = halves16(ba, bb);
    for (int r = 0; r < NX; ++r) {
      const __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(act_q8k(act, stride, r)[b].d));
      acc[r] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(sumi[r]), acc[r]);
    }
  }
  for (int r = 0; r < NX; ++r) _mm512_storeu_ps(out + r * os, acc[r]);
}

template <int NX> struct P2Q4_K { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { panel2_q45_k<false, NX>(k, w, a, s, o, os); } };
template <int NX> struct P2Q5_K { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { panel2_q45_k<true, NX>(k, w, a, s, o, os); } };
template <int NX> struct P2Q6_K { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { panel2_q6_k<NX>(k, w, a, s, o, os); } };
#endif

template <int NX> struct PQ4_K { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { panel_q45_k<false, NX>(k, w, a, s, o, os); } };
template <int NX> struct PQ5_K { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { panel_q45_k<true, NX>(k, w, a, s, o, os); } };
template <int NX> struct PQ6_K { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { panel_q6_k<NX>(k, w, a, s, o, os); } };
template <P32 kType> struct P32Panel {
  template <int NX> struct K { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { panel_q32<kType, NX>(k, w, a, s, o, os); } };
};
template <int NX> using PQ4_0 = P32Panel<P32::kQ4_0>::K<NX>;
template <int NX> using PQ4_1 = P32Panel<P32::kQ4_1>::K<NX>;
template <int NX> using PQ5_0 = P32Panel<P32::kQ5_0>::K<NX>;
template <int NX> using PQ5_1 = P32Panel<P32::kQ5_1>::K<NX>;
template <int NX> using PQ8_0 = P32Panel<P32::kQ8_0>::K<NX>;
#if ONEBIT_DOT_VNNI == 2
template <P32 kType> struct P32Panel2 {
  template <int NX> struct K { static void run(int64_t k, const void* w, const void* a, size_t s, float* o, size_t os) { panel2_q32<kType, NX>(k, w, a, s, o, os); } };
};
#endif
