// Recurrent-layer kernels of the CPU backend (recurrent.h).
#include "backend/cpu/recurrent.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace onebit::cpu {
namespace {

// torch's softplus (threshold 20) times A: the log decay g of a token.
float log_decay(float A, float a, float dt_bias) {
  const float x = a + dt_bias;
  return A * (x > 20.0f ? x : std::log1p(std::exp(x)));
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void gated_delta_recurrent(const DeltaRun& r, int64_t dk, int64_t dv, float* S) {
  std::vector<float> delta(static_cast<size_t>(dv));
  for (int64_t i = 0; i < r.n; ++i) {
    const int64_t t = r.rows[i];
    const float* q = r.q + t * r.q_stride;
    const float* k = r.k + t * r.k_stride;
    const float* v = r.v + t * r.v_stride;
    const float decay = std::exp(log_decay(r.A, r.a[t * r.a_stride], r.dt_bias));
    const float beta = sigmoid(r.b[t * r.b_stride]);
    // delta = beta (v - (decay S)^T k), S = decay S
    std::fill(delta.begin(), delta.end(), 0.0f);
    for (int64_t p = 0; p < dk; ++p) {
      float* Sp = S + p * dv;
      for (int64_t j = 0; j < dv; ++j) {
        Sp[j] *= decay;
        delta[j] += Sp[j] * k[p];
      }
    }
    for (int64_t j = 0; j < dv; ++j) delta[j] = beta * (v[j] - delta[j]);
    // S += k delta^T; o = S^T q
    float* o = r.out + t * r.out_stride;
    std::fill(o, o + dv, 0.0f);
    for (int64_t p = 0; p < dk; ++p) {
      float* Sp = S + p * dv;
      for (int64_t j = 0; j < dv; ++j) {
        Sp[j] += k[p] * delta[j];
        o[j] += Sp[j] * q[p];
      }
    }
    if (r.ckpt != nullptr && r.ckpt[t] >= 0) std::copy(S, S + dk * dv, r.ckpt_base + r.ckpt[t] * r.ckpt_stride);
  }
}

// Within a chunk of c tokens with start state S0 and cumulative log decays G_i = g_0 + .. + g_i:
//   S_i = e^{G_i} S0 + sum_{j<=i} e^{G_i - G_j} k_j u_j^T, where
//   u_i = beta_i (v_i - e^{G_i} S0^T k_i - sum_{j<i} e^{G_i - G_j} (k_i . k_j) u_j)   (solved in order),
//   o_i = e^{G_i} S0^T q_i + sum_{j<=i} e^{G_i - G_j} (q_i . k_j) u_j,
//   S_c = e^{G_{c-1}} S0 + sum_j e^{G_{c-1} - G_j} k_j u_j^T.
// Every exponent is <= 0 (g <= 0), so nothing overflows.
void gated_delta_chunked(const DeltaRun& r, int64_t dk, int64_t dv, float* S, int64_t chunk) {
  std::vector<float> G(chunk), beta(chunk), KK(chunk * chunk), QK(chunk * chunk);
  std::vector<float> U(chunk * dv), O(chunk * dv);
  for (int64_t c0 = 0; c0 < r.n; c0 += chunk) {
    const int64_t c = std::min(chunk, r.n - c0);
    const auto row = [&](int64_t i) { return r.rows[c0 + i]; };
    float acc = 0.0f;
    for (int64_t i = 0; i < c; ++i) {
      acc += log_decay(r.A, r.a[row(i) * r.a_stride], r.dt_bias);
      G[i] = acc;
      beta[i] = sigmoid(r.b[row(i) * r.b_stride]);
    }
    // Gram products within the chunk: KK[i][j] = k_i . k_j, QK[i][j] = q_i . k_j (j <= i)
    for (int64_t i = 0; i < c; ++i) {
      const float* qi = r.q + row(i) * r.q_stride;
      const float* ki = r.k + row(i) * r.k_stride;
      for (int64_t j = 0; j <= i; ++j) {
        const float* kj = r.k + row(j) * r.k_stride;
        float kk = 0.0f, qk = 0.0f;
        for (int64_t p = 0; p < dk; ++p) {
          kk += ki[p] * kj[p];
          qk += qi[p] * kj[p];
        }
        KK[i * chunk + j] = kk;
        QK[i * chunk + j] = qk;
      }
    }
    // Reads of the start state: U_i = S0^T k_i, O_i = S0^T q_i
    std::fill(U.begin(), U.begin() + c * dv, 0.0f);
    std::fill(O.begin(), O.begin() + c * dv, 0.0f);
    for (int64_t i = 0; i < c; ++i) {
      const float* qi = r.q + row(i) * r.q_stride;
      const float* ki = r.k + row(i) * r.k_stride;
      float* ui = U.data() + i * dv;
      float* oi = O.data() + i * dv;
      for (int64_t p = 0; p < dk; ++p) {
        const float* Sp = S + p * dv;
        for (int64_t j = 0; j < dv; ++j) {
          ui[j] += Sp[j] * ki[p];
          oi[j] += Sp[j] * qi[p];
        }
      }
    }
    // u_i in order (forward substitution), then o_i
    for (int64_t i = 0; i < c; ++i) {
      float* ui = U.data() + i * dv;
      const float* vi = r.v + row(i) * r.v_stride;
      const float e = std::exp(G[i]);
      for (int64_t j = 0; j < dv; ++j) ui[j] = vi[j] - e * ui[j];
      for (int64_t m = 0; m < i; ++m) {
        const float w = std::exp(G[i] - G[m]) * KK[i * chunk + m];
        const float* um = U.data() + m * dv;
        for (int64_t j = 0; j < dv; ++j) ui[j] -= w * um[j];
      }
      for (int64_t j = 0; j < dv; ++j) ui[j] *= beta[i];
      float* oi = O.data() + i * dv;
      float* out = r.out + row(i) * r.out_stride;
      for (int64_t j = 0; j < dv; ++j) out[j] = e * oi[j];
      for (int64_t m = 0; m <= i; ++m) {
        const float w = std::exp(G[i] - G[m]) * QK[i * chunk + m];
        const float* um = U.data() + m * dv;
        for (int64_t j = 0; j < dv; ++j) out[j] += w * um[j];
      }
    }
    // S = e^{G_last} S + sum_m e^{G_last - G_m} k_m u_m^T
    const float last = G[c - 1], e_last = std::exp(last);
    for (int64_t p = 0; p < dk; ++p) {
      float* Sp = S + p * dv;
      for (int64_t j = 0; j < dv; ++j) Sp[j] *= e_last;
      for (int64_t m = 0; m < c; ++m) {
        const float w = std::exp(last - G[m]) * r.k[row(m) * r.k_stride + p];
        const float* um = U.data() + m * dv;
        for (int64_t j = 0; j < dv; ++j) Sp[j] += w * um[j];
      }
    }
  }
}

void ssm_conv_run(const float* x, int64_t x_stride, const int32_t* rows, int64_t n, int64_t C, int64_t K,
                  const float* w, int64_t w_stride, float* window, bool silu, float* out, int64_t out_stride,
                  int64_t c0, int64_t c1, const int32_t* ckpt, float* states, int64_t state_stride) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xt = x + rows[i] * x_stride;
    float* ot = out + rows[i] * out_stride;
    for (int64_t c = c0; c < c1; ++c) {
      const float* wc = w + c * w_stride;
      float acc = wc[K - 1] * xt[c];
      for (int64_t j = 0; j < K - 1; ++j) acc += wc[j] * window[j * C + c];
      ot[c] = silu ? acc / (1.0f + std::exp(-acc)) : acc;
      for (int64_t j = 0; j + 1 < K - 1; ++j) window[j * C + c] = window[(j + 1) * C + c];
      window[(K - 2) * C + c] = xt[c];
    }
    if (ckpt != nullptr && ckpt[rows[i]] >= 0) {
      float* dst = states + ckpt[rows[i]] * state_stride;
      for (int64_t j = 0; j < K - 1; ++j) std::copy(window + j * C + c0, window + j * C + c1, dst + j * C + c0);
    }
  }
}

}  // namespace onebit::cpu
