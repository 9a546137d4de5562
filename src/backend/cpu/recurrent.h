// The CPU backend's recurrent-layer kernels (Backend::ssm_conv, Backend::gated_delta_rule) on one
// sequence's run of tokens: plain float loops the compiler vectorizes, called per (sequence,
// channel range) or (sequence, head) from the thread pool. Scalar code, ISA-independent.
#pragma once

#include <cstdint>

namespace onebit::cpu {

// The rows of one sequence for a delta-rule head: row i's q, k (dk floats), v (dv floats), gate
// inputs a and b, at the given strides (floats between rows).
struct DeltaRun {
  const float* q;
  const float* k;
  const float* v;
  const float* a;
  const float* b;
  int64_t q_stride, k_stride, v_stride, a_stride, b_stride;
  const int32_t* rows;  // [n] the run's row indices in the step, in order
  int64_t n;
  float A, dt_bias;     // the head's A and dt_bias
  float* out;           // row r's output at out + rows[i] * out_stride
  int64_t out_stride;
  // Checkpoints (recurrent form only): where ckpt[r] >= 0 the state after row r is copied to
  // ckpt_base + ckpt[r] * ckpt_stride. ckpt nullptr: none.
  const int32_t* ckpt = nullptr;
  float* ckpt_base = nullptr;
  int64_t ckpt_stride = 0;
};

// Token by token: S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q. S [dk][dv] in place.
void gated_delta_recurrent(const DeltaRun& r, int64_t dk, int64_t dv, float* S);

// The same result in chunks of `chunk` tokens: per chunk, the intra-chunk system solved by forward
// substitution against the chunk's start state, then the state advanced once (the chunked form
// of the gated delta rule, as in Yang et al.'s DeltaNet / Gated DeltaNet). S [dk][dv] in place.
void gated_delta_chunked(const DeltaRun& r, int64_t dk, int64_t dv, float* S, int64_t chunk);

// One channel range [c0, c1) of a sequence's run of the short causal convolution over C channels
// of width K: x and out rows `rows` (x_stride, out_stride floats apart), window [K - 1][C] (oldest
// first) updated in place, w row c at w + c * w_stride (K taps, oldest first).
void ssm_conv_run(const float* x, int64_t x_stride, const int32_t* rows, int64_t n, int64_t C, int64_t K,
                  const float* w, int64_t w_stride, float* window, bool silu, float* out, int64_t out_stride,
                  int64_t c0, int64_t c1, const int32_t* ckpt, float* states, int64_t state_stride);

}  // namespace onebit::cpu
