// Model hyperparameters from GGUF metadata: the keys llama.cpp's converter writes for
// llama, qwen2 and qwen3 (llama.cpp src/llama-model.cpp load_hparams is the reference).
#include "model/model_config.h"

#include <cmath>

namespace onebit {
namespace {

Error config_error(const std::string& msg) { return make_error("config: " + msg); }

// The families and what sets them apart; all run the decoder forward (model/decoder.cpp). A new
// family of the same shape is one row here; one with new layer kinds adds its own forward file.
struct Family {
  Architecture arch;
  std::string_view name;     // general.architecture
  RopeOrdering rope;         // llama's converter permutes q/k for adjacent pairs; the rest NeoX
  bool qkv_bias, qk_norm;    // qwen2's q/k/v biases, qwen3's per-head q/k RMSNorm
  bool experts;              // mixture-of-experts FFNs (expert_* keys required)
  bool norm_topk;            // default of expert_weights_norm (HF norm_topk_prob as llama.cpp runs it)
  bool hybrid;               // gated delta-net layers beside gated attention (ssm.* keys required)
};
constexpr Family kFamilies[] = {
    {Architecture::kLlama, "llama", RopeOrdering::kNormal, false, false, false, false, false},
    {Architecture::kQwen2, "qwen2", RopeOrdering::kNeox, true, false, false, false, false},
    {Architecture::kQwen3, "qwen3", RopeOrdering::kNeox, false, true, false, false, false},
    {Architecture::kQwen2Moe, "qwen2moe", RopeOrdering::kNeox, true, false, true, false, false},
    {Architecture::kQwen3Moe, "qwen3moe", RopeOrdering::kNeox, false, true, true, true, false},
    {Architecture::kQwen3Next, "qwen3next", RopeOrdering::kNeox, false, true, true, true, true},
    {Architecture::kQwen35, "qwen35", RopeOrdering::kNeox, false, true, false, false, true},
    {Architecture::kQwen35Moe, "qwen35moe", RopeOrdering::kNeox, false, true, true, true, true},
};

const Family& family(Architecture a) {
  for (const Family& f : kFamilies) {
    if (f.arch == a) return f;
  }
  return kFamilies[0];
}

// A required positive integer key `<arch>.<suffix>` within [1, max].
Result<int32_t> get_dim(const GgufFile& f, const std::string& key, int64_t max) {
  if (!f.find(key)) {
    return config_error("missing key " + key + "; the file is not a complete " +
                        "model (re-convert it with '1bit convert')");
  }
  auto v = f.get_int(key);
  if (!v.ok()) return config_error(v.message());
  if (*v < 1 || *v > max) {
    return config_error(key + " is " + std::to_string(*v) + "; allowed 1.." + std::to_string(max));
  }
  return static_cast<int32_t>(*v);
}

// An optional integer key; `fallback` when absent.
Result<int32_t> get_dim_or(const GgufFile& f, const std::string& key, int64_t max, int32_t fallback) {
  if (!f.find(key)) return fallback;
  return get_dim(f, key, max);
}

Result<float> get_float_or(const GgufFile& f, const std::string& key, float fallback) {
  if (!f.find(key)) return fallback;
  auto v = f.get_float(key);
  if (!v.ok()) return config_error(v.message());
  if (!std::isfinite(*v)) return config_error(key + " is not a finite number");
  return static_cast<float>(*v);
}

Status read_rope(const GgufFile& f, const std::string& arch, ModelConfig& c) {
  const std::string p = arch + ".rope.";
  c.rope.ordering = family(c.arch).rope;
  ONEBIT_ASSIGN_OR_RETURN(c.rope.n_rot, get_dim_or(f, p + "dimension_count", 1 << 16, c.head_dim));
  if (c.rope.n_rot > c.head_dim || c.rope.n_rot % 2 != 0) {
    return config_error(p + "dimension_count is " + std::to_string(c.rope.n_rot) +
                        "; it must be even and at most the head dimension " +
                        std::to_string(c.head_dim));
  }
  ONEBIT_ASSIGN_OR_RETURN(c.rope.freq_base, get_float_or(f, p + "freq_base", 10000.0f));
  if (c.rope.freq_base <= 1.0f) {
    return config_error(p + "freq_base is " + std::to_string(c.rope.freq_base) + "; it must be > 1");
  }
  std::string type = "none";
  if (f.find(p + "scaling.type")) {
    auto t = f.get_string(p + "scaling.type");
    if (!t.ok()) return config_error(t.message());
    type = *t;
  }
  float factor = 1.0f;
  ONEBIT_ASSIGN_OR_RETURN(factor, get_float_or(f, p + "scaling.factor", 1.0f));
  if (f.find(p + "scale_linear") && type == "none") {  // older llama.cpp files
    type = "linear";
    ONEBIT_ASSIGN_OR_RETURN(factor, get_float_or(f, p + "scale_linear", 1.0f));
  }
  if (type == "none" || factor == 1.0f) {
    c.rope.scaling = RopeScaling::kNone;
    return ok_status();
  }
  if (factor <= 0.0f) return config_error(p + "scaling.factor must be > 0, got " + std::to_string(factor));
  c.rope.scaling_factor = factor;
  if (type == "linear") {
    c.rope.scaling = RopeScaling::kLinear;
  } else if (type == "yarn") {
    c.rope.scaling = RopeScaling::kYarn;
    ONEBIT_ASSIGN_OR_RETURN(c.rope.original_context,
                            get_dim_or(f, p + "scaling.original_context_length", 1 << 24, c.context_length));
    ONEBIT_ASSIGN_OR_RETURN(c.rope.yarn_ext_factor, get_float_or(f, p + "scaling.yarn_ext_factor", 1.0f));
    ONEBIT_ASSIGN_OR_RETURN(c.rope.yarn_attn_factor, get_float_or(f, p + "scaling.yarn_attn_factor", 1.0f));
    ONEBIT_ASSIGN_OR_RETURN(c.rope.yarn_beta_fast, get_float_or(f, p + "scaling.yarn_beta_fast", 32.0f));
    ONEBIT_ASSIGN_OR_RETURN(c.rope.yarn_beta_slow, get_float_or(f, p + "scaling.yarn_beta_slow", 1.0f));
  } else {
    return config_error(p + "scaling.type is '" + type + "'; supported: none, linear, yarn");
  }
  return ok_status();
}

// The mixture-of-experts keys (llama.cpp's LLM_KV_EXPERT_*): required for the MoE families, refused
// elsewhere so that a file is never run with its experts ignored.
Status read_experts(const GgufFile& f, const std::string& a, ModelConfig& c) {
  if (!family(c.arch).experts) {
    if (f.find(a + "expert_count")) {
      return config_error(a + "expert_count is set, but the " + c.arch_name +
                          " family has no experts; the file's architecture is wrong");
    }
    return ok_status();
  }
  ONEBIT_ASSIGN_OR_RETURN(c.n_experts, get_dim(f, a + "expert_count", 4096));
  ONEBIT_ASSIGN_OR_RETURN(c.n_experts_used, get_dim(f, a + "expert_used_count", c.n_experts));
  ONEBIT_ASSIGN_OR_RETURN(c.expert_ffn, get_dim(f, a + "expert_feed_forward_length", 1 << 20));
  if (f.find(a + "expert_shared_feed_forward_length")) {
    ONEBIT_ASSIGN_OR_RETURN(c.shared_expert_ffn, get_dim(f, a + "expert_shared_feed_forward_length", 1 << 20));
  }
  c.expert_weights_norm = family(c.arch).norm_topk;
  if (f.find(a + "expert_weights_norm")) {
    auto v = f.get_bool(a + "expert_weights_norm");
    if (!v.ok()) return config_error(v.message());
    c.expert_weights_norm = *v;
  }
  return ok_status();
}

// The hybrid families' keys: the recurrent layer pattern and the delta net's shape.
Status read_hybrid(const GgufFile& f, const std::string& a, ModelConfig& c) {
  if (!family(c.arch).hybrid) return ok_status();
  c.gated_attention = true;
  c.ssm_tiled = c.arch != Architecture::kQwen3Next;
  const std::string list_key = a + "attention.recurrent_layers";
  if (const GgufValue* v = f.find(list_key)) {
    // one entry per layer, MTP layers (attention) included or not
    const uint64_t all = uint64_t(c.n_layers + c.n_nextn);
    if (v->type != GgufValueType::kArray || (v->array_count != uint64_t(c.n_layers) && v->array_count != all) ||
        !(v->array_type == GgufValueType::kBool || v->array_type == GgufValueType::kUint8 ||
          v->array_type == GgufValueType::kInt32 || v->array_type == GgufValueType::kUint32)) {
      return config_error(list_key + " must be an array of " + std::to_string(all) + " booleans");
    }
    for (uint64_t l = 0; l < v->array_count; ++l) {
      if (l >= uint64_t(c.n_layers) && v->array_int(l) != 0) {
        return config_error(list_key + " marks MTP layer " + std::to_string(l) + " recurrent; MTP layers are attention");
      }
      if (l < uint64_t(c.n_layers)) c.recurrent.push_back(v->array_int(l) != 0);
    }
  } else {
    int32_t every = 0;
    ONEBIT_ASSIGN_OR_RETURN(every, get_dim(f, a + "full_attention_interval", c.n_layers));
    for (int32_t l = 0; l < c.n_layers; ++l) c.recurrent.push_back((l + 1) % every != 0);
  }
  int32_t inner = 0;
  ONEBIT_ASSIGN_OR_RETURN(c.ssm_conv_kernel, get_dim(f, a + "ssm.conv_kernel", 8));
  if (c.ssm_conv_kernel < 2) return config_error(a + "ssm.conv_kernel must be 2..8");
  ONEBIT_ASSIGN_OR_RETURN(c.ssm_k_dim, get_dim(f, a + "ssm.state_size", 4096));
  ONEBIT_ASSIGN_OR_RETURN(c.ssm_k_heads, get_dim(f, a + "ssm.group_count", 4096));
  ONEBIT_ASSIGN_OR_RETURN(c.ssm_v_heads, get_dim(f, a + "ssm.time_step_rank", 4096));
  ONEBIT_ASSIGN_OR_RETURN(inner, get_dim(f, a + "ssm.inner_size", 1 << 20));
  if (c.ssm_v_heads % c.ssm_k_heads != 0 || inner % c.ssm_v_heads != 0) {
    return config_error(a + "ssm.time_step_rank must be a multiple of ssm.group_count and divide ssm.inner_size");
  }
  c.ssm_v_dim = inner / c.ssm_v_heads;
  return ok_status();
}

}  // namespace

std::string_view architecture_name(Architecture a) { return family(a).name; }

std::string_view pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kNone: return "none";
    case Pooling::kMean: return "mean";
    case Pooling::kCls: return "cls";
    case Pooling::kLast: return "last";
    case Pooling::kRank: return "rank";
  }
  return "?";
}

Result<ModelConfig> model_config_from_gguf(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch.ok()) return config_error(arch.message());
  c.arch_name = *arch;
  std::string names;
  const Family* fam = nullptr;
  for (const Family& f2 : kFamilies) {
    names += (names.empty() ? "" : ", ") + std::string(f2.name);
    if (c.arch_name == f2.name) fam = &f2;
  }
  if (fam == nullptr) {
    return config_error("general.architecture '" + c.arch_name + "' is not supported; supported: " + names);
  }
  c.arch = fam->arch;
  c.has_qkv_bias = fam->qkv_bias;
  c.has_qk_norm = fam->qk_norm;

  const std::string a = c.arch_name + ".";
  constexpr int64_t kMaxDim = 1 << 20;
  ONEBIT_ASSIGN_OR_RETURN(c.hidden_size, get_dim(f, a + "embedding_length", kMaxDim));
  ONEBIT_ASSIGN_OR_RETURN(c.n_layers, get_dim(f, a + "block_count", 4096));
  // MTP layers (llama.cpp's nextn layers) are counted in block_count and stored after the others.
  if (f.find(a + "nextn_predict_layers")) {
    auto n = f.get_uint(a + "nextn_predict_layers");
    if (!n.ok() || *n >= uint64_t(c.n_layers)) {
      return config_error(a + "nextn_predict_layers must be below block_count (" + std::to_string(c.n_layers) + ")");
    }
    c.n_nextn = static_cast<int32_t>(*n);
    c.n_layers -= c.n_nextn;
  }
  ONEBIT_ASSIGN_OR_RETURN(c.n_heads, get_dim(f, a + "attention.head_count", 4096));
  ONEBIT_ASSIGN_OR_RETURN(c.n_kv_heads, get_dim_or(f, a + "attention.head_count_kv", 4096, c.n_heads));
  if (c.n_heads % c.n_kv_heads != 0) {
    return config_error(a + "attention.head_count_kv is " + std::to_string(c.n_kv_heads) +
                        "; it must divide attention.head_count (" + std::to_string(c.n_heads) + ")");
  }
  if (!f.find(a + "attention.key_length") && c.hidden_size % c.n_heads != 0) {
    return config_error(a + "embedding_length " + std::to_string(c.hidden_size) +
                        " is not a multiple of attention.head_count " + std::to_string(c.n_heads) +
                        " and attention.key_length is absent");
  }
  ONEBIT_ASSIGN_OR_RETURN(c.head_dim, get_dim_or(f, a + "attention.key_length", 1 << 14, c.hidden_size / c.n_heads));
  int32_t value_length = 0;
  ONEBIT_ASSIGN_OR_RETURN(value_length, get_dim_or(f, a + "attention.value_length", 1 << 14, c.head_dim));
  if (value_length != c.head_dim) {
    return config_error(a + "attention.value_length " + std::to_string(value_length) +
                        " differs from key_length " + std::to_string(c.head_dim) + "; not supported");
  }
  ONEBIT_TRY(read_experts(f, a, c));
  if (c.n_experts == 0 || f.find(a + "feed_forward_length")) {
    ONEBIT_ASSIGN_OR_RETURN(c.intermediate_size, get_dim(f, a + "feed_forward_length", kMaxDim));
  }
  ONEBIT_ASSIGN_OR_RETURN(c.context_length, get_dim_or(f, a + "context_length", 1 << 24, 2048));
  ONEBIT_ASSIGN_OR_RETURN(c.rms_norm_eps, get_float_or(f, a + "attention.layer_norm_rms_epsilon", 1e-5f));
  if (!(c.rms_norm_eps > 0.0f && c.rms_norm_eps < 1.0f)) {
    return config_error(a + "attention.layer_norm_rms_epsilon is " + std::to_string(c.rms_norm_eps) +
                        "; allowed (0, 1)");
  }
  ONEBIT_TRY(read_rope(f, c.arch_name, c));
  ONEBIT_TRY(read_hybrid(f, a, c));
  if (f.find(a + "pooling_type")) {
    auto p = f.get_uint(a + "pooling_type");
    if (!p.ok()) return config_error(p.message());
    if (*p > 4) {
      return config_error(a + "pooling_type is " + std::to_string(*p) +
                          "; allowed 0 (none), 1 (mean), 2 (cls), 3 (last), 4 (rank)");
    }
    c.pooling = static_cast<Pooling>(*p);
  }

  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) return config_error("missing tensor token_embd.weight");
  if (embd->ne[1] < 1 || embd->ne[1] > (1 << 24)) {
    return config_error("token_embd.weight has " + std::to_string(embd->ne[1]) + " rows; allowed 1..16777216");
  }
  c.vocab_size = static_cast<int32_t>(embd->ne[1]);
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  return c;
}

}  // namespace onebit
