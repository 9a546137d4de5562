// Panel packing (backend/cpu/panels.h): every row of a packed panel unpacks to the bytes it was
// packed from, and the bytes sit where the kernels' layout comment says.
#include <gtest/gtest.h>

#include <random>
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
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0}) {
    const int64_t k = 32 * 5;
    const size_t rb = row_size(type, k).value();
    const size_t stride = rb + 6;  // rows apart by more than their size
    const std::vector<uint8_t> src = random_bytes(stride * kPanelRows, 3);
    std::vector<uint8_t> panel(rb * kPanelRows);
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

}  // namespace
}  // namespace onebit::cpu
