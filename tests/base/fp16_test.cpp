// Tests of base/fp16.h against the F16C and AVX512-BF16 conversion instructions (where the machine
// has them), against exhaustive identities, and against an independent double-precision rounding.
#include "base/fp16.h"
#include "base/cpu_features.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace onebit {
namespace {

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

// CPUID through our own detection (clang 14 has no "f16c" in __builtin_cpu_supports).
bool has_f16c() { return onebit::cpu_features().f16c; }

__attribute__((target("f16c"))) uint16_t hw_fp32_to_fp16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hw_fp16_to_fp32(uint16_t h) { return _cvtsh_ss(h); }

// Floats that stress every branch of the half conversion: random bit patterns over the whole
// float range, the half range, the subnormal-half range, ties, overflow edges, NaN, Inf.
std::vector<float> interesting_floats() {
  std::vector<float> v;
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) v.push_back(float_of(any(rng)));
  // Magnitudes 2^-26 .. 2^17, covering subnormal halves, normals and overflow.
  std::uniform_int_distribution<uint32_t> near(0x32800000u, 0x48000000u);
  for (int i = 0; i < 400000; ++i) v.push_back(float_of(near(rng) | (any(rng) & 0x80000000u)));
  // Exact ties between adjacent halves (odd and even low bit): h + half an ulp.
  for (uint32_t h = 0; h < 0x7c00u; h += 7) {
    const float a = fp16_to_fp32(static_cast<uint16_t>(h));
    const float b = fp16_to_fp32(static_cast<uint16_t>(h + 1));
    const double mid = (static_cast<double>(a) + b) / 2;
    v.push_back(static_cast<float>(mid));
    v.push_back(-static_cast<float>(mid));
    v.push_back(std::nextafter(static_cast<float>(mid), 0.0f));
    v.push_back(std::nextafter(static_cast<float>(mid), 1e30f));
  }
  for (float f : {65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e30f, 5.9604645e-08f, 2.9802322e-08f,
                  2.9802326e-08f, 6.1035156e-05f, 6.1035152e-05f, 0.0f, -0.0f, 1e-45f, 1.17549435e-38f})
    v.push_back(f);
  v.push_back(float_of(0x7f800000u));  // +Inf
  v.push_back(float_of(0xff800000u));  // -Inf
  v.push_back(float_of(0x7fc00000u));  // quiet NaN
  v.push_back(float_of(0x7f800001u));  // signaling NaN, low payload
  v.push_back(float_of(0xffa5a5a5u));  // negative signaling NaN with payload
  return v;
}

TEST(Fp16, KnownValues) {
  // Encodings from the IEEE 754 binary16 definition.
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);  // largest finite half
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // halfway to 65536 rounds to even: Inf
  EXPECT_EQ(fp32_to_fp16(65519.996f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(6.1035156e-05f), 0x0400);  // smallest normal, 2^-14
  EXPECT_EQ(fp32_to_fp16(5.9604645e-08f), 0x0001);  // smallest subnormal, 2^-24
  EXPECT_EQ(fp32_to_fp16(2.9802322e-08f), 0x0000);  // 2^-25: a tie, rounds to even zero
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(0.333333343f), 0x3555);
  EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), 5.9604644775390625e-08f);
  EXPECT_EQ(fp16_to_fp32(0x03ff), 6.097555160522461e-05f);
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0xfc00)) && fp16_to_fp32(0xfc00) < 0);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
}

TEST(Fp16, HalfToFloatExhaustiveMatchesF16c) {
  if (!has_f16c()) GTEST_SKIP() << "this CPU has no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto hh = static_cast<uint16_t>(h);
    ASSERT_EQ(bits_of(fp16_to_fp32(hh)), bits_of(hw_fp16_to_fp32(hh))) << "half 0x" << std::hex << h;
  }
}

TEST(Fp16, HalfFloatHalfIsIdentityExceptNanQuieting) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto hh = static_cast<uint16_t>(h);
    const bool is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    const uint16_t want = is_nan ? static_cast<uint16_t>(h | 0x200u) : hh;  // quiet bit set
    ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(hh)), want) << "half 0x" << std::hex << h;
  }
}

TEST(Fp16, FloatToHalfMatchesF16cOnInterestingFloats) {
  if (!has_f16c()) GTEST_SKIP() << "this CPU has no F16C";
  for (float f : interesting_floats())
    ASSERT_EQ(fp32_to_fp16(f), hw_fp32_to_fp16(f)) << "float bits 0x" << std::hex << bits_of(f);
}

TEST(Fp16, FloatToHalfMatchesF16cOnEveryFloatNearTheHalfRange) {
  if (!has_f16c()) GTEST_SKIP() << "this CPU has no F16C";
  // Every positive float from 2^-26 to 2^17 (all rounding cases); negatives mirror by sign.
  for (uint32_t u = 0x32800000u; u <= 0x48000000u; ++u) {
    const float f = float_of(u);
    if (fp32_to_fp16(f) != hw_fp32_to_fp16(f)) FAIL() << "float bits 0x" << std::hex << u;
  }
  // A strided sweep of the whole space, both signs.
  for (uint64_t u = 0; u <= 0xffffffffull; u += 997) {
    const float f = float_of(static_cast<uint32_t>(u));
    if (fp32_to_fp16(f) != hw_fp32_to_fp16(f)) FAIL() << "float bits 0x" << std::hex << u;
  }
}

// ---- bfloat16

// Independent reference: pick the nearer of the two bf16 neighbours in double precision; ties go
// to the even one; beyond the largest finite value IEEE overflow rounding applies (2^128 acts as
// the next value). NaN is not handled here.
uint16_t reference_bf16(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t mag = u & 0x7fffffffu;
  const uint32_t lo = mag & 0xffff0000u;  // toward zero
  const uint32_t hi = lo + 0x10000u;      // away from zero (0x7f800000 is Inf)
  const double x = std::fabs(static_cast<double>(f));
  const double dlo = x - static_cast<double>(float_of(lo));
  const double hi_value = hi == 0x7f800000u ? std::ldexp(1.0, 128) : static_cast<double>(float_of(hi));
  const double dhi = hi_value - x;
  uint32_t pick;
  if (mag == lo || dlo < dhi) {
    pick = lo;
  } else if (dhi < dlo) {
    pick = hi;
  } else {
    pick = ((lo >> 16) & 1u) ? hi : lo;
  }
  if (mag >= 0x7f800000u) pick = 0x7f800000u;  // Inf stays Inf
  return static_cast<uint16_t>((sign | pick) >> 16);
}

__attribute__((target("avx512bf16,avx512vl"))) uint16_t hw_fp32_to_bf16(float f) {
  const __m128bh r = _mm_cvtneps_pbh(_mm_set_ss(f));
  uint16_t out;
  std::memcpy(&out, &r, sizeof(out));
  return out;
}

TEST(Bf16, KnownValues) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_bf16(float_of(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(fp32_to_bf16(float_of(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_bf16(float_of(0x7f7fffffu)), 0x7f80);  // FLT_MAX overflows to Inf
  EXPECT_EQ(fp32_to_bf16(float_of(0x00008000u)), 0x0000);  // subnormal tie -> even zero
  EXPECT_EQ(fp32_to_bf16(float_of(0x00018000u)), 0x0002);  // subnormals are kept, not flushed
  EXPECT_EQ(fp32_to_bf16(float_of(0x7f800001u)), 0x7fc0);  // sNaN is quieted
  EXPECT_EQ(fp32_to_bf16(float_of(0xffc12345u)), 0xffc1);
  EXPECT_EQ(bf16_to_fp32(0x4049), 3.140625f);
}

TEST(Bf16, ExhaustiveRoundTripIsIdentityExceptNanQuieting) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const bool is_nan = (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
    const uint16_t want = static_cast<uint16_t>(is_nan ? (b | 0x40u) : b);
    ASSERT_EQ(fp32_to_bf16(bf16_to_fp32(static_cast<uint16_t>(b))), want) << std::hex << b;
  }
}

TEST(Bf16, RoundingMatchesIndependentReference) {
  std::mt19937 rng(777);
  std::uniform_int_distribution<uint32_t> any;
  auto check = [](uint32_t u) {
    const float f = float_of(u);
    if (std::isnan(f)) return;
    ASSERT_EQ(fp32_to_bf16(f), reference_bf16(f)) << "float bits 0x" << std::hex << u;
  };
  for (int i = 0; i < 1000000; ++i) check(any(rng));
  for (uint64_t u = 0; u <= 0xffffffffull; u += 65521) check(static_cast<uint32_t>(u));
  for (uint32_t low = 0x7ff0; low <= 0x8010; ++low) {  // around every tie, a few exponents
    for (uint32_t hi : {0x3f80u, 0x3f81u, 0x0001u, 0x7f7fu, 0xbf80u, 0x8000u}) check((hi << 16) | low);
  }
}

TEST(Bf16, MatchesAvx512Bf16OnNormalFloats) {
  if (!onebit::cpu_features().avx512bf16 || !onebit::cpu_features().avx512vl)
    GTEST_SKIP() << "this CPU has no AVX512-BF16";
  std::mt19937 rng(99);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t u = any(rng);
    const uint32_t exp = (u >> 23) & 0xffu;
    if (exp == 0 || exp == 0xff) continue;  // the instruction flushes subnormals; NaN payloads differ
    ASSERT_EQ(fp32_to_bf16(float_of(u)), hw_fp32_to_bf16(float_of(u))) << std::hex << u;
  }
}

TEST(Fp16, ConstexprUsable) {
  static_assert(fp32_to_fp16(1.0f) == 0x3c00);
  static_assert(fp16_to_fp32(0xc000) == -2.0f);
  static_assert(fp32_to_bf16(1.0f) == 0x3f80);
  static_assert(bf16_to_fp32(0x3f80) == 1.0f);
}

}  // namespace
}  // namespace onebit
