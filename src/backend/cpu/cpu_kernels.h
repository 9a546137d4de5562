// The CPU backend's kernel table: one dot kernel per weight type and SIMD target, the activation
// formats they consume, and the vectorized small ops. Plain structs and function pointers only, so
// that the per-ISA translation units (compiled with wider targets) instantiate no shared inline code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/cpu_features.h"
#include "gguf/ggml_type.h"
#include "gguf/quants.h"

namespace onebit::cpu {

// Activations quantized for the 32-element block types (Q4_0..Q8_0): like ggml's block_q8_1, with
// d and s kept as float rather than half (a little more accurate, same dot products).
struct ActQ8 {
  float d;            // scale: x ~= d * qs
  float s;            // d * sum(qs): lets kernels apply weight offsets (-8, -16, +m) once a block
  int8_t qs[kQK8_0];  // [32]
};
static_assert(sizeof(ActQ8) == 40);

// How a weight type wants its activations.
enum class ActFormat { kF32, kQ8, kQ8K };

// Most activation rows one dot call handles (the register tile of matrix-matrix products).
inline constexpr int kMaxDotRows = 4;
// Most activation rows one call of a two-panel kernel (DotTable::panel2_by_type) handles: its
// 512-bit registers leave room for 8 rows' sums, so each weight block is unpacked once per 8.
inline constexpr int kMaxDualRows = 8;

// out[r * out_stride] = dot(weight row, activation row r) for r < n_x (1..kMaxDotRows), over k
// elements. Activation rows are act_stride_bytes apart, in the format of the kernel's ActFormat.
using DotFn = void (*)(int64_t k, const void* w_row, const void* act, size_t act_stride_bytes,
                       int n_x, float* out, size_t out_stride);

struct DotKernel {
  DotFn fn = nullptr;  // nullptr: the type has no kernel
  ActFormat act = ActFormat::kF32;
};

// Key or value rows of a paged K/V pool as the attention kernels read them: row j of a sequence
// starts at element base + rows[j] * stride, F32 or F16 elements (f16). DotTable::attn_sum also
// takes rows == nullptr: row j at base + j * stride (a contiguous cache).
struct KvRows {
  const void* base;      // the head's first element in pool row 0
  int64_t stride;        // elements between pool rows
  const int32_t* rows;   // [n_keys] pool row of each key, in key order
  bool f16;
};

// Attention's value sums: out[g * hd + d] = sum_j p[g * p_stride + j] * value j [d] for g <
// n_heads, d < hd (hd % 16 == 0), each value row added in key order.
using AttnSumFn = void (*)(const float* p, int n_heads, int64_t p_stride, const KvRows& v, int64_t n_keys,
                           int64_t hd, float* out);

// Dot kernels of one SIMD target, indexed by the raw GgmlType value. A panel kernel (panels.h) has
// the DotFn signature with w_row = one panel: it writes kPanelRows consecutive outputs,
// out[r * out_stride + j] for j < kPanelRows, and takes Q8 activations.
struct DotTable {
  CpuIsa isa;
  DotKernel by_type[32];
  DotFn panel_by_type[32];  // nullptr: the type has no panel layout
  // Two adjacent panels at once (2 * kPanelRows outputs per activation row, the second panel
  // panel_bytes after the first) against 1..kMaxDualRows activation rows, the bits of the panel
  // kernel's calls; for products of several activation rows. nullptr: use panel_by_type.
  DotFn panel2_by_type[32];
  // Attention's value sums on this target's widest registers for head sizes of whole 16s
  // (attention_kernels_impl.h); nullptr: weighted_sum_heads(_rows) (AVX2) for every size.
  AttnSumFn attn_sum = nullptr;
};

// The table of each target (each lives in its own translation unit, compiled for that target).
// Call only when cpu_isa_supported(target).
const DotTable& dot_table_avx2();
const DotTable& dot_table_avx_vnni();
const DotTable& dot_table_avx512();
const DotTable& dot_table_avx512_vnni();
// The table of `isa`.
const DotTable& dot_table(CpuIsa isa);

// --- small ops (small_ops.cpp, AVX2: memory-light, never the bottleneck) ---
// Quantizes x[k] (k % 32 == 0) to k / 32 ActQ8 blocks; optionally scaled by rms * w[k] first
// (w may be null) so rms_norm fuses into the quantization.
void quantize_act_q8(const float* x, ActQ8* y, int64_t k);
// The same on a 4-bit grid (W4A4 prompts of Hadamard-rotated Q4_0 weights): qs in -7..7,
// d = max|x| / 7, held in the int8 lanes every Q8 kernel reads, so the products are int4 x int4.
void quantize_act_q4(const float* x, ActQ8* y, int64_t k);
// Quantizes x[k] (k % 256 == 0) to k / 256 BlockQ8_K blocks (symmetric, d = max|x| / 127).
void quantize_act_q8k(const float* x, BlockQ8_K* y, int64_t k);
// sum(x[i]^2) in float lanes, double across lanes.
double sum_squares(const float* x, int64_t n);
// y[i] = x[i] * scale * w[i].
void scale_mul(const float* x, float scale, const float* w, float* y, int64_t n);
// y[i] = a[i] + b[i].
void add_rows(const float* a, const float* b, float* y, int64_t n);
// y[i] = silu(g[i]) * u[i] with a vectorized expf (rel. error ~2 ulp).
void swiglu_row(const float* g, const float* u, float* y, int64_t n);
// y = softmax(x) over n (max-subtracted).
void softmax_row(const float* x, float* y, int64_t n);
// dot(a, b) over n floats.
float dot_f32(const float* a, const float* b, int64_t n);
// y[i] += a * x[i].
void axpy_f32(float a, const float* x, float* y, int64_t n);
// y[i] *= a.
void scale_f32(float a, float* y, int64_t n);
// Attention of one query row for up to 8 query heads sharing one K/V head (GQA), head_dim hd a
// multiple of 8. scores[g * scores_stride + j] = scale * dot(q[g * hd ..], k[j * k_stride ..])
// for g < n_heads (1..8), j < n_keys: each key row is loaded once for all heads.
void dot_heads_keys(const float* q, int n_heads, int64_t hd, const float* k, int64_t k_stride, int64_t n_keys,
                    float scale, float* scores, int64_t scores_stride);
// out[g * hd + d] = sum_j p[g * p_stride + j] * v[j * v_stride + d] for g < n_heads (any count),
// d < hd (a multiple of 8): two heads and 32 dimensions at a time kept in registers.
void weighted_sum_heads(const float* p, int n_heads, int64_t p_stride, const float* v, int64_t v_stride,
                        int64_t n_keys, int64_t hd, float* out);
// exp(x[i] - m) in place for i < n; returns their sum.
float exp_sub_sum(float* x, float m, int64_t n);

// dot_heads_keys over k's rows, any hd: a multiple of 8 gives dot_heads_keys' arithmetic, else
// each head takes dot_f32's arithmetic times scale. Keys go in order; a key's score depends only
// on q and that key (so the same rows in another layout give the same bits).
void dot_heads_keys_rows(const float* q, int n_heads, int64_t hd, const KvRows& k, int64_t n_keys, float scale,
                         float* scores, int64_t scores_stride);
// weighted_sum_heads over v's rows, any hd: a multiple of 8 gives weighted_sum_heads' arithmetic,
// else each head is zeroed and gets axpy_f32 of each value row in key order.
void weighted_sum_heads_rows(const float* p, int n_heads, int64_t p_stride, const KvRows& v, int64_t n_keys,
                             int64_t hd, float* out);
// y[i] = fp32_to_fp16(x[i]) (round to nearest even; F16C, bit-identical to the scalar conversion).
void fp32_to_fp16_row(const float* x, uint16_t* y, int64_t n);

}  // namespace onebit::cpu
