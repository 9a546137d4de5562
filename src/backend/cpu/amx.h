// AMX (Advanced Matrix Extensions, Sapphire Rapids and later Xeons) for prompt-sized products of
// the 32-element panel types: tiles of 16 activation rows x 16 weight rows, one TDPBSUD (int8 x
// uint8 -> int32) per 32-element block, the block scales applied in AVX-512 after each block.
// Decode (one activation row) stays on the panel kernels: a tile would idle 15 of its 16 rows.
// Knows panels (panels.h) and ActQ8 (cpu_kernels.h); nothing of models or the backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/ggml_type.h"

namespace onebit::cpu {

// Weight rows (two panels) and activation rows of one AMX tile.
inline constexpr int kAmxRows = 16;

// True when this CPU has AMX-INT8 and AVX-512 VNNI, the OS saves the tile state, and Linux granted
// this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once). Thread-safe.
bool amx_ready();

// True for the panel types the AMX path handles: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
bool amx_supports(GgmlType type);

// Bytes of per-thread scratch amx_panel_tile needs for k columns.
size_t amx_scratch_bytes(GgmlType type, int64_t k);

// out[r * os + j] = dot(weight row j, activation row r) for r < n and j < 16 (j < 8 when p1 is
// null): the weight rows are panel p0 (rows 0-7) and panel p1 (rows 8-15) of `type` over k
// columns; the activations are ActQ8 rows act_stride bytes apart, readable (any values) up to n
// rounded up to 16 rows. scratch: amx_scratch_bytes(type, k) bytes. Call only when amx_ready().
void amx_panel_tile(GgmlType type, int64_t k, const uint8_t* p0, const uint8_t* p1, const void* act,
                    size_t act_stride, int64_t n, float* out, size_t os, uint8_t* scratch);

}  // namespace onebit::cpu
