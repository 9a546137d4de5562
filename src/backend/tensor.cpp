// Tensor view arithmetic shared by every backend (rows, reshapes, row sizes).
#include "backend/backend.h"

#include <algorithm>
#include "base/check.h"

namespace onebit {

size_t Tensor::row_bytes() const {
  const auto traits = ggml_type_traits(static_cast<uint32_t>(type));
  ONEBIT_CHECK(traits.has_value());
  ONEBIT_CHECK(n_cols % traits->block_elems == 0);
  return static_cast<size_t>(n_cols / traits->block_elems) * traits->block_bytes;
}

Tensor Tensor::rows(int64_t first, int64_t n) const {
  ONEBIT_CHECK(first >= 0 && n >= 0 && first + n <= n_rows);
  Tensor t = *this;
  t.offset_bytes += static_cast<size_t>(first) * row_stride_bytes;
  t.n_rows = n;
  return t;
}

Tensor Tensor::reshaped(int64_t rows, int64_t cols) const {
  ONEBIT_CHECK(row_stride_bytes == row_bytes() || n_rows <= 1);
  ONEBIT_CHECK(rows * cols == n_rows * n_cols);
  Tensor t = *this;
  t.n_rows = rows;
  t.n_cols = cols;
  t.row_stride_bytes = t.row_bytes();
  return t;
}

}  // namespace onebit

namespace onebit {

void check_moe_route(const Tensor& logits, const Tensor& ids, const Tensor& weights) {
  ONEBIT_CHECK(logits.type == GgmlType::kF32 && ids.type == GgmlType::kI32 && weights.type == GgmlType::kF32);
  ONEBIT_CHECK(ids.n_rows == logits.n_rows && weights.n_rows == logits.n_rows && weights.n_cols == ids.n_cols);
  ONEBIT_CHECK(ids.n_cols >= 1 && ids.n_cols <= logits.n_cols);
}

void check_moe_matmul(const Tensor& w, int32_t n_experts, const Tensor& x, const Tensor& ids, const Tensor& out) {
  ONEBIT_CHECK(n_experts >= 1 && w.n_rows % n_experts == 0);
  ONEBIT_CHECK(ids.type == GgmlType::kI32 && x.type == GgmlType::kF32 && out.type == GgmlType::kF32);
  const int64_t pairs = ids.n_rows * ids.n_cols;
  ONEBIT_CHECK(x.n_cols == w.n_cols && (x.n_rows == ids.n_rows || x.n_rows == pairs));
  ONEBIT_CHECK(out.n_rows == pairs && out.n_cols == w.n_rows / n_experts);
}

void check_moe_combine(const Tensor& y, const Tensor& weights, const Tensor& out) {
  ONEBIT_CHECK(y.type == GgmlType::kF32 && weights.type == GgmlType::kF32 && out.type == GgmlType::kF32);
  ONEBIT_CHECK(out.n_rows == weights.n_rows && y.n_rows == weights.n_rows * weights.n_cols && y.n_cols == out.n_cols);
}

Tensor scratch_rows(Backend& be, Tensor& buf, int64_t capacity, int64_t rows, int64_t cols) {
  ONEBIT_CHECK(rows >= 0 && cols >= 0 && rows * cols <= capacity);
  if (!buf.valid() || buf.n_cols < capacity) {
    if (buf.valid()) be.free(buf);
    auto t = be.alloc(GgmlType::kF32, 1, std::max<int64_t>(capacity, 1 << 16));
    ONEBIT_CHECK_MSG(t.ok(), "backend scratch: out of memory");
    buf = *t;
  }
  return Tensor{buf.buffer, buf.offset_bytes, GgmlType::kF32, rows, cols, size_t(cols) * sizeof(float)};
}

void check_sigmoid_mul(const Tensor& x, const Tensor& g, const Tensor& out) {
  ONEBIT_CHECK(x.type == GgmlType::kF32 && g.type == GgmlType::kF32 && out.type == GgmlType::kF32);
  ONEBIT_CHECK(out.n_rows == x.n_rows && out.n_cols == x.n_cols);
  ONEBIT_CHECK(g.n_rows == x.n_rows && (g.n_cols == x.n_cols || g.n_cols == 1));
}

void check_argmax_rows(const Tensor& x, const Tensor& ids) {
  ONEBIT_CHECK(x.type == GgmlType::kF32 && x.n_cols >= 1);
  ONEBIT_CHECK(ids.type == GgmlType::kI32 && ids.n_rows == 1 && ids.n_cols == x.n_rows);
}

}  // namespace onebit

namespace onebit {

namespace {
// The recurrent ops' optional checkpoint rows: I32 [1, n] when given.
void check_ckpt_rows(const Tensor& ckpt_rows, int64_t n) {
  if (!ckpt_rows.valid()) return;
  ONEBIT_CHECK(ckpt_rows.type == GgmlType::kI32 && ckpt_rows.n_rows == 1 && ckpt_rows.n_cols == n);
}
}  // namespace

int64_t check_ssm_conv(const Tensor& x, const Tensor& w, const Tensor& seq_ids, const Tensor& state_rows,
                       const Tensor& ckpt_rows, const Tensor& states, const Tensor& out) {
  check_ckpt_rows(ckpt_rows, x.n_rows);
  for (const Tensor* t : {&x, &w, &states, &out}) ONEBIT_CHECK(t->type == GgmlType::kF32);
  ONEBIT_CHECK(seq_ids.type == GgmlType::kI32 && state_rows.type == GgmlType::kI32);
  ONEBIT_CHECK(seq_ids.n_rows == 1 && seq_ids.n_cols == x.n_rows && state_rows.n_rows == 1);
  ONEBIT_CHECK(w.n_rows == x.n_cols && w.n_cols >= 2 && out.n_rows == x.n_rows && out.n_cols == x.n_cols);
  ONEBIT_CHECK(states.n_cols == (w.n_cols - 1) * x.n_cols);
  return w.n_cols;
}

DeltaDims check_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                                 const Tensor& A, const Tensor& dt_bias, const Tensor& seq_ids,
                                 const Tensor& state_rows, const Tensor& ckpt_rows, const Tensor& states,
                                 const Tensor& out, const DeltaParams& p) {
  check_ckpt_rows(ckpt_rows, q.n_rows);
  for (const Tensor* t : {&q, &k, &v, &a, &b, &A, &dt_bias, &states, &out}) ONEBIT_CHECK(t->type == GgmlType::kF32);
  ONEBIT_CHECK(seq_ids.type == GgmlType::kI32 && state_rows.type == GgmlType::kI32);
  const int64_t n = q.n_rows, h = a.n_cols;
  ONEBIT_CHECK(h >= 1 && k.n_rows == n && v.n_rows == n && a.n_rows == n && b.n_rows == n && out.n_rows == n);
  ONEBIT_CHECK(b.n_cols == h && A.n_rows == 1 && A.n_cols == h && dt_bias.n_rows == 1 && dt_bias.n_cols == h);
  ONEBIT_CHECK(p.n_k_heads >= 1 && h % p.n_k_heads == 0);
  ONEBIT_CHECK(q.n_cols == k.n_cols && q.n_cols % p.n_k_heads == 0 && v.n_cols % h == 0 && out.n_cols == v.n_cols);
  ONEBIT_CHECK(seq_ids.n_rows == 1 && seq_ids.n_cols == n && state_rows.n_rows == 1);
  const DeltaDims d{h, p.n_k_heads, q.n_cols / p.n_k_heads, v.n_cols / h, p.tiled};
  ONEBIT_CHECK(states.n_cols == d.n_heads * d.dk * d.dv);
  return d;
}

// The fused ops' defaults: the ops they stand for, in turn.
void Backend::add_rms_norm(const Tensor& a, const Tensor& b, const Tensor& weight, float eps, const Tensor& sum,
                           const Tensor& out) {
  add(a, b, sum);
  rms_norm(sum, weight, eps, out);
}

void Backend::qk_rope_store(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                            const Tensor& k_norm, float eps, const Tensor& positions, const RopeParams& rope,
                            int32_t n_kv_heads, const Tensor& slots, const Tensor& k_pool, const Tensor& v_pool) {
  const int64_t n = k.n_rows;
  const int32_t hd = rope.head_dim;
  if (q.valid()) {
    if (q_norm.valid()) rms_norm(q.reshaped(n * rope.n_heads, hd), q_norm, eps, q.reshaped(n * rope.n_heads, hd));
    this->rope(q, positions, rope);
  }
  if (k_norm.valid()) rms_norm(k.reshaped(n * n_kv_heads, hd), k_norm, eps, k.reshaped(n * n_kv_heads, hd));
  RopeParams rk = rope;
  rk.n_heads = n_kv_heads;
  this->rope(k, positions, rk);
  store_kv(k, slots, k_pool);
  store_kv(v, slots, v_pool);
}

void Backend::matmuls(const Tensor& x, const Products& p) {
  for (int32_t i = 0; i < p.n; ++i) matmul(p.w[i], x, p.out[i]);
}

}  // namespace onebit
