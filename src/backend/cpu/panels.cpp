// Packing of weight rows into panels (panels.h).
#include "backend/cpu/panels.h"

#include <cstring>
#include <type_traits>

#include "base/check.h"
#include "gguf/quants.h"

namespace onebit::cpu {
namespace {

constexpr int R = kPanelRows;

// A run of 4-byte groups: group i of every row, rows inner (dst[(i * R + row) * 4 ..]).
void interleave4(const uint8_t* const* rows, size_t offset, int n_groups, uint8_t* dst) {
  for (int i = 0; i < n_groups; ++i) {
    for (int r = 0; r < R; ++r) std::memcpy(dst + (i * R + r) * 4, rows[r] + offset + 4 * i, 4);
  }
}
void deinterleave4(const uint8_t* src, int row, int n_groups, uint8_t* dst) {
  for (int i = 0; i < n_groups; ++i) std::memcpy(dst + 4 * i, src + (i * R + row) * 4, 4);
}

// Bytes of one block of the type in GGUF layout, and its elements.
size_t block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return sizeof(BlockQ4_0);
    case GgmlType::kQ4_1: return sizeof(BlockQ4_1);
    case GgmlType::kQ5_0: return sizeof(BlockQ5_0);
    case GgmlType::kQ5_1: return sizeof(BlockQ5_1);
    case GgmlType::kQ8_0: return sizeof(BlockQ8_0);
    case GgmlType::kQ4_K: return sizeof(BlockQ4_K);
    case GgmlType::kQ5_K: return sizeof(BlockQ5_K);
    default: return sizeof(BlockQ6_K);
  }
}
bool is_k_quant(GgmlType type) { return type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K; }
int64_t block_elems(GgmlType type) { return is_k_quant(type) ? kQK_K : 32; }
size_t panel_block_bytes(GgmlType type) {
  return type == GgmlType::kQ4_K ? 1184 : type == GgmlType::kQ5_K ? 1440 : R * block_bytes(type);
}

// The 32-element types: where a GGUF block keeps its min (Q4_1, Q5_1: after d), high bits (Q5_0,
// Q5_1) and codes; and where the panel block keeps them (d[8], m[8], codes, high bits).
struct Block32 {
  int m = -1, qh = -1, qs = 2;  // GGUF block offsets (-1: none)
  int head = 16;                // panel offset of the codes: d[8] (16 bytes), then m[8] if any
  int codes = 128;              // bytes of codes in the panel block
};
Block32 block32(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_1: return {offsetof(BlockQ4_1, m), -1, offsetof(BlockQ4_1, qs), 32, 128};
    case GgmlType::kQ5_0: return {-1, offsetof(BlockQ5_0, qh), offsetof(BlockQ5_0, qs), 16, 128};
    case GgmlType::kQ5_1: return {offsetof(BlockQ5_1, m), offsetof(BlockQ5_1, qh), offsetof(BlockQ5_1, qs), 32, 128};
    case GgmlType::kQ8_0: return {-1, -1, offsetof(BlockQ8_0, qs), 16, 256};
    default: return {-1, -1, offsetof(BlockQ4_0, qs), 16, 128};  // Q4_0
  }
}

// Q5_0 / Q5_1 high bits of one row, laid out as its codes are: byte i of the row's 4-byte lane
// holds, in bit 2c, the fifth bit of element 4c + i (a low nibble of code group c) and in bit
// 2c + 1 that of element 16 + 4c + i (a high nibble), c = 0..3.
void spread_high_bits(const uint8_t* qh, uint8_t* lane) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  for (int i = 0; i < 4; ++i) {
    uint8_t v = 0;
    for (int c = 0; c < 4; ++c) v |= uint8_t(((h >> (4 * c + i)) & 1) << (2 * c) | ((h >> (16 + 4 * c + i)) & 1) << (2 * c + 1));
    lane[i] = v;
  }
}
void gather_high_bits(const uint8_t* lane, uint8_t* qh) {
  uint32_t h = 0;
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 4; ++c)
      h |= uint32_t((lane[i] >> (2 * c)) & 1) << (4 * c + i) | uint32_t((lane[i] >> (2 * c + 1)) & 1) << (16 + 4 * c + i);
  std::memcpy(qh, &h, 4);
}

// Q4_K / Q5_K: d, dmin, the 6-bit scales and mins unpacked to bytes, the nibbles, (Q5_K) qh.
template <typename Block>
void pack_k45_block(const uint8_t* const* blk, uint8_t* dst) {
  for (int r = 0; r < R; ++r) {
    const auto* b = reinterpret_cast<const Block*>(blk[r]);
    std::memcpy(dst + 2 * r, &b->d, 2);
    std::memcpy(dst + 16 + 2 * r, &b->dmin, 2);
    for (int j = 0; j < 8; ++j) get_scale_min_k4(j, b->scales, &dst[32 + j * R + r], &dst[96 + j * R + r]);
  }
  interleave4(blk, offsetof(Block, qs), 32, dst + 160);
  if constexpr (std::is_same_v<Block, BlockQ5_K>) interleave4(blk, offsetof(Block, qh), 8, dst + 1184);
}

// One block of each row (blk[r]) into one panel block.
void pack_block(GgmlType type, const uint8_t* const* blk, uint8_t* dst) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0: {
      const Block32 l = block32(type);
      for (int r = 0; r < R; ++r) {
        std::memcpy(dst + 2 * r, blk[r], 2);
        if (l.m >= 0) std::memcpy(dst + 16 + 2 * r, blk[r] + l.m, 2);
        if (l.qh >= 0) spread_high_bits(blk[r] + l.qh, dst + l.head + l.codes + 4 * r);
      }
      interleave4(blk, size_t(l.qs), l.codes / 32, dst + l.head);
      return;
    }
    case GgmlType::kQ4_K: return pack_k45_block<BlockQ4_K>(blk, dst);
    case GgmlType::kQ5_K: return pack_k45_block<BlockQ5_K>(blk, dst);
    default:  // Q6_K
      for (int r = 0; r < R; ++r) {
        const auto* b = reinterpret_cast<const BlockQ6_K*>(blk[r]);
        std::memcpy(dst + 2 * r, &b->d, 2);
        for (int j = 0; j < 16; ++j) std::memcpy(&dst[16 + j * R + r], &b->scales[j], 1);
      }
      interleave4(blk, offsetof(BlockQ6_K, ql), 32, dst + 144);
      interleave4(blk, offsetof(BlockQ6_K, qh), 16, dst + 144 + 1024);
      return;
  }
}

}  // namespace

bool has_panels(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return true;
    default: return false;
  }
}

size_t panel_bytes(GgmlType type, int64_t k) {
  ONEBIT_CHECK(has_panels(type) && k % block_elems(type) == 0);
  return size_t(k / block_elems(type)) * panel_block_bytes(type);
}

void pack_panel(GgmlType type, const uint8_t* src, size_t src_stride, int64_t k, uint8_t* dst) {
  ONEBIT_CHECK(has_panels(type) && k % block_elems(type) == 0);
  const size_t bb = block_bytes(type);
  for (int64_t b = 0; b < k / block_elems(type); ++b) {
    const uint8_t* blk[R];
    for (int r = 0; r < R; ++r) blk[r] = src + r * src_stride + b * bb;
    pack_block(type, blk, dst + b * panel_block_bytes(type));
  }
}

void unpack_panel_row(GgmlType type, const uint8_t* panel, int64_t k, int row, uint8_t* dst) {
  ONEBIT_CHECK(has_panels(type) && type != GgmlType::kQ4_K && type != GgmlType::kQ5_K && k % block_elems(type) == 0);
  ONEBIT_CHECK(row >= 0 && row < R);
  const size_t bb = block_bytes(type), pb = panel_block_bytes(type);
  for (int64_t b = 0; b < k / block_elems(type); ++b, dst += bb) {
    const uint8_t* p = panel + b * pb;
    if (type == GgmlType::kQ6_K) {
      auto* out = reinterpret_cast<BlockQ6_K*>(dst);
      std::memcpy(&out->d, p + 2 * row, 2);
      for (int j = 0; j < 16; ++j) std::memcpy(&out->scales[j], &p[16 + j * R + row], 1);
      deinterleave4(p + 144, row, 32, out->ql);
      deinterleave4(p + 144 + 1024, row, 16, out->qh);
    } else {
      const Block32 l = block32(type);
      std::memcpy(dst, p + 2 * row, 2);
      if (l.m >= 0) std::memcpy(dst + l.m, p + 16 + 2 * row, 2);
      if (l.qh >= 0) gather_high_bits(p + l.head + l.codes + 4 * row, dst + l.qh);
      deinterleave4(p + l.head, row, l.codes / 32, dst + l.qs);
    }
  }
}

}  // namespace onebit::cpu
