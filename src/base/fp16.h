// IEEE binary16 (half) and bfloat16 <-> float conversion: scalar, exact, round-to-nearest-even.
// Bit-level only (no FPU mode, no intrinsics), so results are the same on every machine and build.
#pragma once

#include <bit>
#include <cstdint>

namespace onebit {

// Half bits -> float, exact. Infinities keep their sign; a NaN keeps its payload and gets the quiet
// bit set (as the F16C instruction vcvtph2ps does); subnormal halves become normal floats.
constexpr float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {  // Inf (mant == 0) or NaN
    const uint32_t quiet = mant ? 0x400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13) | quiet);
  }
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal: value = mant * 2^-24. Shift the leading one up to bit 10 to make it normal.
    uint32_t e = 127 - 14;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3ffu) << 13));
  }
  return std::bit_cast<float>(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

// Float -> half bits, round to nearest, ties to even. Values at or above 65520 in magnitude become
// infinity; tiny values become subnormals or signed zero; NaN stays NaN, quieted, with the top 9
// payload bits kept. Bit-identical to F16C's vcvtps2ph with rounding mode 0 (_cvtss_sh(x, 0)).
constexpr uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: Inf
  if (abs >= 0x38800000u) {                                              // >= 2^-14: a normal half
    // Add just under half an ulp (plus the lsb for ties-to-even); a carry bumps the exponent.
    const uint32_t rounded = abs + 0x0fffu + ((abs >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - ((127u - 15u) << 23)) >> 13));
  }
  if (abs <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 rounds to zero
  // Subnormal half: count units of 2^-24. The float is normal here (exponent 102..112).
  const uint32_t exp = abs >> 23;
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exp;  // 14..24
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q may reach 0x400, the smallest normal
  return static_cast<uint16_t>(sign | q);
}

// Bfloat16 bits -> float, exact (the top half of the float's bits).
constexpr float bf16_to_fp32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// Float -> bfloat16 bits, round to nearest, ties to even; NaN keeps its sign and top payload bits
// and is forced quiet. Subnormals are kept (not flushed). Same bits as ggml's
// ggml_compute_fp32_to_bf16 (ggml/src/ggml-impl.h), which GGUF BF16 files are written with.
constexpr uint16_t fp32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace onebit
