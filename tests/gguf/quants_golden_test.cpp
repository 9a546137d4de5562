// Bit-exactness of the reference quantizers against ggml: hashes of the bytes that ggml's
// quantize_row_<type>_ref (ggml/src/ggml-quants.c at llama.cpp commit 01243c5, compiled as C
// without FMA as ggml-base is) writes for 36 deterministic rows, and of ggml's dequantization.
// How the hashes were made, and why FP contraction must stay off, is in docs/quants.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "gguf/quants.h"

namespace onebit {
namespace {

uint32_t golden_hash(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Row `row` of 1024 values made with integer arithmetic only (every float exact, the same on
// every platform): kind row % 4 is bell-shaped, uniform, positive-offset or with outliers; the
// scale is 2^(row % 9 - 4) * 2^-22 per integer unit.
std::vector<float> golden_row(int row) {
  std::vector<float> x(1024);
  const float unit = std::ldexp(1.0f, (row % 9) - 4 - 22);
  for (int i = 0; i < 1024; ++i) {
    const uint32_t h0 = golden_hash(static_cast<uint32_t>(row * 1024 + i) * 3u + 1u);
    const uint32_t h1 = golden_hash(h0), h2 = golden_hash(h1);
    const int32_t a = static_cast<int32_t>(h0 >> 10) - (1 << 21);
    const int32_t bell =
        (a + static_cast<int32_t>(h1 >> 10) - (1 << 21) + static_cast<int32_t>(h2 >> 10) - (1 << 21)) / 3;
    int32_t v = 0;
    switch (row % 4) {
      case 0:
        v = bell;
        break;
      case 1:
        v = a;
        break;
      case 2:
        v = (3 << 21) + a / 4;
        break;
      case 3:
        v = (i % 61 == 5) ? a * 16 : bell;
        break;
    }
    x[i] = static_cast<float>(v) * unit;
  }
  return x;
}

uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<const uint8_t*>(p)[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

struct Golden {
  GgmlType type;
  uint64_t bytes_hash;        // FNV-1a of the 36 quantized rows, concatenated
  uint64_t dequantized_hash;  // FNV-1a of ggml's dequantization of them (0: not recorded)
};

constexpr Golden kGolden[] = {
    {GgmlType::kQ4_0, 0xcd7cc2535c2c9025ull, 0},
    {GgmlType::kQ4_1, 0xfe70e819418a560aull, 0},
    {GgmlType::kQ5_0, 0xbe7c86c4e595bda1ull, 0},
    {GgmlType::kQ5_1, 0x5f167442142d2a36ull, 0},
    {GgmlType::kQ8_0, 0x4e394b0addf6c72dull, 0},
    {GgmlType::kQ8_1, 0xa77fdd6c97b12b2eull, 0},
    {GgmlType::kQ4_K, 0xdf5d598fcafd2f08ull, 0x81ad21a972be1127ull},
    {GgmlType::kQ5_K, 0xf6cd7d1ebfcbb464ull, 0x8dc430a65d3a3239ull},
    {GgmlType::kQ6_K, 0xa5d5c60339ab7feeull, 0x539ed2050e6410b9ull},
    {GgmlType::kQ8_K, 0xdb6e96201a5f4277ull, 0},
};

TEST(QuantsGolden, ReferenceQuantizersMatchGgmlBitForBit) {
  constexpr int kRows = 36;
  for (const Golden& g : kGolden) {
    const auto name = ggml_type_traits(static_cast<uint32_t>(g.type))->name;
    const uint64_t row_bytes = *row_size(g.type, 1024);
    std::vector<uint8_t> all(row_bytes * kRows);
    for (int row = 0; row < kRows; ++row)
      quantize_row_reference(g.type, golden_row(row).data(), all.data() + row * row_bytes, 1024);
    EXPECT_EQ(fnv1a(all.data(), all.size()), g.bytes_hash) << name;
    if (g.dequantized_hash != 0) {
      std::vector<float> y(1024 * kRows);
      dequantize_row(g.type, all.data(), y.data(), 1024 * kRows);
      EXPECT_EQ(fnv1a(y.data(), y.size() * sizeof(float)), g.dequantized_hash) << name;
    }
  }
}

}  // namespace
}  // namespace onebit
