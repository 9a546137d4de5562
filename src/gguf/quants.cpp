// Float types and the 32-element "legacy" quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1): scalar
// dequantization and ggml's reference quantizers (ggml/src/ggml-quants.c), plus the dispatch.
#include "gguf/quants.h"

#include <cfloat>
#include <cmath>
#include <string>

#include "base/check.h"
#include "base/checked_math.h"
#include "base/fp16.h"
#include "gguf/quants_impl.h"  // last: turns off FP contraction for this file

namespace onebit {
namespace {

using quants_detail::ggml_max;
using quants_detail::ggml_min;
using quants_detail::load_block;
using quants_detail::store_block;
using quants_detail::trunc_to_int;

// ---- Dequantization: y = d * (q - offset) or y = d * q + m, in ggml's element order.

void dequantize_q4_0(const void* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, y += kQK4_0) {
    const auto b = load_block<BlockQ4_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = static_cast<float>((b.qs[j] & 0x0F) - 8) * d;
      y[j + kQK4_0 / 2] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const void* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, y += kQK4_1) {
    const auto b = load_block<BlockQ4_1>(src, i);
    const float d = fp16_to_fp32(b.d);
    const float m = fp16_to_fp32(b.m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      y[j] = static_cast<float>(b.qs[j] & 0x0F) * d + m;
      y[j + kQK4_1 / 2] = static_cast<float>(b.qs[j] >> 4) * d + m;
    }
  }
}

// The 5-bit code of element j of a Q5 block: low nibble from qs, bit 4 from bit j of qh.
int q5_code(const uint8_t* qs, uint32_t qh, int j) {
  const int low = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
  return low | static_cast<int>(((qh >> j) & 1u) << 4);
}

void dequantize_q5_0(const void* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, y += kQK5_0) {
    const auto b = load_block<BlockQ5_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof(qh));
    for (int j = 0; j < kQK5_0; ++j) y[j] = static_cast<float>(q5_code(b.qs, qh, j) - 16) * d;
  }
}

void dequantize_q5_1(const void* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, y += kQK5_1) {
    const auto b = load_block<BlockQ5_1>(src, i);
    const float d = fp16_to_fp32(b.d);
    const float m = fp16_to_fp32(b.m);
    uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof(qh));
    for (int j = 0; j < kQK5_1; ++j) y[j] = static_cast<float>(q5_code(b.qs, qh, j)) * d + m;
  }
}

void dequantize_q8_0(const void* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, y += kQK8_0) {
    const auto b = load_block<BlockQ8_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

void dequantize_q8_1(const void* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, y += kQK8_1) {
    const auto b = load_block<BlockQ8_1>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < kQK8_1; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

// ---- Reference quantizers: ggml's quantize_row_<type>_ref, operation for operation. The casts
// `(int8_t)(x + 8.5f)` there truncate; trunc_to_int reproduces them without undefined behaviour.

// The element of largest magnitude, sign kept (the first one on ties), as ggml finds it.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

void quantize_q4_0(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, x += kQK4_0) {
    const float d = signed_absmax(x, kQK4_0) / -8;  // the extreme value maps to code 0
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 b;
    b.d = fp32_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const uint8_t q0 = ggml_min(15, static_cast<int8_t>(trunc_to_int(x[j] * id + 8.5f)));
      const uint8_t q1 = ggml_min(15, static_cast<int8_t>(trunc_to_int(x[j + kQK4_0 / 2] * id + 8.5f)));
      b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    store_block(dst, i, b);
  }
}

void quantize_q4_1(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, x += kQK4_1) {
    float min, max;
    min_max(x, kQK4_1, &min, &max);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_1 b;
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(min);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const uint8_t q0 = ggml_min(15, static_cast<int8_t>(trunc_to_int((x[j] - min) * id + 0.5f)));
      const uint8_t q1 =
          ggml_min(15, static_cast<int8_t>(trunc_to_int((x[j + kQK4_1 / 2] - min) * id + 0.5f)));
      b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    store_block(dst, i, b);
  }
}

// Packs 32 five-bit codes: low nibbles into qs (elements j and j+16 share byte j), bit 4 into qh.
void pack_q5(const uint8_t* codes, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((codes[j] & 0x0F) | ((codes[j + 16] & 0x0F) << 4));
    qh |= ((codes[j] & 0x10u) >> 4) << j;
    qh |= ((codes[j + 16] & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, sizeof(qh));
}

void quantize_q5_0(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, x += kQK5_0) {
    const float d = signed_absmax(x, kQK5_0) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_0 b;
    b.d = fp32_to_fp16(d);
    uint8_t codes[kQK5_0];
    for (int j = 0; j < kQK5_0; ++j)
      codes[j] = static_cast<uint8_t>(ggml_min(31, static_cast<int8_t>(trunc_to_int(x[j] * id + 16.5f))));
    pack_q5(codes, b.qs, b.qh);
    store_block(dst, i, b);
  }
}

void quantize_q5_1(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, x += kQK5_1) {
    float min, max;
    min_max(x, kQK5_1, &min, &max);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_1 b;
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(min);
    uint8_t codes[kQK5_1];  // ggml does not clamp here: (x - min) * id never exceeds 31.5
    for (int j = 0; j < kQK5_1; ++j) codes[j] = static_cast<uint8_t>(trunc_to_int((x[j] - min) * id + 0.5f));
    pack_q5(codes, b.qs, b.qh);
    store_block(dst, i, b);
  }
}

// Q8_0 and Q8_1 share the codes: round(x / d) with d = absmax / 127, halves away from zero.
float quantize_q8_codes(const float* x, int8_t* qs) {
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) amax = ggml_max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK8_0; ++j) qs[j] = static_cast<int8_t>(trunc_to_int(std::round(x[j] * id)));
  return d;
}

void quantize_q8_0(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, x += kQK8_0) {
    BlockQ8_0 b;
    b.d = fp32_to_fp16(quantize_q8_codes(x, b.qs));
    store_block(dst, i, b);
  }
}

void quantize_q8_1(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, x += kQK8_1) {
    BlockQ8_1 b;
    const float d = quantize_q8_codes(x, b.qs);
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) sum += b.qs[j];
    b.d = fp32_to_fp16(d);
    b.s = fp32_to_fp16(static_cast<float>(sum) * d);
    store_block(dst, i, b);
  }
}

// ---- Float types (one element per "block").

void dequantize_f16(const void* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(load_block<uint16_t>(src, i));
}
void dequantize_bf16(const void* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(load_block<uint16_t>(src, i));
}
void quantize_f16(const float* x, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_block<uint16_t>(dst, i, fp32_to_fp16(x[i]));
}
void quantize_bf16(const float* x, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_block<uint16_t>(dst, i, fp32_to_bf16(x[i]));
}

using DequantizeFn = void (*)(const void*, float*, int64_t);
using QuantizeFn = void (*)(const float*, void*, int64_t);

struct Codec {
  GgmlType type;
  DequantizeFn dequantize;  // arguments: src, dst, number of blocks
  QuantizeFn quantize;
};

void copy_f32_in(const void* src, float* y, int64_t n) { std::memcpy(y, src, n * sizeof(float)); }
void copy_f32_out(const float* x, void* dst, int64_t n) { std::memcpy(dst, x, n * sizeof(float)); }

constexpr Codec kCodecs[] = {
    {GgmlType::kF32, copy_f32_in, copy_f32_out},
    {GgmlType::kF16, dequantize_f16, quantize_f16},
    {GgmlType::kBF16, dequantize_bf16, quantize_bf16},
    {GgmlType::kQ4_0, dequantize_q4_0, quantize_q4_0},
    {GgmlType::kQ4_1, dequantize_q4_1, quantize_q4_1},
    {GgmlType::kQ5_0, dequantize_q5_0, quantize_q5_0},
    {GgmlType::kQ5_1, dequantize_q5_1, quantize_q5_1},
    {GgmlType::kQ8_0, dequantize_q8_0, quantize_q8_0},
    {GgmlType::kQ8_1, dequantize_q8_1, quantize_q8_1},
    {GgmlType::kQ4_K, quants_detail::dequantize_q4_k, quants_detail::quantize_q4_k},
    {GgmlType::kQ5_K, quants_detail::dequantize_q5_k, quants_detail::quantize_q5_k},
    {GgmlType::kQ6_K, quants_detail::dequantize_q6_k, quants_detail::quantize_q6_k},
    {GgmlType::kQ8_K, quants_detail::dequantize_q8_k, quants_detail::quantize_q8_k},
};

const Codec* find_codec(GgmlType type) {
  for (const auto& c : kCodecs)
    if (c.type == type) return &c;
  return nullptr;
}

// Number of blocks in n elements; CHECKs the caller's validation (a bug if it fails).
int64_t checked_block_count(GgmlType type, int64_t n) {
  const auto traits = ggml_type_traits(static_cast<uint32_t>(type));
  ONEBIT_CHECK_MSG(traits.has_value(), "unknown ggml type");
  ONEBIT_CHECK(n >= 0);
  ONEBIT_CHECK_MSG(n % traits->block_elems == 0, "row length is not a multiple of the block size");
  return n / traits->block_elems;
}

}  // namespace

bool can_dequantize(GgmlType type) { return find_codec(type) != nullptr; }
bool can_quantize(GgmlType type) { return find_codec(type) != nullptr; }

Result<uint64_t> row_size(GgmlType type, int64_t n) {
  const uint32_t raw = static_cast<uint32_t>(type);
  const auto traits = ggml_type_traits(raw);
  if (!traits)
    return make_error("tensor type " + std::to_string(raw) +
                      " is not a ggml type 1bit knows; use a file written with a supported type");
  const std::string name(traits->name);
  if (n < 0)
    return make_error(name + " row of " + std::to_string(n) + " elements: the length must be 0 or more");
  if (n % traits->block_elems != 0)
    return make_error(name + " row of " + std::to_string(n) + " elements is not a multiple of the " +
                      "block size " + std::to_string(traits->block_elems) +
                      "; use a row length that is a multiple of it, or another type");
  const auto bytes = checked_mul(static_cast<uint64_t>(n / traits->block_elems), traits->block_bytes);
  if (!bytes) return make_error(name + " row of " + std::to_string(n) + " elements overflows 64-bit sizes");
  return *bytes;
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const Codec* codec = find_codec(type);
  ONEBIT_CHECK_MSG(codec != nullptr, "dequantize_row: type has no dequantizer (check can_dequantize)");
  codec->dequantize(src, dst, checked_block_count(type, n));
}

void quantize_row_reference(GgmlType type, const float* src, void* dst, int64_t n) {
  const Codec* codec = find_codec(type);
  ONEBIT_CHECK_MSG(codec != nullptr, "quantize_row_reference: type has no quantizer (check can_quantize)");
  codec->quantize(src, dst, checked_block_count(type, n));
}

}  // namespace onebit
