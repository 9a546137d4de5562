// The layer pieces every family's forward is made of, over the Backend ops: the attention block
// (q/k/v with optional biases and per-head norms, RoPE, K/V stored in a paged pool, paged
// attention, output projection), the SwiGLU FFN and the mixture-of-experts FFN; and the binders
// that read their tensors from a GGUF by llama.cpp's names. Shared by Model (model/forward.cpp)
// and the drafters (qwen3_block.h). References: HF modeling_llama.py / modeling_qwen3.py /
// modeling_qwen3_moe.py / modeling_qwen2_moe.py, llama.cpp src/llama-graph.cpp build_moe_ffn.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "base/status.h"
#include "gguf/gguf_reader.h"

namespace onebit {

// Geometry of a block (hidden, heads, head_dim, dense FFN width, eps, RoPE).
struct BlockDims {
  int32_t hidden = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn = 0;
  float eps = 1e-6f;
  RopeParams rope;  // n_heads/head_dim filled per tensor by the block
  bool gated_q = false;  // Qwen3-Next: wq's rows are [q | gate] per head; the output is gated
};

// Per-row inputs of a block: all I32 [1, n] except tables [n_seqs, max_blocks].
struct BlockRows {
  Tensor rope_pos;   // RoPE position of each row
  Tensor attn_pos;   // causal limit of each row: it attends to its sequence's keys 0..attn_pos
  Tensor slots;      // pool row of each row's K/V
  Tensor seq_ids;    // row of tables
  Tensor tables;
};

// Hands a named intermediate to the model's debug hook (nullptr or empty: none).
using Observe = std::function<void(std::string_view name, const Tensor& t)>;

// Attention weights; optional tensors are !valid() when the family has none.
struct AttentionWeights {
  Tensor wq, wk, wv;                // [n_heads*head_dim | n_kv_heads*head_dim, hidden]
  Tensor bq, bk, bv;                // qwen2: [1, n_heads*head_dim | n_kv_heads*head_dim]
  Tensor q_norm, k_norm;            // qwen3: [1, head_dim]
  Tensor wo;                        // [hidden, n_heads*head_dim]
};

// A dense SwiGLU FFN: down(silu(gate x) * up x).
struct FfnWeights {
  Tensor w_gate, w_up;              // [ffn, hidden]
  Tensor w_down;                    // [hidden, ffn]
};

// A mixture of experts: a router over n_experts stacked SwiGLU experts, top_k per token, and
// (qwen2moe) a shared expert scaled by sigmoid(shared_gate_inp . x).
struct MoeWeights {
  Tensor router;                    // ffn_gate_inp [n_experts, hidden]
  Tensor gate, up;                  // ffn_{gate,up}_exps [n_experts * expert_ffn, hidden]
  Tensor down;                      // ffn_down_exps [n_experts * hidden, expert_ffn]
  FfnWeights shared;                // ffn_{gate,up,down}_shexp; !valid() without a shared expert
  Tensor shared_gate_inp;           // ffn_gate_inp_shexp [1, hidden]; optional
};

struct MoeDims {
  int32_t hidden = 0, n_experts = 0, top_k = 0, expert_ffn = 0, shared_ffn = 0;
  bool normalize = false;           // renormalize the top-k weights to sum 1
};

// A gated delta-net layer (Qwen3-Next / Qwen3.5 linear attention, llama.cpp's tensor names).
struct DeltaNetWeights {
  Tensor qkv;                       // attn_qkv [2 * k_heads * dk + v_heads * dv, hidden]
  Tensor gate;                      // attn_gate [v_heads * dv, hidden] (z)
  Tensor beta, alpha;               // ssm_beta, ssm_alpha [v_heads, hidden] (b, a)
  Tensor conv;                      // ssm_conv1d F32 [channels, conv_kernel]
  Tensor dt_bias;                   // ssm_dt.bias F32 [1, v_heads]
  Tensor A;                         // ssm_a F32 [1, v_heads] (-exp(A_log))
  Tensor norm;                      // ssm_norm F32 [1, dv]
  Tensor out;                       // ssm_out [hidden, v_heads * dv]
};

struct DeltaNetDims {
  int32_t hidden = 0, k_heads = 0, v_heads = 0, dk = 0, dv = 0, conv_kernel = 0;
  bool tiled = false;               // value heads in tiled order (Qwen3.5 GGUFs)
  float eps = 1e-6f;                // the gated norm's
  int64_t channels() const { return 2 * int64_t(k_heads) * dk + int64_t(v_heads) * dv; }
};

// Activations of a delta-net layer, sized for max_rows rows, and the constant l2-norm weights.
struct DeltaNetScratch {
  Tensor qkv, conv;                 // [max_rows, channels] projections, after the convolution
  Tensor q, k;                      // [max_rows, k_heads * dk]
  Tensor z, o;                      // [max_rows, v_heads * dv]
  Tensor a, b;                      // [max_rows, v_heads]
  Tensor q_scale, k_scale;          // [1, dk]: 1 / dk and 1 / sqrt(dk) (l2 norm through rms_norm)
  Status alloc(Backend& be, const DeltaNetDims& d, int64_t max_rows);
  void free_all(Backend& be);
};

// A step's per-sequence inputs of the recurrent layers: seq_ids I32 [1, n], state_rows I32 [1,
// n_seqs]; and one layer's state tensors.
struct RecurrentRows {
  Tensor seq_ids, state_rows;
  Tensor ckpt_rows;  // I32 [1, n] checkpoint rows (Backend::ssm_conv), or !valid(): none
};

// Activations of the attention block, sized for max_rows rows.
struct AttentionScratch {
  Tensor q, attn;                   // [max_rows, n_heads * head_dim]
  Tensor qg;                        // [max_rows, 2 * n_heads * head_dim] when gated_q
  Tensor k, v;                      // [max_rows, n_kv_heads * head_dim]
  Status alloc(Backend& be, const BlockDims& d, int64_t max_rows);
  void free_all(Backend& be);
};

// Activations of the MoE FFN, sized for max_rows tokens.
struct MoeScratch {
  Tensor logits;                    // [max_rows, n_experts]
  Tensor ids;                       // I32 [max_rows, top_k]
  Tensor weights;                   // [max_rows, top_k]
  Tensor gate, up;                  // [max_rows * top_k, expert_ffn]
  Tensor y;                         // [max_rows * top_k, hidden]
  Tensor sh_gate, sh_up;            // [max_rows, shared_ffn] (shared expert)
  Tensor sh_out;                    // [max_rows, hidden]
  Tensor sh_scale;                  // [max_rows, 1]
  Status alloc(Backend& be, const MoeDims& d, int64_t max_rows);
  void free_all(Backend& be);
};

// Binds tensor `name` of `f` expected as [n_rows, n_cols] (GGUF ne = {n_cols, n_rows}) on
// `backend`; 1-D tensors must be F32. Absent `optional` tensors give an invalid Tensor. With
// n_stack > 0 the tensor is 3-D (ne = {n_cols, n_rows, n_stack}, stacked experts) and is bound as
// [n_stack * n_rows, n_cols]. Errors start with "tensors: " and name the tensor, shape or type.
Result<Tensor> bind_tensor(const GgufFile& f, Backend& backend, const std::string& name, int64_t n_rows,
                           int64_t n_cols, bool optional = false, int64_t n_stack = 0);

// blk.<layer>.attn_{q,k,v,output}.weight (attn_q with twice the rows when d.gated_q), with
// attn_{q,k,v}.bias when `bias`, attn_{q,k}_norm when `qk_norm`.
Result<AttentionWeights> bind_attention(const GgufFile& f, Backend& be, const BlockDims& d, int32_t layer, bool bias,
                                        bool qk_norm);
// blk.<layer>.{attn_qkv, attn_gate, ssm_beta, ssm_alpha, ssm_conv1d, ssm_out, ssm_norm}.weight,
// ssm_dt.bias and ssm_a. A Qwen3-Next file with llama.cpp's fused ssm_ba is refused (re-convert).
Result<DeltaNetWeights> bind_delta_net(const GgufFile& f, Backend& be, const DeltaNetDims& d, int32_t layer);
// blk.<layer>.ffn_{gate,up,down}<suffix>.weight of width ffn.
Result<FfnWeights> bind_ffn(const GgufFile& f, Backend& be, int32_t layer, int64_t hidden, int64_t ffn,
                            const std::string& suffix = "");
// blk.<layer>.ffn_gate_inp, ffn_{gate,up,down}_exps and, with d.shared_ffn > 0, the shared
// expert ffn_{gate,up,down}_shexp and its optional ffn_gate_inp_shexp.
Result<MoeWeights> bind_moe(const GgufFile& f, Backend& be, const MoeDims& d, int32_t layer);

// The rows' K/V from x [n, hidden] (as given: no norm): k = rope(k_norm(x wk^T + bk)), v = x wv^T
// + bv, stored at the rows' slots of k_pool/v_pool. Uses s.k and s.v.
void store_kv_rows(Backend& be, const BlockDims& d, const AttentionWeights& w, const Tensor& x, const BlockRows& r,
                   const Tensor& k_pool, const Tensor& v_pool, const AttentionScratch& s, const Observe* obs = nullptr);

// out [n, hidden] = attention of h [n, hidden] (already normed): q = rope(q_norm(h wq^T + bq));
// the rows' own K/V stored first (store_kv_rows), so each row sees itself and the keys before it
// in its table up to attn_pos; then the output projection. out must not alias h.
void attention_block(Backend& be, const BlockDims& d, const AttentionWeights& w, const Tensor& h, const BlockRows& r,
                     const Tensor& k_pool, const Tensor& v_pool, int32_t block_size, const AttentionScratch& s,
                     const Tensor& out, const Observe* obs = nullptr);

// out [n, hidden] = the gated delta net of h [n, hidden] (normed): qkv = conv(h wqkv^T) with SiLU
// (the sequence's last inputs in conv_states), q and k l2-normalized (q also by dk^-1/2), the delta
// rule over ssm_states, o = rms_norm(o) * norm * silu(h wz^T), out = o wout^T. out must not alias h.
void delta_net_block(Backend& be, const DeltaNetDims& d, const DeltaNetWeights& w, const Tensor& h,
                     const RecurrentRows& r, const Tensor& conv_states, const Tensor& ssm_states,
                     const DeltaNetScratch& s, const Tensor& out);

// out [n, hidden] = down(silu(gate h) * up h); gate, up [n, ffn] scratch. out must not alias h.
void swiglu_ffn(Backend& be, const FfnWeights& w, const Tensor& h, const Tensor& gate, const Tensor& up,
                const Tensor& out);

// out [n, hidden] = sum over the top_k experts of softmax(router h) (renormalized when d says)
// times expert(h), plus the shared expert (times sigmoid(shared_gate_inp h) when present).
void moe_ffn(Backend& be, const MoeDims& d, const MoeWeights& w, const Tensor& h, const MoeScratch& s,
             const Tensor& out);

}  // namespace onebit
