// The decoder forward every family in model_config.cpp's table runs (llama, qwen2: q/k/v biases,
// qwen3: per-head q/k RMSNorm, qwen2moe / qwen3moe: mixture-of-experts FFNs, qwen2moe with a
// shared expert; the hybrids qwen3next / qwen35 / qwen35moe: gated delta-net layers beside gated
// attention): per layer x += mixer(attn_norm(x)); x += ffn(ffn_norm(x)), the mixer attention or a
// delta net and the FFN dense or a mixture per layer. References: HF modeling_llama.py /
// modeling_qwen2.py / modeling_qwen3.py / modeling_qwen2_moe.py / modeling_qwen3_moe.py /
// modeling_qwen3_next.py / modeling_qwen3_5.py (DecoderLayer.forward), llama.cpp src/models/,
// docs/hybrid.md.
#include <algorithm>

#include "model/model_internal.h"

namespace onebit {

BlockDims block_dims_of(const ModelConfig& c) {
  BlockDims d;
  d.hidden = c.hidden_size;
  d.n_heads = c.n_heads;
  d.n_kv_heads = c.n_kv_heads;
  d.head_dim = c.head_dim;
  d.ffn = c.intermediate_size;
  d.eps = c.rms_norm_eps;
  d.rope = c.rope;
  d.gated_q = c.gated_attention;
  return d;
}

DeltaNetDims delta_dims_of(const ModelConfig& c) {
  return DeltaNetDims{c.hidden_size, c.ssm_k_heads, c.ssm_v_heads, c.ssm_k_dim, c.ssm_v_dim, c.ssm_conv_kernel,
                      c.ssm_tiled, c.rms_norm_eps};
}

MoeDims moe_dims_of(const ModelConfig& c) {
  return MoeDims{c.hidden_size, c.n_experts, c.n_experts_used, c.expert_ffn, c.shared_expert_ffn,
                 c.expert_weights_norm};
}

BlockDims Model::block_dims() const { return block_dims_of(config_); }
DeltaNetDims Model::delta_dims() const { return delta_dims_of(config_); }
MoeDims Model::moe_dims() const { return moe_dims_of(config_); }

Result<LayerWeights> bind_layer(const GgufFile& f, Backend& be, const ModelConfig& c, int32_t l) {
  const std::string p = "blk." + std::to_string(l) + ".";
  LayerWeights L;
  ONEBIT_ASSIGN_OR_RETURN(L.attn_norm, bind_tensor(f, be, p + "attn_norm.weight", 1, c.hidden_size));
  if (c.is_recurrent(l)) {
    ONEBIT_ASSIGN_OR_RETURN(L.delta, bind_delta_net(f, be, delta_dims_of(c), l));
  } else {
    ONEBIT_ASSIGN_OR_RETURN(L.attn, bind_attention(f, be, block_dims_of(c), l, c.has_qkv_bias, c.has_qk_norm));
  }
  const std::string post_norm = c.recurrent.empty() ? "ffn_norm.weight" : "post_attention_norm.weight";
  ONEBIT_ASSIGN_OR_RETURN(L.ffn_norm, bind_tensor(f, be, p + post_norm, 1, c.hidden_size));
  if (c.n_experts > 0 && f.find_tensor(p + "ffn_gate_inp.weight") != nullptr) {
    ONEBIT_ASSIGN_OR_RETURN(L.moe, bind_moe(f, be, moe_dims_of(c), l));
    return L;
  }
  if (c.intermediate_size == 0) {
    return make_error("tensors: layer " + std::to_string(l) + " has no blk." + std::to_string(l) +
                      ".ffn_gate_inp.weight (a dense layer) but the config has no feed_forward_length");
  }
  ONEBIT_ASSIGN_OR_RETURN(L.ffn, bind_ffn(f, be, l, c.hidden_size, c.intermediate_size));
  return L;
}

void Model::forward_decoder(const KvPool& pool, int64_t n, int64_t n_seqs, int64_t max_blocks, int64_t n_out,
                            bool checkpoints) {
  Backend& be = backend_;
  Scratch& s = *scratch_;
  const ModelConfig& c = config_;
  const float eps = c.rms_norm_eps;
  const BlockDims d = block_dims();
  const MoeDims md = moe_dims();
  const DeltaNetDims dd = delta_dims();
  // recurrent layers: each sequence's state row (I32 [1, n_seqs])
  const Tensor state_rows = c.recurrent.empty() ? Tensor{} : s.state_rows.rows(0, n_seqs).reshaped(1, n_seqs);
  const Tensor ckpt_rows = checkpoints ? s.ckpt_rows.rows(0, n).reshaped(1, n) : Tensor{};
  const Tensor ids = s.ids.rows(0, n).reshaped(1, n);  // I32 [1, n]
  const Tensor pos = s.positions.rows(0, n).reshaped(1, n);
  // Each token's RoPE position is also its causal limit.
  const BlockRows rows{pos, pos, s.slots.rows(0, n).reshaped(1, n), s.seq_ids.rows(0, n).reshaped(1, n),
                       s.block_tables.rows(0, n_seqs * max_blocks).reshaped(n_seqs, max_blocks)};
  const Tensor x = s.x.rows(0, n);  // [n, hidden] residual stream
  const Tensor h = s.h.rows(0, n);  // [n, hidden] normed input
  const Tensor o = s.o.rows(0, n);  // [n, hidden] a branch's output
  // capture: layer l's rows (x) into its column slice of the captured rows (drafters)
  const auto capture = [&](int32_t l, const Tensor& rows) {
    for (size_t i = 0; i < limits_.capture_layers.size(); ++i) {
      if (limits_.capture_layers[i] != l) continue;
      Tensor slice = s.captured.rows(0, n);  // [n, hidden] view of columns i * hidden ..
      slice.offset_bytes += i * size_t(c.hidden_size) * sizeof(float);
      slice.n_cols = c.hidden_size;
      be.copy(rows, slice);
    }
  };
  int32_t layer = -1;
  const Observe obs = hook_ ? Observe([&](std::string_view name, const Tensor& t) { observe(name, layer, t); })
                            : Observe();

  // inp_embd: x = token_embd[ids]
  be.get_rows(w_.token_embd, ids, x);
  observe("inp_embd", -1, x);
  // A residual add and the norm after it run as one op (add_rms_norm): h is the layer's first norm
  // of x when the loop body starts (the previous layer's last add made it).
  if (c.n_layers > 0) be.rms_norm(x, w_.layers[0].attn_norm, eps, h);
  for (layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& L = w_.layers[layer];
    // attention: x += attn(attn_norm(x)), K/V of the step's tokens stored in the pool first
    observe("attn_norm", layer, h);
    if (c.is_recurrent(layer)) {
      delta_net_block(be, dd, L.delta, h, RecurrentRows{rows.seq_ids, state_rows, ckpt_rows}, pool.conv[layer], pool.ssm[layer],
                      s.delta, o);
    } else {
      attention_block(be, d, L.attn, h, rows, pool.k[layer], pool.v[layer], pool.block_size, s.attn, o, &obs);
    }
    observe("attn_out", layer, o);
    // ffn: x += ffn(ffn_norm(x)), dense SwiGLU or a mixture of experts
    be.add_rms_norm(x, o, L.ffn_norm, eps, x, h);
    observe("ffn_inp", layer, x);
    observe("ffn_norm", layer, h);
    if (L.moe.router.valid()) {
      moe_ffn(be, md, L.moe, h, s.moe, o);
    } else {
      swiglu_ffn(be, L.ffn, h, s.gate.rows(0, n), s.up.rows(0, n), o);
    }
    observe("ffn_out", layer, o);
    if (layer + 1 < c.n_layers) {
      be.add_rms_norm(x, o, w_.layers[layer + 1].attn_norm, eps, x, h);
    } else {
      be.add(x, o, x);
    }
    observe("l_out", layer, x);
    capture(layer, x);
  }
  // the final-normed rows, when a drafter wants them (in-model MTP layers)
  if (std::find(limits_.capture_layers.begin(), limits_.capture_layers.end(), c.n_layers) !=
      limits_.capture_layers.end()) {
    be.rms_norm(x, w_.output_norm, eps, h);
    capture(c.n_layers, h);
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
