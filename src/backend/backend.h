// The op interface every compute backend implements (reference now; cpu/ and cuda/ next): tensors
// in backend-owned buffers, ops enqueued in order, an explicit synchronize. Knows nothing of models.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "base/status.h"
#include "gguf/ggml_type.h"

namespace onebit {

// Storage owned by a backend (host memory, device memory, or an alias of a mapped file). Opaque
// outside the backend that made it; tensors point into it.
class BackendBuffer {
 public:
  virtual ~BackendBuffer() = default;
};

// A 2-D row-major view into a backend buffer: `n_rows` rows of `n_cols` elements of `type`, rows
// `row_stride_bytes` apart (a row of a block type holds n_cols / block_elems blocks). Cheap to
// copy; does not own the buffer, which must outlive it. 1-D tensors are one row.
struct Tensor {
  BackendBuffer* buffer = nullptr;
  size_t offset_bytes = 0;
  GgmlType type = GgmlType::kF32;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  size_t row_stride_bytes = 0;
  // A weight whose columns were rotated per block of this many by the orthonormal Walsh-Hadamard
  // transform (backend/hadamard.h; 0: none): matmul and moe_matmul rotate their input the same way
  // first, so the product is the unrotated weight's. Only where Backend::rotates_inputs().
  int32_t in_rotation = 0;

  bool valid() const { return buffer != nullptr; }
  // Rows [first, first + n) of this tensor; CHECKs the range.
  Tensor rows(int64_t first, int64_t n) const;
  // The same contiguous bytes seen as [n_rows, n_cols] (same element count); CHECKs contiguity.
  Tensor reshaped(int64_t n_rows, int64_t n_cols) const;
  // Bytes of one row without padding (n_cols elements of `type`).
  size_t row_bytes() const;
};

// RoPE element orderings. kNormal rotates adjacent pairs (x[2i], x[2i+1]) as GGUF llama files
// (whose q/k are permuted by the converter) and llama2.c do; kNeox rotates (x[i], x[i + n_rot/2])
// as HF `rotate_half` and GGUF qwen2/qwen3 do.
enum class RopeOrdering { kNormal, kNeox };

// Frequency scaling of RoPE, as the GGUF rope.scaling.* keys give it (llama.cpp's rope_yarn).
enum class RopeScaling { kNone, kLinear, kYarn };

struct RopeParams {
  int32_t n_heads = 0;       // heads in the tensor's row
  int32_t head_dim = 0;      // elements per head
  int32_t n_rot = 0;         // leading dims of each head that rotate (<= head_dim, even)
  RopeOrdering ordering = RopeOrdering::kNormal;
  float freq_base = 10000.0f;
  RopeScaling scaling = RopeScaling::kNone;
  float scaling_factor = 1.0f;        // positions are divided by this (linear, YaRN)
  int32_t original_context = 0;       // YaRN: rope.scaling.original_context_length
  float yarn_beta_fast = 32.0f;       // YaRN ramp, llama.cpp defaults
  float yarn_beta_slow = 1.0f;
  float yarn_ext_factor = 1.0f;       // YaRN: 1 = full ramp
  float yarn_attn_factor = 1.0f;      // extra magnitude scale (on top of YaRN's mscale)
  Tensor freq_factors;                // optional F32 [1, n_rot / 2]: angle i is divided by it
                                      // (Llama 3.1's rope_freqs.weight)
};

// Causal attention of a block of query rows of one sequence against that sequence's K/V rows.
struct AttentionParams {
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;    // divides n_heads (GQA: query head h uses kv head h / (n_heads/n_kv_heads))
  int32_t head_dim = 0;
  float scale = 1.0f;        // usually 1/sqrt(head_dim)
  int32_t first_pos = 0;     // position of query row 0; query row i sees keys 0 .. first_pos + i
};

// How the gated delta rule's value heads read the key heads (Backend::gated_delta_rule).
struct DeltaParams {
  int32_t n_k_heads = 0;     // divides the value heads
  bool tiled = false;        // value head h reads key head h % n_k_heads (else h / (n_heads / n_k_heads))
};

// Attention over a paged K/V pool. The keys and values of many sequences live in blocks of
// `block_size` consecutive rows of one pool tensor per layer ([n_blocks * block_size, n_kv_heads *
// head_dim], F16 or F32). A sequence's key j is pool row block_table[j / block_size] * block_size
// + j % block_size. One call serves a batch of query rows of several sequences (prefill chunks and
// decode tokens mixed); each query row is computed alone, in a fixed order over its keys, so its
// result does not depend on the rest of the batch.
struct PagedAttentionParams {
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;    // divides n_heads (GQA)
  int32_t head_dim = 0;
  float scale = 1.0f;
  int32_t block_size = 0;    // pool rows per block
};

// Up to three products of one input (Backend::matmuls).
struct Products {
  static constexpr int kMax = 3;
  int32_t n = 0;
  Tensor w[kMax], out[kMax];
  void add(const Tensor& weight, const Tensor& o) {
    w[n] = weight;
    out[n++] = o;
  }
};

// A compute backend. Ops are enqueued in call order and may run asynchronously: host memory given
// to write/read must stay valid until synchronize() returns. Outputs never alias inputs unless an
// op says so. Shapes are checked with CHECKs: a wrong shape is a bug in the caller (the model
// validates outside input when it loads). Not thread-safe: one thread drives one backend.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Whether matmul and moe_matmul honour Tensor::in_rotation (Hadamard-rotated weights).
  virtual bool rotates_inputs() const { return false; }

  // --- memory ---
  // A weight tensor [n_rows, n_cols] of `type` from host bytes that stay valid for the backend's
  // life (a mapped file): a host backend aliases them (no copy), a device backend uploads them.
  virtual Result<Tensor> weight_from_host(GgmlType type, int64_t n_rows, int64_t n_cols,
                                          std::span<const uint8_t> bytes) = 0;
  // A new zeroed tensor [n_rows, n_cols] of F32, F16 or I32 owned by the backend until it is destroyed.
  // Errors when the memory cannot be allocated.
  virtual Result<Tensor> alloc(GgmlType type, int64_t n_rows, int64_t n_cols) = 0;
  // Returns a tensor's buffer (from alloc or weight_from_host) to the backend; every view of it
  // becomes invalid. Waits for enqueued ops that use it.
  virtual void free(const Tensor& t) = 0;
  // Enqueues a copy of host bytes into `dst` (all of it; src holds dst's contiguous bytes).
  virtual void write(const Tensor& dst, const void* src) = 0;
  // Enqueues a copy of `src` (all of it) to host memory; valid after synchronize().
  virtual void read(const Tensor& src, void* dst) = 0;
  // Waits for every enqueued op.
  virtual void synchronize() = 0;

  // --- ops (F32 activations unless stated) ---
  // out[i, :] = dequantized table[ids[i], :]. table any type [n_vocab, d]; ids I32 [1, n]; out [n, d].
  // CHECKs ids in range: callers validate token ids first.
  virtual void get_rows(const Tensor& table, const Tensor& ids, const Tensor& out) = 0;
  // out[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * weight[:]. weight F32 [1, d]; may alias x.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) = 0;
  // out[n, m] = x[n, k] * w[m, k]^T, w of any dequantizable type. Matrix-vector when n == 1.
  virtual void matmul(const Tensor& w, const Tensor& x, const Tensor& out) = 0;
  // out = a + b; b is [n, d] like a, or one row [1, d] broadcast over a's rows. out may alias a.
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = silu(gate) * up, all [n, f]. out may alias gate.
  virtual void swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  // Row-wise softmax of x [n, d] into out (may alias x).
  virtual void softmax(const Tensor& x, const Tensor& out) = 0;
  // Copies src into dst (same shape and type; may overlap). Any type: also copies K/V pool blocks.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  // dst[slots[i], :] = src[i, :] rounded to dst's type (F32 or F16, round to nearest even).
  // src F32 [n, d]; slots I32 [1, n], distinct, each < dst.n_rows; dst [rows, d].
  virtual void store_kv(const Tensor& src, const Tensor& slots, const Tensor& dst) = 0;
  // For each query row i of q [n, n_heads * head_dim]: s = seq_ids[i], keys j = 0 .. positions[i]
  // (causal; positions[i] + 1 keys) read through row s of block_tables; out[i, head h] =
  // softmax(q_h k^T * scale) v with kv head h / (n_heads / n_kv_heads). positions, seq_ids I32
  // [1, n]; block_tables I32 [n_seqs, max_blocks] (entries past a sequence's blocks are unused);
  // k_pool, v_pool F16 or F32 (same type) [n_pool_rows, n_kv_heads * head_dim]; out F32 like q.
  virtual void paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                               const Tensor& positions, const Tensor& seq_ids, const Tensor& block_tables,
                               const Tensor& out, const PagedAttentionParams& p) = 0;
  // Rotates x [n, n_heads * head_dim] in place; positions I32 [1, n] gives each row's position.
  virtual void rope(const Tensor& x, const Tensor& positions, const RopeParams& p) = 0;
  // out[n, n_heads * head_dim] = softmax(q k^T * scale, causal) v for one sequence. q [n, n_heads *
  // head_dim]; k, v [n_kv, n_kv_heads * head_dim] with n_kv >= first_pos + n (the cache rows).
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const AttentionParams& p) = 0;

  // --- mixture of experts (a token's FFN is the weighted sum of top_k of n_experts FFNs) ---
  // Router. For each row i of logits F32 [n, n_experts]: p = softmax(logits[i]); ids[i, :] = the
  // top_k = ids.n_cols experts of largest p, largest first (the lower index first on equal p);
  // weights[i, :] = their p, divided by their sum when `normalize`. ids I32 [n, top_k]; weights
  // F32 [n, top_k]; top_k <= n_experts.
  virtual void moe_route(const Tensor& logits, bool normalize, const Tensor& ids, const Tensor& weights) = 0;
  // Expert-indexed product. w stacks n_experts matrices of m = w.n_rows / n_experts rows each
  // ([n_experts * m, k], any matmul type; expert e is w.rows(e * m, m)); ids I32 [n, top_k]; x F32
  // [n, k] (row i serves all top_k pairs of token i) or [n * top_k, k] (one row per pair); out F32
  // [n * top_k, m] with out[i * top_k + j, :] = x_row * W_{ids[i, j]}^T. CHECKs ids < n_experts.
  // Each expert's weights are read once per call however many pairs route to it.
  virtual void moe_matmul(const Tensor& w, int32_t n_experts, const Tensor& x, const Tensor& ids,
                          const Tensor& out) = 0;
  // out[i, :] = sum over j = 0 .. top_k - 1 in order of weights[i, j] * y[i * top_k + j, :].
  // weights F32 [n, top_k]; y F32 [n * top_k, d]; out F32 [n, d] (does not alias y).
  virtual void moe_combine(const Tensor& y, const Tensor& weights, const Tensor& out) = 0;
  // out = x * sigmoid(g) elementwise; g is [n, d] like x, or [n, 1] (one gate per row). out may
  // alias x.
  virtual void sigmoid_mul(const Tensor& x, const Tensor& g, const Tensor& out) = 0;
  // ids[0, i] = the index of row i's largest value, the lowest among equal ones, a NaN never
  // beating a number (a row whose first value is NaN gives 0: the scan of onebit::argmax), or -1
  // when that value is -inf (no value can be taken). x F32 [n, d]; ids I32 [1, n]. A greedy row of
  // logits thus comes back from a device as one id.
  virtual void argmax_rows(const Tensor& x, const Tensor& ids) = 0;

  // --- recurrent layers (gated delta net); each sequence's state is one row of a state tensor ---
  // The rows of a step belong to sequences (seq_ids I32 [1, n], indices into state_rows I32
  // [1, n_seqs], which names each sequence's state row); a sequence's rows are in order and
  // continue from its state. Rows of different sequences may interleave.
  // Short causal convolution: per channel c, out[t, c] = act(sum over j < K of w[c, j] * xs[t + j,
  // c]) where xs is the sequence's previous K - 1 inputs (its state) followed by its rows; act is
  // SiLU when `silu`. x F32 [n, C]; w F32 [C, K]; states F32 [n_rows, (K - 1) * C] (oldest input
  // first), updated to each sequence's last K - 1 inputs; out F32 [n, C] (does not alias x).
  // Checkpoints (both recurrent ops): ckpt_rows I32 [1, n] or !valid(); where ckpt_rows[t] >= 0 the
  // sequence's state after row t is also written to that state row (speculative verification keeps
  // the state after each drafted token to roll back to). Checkpoint rows are none of the step's
  // state rows and distinct.
  virtual void ssm_conv(const Tensor& x, const Tensor& w, const Tensor& seq_ids, const Tensor& state_rows,
                        const Tensor& ckpt_rows, const Tensor& states, bool silu, const Tensor& out) = 0;
  // Gated delta rule (Qwen3-Next's linear attention), per value head h of n_heads with key dim dk
  // and value dim dv, reading key head kh(h) of p.n_k_heads (grouped: h / (n_heads / n_k_heads), as
  // HF's repeat_interleave and Qwen3-Next GGUFs; tiled: h % n_k_heads, as Qwen3.5 GGUFs order their
  // value heads): g = A[h] * softplus(a[t, h] + dt_bias[h]), beta = sigmoid(b[t, h]); then S =
  // exp(g) S; S += k_t (beta (v_t - S^T k_t))^T; o_t = S^T q_t, with S the sequence's state [dk, dv]
  // of head h. q, k F32 [n, n_k_heads * dk] (as given: normalize and scale them first); v F32 [n,
  // n_heads * dv]; a, b F32 [n, n_heads]; A, dt_bias F32 [1, n_heads]; states F32 [n_rows, n_heads *
  // dk * dv] (head-major, then dk rows of dv), updated; out F32 [n, n_heads * dv]. The token-by-token
  // recurrence defines the result; a backend may compute long runs of a sequence in chunks (the
  // same math, other rounding).
  virtual void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                                const Tensor& b, const Tensor& A, const Tensor& dt_bias, const Tensor& seq_ids,
                                const Tensor& state_rows, const Tensor& ckpt_rows, const Tensor& states,
                                const Tensor& out, const DeltaParams& p) = 0;

  // --- fused ops: each is the ops it names, in turn (the default here); a backend may run them
  // as one kernel (a decode step on a GPU is bound by its number of kernels) ---
  // sum = a + b, then out = rms_norm(sum, weight, eps): the residual add and the next norm. a, b,
  // sum [n, d] (sum may alias a); out [n, d] aliases none of them.
  virtual void add_rms_norm(const Tensor& a, const Tensor& b, const Tensor& weight, float eps, const Tensor& sum,
                            const Tensor& out);
  // A step's attention inputs, finished and stored: each head of q [n, rope.n_heads * head_dim]
  // (or !valid(): none) and k [n, n_kv_heads * head_dim] RMS-normed with q_norm / k_norm (F32 [1,
  // head_dim], eps; a norm that is !valid() is skipped), then rotated at positions (rope: q's
  // n_heads; k gets n_kv_heads), in place; then k and v (like k) stored at slots into k_pool and
  // v_pool (store_kv).
  virtual void qk_rope_store(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                             const Tensor& k_norm, float eps, const Tensor& positions, const RopeParams& rope,
                             int32_t n_kv_heads, const Tensor& slots, const Tensor& k_pool, const Tensor& v_pool);
  // Products of one input: p.out[i] = x * p.w[i]^T for i < p.n (q, k and v; gate and up), as
  // matmul each.
  virtual void matmuls(const Tensor& x, const Products& p);
};

// A backend's own scratch: grows `buf` (F32 [1, n] of `be`, never shrunk, at least 64 Ki floats) to
// hold `capacity` floats, and returns a [rows, cols] F32 view of its start (rows * cols <=
// capacity). Growing frees the old buffer: views taken before are gone. CHECKs that memory lasts.
Tensor scratch_rows(Backend& be, Tensor& buf, int64_t capacity, int64_t rows, int64_t cols);

// CHECKs of the shapes and types the MoE ops and sigmoid_mul take (every backend calls them; data,
// such as expert ids in range, is checked where it is read).
void check_moe_route(const Tensor& logits, const Tensor& ids, const Tensor& weights);
void check_moe_matmul(const Tensor& w, int32_t n_experts, const Tensor& x, const Tensor& ids, const Tensor& out);
void check_moe_combine(const Tensor& y, const Tensor& weights, const Tensor& out);
void check_sigmoid_mul(const Tensor& x, const Tensor& g, const Tensor& out);
void check_argmax_rows(const Tensor& x, const Tensor& ids);
// CHECKs of ssm_conv's and gated_delta_rule's shapes and types; returns the kernel width K, or the
// (n_heads, dk, dv) of the delta rule.
int64_t check_ssm_conv(const Tensor& x, const Tensor& w, const Tensor& seq_ids, const Tensor& state_rows,
                       const Tensor& ckpt_rows, const Tensor& states, const Tensor& out);
struct DeltaDims {
  int64_t n_heads = 0, n_k_heads = 0, dk = 0, dv = 0;
  bool tiled = false;
  int64_t k_head(int64_t h) const { return tiled ? h % n_k_heads : h / (n_heads / n_k_heads); }
};
DeltaDims check_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                                 const Tensor& A, const Tensor& dt_bias, const Tensor& seq_ids,
                                 const Tensor& state_rows, const Tensor& ckpt_rows, const Tensor& states,
                                 const Tensor& out, const DeltaParams& p);

// The scalar reference backend (backend/reference/): host memory, clear loops, the oracle.
std::unique_ptr<Backend> make_reference_backend();

}  // namespace onebit
