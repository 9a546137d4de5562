// The scalar reference backend: host memory, plain loops, double accumulation. It is the oracle
// the optimized CPU and CUDA backends are tested against, so it is written for clarity, not speed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/hadamard.h"
#include "backend/host_backend.h"
#include "base/check.h"
#include "base/fp16.h"
#include "gguf/quants.h"

namespace onebit {
namespace {

class ReferenceBackend final : public HostBackend {
 public:
  ReferenceBackend() : HostBackend("reference backend") {}
  std::string_view name() const override { return "reference"; }

  void get_rows(const Tensor& table, const Tensor& ids, const Tensor& out) override {
    ONEBIT_CHECK(ids.n_rows == 1 && ids.n_cols == out.n_rows && table.n_cols == out.n_cols);
    const int32_t* id = i32_row(ids, 0);
    for (int64_t i = 0; i < out.n_rows; ++i) {
      ONEBIT_CHECK(id[i] >= 0 && id[i] < table.n_rows);
      dequantize_row(table.type, row_ptr(table, id[i]), f32_row(out, i), table.n_cols);
    }
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
    check_same_shape(x, out);
    ONEBIT_CHECK(weight.n_rows == 1 && weight.n_cols == x.n_cols);
    const float* w = f32_row(weight, 0);
    for (int64_t r = 0; r < x.n_rows; ++r) {
      const float* xr = f32_row(x, r);
      double sum_sq = 0.0;
      for (int64_t c = 0; c < x.n_cols; ++c) sum_sq += double(xr[c]) * xr[c];
      const double inv = 1.0 / std::sqrt(sum_sq / double(x.n_cols) + eps);
      float* o = f32_row(out, r);
      for (int64_t c = 0; c < x.n_cols; ++c) o[c] = float(xr[c] * inv) * w[c];
    }
  }

  bool rotates_inputs() const override { return true; }

  void matmul(const Tensor& w, const Tensor& x, const Tensor& out) override {
    ONEBIT_CHECK(w.n_cols == x.n_cols && out.n_rows == x.n_rows && out.n_cols == w.n_rows);
    const std::vector<double> xs = inputs(w, x, 0, x.n_rows);  // [n, k], rotated as w says
    std::vector<float> w_row(static_cast<size_t>(w.n_cols));  // [k]
    for (int64_t m = 0; m < w.n_rows; ++m) {
      dequantize_row(w.type, row_ptr(w, m), w_row.data(), w.n_cols);
      for (int64_t n = 0; n < x.n_rows; ++n) {
        const double* xr = xs.data() + n * w.n_cols;
        double acc = 0.0;
        for (int64_t k = 0; k < w.n_cols; ++k) acc += double(w_row[k]) * xr[k];
        f32_row(out, n)[m] = static_cast<float>(acc);
      }
    }
  }

  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    check_same_shape(a, out);
    ONEBIT_CHECK(b.n_cols == a.n_cols && (b.n_rows == a.n_rows || b.n_rows == 1));
    for (int64_t r = 0; r < a.n_rows; ++r) {
      const float* ar = f32_row(a, r);
      const float* br = f32_row(b, b.n_rows == 1 ? 0 : r);
      float* o = f32_row(out, r);
      for (int64_t c = 0; c < a.n_cols; ++c) o[c] = ar[c] + br[c];
    }
  }

  void swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) override {
    check_same_shape(gate, up);
    check_same_shape(gate, out);
    for (int64_t r = 0; r < gate.n_rows; ++r) {
      const float* g = f32_row(gate, r);
      const float* u = f32_row(up, r);
      float* o = f32_row(out, r);
      for (int64_t c = 0; c < gate.n_cols; ++c) {
        const double silu = g[c] / (1.0 + std::exp(-double(g[c])));
        o[c] = static_cast<float>(silu * u[c]);
      }
    }
  }

  void softmax(const Tensor& x, const Tensor& out) override {
    check_same_shape(x, out);
    for (int64_t r = 0; r < x.n_rows; ++r) {
      const float* xr = f32_row(x, r);
      float* o = f32_row(out, r);
      softmax_row(xr, o, x.n_cols);
    }
  }

  void store_kv(const Tensor& src, const Tensor& slots, const Tensor& dst) override {
    check_store_kv(src, slots, dst);
    const int32_t* slot = i32_row(slots, 0);
    std::vector<int32_t> sorted(slot, slot + src.n_rows);
    std::sort(sorted.begin(), sorted.end());
    ONEBIT_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());  // distinct
    for (int64_t i = 0; i < src.n_rows; ++i) {
      const float* s = f32_row(src, i);
      uint8_t* d = row_ptr(dst, slot[i]);
      for (int64_t c = 0; c < src.n_cols; ++c) {
        if (dst.type == GgmlType::kF16) {
          reinterpret_cast<uint16_t*>(d)[c] = fp32_to_fp16(s[c]);
        } else {
          reinterpret_cast<float*>(d)[c] = s[c];
        }
      }
    }
  }

  void rope(const Tensor& x, const Tensor& positions, const RopeParams& p) override;

  // Softmax in double, then a stable sort by descending p (ties: lower index first), then the
  // first top_k, renormalized in double.
  void moe_route(const Tensor& logits, bool normalize, const Tensor& ids, const Tensor& weights) override {
    check_moe_route(logits, ids, weights);
    const int64_t n_exp = logits.n_cols, top_k = ids.n_cols;
    std::vector<float> p(static_cast<size_t>(n_exp));
    std::vector<int32_t> order(static_cast<size_t>(n_exp));
    for (int64_t i = 0; i < logits.n_rows; ++i) {
      softmax_row(f32_row(logits, i), p.data(), n_exp);
      for (int64_t e = 0; e < n_exp; ++e) order[e] = int32_t(e);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
      double sum = 0.0;
      for (int64_t j = 0; j < top_k; ++j) sum += p[order[j]];
      int32_t* id = const_cast<int32_t*>(i32_row(ids, i));
      for (int64_t j = 0; j < top_k; ++j) {
        id[j] = order[j];
        f32_row(weights, i)[j] = normalize ? float(p[order[j]] / sum) : p[order[j]];
      }
    }
  }

  // Each pair alone: its expert's rows dequantized and dotted with the pair's activation row.
  void moe_matmul(const Tensor& w, int32_t n_experts, const Tensor& x, const Tensor& ids, const Tensor& out) override {
    check_moe_matmul(w, n_experts, x, ids, out);
    const int64_t m = w.n_rows / n_experts, top_k = ids.n_cols;
    std::vector<float> w_row(static_cast<size_t>(w.n_cols));  // [k]
    for (int64_t i = 0; i < ids.n_rows; ++i) {
      for (int64_t j = 0; j < top_k; ++j) {
        const int32_t e = i32_row(ids, i)[j];
        ONEBIT_CHECK(e >= 0 && e < n_experts);
        const int64_t pair = i * top_k + j;
        const std::vector<double> xs = inputs(w, x, x.n_rows == ids.n_rows ? i : pair, 1);
        const double* xr = xs.data();
        for (int64_t r = 0; r < m; ++r) {
          dequantize_row(w.type, row_ptr(w, e * m + r), w_row.data(), w.n_cols);
          double acc = 0.0;
          for (int64_t c = 0; c < w.n_cols; ++c) acc += double(w_row[c]) * xr[c];
          f32_row(out, pair)[r] = static_cast<float>(acc);
        }
      }
    }
  }

  void moe_combine(const Tensor& y, const Tensor& weights, const Tensor& out) override {
    check_moe_combine(y, weights, out);
    const int64_t top_k = weights.n_cols;
    for (int64_t i = 0; i < out.n_rows; ++i) {
      for (int64_t c = 0; c < out.n_cols; ++c) {
        double acc = 0.0;
        for (int64_t j = 0; j < top_k; ++j) acc += double(f32_row(weights, i)[j]) * f32_row(y, i * top_k + j)[c];
        f32_row(out, i)[c] = static_cast<float>(acc);
      }
    }
  }

  void sigmoid_mul(const Tensor& x, const Tensor& g, const Tensor& out) override {
    check_sigmoid_mul(x, g, out);
    for (int64_t r = 0; r < x.n_rows; ++r) {
      for (int64_t c = 0; c < x.n_cols; ++c) {
        const double gate = f32_row(g, r)[g.n_cols == 1 ? 0 : c];
        f32_row(out, r)[c] = static_cast<float>(f32_row(x, r)[c] / (1.0 + std::exp(-gate)));
      }
    }
  }

  // Each sequence's window of its last K - 1 inputs, loaded from its state row at its first token
  // and written back after the last.
  void ssm_conv(const Tensor& x, const Tensor& w, const Tensor& seq_ids, const Tensor& state_rows,
                const Tensor& ckpt_rows, const Tensor& states, bool silu, const Tensor& out) override {
    const int64_t K = check_ssm_conv(x, w, seq_ids, state_rows, ckpt_rows, states, out), C = x.n_cols;
    std::vector<std::vector<float>> win(static_cast<size_t>(state_rows.n_cols));  // [K - 1][C] per sequence
    for (int64_t t = 0; t < x.n_rows; ++t) {
      const int32_t s = state_row_of(seq_ids, state_rows, states, t);
      std::vector<float>& ws = win[seq_ids_at(seq_ids, t)];
      if (ws.empty()) ws.assign(f32_row(states, s), f32_row(states, s) + (K - 1) * C);
      for (int64_t c = 0; c < C; ++c) {
        const float* wc = f32_row(w, c);
        double acc = double(wc[K - 1]) * f32_row(x, t)[c];
        for (int64_t j = 0; j < K - 1; ++j) acc += double(wc[j]) * ws[j * C + c];
        f32_row(out, t)[c] = static_cast<float>(silu ? acc / (1.0 + std::exp(-acc)) : acc);
      }
      ws.erase(ws.begin(), ws.begin() + C);  // drop the oldest input, append this one
      ws.insert(ws.end(), f32_row(x, t), f32_row(x, t) + C);
      if (const int32_t c = ckpt_row_of(ckpt_rows, states, t); c >= 0) std::copy(ws.begin(), ws.end(), f32_row(states, c));
    }
    for (size_t i = 0; i < win.size(); ++i) {
      if (!win[i].empty()) std::copy(win[i].begin(), win[i].end(), f32_row(states, i32_row(state_rows, 0)[i]));
    }
  }

  // Token by token in double: the recurrence that defines the op.
  void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                        const Tensor& A, const Tensor& dt_bias, const Tensor& seq_ids, const Tensor& state_rows,
                        const Tensor& ckpt_rows, const Tensor& states, const Tensor& out,
                        const DeltaParams& p) override {
    const DeltaDims d =
        check_gated_delta_rule(q, k, v, a, b, A, dt_bias, seq_ids, state_rows, ckpt_rows, states, out, p);
    const int64_t hs = d.dk * d.dv;  // state elements per head
    std::vector<std::vector<double>> st(static_cast<size_t>(state_rows.n_cols));  // [n_heads * dk * dv]
    std::vector<double> kv(static_cast<size_t>(d.dv));
    for (int64_t t = 0; t < q.n_rows; ++t) {
      const int32_t row = state_row_of(seq_ids, state_rows, states, t);
      std::vector<double>& S = st[seq_ids_at(seq_ids, t)];
      if (S.empty()) S.assign(f32_row(states, row), f32_row(states, row) + d.n_heads * hs);
      for (int64_t h = 0; h < d.n_heads; ++h) {
        double* Sh = S.data() + h * hs;  // [dk][dv]
        const float* qh = f32_row(q, t) + d.k_head(h) * d.dk;
        const float* kh = f32_row(k, t) + d.k_head(h) * d.dk;
        const float* vh = f32_row(v, t) + h * d.dv;
        const double x = double(f32_row(a, t)[h]) + f32_row(dt_bias, 0)[h];
        const double g = f32_row(A, 0)[h] * (x > 20.0 ? x : std::log1p(std::exp(x)));  // softplus as torch's
        const double beta = 1.0 / (1.0 + std::exp(-double(f32_row(b, t)[h])));
        const double decay = std::exp(g);
        for (int64_t i = 0; i < hs; ++i) Sh[i] *= decay;
        for (int64_t j = 0; j < d.dv; ++j) {
          double acc = 0.0;
          for (int64_t i = 0; i < d.dk; ++i) acc += Sh[i * d.dv + j] * kh[i];
          kv[j] = beta * (vh[j] - acc);  // the delta
        }
        for (int64_t i = 0; i < d.dk; ++i) {
          for (int64_t j = 0; j < d.dv; ++j) Sh[i * d.dv + j] += kh[i] * kv[j];
        }
        float* oh = f32_row(out, t) + h * d.dv;
        for (int64_t j = 0; j < d.dv; ++j) {
          double acc = 0.0;
          for (int64_t i = 0; i < d.dk; ++i) acc += Sh[i * d.dv + j] * qh[i];
          oh[j] = static_cast<float>(acc);
        }
      }
      if (const int32_t c = ckpt_row_of(ckpt_rows, states, t); c >= 0) {
        for (size_t e = 0; e < S.size(); ++e) f32_row(states, c)[e] = static_cast<float>(S[e]);
      }
    }
    for (size_t i = 0; i < st.size(); ++i) {
      if (st[i].empty()) continue;
      float* dst = f32_row(states, i32_row(state_rows, 0)[i]);
      for (size_t e = 0; e < st[i].size(); ++e) dst[e] = static_cast<float>(st[i][e]);
    }
  }

  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const AttentionParams& p) override;
  void paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const Tensor& positions,
                       const Tensor& seq_ids, const Tensor& block_tables, const Tensor& out,
                       const PagedAttentionParams& p) override;

 private:
  // Element c of row r of an F32 or F16 K/V pool, as float.
  static float pool_at(const Tensor& pool, int64_t r, int64_t c) {
    if (pool.type == GgmlType::kF16) return fp16_to_fp32(reinterpret_cast<const uint16_t*>(row_ptr(pool, r))[c]);
    return f32_row(pool, r)[c];
  }

  // The sequence index of token t (CHECKed against state_rows) and its state row (CHECKed).
  static size_t seq_ids_at(const Tensor& seq_ids, int64_t t) { return static_cast<size_t>(i32_row(seq_ids, 0)[t]); }
  static int32_t state_row_of(const Tensor& seq_ids, const Tensor& state_rows, const Tensor& states, int64_t t) {
    const int32_t s = i32_row(seq_ids, 0)[t];
    ONEBIT_CHECK(s >= 0 && s < state_rows.n_cols);
    const int32_t row = i32_row(state_rows, 0)[s];
    ONEBIT_CHECK(row >= 0 && row < states.n_rows);
    return row;
  }
  // Rows [first, first + n) of x in double, rotated per block when w's columns are (in_rotation).
  static std::vector<double> inputs(const Tensor& w, const Tensor& x, int64_t first, int64_t n) {
    std::vector<double> v(static_cast<size_t>(n * x.n_cols));
    for (int64_t r = 0; r < n; ++r) {
      double* row = v.data() + r * x.n_cols;
      for (int64_t c = 0; c < x.n_cols; ++c) row[c] = f32_row(x, first + r)[c];
      if (w.in_rotation > 0) {
        ONEBIT_CHECK(x.n_cols % w.in_rotation == 0);
        hadamard_rotate(row, x.n_cols, w.in_rotation);
      }
    }
    return v;
  }

  // The checkpoint row after token t (CHECKed), or -1.
  static int32_t ckpt_row_of(const Tensor& ckpt_rows, const Tensor& states, int64_t t) {
    if (!ckpt_rows.valid()) return -1;
    const int32_t row = i32_row(ckpt_rows, 0)[t];
    ONEBIT_CHECK(row >= -1 && row < states.n_rows);
    return row;
  }

  static void softmax_row(const float* x, float* out, int64_t n) {
    double max_v = -INFINITY;
    for (int64_t c = 0; c < n; ++c) max_v = std::max(max_v, double(x[c]));
    double sum = 0.0;
    std::vector<double> e(static_cast<size_t>(n));
    for (int64_t c = 0; c < n; ++c) sum += e[c] = std::exp(double(x[c]) - max_v);
    for (int64_t c = 0; c < n; ++c) out[c] = static_cast<float>(e[c] / sum);
  }

};

// RoPE as llama.cpp's ggml_rope_ext computes it (rope_yarn): theta = pos * base^(-2i/n_rot),
// scaled by 1/factor and blended with the unscaled angle by YaRN's ramp. Angles in double.
void ReferenceBackend::rope(const Tensor& x, const Tensor& positions, const RopeParams& p) {
  ONEBIT_CHECK(x.n_cols == int64_t(p.n_heads) * p.head_dim);
  ONEBIT_CHECK(positions.n_rows == 1 && positions.n_cols == x.n_rows);
  const RopeAngles angles(p);
  const float* freq_factors = p.freq_factors.valid() ? f32_row(p.freq_factors, 0) : nullptr;
  const int32_t* pos = i32_row(positions, 0);
  const int half = p.n_rot / 2;
  for (int64_t r = 0; r < x.n_rows; ++r) {
    float* row = f32_row(x, r);
    for (int h = 0; h < p.n_heads; ++h) {
      float* head = row + int64_t(h) * p.head_dim;
      for (int i = 0; i < half; ++i) {
        const double theta = angles.theta(pos[r], i, freq_factors);
        const double c = std::cos(theta) * angles.mscale(), s = std::sin(theta) * angles.mscale();
        const int a = p.ordering == RopeOrdering::kNormal ? 2 * i : i;
        const int b = p.ordering == RopeOrdering::kNormal ? 2 * i + 1 : i + half;
        const double x0 = head[a], x1 = head[b];
        head[a] = static_cast<float>(x0 * c - x1 * s);
        head[b] = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

void ReferenceBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const AttentionParams& p) {
  ONEBIT_CHECK(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0);
  ONEBIT_CHECK(q.n_cols == int64_t(p.n_heads) * p.head_dim);
  ONEBIT_CHECK(k.n_cols == int64_t(p.n_kv_heads) * p.head_dim && v.n_cols == k.n_cols);
  ONEBIT_CHECK(k.n_rows == v.n_rows && k.n_rows >= p.first_pos + q.n_rows);
  check_same_shape(q, out);
  const int group = p.n_heads / p.n_kv_heads;
  std::vector<double> scores;  // [n_keys]
  for (int64_t i = 0; i < q.n_rows; ++i) {
    const int64_t n_keys = p.first_pos + i + 1;  // causal: keys 0 .. first_pos + i
    scores.assign(static_cast<size_t>(n_keys), 0.0);
    for (int h = 0; h < p.n_heads; ++h) {
      const float* qh = f32_row(q, i) + int64_t(h) * p.head_dim;
      const int64_t kv_off = int64_t(h / group) * p.head_dim;
      double max_s = -INFINITY;
      for (int64_t j = 0; j < n_keys; ++j) {
        const float* kj = f32_row(k, j) + kv_off;
        double dot = 0.0;
        for (int d = 0; d < p.head_dim; ++d) dot += double(qh[d]) * kj[d];
        scores[j] = dot * p.scale;
        max_s = std::max(max_s, scores[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < n_keys; ++j) sum += scores[j] = std::exp(scores[j] - max_s);
      float* oh = f32_row(out, i) + int64_t(h) * p.head_dim;
      for (int d = 0; d < p.head_dim; ++d) {
        double acc = 0.0;
        for (int64_t j = 0; j < n_keys; ++j) acc += scores[j] * f32_row(v, j)[kv_off + d];
        oh[d] = static_cast<float>(acc / sum);
      }
    }
  }
}

// Each query row alone: its sequence's keys 0 .. positions[i] looked up through the block table,
// then the same scalar softmax-weighted sum as attention().
void ReferenceBackend::paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                                       const Tensor& positions, const Tensor& seq_ids, const Tensor& block_tables,
                                       const Tensor& out, const PagedAttentionParams& p) {
  check_paged_attention(q, k_pool, v_pool, positions, seq_ids, block_tables, out, p);
  const int group = p.n_heads / p.n_kv_heads;
  const int32_t* pos = i32_row(positions, 0);
  const int32_t* seq = i32_row(seq_ids, 0);
  std::vector<int64_t> kv_rows;  // [n_keys] pool row of each key
  std::vector<double> scores;    // [n_keys]
  for (int64_t i = 0; i < q.n_rows; ++i) {
    const int64_t n_keys = int64_t(pos[i]) + 1;  // causal: keys 0 .. positions[i]
    kv_rows.resize(static_cast<size_t>(n_keys));
    for (int64_t j = 0; j < n_keys; ++j) {
      kv_rows[j] = paged_kv_row(block_tables, seq[i], j, p.block_size, k_pool.n_rows);
    }
    scores.assign(static_cast<size_t>(n_keys), 0.0);
    for (int h = 0; h < p.n_heads; ++h) {
      const float* qh = f32_row(q, i) + int64_t(h) * p.head_dim;
      const int64_t kv_off = int64_t(h / group) * p.head_dim;
      double max_s = -INFINITY;
      for (int64_t j = 0; j < n_keys; ++j) {
        double dot = 0.0;
        for (int d = 0; d < p.head_dim; ++d) dot += double(qh[d]) * pool_at(k_pool, kv_rows[j], kv_off + d);
        scores[j] = dot * p.scale;
        max_s = std::max(max_s, scores[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < n_keys; ++j) sum += scores[j] = std::exp(scores[j] - max_s);
      float* oh = f32_row(out, i) + int64_t(h) * p.head_dim;
      for (int d = 0; d < p.head_dim; ++d) {
        double acc = 0.0;
        for (int64_t j = 0; j < n_keys; ++j) acc += scores[j] * pool_at(v_pool, kv_rows[j], kv_off + d);
        oh[d] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace onebit
