// The shared memory half of the host backends (host_backend.h).
#include "backend/host_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numbers>

#include "base/large_alloc.h"
#include "gguf/quants.h"

namespace onebit {

HostBuffer::~HostBuffer() {
  if (owned_) std::free(data_);
}

namespace {

// llama.cpp's rope_yarn_corr_dim: the dimension whose wavelength fits n_turns turns in the
// original context.
double yarn_corr_dim(int n_rot, int original_context, double n_turns, double base) {
  return n_rot * std::log(original_context / (n_turns * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

RopeAngles::RopeAngles(const RopeParams& p)
    : freq_base_(p.freq_base), freq_scale_(p.scaling == RopeScaling::kNone ? 1.0 : 1.0 / p.scaling_factor),
      mscale_(p.yarn_attn_factor), n_rot_(p.n_rot) {
  ONEBIT_CHECK(p.n_rot > 0 && p.n_rot <= p.head_dim && p.n_rot % 2 == 0);
  if (p.freq_factors.valid()) ONEBIT_CHECK(p.freq_factors.n_cols == p.n_rot / 2);
  if (p.scaling == RopeScaling::kYarn && p.yarn_ext_factor != 0.0) {
    ext_factor_ = p.yarn_ext_factor;
    corr_low_ = std::max(0.0, std::floor(yarn_corr_dim(p.n_rot, p.original_context, p.yarn_beta_fast, p.freq_base)));
    corr_high_ = std::min(double(p.n_rot - 1),
                          std::ceil(yarn_corr_dim(p.n_rot, p.original_context, p.yarn_beta_slow, p.freq_base)));
    mscale_ *= 1.0 + 0.1 * std::log(1.0 / freq_scale_);
  }
}

double RopeAngles::theta(int32_t pos, int i, const float* freq_factors) const {
  double theta_extrap = pos * std::pow(freq_base_, -2.0 * i / n_rot_);
  if (freq_factors != nullptr) theta_extrap /= freq_factors[i];
  double theta = freq_scale_ * theta_extrap;
  if (ext_factor_ != 0.0) {
    const double y = (i - corr_low_) / std::max(0.001, corr_high_ - corr_low_);
    const double ramp = (1.0 - std::min(1.0, std::max(0.0, y))) * ext_factor_;
    theta = theta * (1.0 - ramp) + theta_extrap * ramp;
  }
  return theta;
}

Result<Tensor> HostBackend::weight_from_host(GgmlType type, int64_t n_rows, int64_t n_cols,
                                             std::span<const uint8_t> bytes) {
  Tensor t{nullptr, 0, type, n_rows, n_cols, 0};
  if (!ggml_type_traits(static_cast<uint32_t>(type)) || !can_dequantize(type)) {
    return make_error(label_ + ": weight type " + ggml_type_name(static_cast<uint32_t>(type)) +
                      " is not supported; use f32, f16, bf16, q4_0..q8_0 or q4_K..q6_K");
  }
  t.row_stride_bytes = t.row_bytes();
  if (bytes.size() != t.row_stride_bytes * static_cast<size_t>(n_rows)) {
    return make_error(label_ + ": weight of " + std::to_string(n_rows) + " x " + std::to_string(n_cols) +
                      " needs " + std::to_string(t.row_stride_bytes * n_rows) + " bytes, got " +
                      std::to_string(bytes.size()));
  }
  buffers_.push_back(std::make_unique<HostBuffer>(bytes));
  t.buffer = buffers_.back().get();
  return t;
}

Result<Tensor> HostBackend::alloc(GgmlType type, int64_t n_rows, int64_t n_cols) {
  ONEBIT_CHECK(type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kI32);
  ONEBIT_CHECK(n_rows >= 0 && n_cols >= 0);
  const size_t elem_bytes = type == GgmlType::kF16 ? 2 : 4;
  const size_t n_bytes = static_cast<size_t>(n_rows) * static_cast<size_t>(n_cols) * elem_bytes;
  void* p = large_alloc(n_bytes);
  if (p == nullptr) {
    return make_error(label_ + ": out of memory allocating " + std::to_string(n_bytes) +
                      " bytes; use a smaller context (--ctx-size) or model");
  }
  std::memset(p, 0, n_bytes);
  buffers_.push_back(std::make_unique<HostBuffer>(static_cast<uint8_t*>(p)));
  return Tensor{buffers_.back().get(), 0, type, n_rows, n_cols, static_cast<size_t>(n_cols) * elem_bytes};
}

void HostBackend::free(const Tensor& t) {
  const auto it = std::find_if(buffers_.begin(), buffers_.end(), [&](const auto& b) { return b.get() == t.buffer; });
  ONEBIT_CHECK_MSG(it != buffers_.end(), "free of a tensor this backend does not own");
  buffers_.erase(it);
}

void HostBackend::write(const Tensor& dst, const void* src) {
  const size_t rb = dst.row_bytes();
  for (int64_t r = 0; r < dst.n_rows; ++r) std::memcpy(row_ptr(dst, r), static_cast<const uint8_t*>(src) + r * rb, rb);
}

void HostBackend::copy(const Tensor& src, const Tensor& dst) {
  check_same_shape(src, dst);
  ONEBIT_CHECK(src.type == dst.type);
  const size_t rb = src.row_bytes();
  // Overlapping views of one buffer: walk rows in the direction that reads each source row before
  // it is overwritten (memmove within a row).
  const bool backward = src.buffer == dst.buffer && dst.offset_bytes > src.offset_bytes;
  for (int64_t i = 0; i < src.n_rows; ++i) {
    const int64_t r = backward ? src.n_rows - 1 - i : i;
    std::memmove(row_ptr(dst, r), row_ptr(src, r), rb);
  }
}

void HostBackend::read(const Tensor& src, void* dst) {
  const size_t rb = src.row_bytes();
  for (int64_t r = 0; r < src.n_rows; ++r) std::memcpy(static_cast<uint8_t*>(dst) + r * rb, row_ptr(src, r), rb);
}

void HostBackend::argmax_rows(const Tensor& x, const Tensor& ids) {
  check_argmax_rows(x, ids);
  int32_t* id = reinterpret_cast<int32_t*>(row_ptr(ids, 0));
  for (int64_t i = 0; i < x.n_rows; ++i) {
    const float* r = reinterpret_cast<const float*>(row_ptr(x, i));
    int64_t best = 0;
    for (int64_t c = 1; c < x.n_cols; ++c) best = r[c] > r[best] ? c : best;
    id[i] = r[best] == -std::numeric_limits<float>::infinity() ? -1 : int32_t(best);
  }
}

void check_store_kv(const Tensor& src, const Tensor& slots, const Tensor& dst) {
  ONEBIT_CHECK(src.type == GgmlType::kF32 && (dst.type == GgmlType::kF32 || dst.type == GgmlType::kF16));
  ONEBIT_CHECK(slots.type == GgmlType::kI32 && slots.n_rows == 1 && slots.n_cols == src.n_rows);
  ONEBIT_CHECK(src.n_cols == dst.n_cols);
  const int32_t* slot = i32_row(slots, 0);
  for (int64_t i = 0; i < src.n_rows; ++i) ONEBIT_CHECK(slot[i] >= 0 && slot[i] < dst.n_rows);
}

void check_paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const Tensor& positions,
                           const Tensor& seq_ids, const Tensor& block_tables, const Tensor& out,
                           const PagedAttentionParams& p) {
  ONEBIT_CHECK(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 && p.head_dim > 0 && p.block_size > 0);
  ONEBIT_CHECK(q.type == GgmlType::kF32 && out.type == GgmlType::kF32);
  ONEBIT_CHECK(q.n_cols == int64_t(p.n_heads) * p.head_dim);
  check_same_shape(q, out);
  ONEBIT_CHECK(k_pool.type == GgmlType::kF32 || k_pool.type == GgmlType::kF16);
  ONEBIT_CHECK(v_pool.type == k_pool.type);
  ONEBIT_CHECK(k_pool.n_cols == int64_t(p.n_kv_heads) * p.head_dim);
  check_same_shape(k_pool, v_pool);
  ONEBIT_CHECK(k_pool.n_rows <= INT32_MAX);
  ONEBIT_CHECK(positions.type == GgmlType::kI32 && positions.n_rows == 1 && positions.n_cols == q.n_rows);
  ONEBIT_CHECK(seq_ids.type == GgmlType::kI32 && seq_ids.n_rows == 1 && seq_ids.n_cols == q.n_rows);
  ONEBIT_CHECK(block_tables.type == GgmlType::kI32);
  const int32_t* pos = i32_row(positions, 0);
  const int32_t* seq = i32_row(seq_ids, 0);
  for (int64_t i = 0; i < q.n_rows; ++i) {
    ONEBIT_CHECK(seq[i] >= 0 && seq[i] < block_tables.n_rows);
    ONEBIT_CHECK(pos[i] >= 0 && pos[i] / p.block_size < block_tables.n_cols);
  }
}

}  // namespace onebit
