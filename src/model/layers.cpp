// The shared layer pieces (layers.h): binders with shape and type checks, and the attention, SwiGLU
// and mixture-of-experts blocks as named steps over the Backend ops.
#include "model/layers.h"

#include "model/rotation.h"

#include <cmath>

#include "gguf/quants.h"

namespace onebit {
namespace {

Error tensor_error(const std::string& msg) { return make_error("tensors: " + msg); }

std::string shape_str(int64_t n_rows, int64_t n_cols, int64_t n_stack) {
  return "[" + std::to_string(n_cols) + ", " + std::to_string(n_rows) +
         (n_stack > 0 ? ", " + std::to_string(n_stack) : "") + "]";
}

void observe(const Observe* obs, std::string_view name, const Tensor& t) {
  if (obs != nullptr && *obs) (*obs)(name, t);
}

Status alloc_all(Backend& be, std::initializer_list<std::tuple<Tensor*, GgmlType, int64_t, int64_t>> wants,
                 const std::string& what) {
  for (const auto& [t, type, rows, cols] : wants) {
    auto a = be.alloc(type, rows, cols);
    if (!a.ok()) return make_error(what + ": " + a.message());
    *t = *a;
  }
  return ok_status();
}

void free_all_of(Backend& be, std::initializer_list<Tensor*> ts) {
  for (Tensor* t : ts) {
    if (t->valid()) be.free(*t);
    *t = Tensor{};
  }
}

}  // namespace

Result<Tensor> bind_tensor(const GgufFile& f, Backend& backend, const std::string& name, int64_t n_rows,
                           int64_t n_cols, bool optional, int64_t n_stack) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t) {
    if (optional) return Tensor{};
    return tensor_error("missing tensor " + name + " (expected shape " + shape_str(n_rows, n_cols, n_stack) +
                        "); the file is incomplete or of another architecture");
  }
  const bool is_vector = n_rows == 1 && n_stack == 0 && t->n_dims == 1;
  const int64_t got_rows = t->n_dims >= 2 ? static_cast<int64_t>(t->ne[1]) : 1;
  const bool shape_ok = n_stack > 0 ? t->n_dims == 3 && int64_t(t->ne[2]) == n_stack
                                    : t->n_dims <= 2;
  if (!shape_ok || static_cast<int64_t>(t->ne[0]) != n_cols || got_rows != n_rows) {
    std::string got = "[";
    for (uint32_t d = 0; d < t->n_dims; ++d) got += (d ? ", " : "") + std::to_string(t->ne[d]);
    return tensor_error(name + " has shape " + got + "]; the config needs " + shape_str(n_rows, n_cols, n_stack) +
                        " (ggml order)");
  }
  const GgmlType type = t->type();
  if (is_vector && type != GgmlType::kF32) {
    return tensor_error(name + " has type " + ggml_type_name(t->raw_type) +
                        "; norm and bias vectors must be f32 (re-convert the model)");
  }
  auto traits = ggml_type_traits(t->raw_type);
  if (!traits || !can_dequantize(type) || type == GgmlType::kQ8_1 || type == GgmlType::kQ8_K) {
    return tensor_error(name + " has type " + ggml_type_name(t->raw_type) +
                        "; supported: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K");
  }
  if (n_cols % traits->block_elems != 0) {
    return tensor_error(name + " has " + std::to_string(n_cols) + " columns, not a multiple of " +
                        ggml_type_name(t->raw_type) + "'s block of " + std::to_string(traits->block_elems));
  }
  const int64_t rows = n_stack > 0 ? n_stack * n_rows : n_rows;
  auto w = backend.weight_from_host(type, rows, n_cols, {t->data, static_cast<size_t>(t->n_bytes)});
  if (!w.ok()) return tensor_error(name + ": " + w.message());
  // A Hadamard-rotated file: the backend rotates this matrix's inputs to match (Model::load checks
  // that it can).
  auto block = hadamard_block(f);
  if (block.ok() && rotated_by_hadamard(name, int(t->n_dims), n_cols, *block)) w->in_rotation = *block;
  return *w;
}

Result<AttentionWeights> bind_attention(const GgufFile& f, Backend& be, const BlockDims& d, int32_t layer, bool bias,
                                        bool qk_norm) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t qd = int64_t(d.n_heads) * d.head_dim, kvd = int64_t(d.n_kv_heads) * d.head_dim;
  AttentionWeights w;
  ONEBIT_ASSIGN_OR_RETURN(w.wq, bind_tensor(f, be, p + "attn_q.weight", d.gated_q ? 2 * qd : qd, d.hidden));
  ONEBIT_ASSIGN_OR_RETURN(w.wk, bind_tensor(f, be, p + "attn_k.weight", kvd, d.hidden));
  ONEBIT_ASSIGN_OR_RETURN(w.wv, bind_tensor(f, be, p + "attn_v.weight", kvd, d.hidden));
  if (bias) {
    ONEBIT_ASSIGN_OR_RETURN(w.bq, bind_tensor(f, be, p + "attn_q.bias", 1, qd));
    ONEBIT_ASSIGN_OR_RETURN(w.bk, bind_tensor(f, be, p + "attn_k.bias", 1, kvd));
    ONEBIT_ASSIGN_OR_RETURN(w.bv, bind_tensor(f, be, p + "attn_v.bias", 1, kvd));
  }
  if (qk_norm) {
    ONEBIT_ASSIGN_OR_RETURN(w.q_norm, bind_tensor(f, be, p + "attn_q_norm.weight", 1, d.head_dim));
    ONEBIT_ASSIGN_OR_RETURN(w.k_norm, bind_tensor(f, be, p + "attn_k_norm.weight", 1, d.head_dim));
  }
  ONEBIT_ASSIGN_OR_RETURN(w.wo, bind_tensor(f, be, p + "attn_output.weight", d.hidden, qd));
  return w;
}

Result<DeltaNetWeights> bind_delta_net(const GgufFile& f, Backend& be, const DeltaNetDims& d, int32_t layer) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  if (f.find_tensor(p + "ssm_ba.weight") != nullptr) {
    return tensor_error(p + "ssm_ba.weight (llama.cpp's fused beta/alpha projection) is not read yet; convert the "
                        "Hugging Face checkpoint with '1bit convert', which writes ssm_beta and ssm_alpha");
  }
  const int64_t vd = int64_t(d.v_heads) * d.dv;
  DeltaNetWeights w;
  ONEBIT_ASSIGN_OR_RETURN(w.qkv, bind_tensor(f, be, p + "attn_qkv.weight", d.channels(), d.hidden));
  ONEBIT_ASSIGN_OR_RETURN(w.gate, bind_tensor(f, be, p + "attn_gate.weight", vd, d.hidden));
  ONEBIT_ASSIGN_OR_RETURN(w.beta, bind_tensor(f, be, p + "ssm_beta.weight", d.v_heads, d.hidden));
  ONEBIT_ASSIGN_OR_RETURN(w.alpha, bind_tensor(f, be, p + "ssm_alpha.weight", d.v_heads, d.hidden));
  ONEBIT_ASSIGN_OR_RETURN(w.conv, bind_tensor(f, be, p + "ssm_conv1d.weight", d.channels(), d.conv_kernel));
  ONEBIT_ASSIGN_OR_RETURN(w.dt_bias, bind_tensor(f, be, p + "ssm_dt.bias", 1, d.v_heads));
  ONEBIT_ASSIGN_OR_RETURN(w.A, bind_tensor(f, be, p + "ssm_a", 1, d.v_heads));
  ONEBIT_ASSIGN_OR_RETURN(w.norm, bind_tensor(f, be, p + "ssm_norm.weight", 1, d.dv));
  ONEBIT_ASSIGN_OR_RETURN(w.out, bind_tensor(f, be, p + "ssm_out.weight", d.hidden, vd));
  if (w.conv.type != GgmlType::kF32) return tensor_error(p + "ssm_conv1d.weight must be f32 (re-convert the model)");
  return w;
}

Result<FfnWeights> bind_ffn(const GgufFile& f, Backend& be, int32_t layer, int64_t hidden, int64_t ffn,
                            const std::string& suffix) {
  const std::string p = "blk." + std::to_string(layer) + ".ffn_";
  FfnWeights w;
  ONEBIT_ASSIGN_OR_RETURN(w.w_gate, bind_tensor(f, be, p + "gate" + suffix + ".weight", ffn, hidden));
  ONEBIT_ASSIGN_OR_RETURN(w.w_up, bind_tensor(f, be, p + "up" + suffix + ".weight", ffn, hidden));
  ONEBIT_ASSIGN_OR_RETURN(w.w_down, bind_tensor(f, be, p + "down" + suffix + ".weight", hidden, ffn));
  return w;
}

Result<MoeWeights> bind_moe(const GgufFile& f, Backend& be, const MoeDims& d, int32_t layer) {
  const std::string p = "blk." + std::to_string(layer) + ".ffn_";
  MoeWeights w;
  ONEBIT_ASSIGN_OR_RETURN(w.router, bind_tensor(f, be, p + "gate_inp.weight", d.n_experts, d.hidden));
  ONEBIT_ASSIGN_OR_RETURN(w.gate, bind_tensor(f, be, p + "gate_exps.weight", d.expert_ffn, d.hidden, false, d.n_experts));
  ONEBIT_ASSIGN_OR_RETURN(w.up, bind_tensor(f, be, p + "up_exps.weight", d.expert_ffn, d.hidden, false, d.n_experts));
  ONEBIT_ASSIGN_OR_RETURN(w.down, bind_tensor(f, be, p + "down_exps.weight", d.hidden, d.expert_ffn, false, d.n_experts));
  if (d.shared_ffn > 0) {
    ONEBIT_ASSIGN_OR_RETURN(w.shared, bind_ffn(f, be, layer, d.hidden, d.shared_ffn, "_shexp"));
    ONEBIT_ASSIGN_OR_RETURN(w.shared_gate_inp, bind_tensor(f, be, p + "gate_inp_shexp.weight", 1, d.hidden, true));
  } else if (f.find_tensor(p + "gate_shexp.weight") != nullptr) {
    return tensor_error(p + "gate_shexp.weight is present but the config has no "
                        "expert_shared_feed_forward_length; the file is inconsistent (re-convert it)");
  }
  return w;
}

Status AttentionScratch::alloc(Backend& be, const BlockDims& d, int64_t n) {
  const int64_t qd = int64_t(d.n_heads) * d.head_dim, kvd = int64_t(d.n_kv_heads) * d.head_dim;
  ONEBIT_TRY(alloc_all(be, {{&q, GgmlType::kF32, n, qd}, {&attn, GgmlType::kF32, n, qd},
                            {&k, GgmlType::kF32, n, kvd}, {&v, GgmlType::kF32, n, kvd}}, "attention scratch"));
  if (!d.gated_q) return ok_status();
  return alloc_all(be, {{&qg, GgmlType::kF32, n, 2 * qd}}, "attention scratch");
}

void AttentionScratch::free_all(Backend& be) { free_all_of(be, {&q, &attn, &qg, &k, &v}); }

Status DeltaNetScratch::alloc(Backend& be, const DeltaNetDims& d, int64_t n) {
  const int64_t kd = int64_t(d.k_heads) * d.dk, vd = int64_t(d.v_heads) * d.dv;
  ONEBIT_TRY(alloc_all(be, {{&qkv, GgmlType::kF32, n, d.channels()}, {&conv, GgmlType::kF32, n, d.channels()},
                            {&q, GgmlType::kF32, n, kd}, {&k, GgmlType::kF32, n, kd}, {&z, GgmlType::kF32, n, vd},
                            {&o, GgmlType::kF32, n, vd}, {&a, GgmlType::kF32, n, d.v_heads},
                            {&b, GgmlType::kF32, n, d.v_heads}, {&q_scale, GgmlType::kF32, 1, d.dk},
                            {&k_scale, GgmlType::kF32, 1, d.dk}}, "delta-net scratch"));
  const std::vector<float> qs(size_t(d.dk), 1.0f / float(d.dk)), ks(size_t(d.dk), 1.0f / std::sqrt(float(d.dk)));
  be.write(q_scale, qs.data());
  be.write(k_scale, ks.data());
  be.synchronize();  // qs and ks go out of scope
  return ok_status();
}

void DeltaNetScratch::free_all(Backend& be) {
  free_all_of(be, {&qkv, &conv, &q, &k, &z, &o, &a, &b, &q_scale, &k_scale});
}

Status MoeScratch::alloc(Backend& be, const MoeDims& d, int64_t n) {
  const int64_t pairs = n * d.top_k;
  ONEBIT_TRY(alloc_all(be, {{&logits, GgmlType::kF32, n, d.n_experts}, {&ids, GgmlType::kI32, n, d.top_k},
                            {&weights, GgmlType::kF32, n, d.top_k}, {&gate, GgmlType::kF32, pairs, d.expert_ffn},
                            {&up, GgmlType::kF32, pairs, d.expert_ffn}, {&y, GgmlType::kF32, pairs, d.hidden}},
                       "expert scratch"));
  if (d.shared_ffn == 0) return ok_status();
  return alloc_all(be, {{&sh_gate, GgmlType::kF32, n, d.shared_ffn}, {&sh_up, GgmlType::kF32, n, d.shared_ffn},
                        {&sh_out, GgmlType::kF32, n, d.hidden}, {&sh_scale, GgmlType::kF32, n, 1}},
                   "shared expert scratch");
}

void MoeScratch::free_all(Backend& be) {
  free_all_of(be, {&logits, &ids, &weights, &gate, &up, &y, &sh_gate, &sh_up, &sh_out, &sh_scale});
}

namespace {
// k = x wk^T (+ bk), v = x wv^T (+ bv): the rows' keys and values before their norm and RoPE; with
// q = x wq^T in the same call when q is valid.
void project_kv(Backend& be, const AttentionWeights& w, const Tensor& x, const Tensor& q, const Tensor& k,
                const Tensor& v) {
  Products p;
  if (q.valid()) p.add(w.wq, q);
  p.add(w.wk, k);
  p.add(w.wv, v);
  be.matmuls(x, p);
  if (w.bk.valid()) {
    be.add(k, w.bk, k);
    be.add(v, w.bv, v);
  }
}
}  // namespace

void store_kv_rows(Backend& be, const BlockDims& d, const AttentionWeights& w, const Tensor& x, const BlockRows& r,
                   const Tensor& k_pool, const Tensor& v_pool, const AttentionScratch& s, const Observe* obs) {
  const int64_t n = x.n_rows;
  const Tensor k = s.k.rows(0, n);  // [n, n_kv_heads * head_dim]
  const Tensor v = s.v.rows(0, n);
  project_kv(be, w, x, Tensor{}, k, v);
  // qwen3: RMSNorm over each head's head_dim before RoPE (k_norm)
  RopeParams rope = d.rope;
  rope.n_heads = d.n_heads;
  rope.head_dim = d.head_dim;
  be.qk_rope_store(Tensor{}, k, v, Tensor{}, w.k_norm, d.eps, r.rope_pos, rope, d.n_kv_heads, r.slots, k_pool, v_pool);
  observe(obs, "Kcur", k);
  observe(obs, "Vcur", v);
}

void attention_block(Backend& be, const BlockDims& d, const AttentionWeights& w, const Tensor& h, const BlockRows& r,
                     const Tensor& k_pool, const Tensor& v_pool, int32_t block_size, const AttentionScratch& s,
                     const Tensor& out, const Observe* obs) {
  const int64_t n = h.n_rows;
  const Tensor q = s.q.rows(0, n);        // [n, n_heads * head_dim]
  const Tensor attn = s.attn.rows(0, n);  // [n, n_heads * head_dim]
  Tensor gate;                            // gated_q: [n * n_heads, head_dim] view of the gate halves
  if (d.gated_q) {
    // wq's rows per head are [q (head_dim) | gate (head_dim)]: q is copied out, the gate stays.
    const Tensor qg = s.qg.rows(0, n).reshaped(n * d.n_heads, 2 * d.head_dim);
    be.matmul(w.wq, h, s.qg.rows(0, n));
    Tensor q_half = qg;
    q_half.n_cols = d.head_dim;
    gate = q_half;
    gate.offset_bytes += size_t(d.head_dim) * sizeof(float);
    be.copy(q_half, q.reshaped(n * d.n_heads, d.head_dim));
  }
  const Tensor k = s.k.rows(0, n);  // [n, n_kv_heads * head_dim]
  const Tensor v = s.v.rows(0, n);
  project_kv(be, w, h, d.gated_q ? Tensor{} : q, k, v);
  if (w.bq.valid()) be.add(q, w.bq, q);
  // qwen3: RMSNorm over each head's head_dim before RoPE (q_norm, k_norm); the rows' own K/V stored
  // first, so each row sees itself and the keys before it
  RopeParams rq = d.rope;
  rq.n_heads = d.n_heads;
  rq.head_dim = d.head_dim;
  be.qk_rope_store(q, k, v, w.q_norm, w.k_norm, d.eps, r.rope_pos, rq, d.n_kv_heads, r.slots, k_pool, v_pool);
  observe(obs, "Qcur", q);
  observe(obs, "Kcur", k);
  observe(obs, "Vcur", v);
  PagedAttentionParams ap;
  ap.n_heads = d.n_heads;
  ap.n_kv_heads = d.n_kv_heads;
  ap.head_dim = d.head_dim;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(d.head_dim));  // HF: head_dim ** -0.5
  ap.block_size = block_size;
  be.paged_attention(q, k_pool, v_pool, r.attn_pos, r.seq_ids, r.tables, attn, ap);
  observe(obs, "kq_out", attn);
  if (d.gated_q) {  // attn * sigmoid(gate), per head
    const Tensor heads = attn.reshaped(n * d.n_heads, d.head_dim);
    be.sigmoid_mul(heads, gate, heads);
  }
  be.matmul(w.wo, attn, out);
}

void delta_net_block(Backend& be, const DeltaNetDims& d, const DeltaNetWeights& w, const Tensor& h,
                     const RecurrentRows& r, const Tensor& conv_states, const Tensor& ssm_states,
                     const DeltaNetScratch& s, const Tensor& out) {
  const int64_t n = h.n_rows, kd = int64_t(d.k_heads) * d.dk;
  const Tensor qkv = s.qkv.rows(0, n), conv = s.conv.rows(0, n);  // [n, channels]
  const Tensor q = s.q.rows(0, n), k = s.k.rows(0, n);              // [n, kd]
  const Tensor z = s.z.rows(0, n), o = s.o.rows(0, n);              // [n, v_heads * dv]
  const Tensor a = s.a.rows(0, n), b = s.b.rows(0, n);              // [n, v_heads]
  // projections; the short convolution (SiLU) over [q | k | v] continues each sequence's inputs
  be.matmul(w.qkv, h, qkv);
  be.ssm_conv(qkv, w.conv, r.seq_ids, r.state_rows, r.ckpt_rows, conv_states, /*silu=*/true, conv);
  const auto cols = [&](int64_t first, int64_t count) {  // [n, count] view of conv's columns
    Tensor t = conv;
    t.offset_bytes += size_t(first) * sizeof(float);
    t.n_cols = count;
    return t;
  };
  be.copy(cols(0, kd), q);
  be.copy(cols(kd, kd), k);
  // l2 norm per key head (HF: x * rsqrt(sum x^2 + 1e-6)) as rms_norm(x, 1e-6 / dk) / sqrt(dk);
  // q also scaled by dk^-1/2
  const float l2_eps = 1e-6f / float(d.dk);
  be.rms_norm(q.reshaped(n * d.k_heads, d.dk), s.q_scale, l2_eps, q.reshaped(n * d.k_heads, d.dk));
  be.rms_norm(k.reshaped(n * d.k_heads, d.dk), s.k_scale, l2_eps, k.reshaped(n * d.k_heads, d.dk));
  be.matmul(w.alpha, h, a);
  be.matmul(w.beta, h, b);
  be.gated_delta_rule(q, k, cols(2 * kd, int64_t(d.v_heads) * d.dv), a, b, w.A, w.dt_bias, r.seq_ids, r.state_rows,
                      r.ckpt_rows, ssm_states, o, DeltaParams{d.k_heads, d.tiled});
  // gated norm per value head: rms_norm(o) * norm * silu(z), then the output projection
  const Tensor o_heads = o.reshaped(n * d.v_heads, d.dv);
  be.rms_norm(o_heads, w.norm, d.eps, o_heads);
  be.matmul(w.gate, h, z);
  be.swiglu(z, o, z);
  be.matmul(w.out, z, out);
}

void swiglu_ffn(Backend& be, const FfnWeights& w, const Tensor& h, const Tensor& gate, const Tensor& up,
                const Tensor& out) {
  Products p;
  p.add(w.w_gate, gate);
  p.add(w.w_up, up);
  be.matmuls(h, p);
  be.swiglu(gate, up, gate);
  be.matmul(w.w_down, gate, out);
}

void moe_ffn(Backend& be, const MoeDims& d, const MoeWeights& w, const Tensor& h, const MoeScratch& s,
             const Tensor& out) {
  const int64_t n = h.n_rows, pairs = n * d.top_k;
  // router: probabilities over the experts, the top_k of each token
  const Tensor logits = s.logits.rows(0, n);    // [n, n_experts]
  const Tensor ids = s.ids.rows(0, n);          // I32 [n, top_k]
  const Tensor weights = s.weights.rows(0, n);  // [n, top_k]
  be.matmul(w.router, h, logits);
  be.moe_route(logits, d.normalize, ids, weights);
  // each routed pair through its expert's SwiGLU: [n * top_k, expert_ffn] -> [n * top_k, hidden]
  const Tensor gate = s.gate.rows(0, pairs), up = s.up.rows(0, pairs), y = s.y.rows(0, pairs);
  be.moe_matmul(w.gate, d.n_experts, h, ids, gate);
  be.moe_matmul(w.up, d.n_experts, h, ids, up);
  be.swiglu(gate, up, gate);
  be.moe_matmul(w.down, d.n_experts, gate, ids, y);
  // out = the pairs' outputs weighted per token
  be.moe_combine(y, weights, out);
  if (!w.shared.w_gate.valid()) return;
  // shared expert, gated by sigmoid(shared_gate_inp . h) when the family has the gate
  const Tensor sh_out = s.sh_out.rows(0, n);
  swiglu_ffn(be, w.shared, h, s.sh_gate.rows(0, n), s.sh_up.rows(0, n), sh_out);
  if (w.shared_gate_inp.valid()) {
    const Tensor scale = s.sh_scale.rows(0, n);  // [n, 1]
    be.matmul(w.shared_gate_inp, h, scale);
    be.sigmoid_mul(sh_out, scale, sh_out);
  }
  be.add(out, sh_out, out);
}

}  // namespace onebit
