// Panel packing (backend/cpu/panels.h): every row of a packed panel unpacks to the bytes it was
// packed from, and the bytes sit where the kernels' layout comment says.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "backend/cpu/panels.h"
#include "gguf/quants.h"

namespace onebit::cpu {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

TEST(CpuPanels, PackThenUnpackGivesEveryRowBack) {
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                        GgmlType::kQ6_K}) {
    const int64_t k = type == GgmlType::kQ6_K ? 256 * 3 : 32 * 5;
    const size_t rb = row_size(type, k).value();
    const size_t stride = rb + 6;  // rows apart by more than their size
    const std::vector<uint8_t> src = random_bytes(stride * kPanelRows, 3);
    std::vector<uint8_t> panel(panel_bytes(type, k));
    ASSERT_EQ(panel.size(), rb * kPanelRows);
    pack_panel(type, src.data(), stride, k, panel.data());
    for (int r = 0; r < kPanelRows; ++r) {
      std::vector<uint8_t> row(rb);
      unpack_panel_row(type, panel.data(), k, r, row.data());
      EXPECT_EQ(row, std::vector<uint8_t>(src.begin() + r * stride, src.begin() + r * stride + rb))
          << ggml_type_name(uint32_t(type)) << " row " << r;
    }
  }
}

TEST(CpuPanels, Q4_0LayoutPutsFourCodesOfEachRowInOneLane) {
  const int64_t k = 64;
  const size_t rb = row_size(GgmlType::kQ4_0, k).value();
  const std::vector<uint8_t> src = random_bytes(rb * kPanelRows, 4);
  std::vector<uint8_t> panel(rb * kPanelRows);
  pack_panel(GgmlType::kQ4_0, src.data(), rb, k, panel.data());
  // Block 1, chunk c = 2, row 5: bytes qs[8..11] of row 5's second block.
  const uint8_t* blk = panel.data() + 144;
  const uint8_t* row5_blk1 = src.data() + 5 * rb + 18;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(blk[16 + (2 * kPanelRows + 5) * 4 + i], row5_blk1[2 + 8 + i]);
  EXPECT_EQ(blk[2 * 5], row5_blk1[0]);  // row 5's scale
  EXPECT_EQ(blk[2 * 5 + 1], row5_blk1[1]);
}

// Q5_0's high bits follow its codes, spread as the codes are: byte i of a row's lane holds, in bit
// 2c, the fifth bit of element 4c + i and, in bit 2c + 1, that of element 16 + 4c + i.
TEST(CpuPanels, Q5_0HighBitsSitBesideTheirCodes) {
  const int64_t k = 64;
  const size_t rb = row_size(GgmlType::kQ5_0, k).value();
  const std::vector<uint8_t> src = random_bytes(rb * kPanelRows, 5);
  std::vector<uint8_t> panel(panel_bytes(GgmlType::kQ5_0, k));
  ASSERT_EQ(panel.size(), rb * kPanelRows);
  pack_panel(GgmlType::kQ5_0, src.data(), rb, k, panel.data());
  for (int b = 0; b < 2; ++b) {
    for (int r = 0; r < kPanelRows; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ5_0*>(src.data() + r * rb + b * sizeof(BlockQ5_0));
      const uint32_t qh = uint32_t(blk->qh[0]) | uint32_t(blk->qh[1]) << 8 | uint32_t(blk->qh[2]) << 16 |
                          uint32_t(blk->qh[3]) << 24;
      const uint8_t* lane = panel.data() + b * 176 + 144 + 4 * r;
      for (int c = 0; c < 4; ++c) {
        for (int i = 0; i < 4; ++i) {
          EXPECT_EQ((lane[i] >> (2 * c)) & 1, (qh >> (4 * c + i)) & 1) << "row " << r << " element " << 4 * c + i;
          EXPECT_EQ((lane[i] >> (2 * c + 1)) & 1, (qh >> (16 + 4 * c + i)) & 1) << "row " << r;
        }
        EXPECT_EQ(std::memcmp(panel.data() + b * 176 + 16 + (c * kPanelRows + r) * 4, blk->qs + 4 * c, 4), 0);
      }
    }
  }
}

// Q4_K and Q5_K keep their scales unpacked: each (sub-block, row) byte equals get_scale_min_k4's
// value; the nibbles (and Q5_K's high bits) follow in 4-byte groups, rows inner.
template <typename Block>
void check_k45_layout(GgmlType type, size_t panel_block) {
  const int64_t k = 512;
  const size_t rb = row_size(type, k).value();
  const std::vector<uint8_t> src = random_bytes(rb * kPanelRows, 6);
  std::vector<uint8_t> panel(panel_bytes(type, k));
  ASSERT_EQ(panel.size(), 2 * panel_block);
  pack_panel(type, src.data(), rb, k, panel.data());
  for (int b = 0; b < 2; ++b) {
    const uint8_t* p = panel.data() + b * panel_block;
    for (int r = 0; r < kPanelRows; ++r) {
      const auto* blk = reinterpret_cast<const Block*>(src.data() + r * rb + b * sizeof(Block));
      EXPECT_EQ(std::memcmp(p + 2 * r, &blk->d, 2), 0);
      EXPECT_EQ(std::memcmp(p + 16 + 2 * r, &blk->dmin, 2), 0);
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, mn;
        get_scale_min_k4(j, blk->scales, &sc, &mn);
        EXPECT_EQ(p[32 + j * kPanelRows + r], sc) << "block " << b << " row " << r << " sub " << j;
        EXPECT_EQ(p[96 + j * kPanelRows + r], mn) << "block " << b << " row " << r << " sub " << j;
      }
      for (int g = 0; g < 32; ++g) EXPECT_EQ(std::memcmp(p + 160 + (g * kPanelRows + r) * 4, blk->qs + 4 * g, 4), 0);
      if constexpr (std::is_same_v<Block, BlockQ5_K>) {
        for (int g = 0; g < 8; ++g) EXPECT_EQ(std::memcmp(p + 1184 + (g * kPanelRows + r) * 4, blk->qh + 4 * g, 4), 0);
      }
    }
  }
}

TEST(CpuPanels, Q4_KScalesAndMinsUnpackedPerRow) { check_k45_layout<BlockQ4_K>(GgmlType::kQ4_K, 1184); }
TEST(CpuPanels, Q5_KScalesUnpackedAndHighBitsInterleaved) { check_k45_layout<BlockQ5_K>(GgmlType::kQ5_K, 1440); }

}  // namespace
}  // namespace onebit::cpu
