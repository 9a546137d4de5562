// Packing of weight rows into panels (panels.h).
#include "backend/cpu/panels.h"

#include <cstring>

#include "base/check.h"
#include "gguf/quants.h"

namespace onebit::cpu {
namespace {

// Bytes of codes per 32-element block, per row.
int code_bytes(GgmlType type) { return type == GgmlType::kQ4_0 ? 16 : 32; }
size_t block_bytes(GgmlType type) { return type == GgmlType::kQ4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0); }

}  // namespace

bool has_panels(GgmlType type) { return type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0; }

void pack_panel(GgmlType type, const uint8_t* src, size_t src_stride, int64_t k, uint8_t* dst) {
  ONEBIT_CHECK(has_panels(type) && k % 32 == 0);
  const int cb = code_bytes(type);
  const size_t bb = block_bytes(type);
  for (int64_t b = 0; b < k / 32; ++b) {
    for (int r = 0; r < kPanelRows; ++r) {
      const uint8_t* blk = src + r * src_stride + b * bb;  // d (2 bytes), then the codes
      std::memcpy(dst + 2 * r, blk, 2);
      for (int c = 0; c < cb / 4; ++c) std::memcpy(dst + 16 + (c * kPanelRows + r) * 4, blk + 2 + 4 * c, 4);
    }
    dst += kPanelRows * bb;
  }
}

void unpack_panel_row(GgmlType type, const uint8_t* panel, int64_t k, int row, uint8_t* dst) {
  ONEBIT_CHECK(has_panels(type) && k % 32 == 0 && row >= 0 && row < kPanelRows);
  const int cb = code_bytes(type);
  const size_t bb = block_bytes(type);
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* p = panel + b * kPanelRows * bb;
    std::memcpy(dst, p + 2 * row, 2);
    for (int c = 0; c < cb / 4; ++c) std::memcpy(dst + 2 + 4 * c, p + 16 + (c * kPanelRows + row) * 4, 4);
    dst += bb;
  }
}

}  // namespace onebit::cpu
