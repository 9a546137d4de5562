// Weight panels: the CPU backend's repacked layout for the types whose row-by-row dot is bound by
// unpacking rather than by memory (Q4_0, Q8_0). kPanelRows consecutive weight rows are interleaved
// block by block so that one 32-byte load holds 4 consecutive codes of each of the 8 rows (one
// 32-bit lane per row): a single vpdpbusd against 4 broadcast activation bytes then advances 8 rows
// at once, and the 8 row scales convert with one vcvtph2ps. Same idea as llama.cpp's CPU "repack"
// buffers (block_q4_0x8); our byte order is our own. Scalar code, ISA-independent.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/ggml_type.h"

namespace onebit::cpu {

inline constexpr int kPanelRows = 8;

// True when `type` has a panel layout and panel kernels.
bool has_panels(GgmlType type);

// Packs kPanelRows rows of k elements (row r at src + r * src_stride, the GGUF block layout) into
// one panel at dst, of kPanelRows * row bytes. Per 32-element block b the panel holds:
//   d[8]   the rows' fp16 scales (16 bytes), then
//   Q4_0:  for c in 0..3, row in 0..7: bytes qs[4c .. 4c+3] of that row's block (128 bytes): the
//          low nibbles are elements 4c..4c+3, the high nibbles elements 16+4c .. 16+4c+3;
//   Q8_0:  for c in 0..7, row in 0..7: qs[4c .. 4c+3] (256 bytes).
void pack_panel(GgmlType type, const uint8_t* src, size_t src_stride, int64_t k, uint8_t* dst);

// The inverse for one row (tests): writes row `row` of the panel back in GGUF block layout.
void unpack_panel_row(GgmlType type, const uint8_t* panel, int64_t k, int row, uint8_t* dst);

}  // namespace onebit::cpu
