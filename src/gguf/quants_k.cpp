// K-quants (Q4_K, Q5_K, Q6_K and the Q8_K activations): scalar dequantization and ggml's reference
// quantizers with their scale searches (make_qkx2_quants, make_qx_quants in ggml-quants.c).
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "gguf/quants.h"
#include "gguf/quants_impl.h"  // last: turns off FP contraction for this file

namespace onebit::quants_detail {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: a group below this is all zero

// ggml's make_qkx2_quants: fits x[n] ~ scale * L - min with L in [0, nmax] and min >= 0, minimising
// the weighted squared error. Tries the plain min/max fit, then nstep+1 scales around it, each
// refined by weighted least squares for (scale, min). Returns scale; writes L[n] and *the_min.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(ggml_max(0, ggml_min(nmax, l)));
    const float diff = scale * L[i] + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = ggml_max(0, ggml_min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * Laux[i] + this_min - x[i];
        cur_error += weights[i] * (diff * diff);
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights (as quantize_row_q6_K_ref
// calls it): symmetric codes L in [0, 2*nmax) meaning L - nmax, weights x^2, 19 trial scales.
// Returns the scale; writes L[n].
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = ggml_max(-nmax, ggml_min(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = ggml_max(-nmax, ggml_min(nmax - 1, nearest_int(iscale * x[i])));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i)
        L[i] = static_cast<int8_t>(nmax + ggml_max(-nmax, ggml_min(nmax - 1, nearest_int(iscale * x[i]))));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Packs eight 6-bit (scale, min) pairs into Q4_K/Q5_K's 12 bytes; inverse of get_scale_min_k4.
void pack_scales_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* scales) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = ls[j];
    scales[j + 4] = lm[j];
  }
  for (int j = 4; j < 8; ++j) {
    scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
    scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
    scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
  }
}

// The shared first half of quantize_row_q4_K_ref / q5_K_ref: per sub-block (scale, min) search,
// 6-bit quantisation of both against the block maxima, then codes L[256] in [0, nmax] recomputed
// against the rounded scales. Fills d, dmin and scales of the block.
void quantize_k4_scales_and_codes(const float* x, int nmax, float rmin, float rdelta, int nstep,
                                  uint16_t* d_out, uint16_t* dmin_out, uint8_t* packed, uint8_t* L) {
  constexpr int kSub = kQK_K / 32;
  float scales[kSub], mins[kSub], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;  // scales are positive since the min is subtracted
  for (int j = 0; j < kSub; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[kSub], lm[kSub];
  for (int j = 0; j < kSub; ++j) {
    ls[j] = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));  // wraps as ggml's does
    lm[j] = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls[j] = static_cast<uint8_t>(ggml_min(63, ls[j]));
    lm[j] = static_cast<uint8_t>(ggml_min(63, lm[j]));
  }
  pack_scales_k4(ls, lm, packed);
  *d_out = fp32_to_fp16(max_scale / 63.f);
  *dmin_out = fp32_to_fp16(max_min / 63.f);

  for (int j = 0; j < kSub; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, packed, &sc, &m);
    const float d = fp16_to_fp32(*d_out) * sc;
    if (d == 0.0f) continue;  // keep the codes of the search
    const float dm = fp16_to_fp32(*dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(ggml_max(0, ggml_min(nmax, l)));
    }
  }
}

}  // namespace

// ---- Dequantization.

void dequantize_q4_k(const void* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ4_K>(src, i);
    const float d = fp16_to_fp32(b.d);
    const float min = fp16_to_fp32(b.dmin);
    // Chunk c of 64 elements: sub-block 2c in the low nibbles of qs[32c..], 2c+1 in the high.
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = b.qs + 32 * c;
      uint8_t sc, m;
      get_scale_min_k4(2 * c, b.scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      get_scale_min_k4(2 * c + 1, b.scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_k(const void* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ5_K>(src, i);
    const float d = fp16_to_fp32(b.d);
    const float min = fp16_to_fp32(b.dmin);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* ql = b.qs + 32 * c;
      const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c));  // fifth bit of sub-block 2c
      const uint8_t u2 = static_cast<uint8_t>(2u << (2 * c));  // ... and of 2c+1
      uint8_t sc, m;
      get_scale_min_k4(2 * c, b.scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      get_scale_min_k4(2 * c + 1, b.scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (b.qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (b.qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void dequantize_q6_k(const void* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ6_K>(src, i);
    const float d = fp16_to_fp32(b.d);
    // Half h of 128 elements uses ql[64h..64h+63], qh[32h..32h+31] and scales[8h..8h+7].
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      const int8_t* sc = b.scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

void dequantize_q8_k(const void* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ8_K>(src, i);
    for (int j = 0; j < kQK_K; ++j) *y++ = b.d * b.qs[j];
  }
}

// ---- Reference quantizers (ggml's quantize_row_q4_K_ref, q5_K_ref, q6_K_ref, q8_K_ref).

void quantize_q4_k(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, x += kQK_K) {
    BlockQ4_K b;
    uint8_t L[kQK_K];
    quantize_k4_scales_and_codes(x, 15, -1.f, 0.1f, 20, &b.d, &b.dmin, b.scales, L);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        b.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + l + 32] << 4));
    store_block(dst, i, b);
  }
}

void quantize_q5_k(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, x += kQK_K) {
    BlockQ5_K b;
    uint8_t L[kQK_K];
    quantize_k4_scales_and_codes(x, 31, -0.5f, 0.1f, 15, &b.d, &b.dmin, b.scales, L);
    std::memset(b.qh, 0, sizeof(b.qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int l1 = L[64 * c + l], l2 = L[64 * c + l + 32];
        if (l1 > 15) b.qh[l] |= static_cast<uint8_t>(1u << (2 * c));
        if (l2 > 15) b.qh[l] |= static_cast<uint8_t>(2u << (2 * c));
        b.qs[32 * c + l] = static_cast<uint8_t>((l1 & 0xF) | ((l2 & 0xF) << 4));
      }
    }
    store_block(dst, i, b);
  }
}

void quantize_q6_k(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, x += kQK_K) {
    BlockQ6_K b;
    int8_t L[kQK_K];
    float scales[kQK_K / 16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&b, 0, sizeof(b));
      store_block(dst, i, b);
      continue;
    }
    const float iscale = -128.f / max_scale;
    b.d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib)
      b.scales[ib] = static_cast<int8_t>(ggml_min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16_to_fp32(b.d) * b.scales[j];
      if (d == 0.0f) continue;  // keep the codes of the search
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(ggml_max(-32, ggml_min(31, l)) + 32);
      }
    }
    // Elements 128h + 32k + l (k = 0..3): low nibble in ql[64h + l + 32(k&1)] (high nibble when
    // k >= 2), top two bits in bits 2k..2k+1 of qh[32h + l].
    for (int h = 0; h < 2; ++h) {
      const int8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        b.ql[64 * h + l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        b.ql[64 * h + l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        b.qh[32 * h + l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                                ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
      }
    }
    store_block(dst, i, b);
  }
}

void quantize_q8_k(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, x += kQK_K) {
    BlockQ8_K b;
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.0f) {  // ggml leaves bsums unwritten here; we zero them
      std::memset(&b, 0, sizeof(b));
      store_block(dst, i, b);
      continue;
    }
    const float iscale = -127.f / max;  // -127, not -128: ggml keeps codes symmetric for IQ kernels
    for (int j = 0; j < kQK_K; ++j) b.qs[j] = static_cast<int8_t>(ggml_min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += b.qs[16 * j + ii];
      b.bsums[j] = static_cast<int16_t>(sum);
    }
    b.d = 1 / iscale;
    store_block(dst, i, b);
  }
}

}  // namespace onebit::quants_detail
