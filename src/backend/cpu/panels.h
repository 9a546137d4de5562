// Weight panels: the CPU backend's repacked layout, for the types whose row-by-row dot is bound by
// unpacking rather than by memory. kPanelRows consecutive weight rows are interleaved block by
// block so that one 32-byte load holds 4 consecutive codes of each of the 8 rows (one 32-bit lane
// per row): one vpdpbusd against 4 broadcast activation bytes then advances 8 rows at once, and
// the rows' scales sit side by side (8 fp16 scales convert with one vcvtph2ps). The same idea as
// llama.cpp's CPU "repack" buffers (block_q4_0x8); the byte orders here are our own. Scalar code,
// ISA-independent; the kernels are in panel_kernels_impl.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/ggml_type.h"

namespace onebit::cpu {

inline constexpr int kPanelRows = 8;

// True when `type` has a panel layout: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
bool has_panels(GgmlType type);

// Bytes of one panel of kPanelRows rows of k elements (k a multiple of the type's block).
size_t panel_bytes(GgmlType type, int64_t k);

// Packs kPanelRows rows of k elements (row r at src + r * src_stride, GGUF block layout) into one
// panel at dst (panel_bytes(type, k)). Per block of the type, the panel holds (row = 0..7 inner):
//   Q4_0 (32 elements, 144 bytes): d[row] (fp16, 16 bytes), then for c in 0..3: the 4 bytes
//        qs[4c .. 4c+3] of each row: low nibbles elements 4c .. 4c+3, high 16+4c .. 16+4c+3.
//   Q4_1 (32 elements, 160 bytes): d[row], m[row] (fp16), then the codes as Q4_0's.
//   Q5_0 (32 elements, 176 bytes): Q4_0's 144 bytes, then 4 bytes of high bits per row: byte i
//        holds in bit 2c the fifth bit of element 4c + i, in bit 2c + 1 that of 16 + 4c + i.
//   Q5_1 (32 elements, 192 bytes): d[row], m[row], the codes, then the high bits as Q5_0's.
//   Q8_0 (32 elements, 272 bytes): d[row], then for c in 0..7: qs[4c .. 4c+3] of each row.
//   Q4_K (256 elements, 1184 bytes): d[row], dmin[row] (fp16), scale[j][row] and min[j][row] for
//        sub-blocks j = 0..7 (6-bit values unpacked to bytes, 64 + 64), then for chunk c in 0..3,
//        g in 0..7: qs[32c + 4g .. +3] of each row (low nibbles: sub-block 2c, high: 2c + 1).
//   Q5_K (256 elements, 1440 bytes): Q4_K's 1184 bytes, then for g in 0..7: qh[4g .. +3] of each
//        row (bit 2c of a byte is the fifth bit of its low-nibble element in chunk c, 2c + 1 of
//        its high-nibble element).
//   Q6_K (256 elements, 1680 bytes): d[row] (fp16), scales[j][row] (int8, j = 0..15), then ql: for
//        half h, part p (0, 1), g in 0..7: ql[64h + 32p + 4g .. +3] of each row; then qh: for h,
//        g in 0..7: qh[32h + 4g .. +3] of each row.
void pack_panel(GgmlType type, const uint8_t* src, size_t src_stride, int64_t k, uint8_t* dst);

// The inverse for one row (tests): row `row` of the panel back in GGUF block layout. Every panel
// type but Q4_K and Q5_K (their 6-bit scales are stored unpacked).
void unpack_panel_row(GgmlType type, const uint8_t* panel, int64_t k, int row, uint8_t* dst);

}  // namespace onebit::cpu
