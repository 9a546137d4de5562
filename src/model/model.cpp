// Model loading (tensor binding with shape/type checks), K/V storage, batch validation and the
// scratch activations; the per-architecture forward lives in its own file (llama.cpp).
#include "model/model.h"

#include <algorithm>

#include "base/check.h"
#include "gguf/quants.h"
#include "model/model_internal.h"

namespace onebit {
namespace {

Error tensor_error(const std::string& msg) { return make_error("tensors: " + msg); }

std::string shape_str(int64_t n_rows, int64_t n_cols) {
  return "[" + std::to_string(n_cols) + ", " + std::to_string(n_rows) + "]";
}

}  // namespace

Model::Model(const GgufFile& file, Backend& backend, ModelConfig config)
    : file_(file), backend_(backend), config_(std::move(config)) {}

Model::~Model() {
  if (scratch_) scratch_->free_all(backend_);
}

Result<std::unique_ptr<Model>> Model::load(const GgufFile& file, Backend& backend) {
  ONEBIT_ASSIGN_OR_RETURN(ModelConfig config, model_config_from_gguf(file));
  std::unique_ptr<Model> m(new Model(file, backend, std::move(config)));
  ONEBIT_TRY(m->bind_weights());
  m->scratch_ = std::make_unique<Scratch>();
  return m;
}

// Binds tensor `name` expected as [n_rows, n_cols] (GGUF ne = {n_cols, n_rows}); 1-D tensors
// (norms, biases) must be F32. `optional` tensors that are absent give an invalid Tensor.
static Result<Tensor> bind_tensor(const GgufFile& f, Backend& backend, const std::string& name,
                                  int64_t n_rows, int64_t n_cols, bool optional = false) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t) {
    if (optional) return Tensor{};
    return tensor_error("missing tensor " + name + " (expected shape " + shape_str(n_rows, n_cols) +
                        "); the file is incomplete or of another architecture");
  }
  const bool is_vector = n_rows == 1 && t->n_dims == 1;
  const int64_t got_rows = t->n_dims >= 2 ? static_cast<int64_t>(t->ne[1]) : 1;
  if (t->n_dims > 2 || static_cast<int64_t>(t->ne[0]) != n_cols || got_rows != n_rows) {
    std::string got = "[";
    for (uint32_t d = 0; d < t->n_dims; ++d) got += (d ? ", " : "") + std::to_string(t->ne[d]);
    return tensor_error(name + " has shape " + got + "]; the config needs " +
                        shape_str(n_rows, n_cols) + " (ggml order)");
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
  auto w = backend.weight_from_host(type, n_rows, n_cols, {t->data, static_cast<size_t>(t->n_bytes)});
  if (!w.ok()) return tensor_error(name + ": " + w.message());
  return *w;
}

Status Model::bind_weights() {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, q_dim = int64_t(c.n_heads) * c.head_dim;
  const int64_t kv_dim = int64_t(c.n_kv_heads) * c.head_dim, ffn = c.intermediate_size;
  auto bind = [&](const std::string& name, int64_t rows, int64_t cols, bool optional = false) {
    return bind_tensor(file_, backend_, name, rows, cols, optional);
  };
  ONEBIT_ASSIGN_OR_RETURN(w_.token_embd, bind("token_embd.weight", c.vocab_size, hidden));
  ONEBIT_ASSIGN_OR_RETURN(w_.output_norm, bind("output_norm.weight", 1, hidden));
  if (c.tied_output) {
    w_.output = w_.token_embd;
  } else {
    ONEBIT_ASSIGN_OR_RETURN(w_.output, bind("output.weight", c.vocab_size, hidden));
  }
  ONEBIT_ASSIGN_OR_RETURN(w_.rope_freqs, bind("rope_freqs.weight", 1, c.rope.n_rot / 2, true));
  config_.rope.freq_factors = w_.rope_freqs;
  w_.layers.resize(c.n_layers);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w_.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    ONEBIT_ASSIGN_OR_RETURN(L.attn_norm, bind(p + "attn_norm.weight", 1, hidden));
    ONEBIT_ASSIGN_OR_RETURN(L.wq, bind(p + "attn_q.weight", q_dim, hidden));
    ONEBIT_ASSIGN_OR_RETURN(L.wk, bind(p + "attn_k.weight", kv_dim, hidden));
    ONEBIT_ASSIGN_OR_RETURN(L.wv, bind(p + "attn_v.weight", kv_dim, hidden));
    if (c.has_qkv_bias) {
      ONEBIT_ASSIGN_OR_RETURN(L.bq, bind(p + "attn_q.bias", 1, q_dim));
      ONEBIT_ASSIGN_OR_RETURN(L.bk, bind(p + "attn_k.bias", 1, kv_dim));
      ONEBIT_ASSIGN_OR_RETURN(L.bv, bind(p + "attn_v.bias", 1, kv_dim));
    }
    if (c.has_qk_norm) {
      ONEBIT_ASSIGN_OR_RETURN(L.q_norm, bind(p + "attn_q_norm.weight", 1, c.head_dim));
      ONEBIT_ASSIGN_OR_RETURN(L.k_norm, bind(p + "attn_k_norm.weight", 1, c.head_dim));
    }
    ONEBIT_ASSIGN_OR_RETURN(L.wo, bind(p + "attn_output.weight", hidden, q_dim));
    ONEBIT_ASSIGN_OR_RETURN(L.ffn_norm, bind(p + "ffn_norm.weight", 1, hidden));
    ONEBIT_ASSIGN_OR_RETURN(L.w_gate, bind(p + "ffn_gate.weight", ffn, hidden));
    ONEBIT_ASSIGN_OR_RETURN(L.w_up, bind(p + "ffn_up.weight", ffn, hidden));
    ONEBIT_ASSIGN_OR_RETURN(L.w_down, bind(p + "ffn_down.weight", hidden, ffn));
  }
  return ok_status();
}

Result<KvCache> Model::new_kv_cache(int32_t n_ctx) {
  if (n_ctx < 1) return make_error("kv cache: context of " + std::to_string(n_ctx) + " positions; need at least 1");
  KvCache kv;
  kv.n_ctx = n_ctx;
  const int64_t kv_dim = int64_t(config_.n_kv_heads) * config_.head_dim;
  for (int32_t l = 0; l < config_.n_layers; ++l) {
    auto k = backend_.alloc(GgmlType::kF32, n_ctx, kv_dim);
    auto v = k.ok() ? backend_.alloc(GgmlType::kF32, n_ctx, kv_dim) : k;
    if (!k.ok() || !v.ok()) {
      if (k.ok()) backend_.free(*k);
      free_kv_cache(kv);
      return make_error("kv cache: " + (k.ok() ? v : k).message());
    }
    kv.k.push_back(*k);
    kv.v.push_back(*v);
  }
  return kv;
}

void Model::free_kv_cache(KvCache& kv) {
  for (auto& t : kv.k) backend_.free(t);
  for (auto& t : kv.v) backend_.free(t);
  kv.k.clear();
  kv.v.clear();
  kv.n_past = 0;
}

Status Model::ensure_scratch(int64_t n_tokens, int64_t n_out) {
  Scratch& s = *scratch_;
  if (n_tokens <= s.cap_tokens && n_out <= s.cap_out) return ok_status();
  s.free_all(backend_);
  const ModelConfig& c = config_;
  const int64_t n = std::max(n_tokens, 2 * s.cap_tokens), no = std::max(n_out, 2 * s.cap_out);
  const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
  struct Want { Tensor* t; GgmlType type; int64_t rows, cols; };
  const Want wants[] = {
      {&s.ids, GgmlType::kI32, n, 1},           {&s.positions, GgmlType::kI32, n, 1},
      {&s.x, GgmlType::kF32, n, c.hidden_size}, {&s.h, GgmlType::kF32, n, c.hidden_size},
      {&s.q, GgmlType::kF32, n, q_dim},         {&s.k, GgmlType::kF32, n, kv_dim},
      {&s.v, GgmlType::kF32, n, kv_dim},        {&s.attn, GgmlType::kF32, n, q_dim},
      {&s.gate, GgmlType::kF32, n, c.intermediate_size}, {&s.up, GgmlType::kF32, n, c.intermediate_size},
      {&s.out_rows, GgmlType::kF32, no, c.hidden_size},  {&s.logits, GgmlType::kF32, no, c.vocab_size},
  };
  for (const Want& want : wants) {
    auto t = backend_.alloc(want.type, want.rows, want.cols);
    if (!t.ok()) {
      s.free_all(backend_);
      return make_error("forward: scratch for " + std::to_string(n) + " tokens: " + t.message());
    }
    *want.t = *t;
  }
  s.cap_tokens = n;
  s.cap_out = no;
  return ok_status();
}

void Model::Scratch::free_all(Backend& backend) {
  for (Tensor* t : {&ids, &positions, &x, &h, &q, &k, &v, &attn, &gate, &up, &out_rows, &logits}) {
    if (t->valid()) backend.free(*t);
    *t = Tensor{};
  }
  cap_tokens = cap_out = 0;
}

void Model::observe(std::string_view name, int layer_idx, const Tensor& t) {
  if (!hook_) return;
  std::vector<float> host(static_cast<size_t>(t.n_rows * t.n_cols));
  backend_.read(t, host.data());
  backend_.synchronize();
  hook_(name, layer_idx, t.n_rows, t.n_cols, host);
}

Status Model::forward(const Batch& batch, std::vector<float>& logits) {
  if (batch.sequences.empty()) return make_error("forward: empty batch");
  int64_t n_tokens = 0, n_out = 0;
  for (const BatchSequence& s : batch.sequences) {
    ONEBIT_CHECK(s.kv != nullptr && static_cast<int32_t>(s.kv->k.size()) == config_.n_layers);
    if (s.tokens.empty()) return make_error("forward: a sequence of the batch has no tokens");
    for (TokenId id : s.tokens) {
      if (id < 0 || id >= config_.vocab_size) {
        return make_error("forward: token id " + std::to_string(id) + " is outside the vocabulary 0.." +
                          std::to_string(config_.vocab_size - 1));
      }
    }
    if (int64_t(s.kv->n_past) + int64_t(s.tokens.size()) > s.kv->n_ctx) {
      return make_error("forward: sequence needs " + std::to_string(s.kv->n_past + s.tokens.size()) +
                        " positions; its context is " + std::to_string(s.kv->n_ctx) +
                        "; shorten the prompt or raise the context size");
    }
    n_tokens += static_cast<int64_t>(s.tokens.size());
    n_out += s.all_logits ? static_cast<int64_t>(s.tokens.size()) : 1;
  }
  ONEBIT_TRY(ensure_scratch(n_tokens, n_out));
  // Token ids and positions of the whole batch, in batch order.
  std::vector<int32_t> ids, positions;  // [n_tokens]
  for (const BatchSequence& s : batch.sequences) {
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      ids.push_back(s.tokens[i]);
      positions.push_back(s.kv->n_past + static_cast<int32_t>(i));
    }
  }
  Scratch& sc = *scratch_;
  const Tensor ids_t = sc.ids.rows(0, n_tokens).reshaped(1, n_tokens);
  const Tensor pos_t = sc.positions.rows(0, n_tokens).reshaped(1, n_tokens);
  backend_.write(ids_t, ids.data());
  backend_.write(pos_t, positions.data());
  forward_llama(batch, n_tokens, n_out);
  logits.resize(static_cast<size_t>(n_out * config_.vocab_size));
  backend_.read(sc.logits.rows(0, n_out), logits.data());
  backend_.synchronize();
  for (const BatchSequence& s : batch.sequences) s.kv->n_past += static_cast<int32_t>(s.tokens.size());
  return ok_status();
}

}  // namespace onebit
