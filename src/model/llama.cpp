// The llama-family forward (llama, qwen2: q/k/v biases, qwen3: per-head q/k RMSNorm): one flat
// sequence of named steps over the Backend ops. References: HF modeling_llama.py / modeling_qwen2.py
// / modeling_qwen3.py (LlamaDecoderLayer.forward, Qwen3Attention.forward), llama.cpp src/models/.
#include <cmath>

#include "model/model_internal.h"

namespace onebit {

void Model::forward_llama(const KvPool& pool, int64_t n, int64_t n_seqs, int64_t max_blocks, int64_t n_out) {
  Backend& be = backend_;
  Scratch& s = *scratch_;
  const ModelConfig& c = config_;
  const float eps = c.rms_norm_eps;
  const Tensor ids = s.ids.rows(0, n).reshaped(1, n);              // I32 [1, n]
  const Tensor pos = s.positions.rows(0, n).reshaped(1, n);        // I32 [1, n]
  const Tensor slots = s.slots.rows(0, n).reshaped(1, n);          // I32 [1, n] K/V pool rows
  const Tensor seq_ids = s.seq_ids.rows(0, n).reshaped(1, n);      // I32 [1, n]
  const Tensor tables = s.block_tables.rows(0, n_seqs * max_blocks).reshaped(n_seqs, max_blocks);

  const Tensor x = s.x.rows(0, n);        // [n, hidden] residual stream
  const Tensor h = s.h.rows(0, n);        // [n, hidden]
  const Tensor q = s.q.rows(0, n);        // [n, n_heads * head_dim]
  const Tensor k = s.k.rows(0, n);        // [n, n_kv_heads * head_dim]
  const Tensor v = s.v.rows(0, n);        // [n, n_kv_heads * head_dim]
  const Tensor attn = s.attn.rows(0, n);  // [n, n_heads * head_dim]
  const Tensor gate = s.gate.rows(0, n);  // [n, intermediate]
  const Tensor up = s.up.rows(0, n);      // [n, intermediate]
  RopeParams rope_q = c.rope, rope_k = c.rope;
  rope_q.n_heads = c.n_heads;
  rope_k.n_heads = c.n_kv_heads;
  rope_q.head_dim = rope_k.head_dim = c.head_dim;
  PagedAttentionParams ap;
  ap.n_heads = c.n_heads;
  ap.n_kv_heads = c.n_kv_heads;
  ap.head_dim = c.head_dim;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));  // HF: head_dim ** -0.5
  ap.block_size = pool.block_size;

  // inp_embd: x = token_embd[ids]
  be.get_rows(w_.token_embd, ids, x);
  observe("inp_embd", -1, x);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    // attn_norm: h = rms_norm(x) * attn_norm
    be.rms_norm(x, L.attn_norm, eps, h);
    observe("attn_norm", l, h);
    // q/k/v projections (+ qwen2 biases)
    be.matmul(L.wq, h, q);
    be.matmul(L.wk, h, k);
    be.matmul(L.wv, h, v);
    if (L.bq.valid()) {
      be.add(q, L.bq, q);
      be.add(k, L.bk, k);
      be.add(v, L.bv, v);
    }
    // qwen3: RMSNorm over each head's head_dim before RoPE (Qwen3Attention q_norm/k_norm)
    if (L.q_norm.valid()) {
      const Tensor q_heads = q.reshaped(n * c.n_heads, c.head_dim);     // [n * n_heads, head_dim]
      const Tensor k_heads = k.reshaped(n * c.n_kv_heads, c.head_dim);  // [n * n_kv_heads, head_dim]
      be.rms_norm(q_heads, L.q_norm, eps, q_heads);
      be.rms_norm(k_heads, L.k_norm, eps, k_heads);
    }
    // rope on q and k at each token's position
    be.rope(q, pos, rope_q);
    be.rope(k, pos, rope_k);
    observe("Qcur", l, q);
    observe("Kcur", l, k);
    observe("Vcur", l, v);
    // kv store into the pool rows of the step's tokens, then causal attention of every token
    // over its sequence's blocks
    be.store_kv(k, slots, pool.k[l]);
    be.store_kv(v, slots, pool.v[l]);
    be.paged_attention(q, pool.k[l], pool.v[l], pos, seq_ids, tables, attn, ap);
    observe("kq_out", l, attn);
    // attn_out: h = attn * wo^T; x += h
    be.matmul(L.wo, attn, h);
    observe("attn_out", l, h);
    be.add(x, h, x);
    observe("ffn_inp", l, x);
    // ffn_norm, then SwiGLU: h = down(silu(gate(h)) * up(h)); x += h
    be.rms_norm(x, L.ffn_norm, eps, h);
    observe("ffn_norm", l, h);
    be.matmul(L.w_gate, h, gate);
    be.matmul(L.w_up, h, up);
    be.swiglu(gate, up, gate);
    be.matmul(L.w_down, gate, h);
    observe("ffn_out", l, h);
    be.add(x, h, x);
    observe("l_out", l, x);
    // capture: the layer's output into its column slice of the captured rows (drafters)
    for (size_t i = 0; i < limits_.capture_layers.size(); ++i) {
      if (limits_.capture_layers[i] != l) continue;
      Tensor slice = s.captured.rows(0, n);  // [n, hidden] view of columns i * hidden ..
      slice.offset_bytes += i * size_t(c.hidden_size) * sizeof(float);
      slice.n_cols = c.hidden_size;
      be.copy(x, slice);
    }
  }
  if (n_out == 0) return;  // a step of prompt chunks only: K/V stored, nothing to sample
  // Rows that get logits (the step's out_rows): out_rows = x[out_ids]
  const Tensor out_ids = s.out_ids.rows(0, n_out).reshaped(1, n_out);  // I32 [1, n_out]
  const Tensor out_rows = s.out_rows.rows(0, n_out);  // [n_out, hidden]
  be.get_rows(x, out_ids, out_rows);
  // result_norm, result_output: logits = rms_norm(out_rows) * output^T
  be.rms_norm(out_rows, w_.output_norm, eps, out_rows);
  observe("result_norm", -1, out_rows);
  if (!limits_.logits) return;  // hidden rows only (embeddings)
  be.matmul(w_.output, out_rows, s.logits.rows(0, n_out));
  observe("result_output", -1, s.logits.rows(0, n_out));
}

}  // namespace onebit
