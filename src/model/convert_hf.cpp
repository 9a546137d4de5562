// HF -> GGUF conversion for llama / qwen2 / qwen3 / qwen2moe / qwen3moe. The reference is
// llama.cpp's convert_hf_to_gguf.py (LlamaModel.permute and modify_tensors, Qwen2Model, Qwen3Model,
// Qwen2MoeModel: per-expert tensors stacked into one 3-D tensor per layer and projection) and
// gguf-py's tensor_mapping.py for the names. Output tensor data is built in memory, then written.
#include "model/convert_hf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "base/fp16.h"
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "gguf/quants.h"
#include "model/convert_common.h"
#include "model/safetensors.h"
#include "tokenizer/hf_vocab.h"

namespace onebit {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

Error cfg_error(const std::string& msg) { return make_error("convert: config.json: " + msg); }

struct HfConfig {
  std::string arch;  // GGUF architecture name
  int64_t hidden_size = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t intermediate_size = 0, context_length = 0, vocab_size = 0;
  bool explicit_head_dim = false;
  bool tied = false;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
  std::string rope_scaling = "none";  // none, linear, yarn, llama3 (as rope_freqs.weight)
  double rope_factor = 1.0;
  int64_t rope_original_context = 0;
  double llama3_low_freq_factor = 1.0, llama3_high_freq_factor = 4.0;
  int64_t pooling_type = -1;  // llama.cpp's <arch>.pooling_type from a sentence-transformers Pooling module; -1 none
  // Mixture of experts (num_experts 0: dense).
  int64_t n_experts = 0, n_experts_used = 0, expert_ffn = 0, shared_expert_ffn = 0;
  bool norm_topk_prob = false;
  // Hybrid (qwen3next, qwen35, qwen35moe): which layers are linear attention (gated delta net),
  // and its shape (HF linear_*), the rotary fraction of the attention heads.
  std::vector<bool> recurrent;
  int64_t conv_kernel = 0, n_k_heads = 0, n_v_heads = 0, k_head_dim = 0, v_head_dim = 0;
  double partial_rotary = 1.0;
  // MTP layers (hybrid checkpoints' mtp.*): written after the n_layers layers as blk.<n_layers>.*
  // with its nextn.* tensors (llama.cpp's layout for DeepSeek-V3 / GLM-4.5 MTP layers);
  // recurrent[] then lists them too, as attention layers. Set from the checkpoint's tensors.
  int64_t n_mtp = 0;
  int64_t all_layers() const { return n_layers + n_mtp; }
  bool hybrid() const { return !recurrent.empty(); }
  bool tiled_v_heads() const { return arch == "qwen35" || arch == "qwen35moe"; }
};

Result<int64_t> req_int(const json& c, const char* key, int64_t min, int64_t max) {
  if (!c.contains(key) || !c[key].is_number_integer()) return cfg_error(std::string("missing integer field ") + key);
  const int64_t v = c[key].get<int64_t>();
  if (v < min || v > max) {
    return cfg_error(std::string(key) + " is " + std::to_string(v) + "; allowed " + std::to_string(min) +
                     ".." + std::to_string(max));
  }
  return v;
}

// rope_theta / rope_scaling as transformers 4 (top-level) or 5 (rope_parameters) writes them.
Status read_rope(const json& c, HfConfig& h) {
  const json* rp = c.contains("rope_parameters") && c["rope_parameters"].is_object() ? &c["rope_parameters"] : nullptr;
  if (c.contains("rope_theta") && c["rope_theta"].is_number()) h.rope_theta = c["rope_theta"].get<double>();
  else if (rp && rp->contains("rope_theta")) h.rope_theta = (*rp)["rope_theta"].get<double>();
  const json* rs = c.contains("rope_scaling") && c["rope_scaling"].is_object() ? &c["rope_scaling"] : rp;
  if (!rs) return ok_status();
  std::string type = "default";
  if (rs->contains("rope_type") && (*rs)["rope_type"].is_string()) type = (*rs)["rope_type"].get<std::string>();
  else if (rs->contains("type") && (*rs)["type"].is_string()) type = (*rs)["type"].get<std::string>();
  if (type == "default") return ok_status();
  if (type != "linear" && type != "yarn" && type != "llama3") {
    return cfg_error("rope scaling type '" + type + "' is not supported yet; supported: default, linear, yarn, llama3");
  }
  h.rope_scaling = type;
  if (!rs->contains("factor") || !(*rs)["factor"].is_number()) return cfg_error("rope scaling needs a numeric factor");
  h.rope_factor = (*rs)["factor"].get<double>();
  if (rs->contains("original_max_position_embeddings")) {
    h.rope_original_context = (*rs)["original_max_position_embeddings"].get<int64_t>();
  }
  if (type == "llama3") {
    h.llama3_low_freq_factor = rs->value("low_freq_factor", 1.0);
    h.llama3_high_freq_factor = rs->value("high_freq_factor", 4.0);
    if (h.rope_original_context <= 0) h.rope_original_context = 8192;
    if (!(h.llama3_high_freq_factor > h.llama3_low_freq_factor && h.llama3_low_freq_factor > 0)) {
      return cfg_error("rope scaling llama3 needs 0 < low_freq_factor < high_freq_factor");
    }
  }
  return ok_status();
}

// num_experts (num_local_experts in transformers 5), num_experts_per_tok, moe_intermediate_size,
// shared_expert_intermediate_size (qwen2moe) and norm_topk_prob (HF Qwen2MoeConfig / Qwen3MoeConfig).
Status read_experts(const json& c, HfConfig& h) {
  const char* count_key = c.contains("num_experts") ? "num_experts" : "num_local_experts";
  ONEBIT_ASSIGN_OR_RETURN(h.n_experts, req_int(c, count_key, 1, 4096));
  ONEBIT_ASSIGN_OR_RETURN(h.n_experts_used, req_int(c, "num_experts_per_tok", 1, h.n_experts));
  ONEBIT_ASSIGN_OR_RETURN(h.expert_ffn, req_int(c, "moe_intermediate_size", 1, 1 << 22));
  if (c.contains("shared_expert_intermediate_size") && c["shared_expert_intermediate_size"].is_number_integer() &&
      c["shared_expert_intermediate_size"].get<int64_t>() > 0) {
    ONEBIT_ASSIGN_OR_RETURN(h.shared_expert_ffn, req_int(c, "shared_expert_intermediate_size", 1, 1 << 22));
  }
  h.norm_topk_prob = c.value("norm_topk_prob", h.arch == "qwen3moe");
  return ok_status();
}

// layer_types (or full_attention_interval, HF's default 4) and the linear-attention shape.
Status read_hybrid(const json& c, HfConfig& h) {
  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    for (const json& t : c["layer_types"]) {
      const std::string v = t.is_string() ? t.get<std::string>() : "";
      if (v != "linear_attention" && v != "full_attention") {
        return cfg_error("layer_types holds '" + t.dump() + "'; allowed: linear_attention, full_attention");
      }
      h.recurrent.push_back(v == "linear_attention");
    }
    if (int64_t(h.recurrent.size()) != h.n_layers) return cfg_error("layer_types does not list num_hidden_layers layers");
  } else {
    const int64_t every = c.value("full_attention_interval", int64_t(4));
    if (every < 1) return cfg_error("full_attention_interval must be >= 1");
    for (int64_t l = 0; l < h.n_layers; ++l) h.recurrent.push_back((l + 1) % every != 0);
  }
  ONEBIT_ASSIGN_OR_RETURN(h.conv_kernel, req_int(c, "linear_conv_kernel_dim", 2, 8));
  ONEBIT_ASSIGN_OR_RETURN(h.k_head_dim, req_int(c, "linear_key_head_dim", 1, 4096));
  ONEBIT_ASSIGN_OR_RETURN(h.v_head_dim, req_int(c, "linear_value_head_dim", 1, 4096));
  ONEBIT_ASSIGN_OR_RETURN(h.n_k_heads, req_int(c, "linear_num_key_heads", 1, 4096));
  ONEBIT_ASSIGN_OR_RETURN(h.n_v_heads, req_int(c, "linear_num_value_heads", 1, 4096));
  if (h.n_v_heads % h.n_k_heads != 0) return cfg_error("linear_num_value_heads must be a multiple of linear_num_key_heads");
  const json* rp = c.contains("rope_parameters") && c["rope_parameters"].is_object() ? &c["rope_parameters"] : nullptr;
  if (c.contains("partial_rotary_factor") && c["partial_rotary_factor"].is_number()) {
    h.partial_rotary = c["partial_rotary_factor"].get<double>();
  } else if (rp && rp->contains("partial_rotary_factor")) {
    h.partial_rotary = (*rp)["partial_rotary_factor"].get<double>();
  }
  if (!(h.partial_rotary > 0 && h.partial_rotary <= 1)) return cfg_error("partial_rotary_factor must be in (0, 1]");
  return ok_status();
}

Result<HfConfig> read_config(const std::string& dir) {
  const fs::path path = fs::path(dir) / "config.json";
  json c;
  try {
    std::ifstream in(path);
    if (!in) return make_error("convert: cannot read " + path.string() + "; give a Hugging Face model directory");
    c = json::parse(in);
  } catch (const std::exception& e) {
    return cfg_error(std::string("not valid JSON: ") + e.what());
  }
  HfConfig h;
  const std::string cls = c.contains("architectures") && c["architectures"].is_array() && !c["architectures"].empty() &&
                                  c["architectures"][0].is_string()
                              ? c["architectures"][0].get<std::string>()
                              : "";
  const std::pair<const char*, const char*> kClasses[] = {
      {"LlamaForCausalLM", "llama"},         {"Qwen2ForCausalLM", "qwen2"},       {"Qwen3ForCausalLM", "qwen3"},
      {"Qwen2MoeForCausalLM", "qwen2moe"}, {"Qwen3MoeForCausalLM", "qwen3moe"},
      {"Qwen3NextForCausalLM", "qwen3next"}, {"Qwen3_5ForCausalLM", "qwen35"},
      {"Qwen3_5MoeForCausalLM", "qwen35moe"}};
  std::string supported;
  for (const auto& [hf, gguf] : kClasses) {
    supported += (supported.empty() ? "" : ", ") + std::string(hf);
    if (cls == hf) h.arch = gguf;
  }
  if (h.arch.empty()) return cfg_error("architectures[0] is '" + cls + "'; supported: " + supported);
  ONEBIT_ASSIGN_OR_RETURN(h.hidden_size, req_int(c, "hidden_size", 1, 1 << 20));
  ONEBIT_ASSIGN_OR_RETURN(h.n_layers, req_int(c, "num_hidden_layers", 1, 4096));
  ONEBIT_ASSIGN_OR_RETURN(h.n_heads, req_int(c, "num_attention_heads", 1, 4096));
  h.n_kv_heads = h.n_heads;
  if (c.contains("num_key_value_heads") && !c["num_key_value_heads"].is_null()) {
    ONEBIT_ASSIGN_OR_RETURN(h.n_kv_heads, req_int(c, "num_key_value_heads", 1, h.n_heads));
  }
  if (h.n_heads % h.n_kv_heads != 0) return cfg_error("num_key_value_heads must divide num_attention_heads");
  ONEBIT_ASSIGN_OR_RETURN(h.intermediate_size, req_int(c, "intermediate_size", 1, 1 << 22));
  ONEBIT_ASSIGN_OR_RETURN(h.vocab_size, req_int(c, "vocab_size", 1, 1 << 24));
  ONEBIT_ASSIGN_OR_RETURN(h.context_length, req_int(c, "max_position_embeddings", 1, 1 << 24));
  h.explicit_head_dim = c.contains("head_dim") && c["head_dim"].is_number_integer();
  if (h.explicit_head_dim) {
    ONEBIT_ASSIGN_OR_RETURN(h.head_dim, req_int(c, "head_dim", 2, 1 << 14));
  } else {
    if (h.hidden_size % h.n_heads != 0) return cfg_error("hidden_size is not a multiple of num_attention_heads and head_dim is absent");
    h.head_dim = h.hidden_size / h.n_heads;
  }
  if (c.contains("rms_norm_eps") && c["rms_norm_eps"].is_number()) h.rms_norm_eps = c["rms_norm_eps"].get<double>();
  h.tied = c.value("tie_word_embeddings", false);
  if (h.arch == "llama" && (c.value("attention_bias", false) || c.value("mlp_bias", false))) {
    return cfg_error("attention_bias / mlp_bias are true; llama models with biases are not supported");
  }
  ONEBIT_TRY(read_rope(c, h));
  if (h.arch.ends_with("moe") || h.arch == "qwen3next") ONEBIT_TRY(read_experts(c, h));
  if (h.arch == "qwen35moe") h.norm_topk_prob = true;  // Qwen3_5MoeTopKRouter always renormalizes
  if (h.arch == "qwen3next" || h.arch.starts_with("qwen35")) ONEBIT_TRY(read_hybrid(c, h));
  return h;
}

// A sentence-transformers checkpoint's pooling (modules.json names the Pooling module's folder,
// whose config.json says the mode), as llama.cpp's _try_set_pooling_type reads it: mean, cls or
// last token become <arch>.pooling_type 1, 2 or 3. No modules.json: no pooling type.
Status read_pooling(const std::string& dir, HfConfig& h, ConvertReport& report) {
  const fs::path modules_path = fs::path(dir) / "modules.json";
  if (!fs::exists(modules_path)) return ok_status();
  json modules, pooling;
  std::string pooling_dir;
  try {
    std::ifstream in(modules_path);
    modules = json::parse(in);
    if (!modules.is_array()) return make_error("convert: " + modules_path.string() + " is not a JSON array of modules");
    for (const json& m : modules) {
      if (m.is_object() && m.value("type", "") == "sentence_transformers.models.Pooling") pooling_dir = m.value("path", "");
    }
    if (pooling_dir.empty()) return ok_status();
    const fs::path config_path = fs::path(dir) / pooling_dir / "config.json";
    std::ifstream pin(config_path);
    if (!pin) return make_error("convert: cannot read " + config_path.string() + ", the Pooling module modules.json names");
    pooling = json::parse(pin);
  } catch (const std::exception& e) {
    return make_error("convert: sentence-transformers modules: not valid JSON: " + std::string(e.what()));
  }
  if (!pooling.is_object()) return make_error("convert: " + pooling_dir + "/config.json is not a JSON object");
  auto on = [&](const char* key) { return pooling.contains(key) && pooling[key].is_boolean() && pooling[key].get<bool>(); };
  if (on("pooling_mode_mean_tokens")) h.pooling_type = 1;
  else if (on("pooling_mode_cls_token")) h.pooling_type = 2;
  else if (on("pooling_mode_lasttoken")) h.pooling_type = 3;
  else report.warnings.push_back(pooling_dir + "/config.json: a pooling mode other than mean, cls or last token; no " + h.arch +
                                 ".pooling_type written (serve --embedding needs --pooling)");
  return ok_status();
}

// Per-layer HF names -> GGUF names (gguf-py tensor_mapping.py).
const std::map<std::string, std::string>& layer_names() {
  static const std::map<std::string, std::string> kNames = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
  };
  return kNames;
}

// The GGUF name of an HF tensor; "" to skip it; an error for an unknown name.
Result<std::string> gguf_name(const std::string& hf, const HfConfig& h) {
  if (hf == "model.embed_tokens.weight") return std::string("token_embd.weight");
  if (hf == "model.norm.weight") return std::string("output_norm.weight");
  if (hf == "lm_head.weight") return std::string(h.tied ? "" : "output.weight");
  if (hf.ends_with("rotary_emb.inv_freq")) return std::string("");
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) == 0) {
    const size_t dot = hf.find('.', prefix.size());
    const std::string idx = hf.substr(prefix.size(), dot - prefix.size());
    if (dot != std::string::npos && !idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos &&
        std::stoll(idx) < h.all_layers()) {
      auto it = layer_names().find(hf.substr(dot + 1));
      if (it != layer_names().end()) return "blk." + idx + "." + it->second;
    }
  }
  return make_error("convert: tensor " + hf + " is not known for " + h.arch + "; the checkpoint has parts 1bit cannot convert");
}

// One expert's projection: "model.layers.<l>.mlp.experts.<e>.<proj>_proj.weight" -> (l, e, proj).
struct ExpertName {
  int64_t layer = -1, expert = -1;
  std::string proj;  // gate, up, down
};
std::optional<ExpertName> expert_name(const std::string& hf, const HfConfig& h) {
  ExpertName n;
  char proj[8] = {0};
  long long l = -1, e = -1;
  int used = 0;
  if (h.n_experts == 0 ||
      std::sscanf(hf.c_str(), "model.layers.%lld.mlp.experts.%lld.%7[a-z]_proj.weight%n", &l, &e, proj, &used) != 3 ||
      size_t(used) != hf.size() || l < 0 || l >= h.all_layers() || e < 0 || e >= h.n_experts) {
    return std::nullopt;
  }
  n.layer = l, n.expert = e, n.proj = proj;
  if (n.proj != "gate" && n.proj != "up" && n.proj != "down") return std::nullopt;
  return n;
}

// Stacks every expert's projection of one layer into blk.<l>.ffn_<proj>_exps.weight, ne = {cols,
// rows, n_experts} (llama.cpp's Qwen2MoeModel.modify_tensors). An error names a missing expert.
Result<OutTensor> stack_experts(const std::vector<const SafetensorsTensor*>& experts, int64_t layer,
                                const std::string& proj, GgmlType type) {
  const std::string name = "blk." + std::to_string(layer) + ".ffn_" + proj + "_exps.weight";
  OutTensor out{name, type, {}, {}};
  for (size_t e = 0; e < experts.size(); ++e) {
    if (experts[e] == nullptr) {
      return make_error("convert: model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(e) + "." +
                        proj + "_proj.weight is missing; the checkpoint is incomplete");
    }
    if (experts[e]->shape != experts[0]->shape || experts[e]->shape.size() != 2) {
      return make_error("convert: the experts of layer " + std::to_string(layer) + " " + proj +
                        "_proj differ in shape or are not 2-D");
    }
    ONEBIT_ASSIGN_OR_RETURN(OutTensor one, encode_tensor(*experts[e], name, type));
    out.bytes.insert(out.bytes.end(), one.bytes.begin(), one.bytes.end());
    if (e == 0) out.ne = {one.ne[0], one.ne[1], uint64_t(experts.size())};
  }
  return out;
}

// ---- hybrid families (docs/hybrid.md): llama.cpp's GGUF layout and transforms ----

// t's elements as floats, row-major.
std::vector<float> floats_of(const SafetensorsTensor& t) {
  std::vector<float> v(size_t(t.n_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.at(int64_t(i));
  return v;
}

// rows x cols floats encoded as `type` (F32 vectors when rows == 0: one dimension).
OutTensor encode_floats(const std::string& name, GgmlType type, int64_t rows, int64_t cols, const std::vector<float>& v) {
  OutTensor out{name, type, rows == 0 ? std::vector<uint64_t>{uint64_t(cols)} : std::vector<uint64_t>{uint64_t(cols), uint64_t(rows)}, {}};
  const int64_t n_rows = std::max<int64_t>(rows, 1);
  const size_t rb = row_size(type, cols).value();
  out.bytes.resize(rb * size_t(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) encode_row(type, v.data() + r * cols, cols, out.bytes.data() + size_t(r) * rb);
  return out;
}

// Qwen3.5 GGUFs hold value heads in tiled order: slot s is HF (grouped) head (s % nk) * r + s / nk.
// Reorders n_v_heads blocks of `block` consecutive elements of v starting at `first`.
void tile_v_heads(std::vector<float>& v, size_t first, size_t block, const HfConfig& h) {
  const int64_t nk = h.n_k_heads, r = h.n_v_heads / h.n_k_heads;
  std::vector<float> src(v.begin() + first, v.begin() + first + block * h.n_v_heads);
  for (int64_t s = 0; s < h.n_v_heads; ++s) {
    const int64_t from = (s % nk) * r + s / nk;
    std::copy_n(src.begin() + from * block, block, v.begin() + first + s * block);
  }
}

// A linear-attention layer's tensor or a zero-centred norm of the hybrid families, converted; an
// empty vector when `suffix` (the name after model.layers.<l>.) is not one of them.
Result<std::vector<OutTensor>> hybrid_tensors(const SafetensorsTensor& t, const std::string& suffix, int64_t layer,
                                              const HfConfig& h, GgmlType out_type, ConvertReport& report) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t H = h.hidden_size, nk = h.n_k_heads, nv = h.n_v_heads, dk = h.k_head_dim, dv = h.v_head_dim;
  const int64_t kd = nk * dk, vd = nv * dv, C = 2 * kd + vd;
  const auto matrix = [&](const std::string& name, int64_t rows, std::vector<float> v) -> Result<OutTensor> {
    ONEBIT_ASSIGN_OR_RETURN(GgmlType type, storage_type(t.name, t, out_type, report));
    return encode_floats(name, type, rows, int64_t(v.size()) / rows, v);
  };
  const auto expect = [&](std::vector<int64_t> shape) -> Status {
    if (t.shape == shape) return ok_status();
    std::string want, got;
    for (int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    for (int64_t d : t.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
    return make_error("convert: " + t.name + " has shape [" + got + "]; the config needs [" + want + "]");
  };
  std::vector<OutTensor> out;
  // Zero-centred RMSNorms (x * (1 + w)): llama.cpp's converter stores 1 + w.
  const std::map<std::string, std::string> norms = {{"input_layernorm.weight", "attn_norm.weight"},
                                                    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
                                                    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
                                                    {"self_attn.k_norm.weight", "attn_k_norm.weight"}};
  if (auto it = norms.find(suffix); it != norms.end()) {
    std::vector<float> v = floats_of(t);
    for (float& x : v) x += 1.0f;
    out.push_back(encode_floats(p + it->second, GgmlType::kF32, 0, int64_t(v.size()), v));
    return out;
  }
  if (!suffix.starts_with("linear_attn.")) return out;
  if (!h.recurrent[size_t(layer)]) return make_error("convert: " + t.name + " in a full_attention layer");
  const std::string w = suffix.substr(12);
  std::vector<float> v = floats_of(t);
  if (w == "in_proj_qkvz.weight") {  // qwen3next: per key head [q dk, k dk, v r*dv, z r*dv]
    ONEBIT_TRY(expect({2 * kd + 2 * vd, H}));
    const int64_t r = nv / nk, group = 2 * dk + 2 * r * dv;
    std::vector<float> qkv, z;
    const auto rows = [&](std::vector<float>& dst, int64_t g, int64_t first, int64_t n) {
      dst.insert(dst.end(), v.begin() + (g * group + first) * H, v.begin() + (g * group + first + n) * H);
    };
    for (int64_t g = 0; g < nk; ++g) rows(qkv, g, 0, dk);
    for (int64_t g = 0; g < nk; ++g) rows(qkv, g, dk, dk);
    for (int64_t g = 0; g < nk; ++g) rows(qkv, g, 2 * dk, r * dv);
    for (int64_t g = 0; g < nk; ++g) rows(z, g, 2 * dk + r * dv, r * dv);
    ONEBIT_ASSIGN_OR_RETURN(OutTensor a, matrix(p + "attn_qkv.weight", C, qkv));
    ONEBIT_ASSIGN_OR_RETURN(OutTensor b, matrix(p + "attn_gate.weight", vd, z));
    out.push_back(std::move(a));
    out.push_back(std::move(b));
  } else if (w == "in_proj_ba.weight") {  // qwen3next: per key head [b r, a r]; written split
    ONEBIT_TRY(expect({2 * nv, H}));
    const int64_t r = nv / nk;
    std::vector<float> beta, alpha;
    for (int64_t g = 0; g < nk; ++g) {
      beta.insert(beta.end(), v.begin() + (g * 2 * r) * H, v.begin() + (g * 2 * r + r) * H);
      alpha.insert(alpha.end(), v.begin() + (g * 2 * r + r) * H, v.begin() + (g * 2 * r + 2 * r) * H);
    }
    ONEBIT_ASSIGN_OR_RETURN(OutTensor a, matrix(p + "ssm_beta.weight", nv, beta));
    ONEBIT_ASSIGN_OR_RETURN(OutTensor b, matrix(p + "ssm_alpha.weight", nv, alpha));
    out.push_back(std::move(a));
    out.push_back(std::move(b));
  } else if (w == "in_proj_qkv.weight") {  // qwen35: [q kd, k kd, v vd]
    ONEBIT_TRY(expect({C, H}));
    tile_v_heads(v, size_t(2 * kd * H), size_t(dv * H), h);
    ONEBIT_ASSIGN_OR_RETURN(OutTensor a, matrix(p + "attn_qkv.weight", C, v));
    out.push_back(std::move(a));
  } else if (w == "in_proj_z.weight" || w == "in_proj_b.weight" || w == "in_proj_a.weight") {
    const bool z = w == "in_proj_z.weight";
    ONEBIT_TRY(expect({z ? vd : nv, H}));
    tile_v_heads(v, 0, size_t((z ? dv : 1) * H), h);
    const std::string name = z ? "attn_gate.weight" : w == "in_proj_b.weight" ? "ssm_beta.weight" : "ssm_alpha.weight";
    ONEBIT_ASSIGN_OR_RETURN(OutTensor a, matrix(p + name, z ? vd : nv, v));
    out.push_back(std::move(a));
  } else if (w == "conv1d.weight") {  // [C, 1, K] -> ne {K, C}, f32
    ONEBIT_TRY(expect({C, 1, h.conv_kernel}));
    if (h.tiled_v_heads()) tile_v_heads(v, size_t(2 * kd * h.conv_kernel), size_t(dv * h.conv_kernel), h);
    out.push_back(encode_floats(p + "ssm_conv1d.weight", GgmlType::kF32, C, h.conv_kernel, v));
  } else if (w == "dt_bias" || w == "A_log") {
    ONEBIT_TRY(expect({nv}));
    if (h.tiled_v_heads()) tile_v_heads(v, 0, 1, h);
    if (w == "A_log") {
      for (float& x : v) x = -std::exp(x);  // llama.cpp's ssm_a
    }
    out.push_back(encode_floats(p + (w == "A_log" ? "ssm_a" : "ssm_dt.bias"), GgmlType::kF32, 0, nv, v));
  } else if (w == "norm.weight") {  // the gated norm: plain weight, no + 1
    ONEBIT_TRY(expect({dv}));
    out.push_back(encode_floats(p + "ssm_norm.weight", GgmlType::kF32, 0, dv, v));
  } else if (w == "out_proj.weight") {  // [H, vd]; qwen35: input columns in tiled order
    ONEBIT_TRY(expect({H, vd}));
    if (h.tiled_v_heads()) {
      for (int64_t row = 0; row < H; ++row) tile_v_heads(v, size_t(row * vd), size_t(dv), h);
    }
    ONEBIT_ASSIGN_OR_RETURN(OutTensor a, matrix(p + "ssm_out.weight", H, v));
    out.push_back(std::move(a));
  } else {
    return make_error("convert: tensor " + t.name + " is not known for " + h.arch);
  }
  return out;
}

// ---- MTP layers of the hybrid checkpoints (mtp.*, as vLLM's qwen3_next_mtp.py reads them) ----

// Counts the checkpoint's mtp.layers.<i> (h.n_mtp) and lists them in h.recurrent as attention
// layers. One MTP layer is supported (the released Qwen3-Next / Qwen3.5 checkpoints have one).
Status count_mtp_layers(const SafetensorsCheckpoint& ckpt, HfConfig& h) {
  if (!h.hybrid()) return ok_status();
  int64_t n = 0;
  for (const auto& [name, t] : ckpt.tensors()) {
    long long i = -1;
    if (std::sscanf(name.c_str(), "mtp.layers.%lld.", &i) == 1 && i >= 0) n = std::max<int64_t>(n, i + 1);
  }
  if (n > 1) return make_error("convert: the checkpoint has " + std::to_string(n) + " MTP layers (mtp.layers.*); 1bit converts one");
  h.n_mtp = n;
  h.recurrent.resize(size_t(h.all_layers()), false);
  return ok_status();
}

// "mtp.layers.<i>.<rest>" as "model.layers.<n_layers + i>.<rest>"; other names unchanged.
std::string layer_name_of_mtp(const std::string& name, const HfConfig& h) {
  long long i = -1;
  int used = 0;
  if (h.n_mtp == 0 || std::sscanf(name.c_str(), "mtp.layers.%lld.%n", &i, &used) != 1 || used == 0) return name;
  return "model.layers." + std::to_string(h.n_layers + i) + "." + name.substr(size_t(used));
}

// The MTP layer's own tensors: fc (eh_proj over [embedding; hidden]) and its zero-centred norms
// (stored 1 + w), as blk.<n_layers>.nextn.*.
Result<OutTensor> mtp_tensor(const SafetensorsTensor& t, const HfConfig& h, GgmlType out_type, ConvertReport& report) {
  const std::string p = "blk." + std::to_string(h.n_layers) + ".nextn.";
  if (h.n_mtp == 0) return make_error("convert: " + t.name + " without mtp.layers.0.*: the MTP layer is incomplete");
  const std::map<std::string, std::string> norms = {{"mtp.pre_fc_norm_embedding.weight", "enorm.weight"},
                                                    {"mtp.pre_fc_norm_hidden.weight", "hnorm.weight"},
                                                    {"mtp.norm.weight", "shared_head_norm.weight"}};
  if (auto it = norms.find(t.name); it != norms.end()) {
    if (t.shape != std::vector<int64_t>{h.hidden_size}) return make_error("convert: " + t.name + " is not [hidden_size]");
    std::vector<float> v = floats_of(t);
    for (float& x : v) x += 1.0f;
    return encode_floats(p + it->second, GgmlType::kF32, 0, int64_t(v.size()), v);
  }
  if (t.name == "mtp.fc.weight") {
    if (t.shape != std::vector<int64_t>{h.hidden_size, 2 * h.hidden_size}) {
      return make_error("convert: mtp.fc.weight is not [hidden_size, 2 hidden_size]");
    }
    ONEBIT_ASSIGN_OR_RETURN(GgmlType type, storage_type(t.name, t, out_type, report));
    return encode_tensor(t, p + "eh_proj.weight", type);
  }
  return make_error("convert: tensor " + t.name + " is not known for " + h.arch + "'s MTP layer");
}

// Llama 3.1 rope scaling as per-frequency divisors (llama.cpp LlamaModel.generate_extra_tensors,
// HF _compute_llama3_parameters): long wavelengths slow down by `factor`, short ones stay, the
// band between is blended. Computed in float as both references do.
OutTensor llama3_rope_freqs(const HfConfig& h) {
  OutTensor t{"rope_freqs.weight", GgmlType::kF32, {uint64_t(h.head_dim / 2)}, {}};
  const float factor = float(h.rope_factor), low = float(h.llama3_low_freq_factor);
  const float high = float(h.llama3_high_freq_factor), old_ctx = float(h.rope_original_context);
  const float low_freq_wavelen = old_ctx / low, high_freq_wavelen = old_ctx / high;
  for (int64_t i = 0; i < h.head_dim / 2; ++i) {
    const float freq = 1.0f / std::pow(float(h.rope_theta), float(2 * i) / float(h.head_dim));
    const float wavelen = 2.0f * float(M_PI) / freq;
    float f = 1.0f;
    if (wavelen > low_freq_wavelen) {
      f = factor;
    } else if (wavelen >= high_freq_wavelen) {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      f = 1.0f / ((1.0f - smooth) / factor + smooth);
    }
    const auto* b = reinterpret_cast<const uint8_t*>(&f);
    t.bytes.insert(t.bytes.end(), b, b + 4);
  }
  return t;
}

void write_hparams(GgufWriter& w, const HfConfig& h, const std::string& name, GgmlType out_type) {
  const std::string a = h.arch + ".";
  w.set_string("general.architecture", h.arch);
  w.set_string("general.name", name);
  w.set_uint32("general.file_type", llama_file_type(out_type));
  w.set_uint32(a + "vocab_size", static_cast<uint32_t>(h.vocab_size));
  w.set_uint32(a + "context_length", static_cast<uint32_t>(h.context_length));
  w.set_uint32(a + "embedding_length", static_cast<uint32_t>(h.hidden_size));
  w.set_uint32(a + "block_count", static_cast<uint32_t>(h.all_layers()));
  if (h.n_mtp > 0) w.set_uint32(a + "nextn_predict_layers", static_cast<uint32_t>(h.n_mtp));
  w.set_uint32(a + "feed_forward_length", static_cast<uint32_t>(h.intermediate_size));
  w.set_uint32(a + "attention.head_count", static_cast<uint32_t>(h.n_heads));
  w.set_uint32(a + "attention.head_count_kv", static_cast<uint32_t>(h.n_kv_heads));
  w.set_float32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(h.rms_norm_eps));
  w.set_float32(a + "rope.freq_base", static_cast<float>(h.rope_theta));
  w.set_uint32(a + "rope.dimension_count", static_cast<uint32_t>(h.hybrid() ? int64_t(double(h.head_dim) * h.partial_rotary)
                                                                             : h.head_dim));
  if (h.explicit_head_dim) {
    w.set_uint32(a + "attention.key_length", static_cast<uint32_t>(h.head_dim));
    w.set_uint32(a + "attention.value_length", static_cast<uint32_t>(h.head_dim));
  }
  if (h.pooling_type >= 0) w.set_uint32(a + "pooling_type", static_cast<uint32_t>(h.pooling_type));
  if (h.n_experts > 0) {
    w.set_uint32(a + "expert_count", static_cast<uint32_t>(h.n_experts));
    w.set_uint32(a + "expert_used_count", static_cast<uint32_t>(h.n_experts_used));
    w.set_uint32(a + "expert_feed_forward_length", static_cast<uint32_t>(h.expert_ffn));
    if (h.shared_expert_ffn > 0) {
      w.set_uint32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(h.shared_expert_ffn));
    }
    w.set_bool(a + "expert_weights_norm", h.norm_topk_prob);
  }
  if (h.hybrid()) {
    w.set_uint32(a + "ssm.conv_kernel", uint32_t(h.conv_kernel));
    w.set_uint32(a + "ssm.state_size", uint32_t(h.k_head_dim));
    w.set_uint32(a + "ssm.group_count", uint32_t(h.n_k_heads));
    w.set_uint32(a + "ssm.time_step_rank", uint32_t(h.n_v_heads));
    w.set_uint32(a + "ssm.inner_size", uint32_t(h.v_head_dim * h.n_v_heads));
    // The interval when the layers follow it (llama.cpp reads only that), else the per-layer list.
    bool interval = h.n_layers >= 4;
    for (int64_t l = 0; l < h.n_layers; ++l) interval = interval && h.recurrent[size_t(l)] == ((l + 1) % 4 != 0);
    if (interval) {
      w.set_uint32(a + "full_attention_interval", 4);
    } else {
      w.set_bool_array(a + "attention.recurrent_layers", h.recurrent);
    }
    if (h.tiled_v_heads()) {
      const int32_t sections[] = {11, 11, 10, 0};
      w.set_array<int32_t>(a + "rope.dimension_sections", sections);
    }
  }
  if (h.rope_scaling == "linear" || h.rope_scaling == "yarn") {
    w.set_string(a + "rope.scaling.type", h.rope_scaling);
    w.set_float32(a + "rope.scaling.factor", static_cast<float>(h.rope_factor));
    if (h.rope_original_context > 0) {
      w.set_uint32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(h.rope_original_context));
    }
  }
}

// Adds the tokenizer.* keys the tokenizer layer writes for tokenizer.json (through a vocab-only
// GGUF next to the output, removed afterwards). A tokenizer it cannot read is a warning.
void add_vocab(GgufWriter& w, const ConvertOptions& o, ConvertReport& report) {
  const fs::path tok_path = fs::path(o.hf_dir) / "tokenizer.json";
  if (!fs::exists(tok_path)) {
    report.warnings.push_back("no tokenizer.json: the GGUF has no vocabulary ('1bit run' will refuse it)");
    return;
  }
  auto tok = read_hf_tokenizer(tok_path.string());
  if (!tok.ok()) {
    report.warnings.push_back("tokenizer not converted: " + tok.message());
    return;
  }
  const std::string tmp = o.out_path + ".vocab.tmp";
  Status st = write_vocab_gguf(*tok, tmp);
  if (st.ok()) {
    auto vocab = GgufFile::open(tmp);
    if (vocab.ok()) {
      for (const GgufKeyValue& kv : vocab->metadata()) {
        if (kv.key.rfind("tokenizer.", 0) == 0) w.set_value(kv.key, kv.value);
      }
    } else {
      st = vocab.error();
    }
  }
  std::error_code ec;
  fs::remove(tmp, ec);
  if (!st.ok()) report.warnings.push_back("tokenizer not converted: " + st.message());
}

}  // namespace

Result<ConvertReport> convert_hf(const ConvertOptions& o) {
  if (o.out_type != GgmlType::kF32 && o.out_type != GgmlType::kF16 && o.out_type != GgmlType::kBF16 &&
      o.out_type != GgmlType::kQ8_0) {
    return make_error("convert: output type " + ggml_type_name(static_cast<uint32_t>(o.out_type)) +
                      " is not supported here; use f32, f16, bf16 or q8_0 (then '1bit quantize' for others)");
  }
  ONEBIT_ASSIGN_OR_RETURN(HfConfig h, read_config(o.hf_dir));
  ONEBIT_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::open_dir(o.hf_dir));
  ConvertReport report;
  report.architecture = h.arch;
  ONEBIT_TRY(read_pooling(o.hf_dir, h, report));
  // Tied models may store the shared matrix only as lm_head.weight (tinystories-656K does).
  if (!ckpt.find("lm_head.weight")) h.tied = true;
  const SafetensorsTensor* embed = ckpt.find("model.embed_tokens.weight");
  if (!embed && h.tied) embed = ckpt.find("lm_head.weight");
  if (!embed) return make_error("convert: the checkpoint has no model.embed_tokens.weight");

  std::vector<OutTensor> out;
  // experts[{layer, proj}][e]: the per-expert tensors, stacked after the loop
  std::map<std::pair<int64_t, std::string>, std::vector<const SafetensorsTensor*>> experts;
  ONEBIT_TRY(count_mtp_layers(ckpt, h));
  for (const auto& [stored_name, t] : ckpt.tensors()) {
    const std::string hf_name = layer_name_of_mtp(stored_name, h);  // mtp.layers.<i>. -> model.layers.<n + i>.
    if (auto e = expert_name(hf_name, h)) {
      auto& slot = experts[{e->layer, e->proj}];
      slot.resize(size_t(h.n_experts), nullptr);
      slot[size_t(e->expert)] = &t;
      continue;
    }
    if (h.hybrid() && hf_name.starts_with("mtp.") && !hf_name.starts_with("mtp.layers.")) {
      ONEBIT_ASSIGN_OR_RETURN(OutTensor ot, mtp_tensor(t, h, o.out_type, report));
      out.push_back(std::move(ot));
      continue;
    }
    if (h.hybrid() && hf_name == "model.norm.weight") {  // zero-centred: 1 + w
      std::vector<float> v = floats_of(t);
      for (float& x : v) x += 1.0f;
      out.push_back(encode_floats("output_norm.weight", GgmlType::kF32, 0, int64_t(v.size()), v));
      continue;
    }
    if (h.hybrid() && hf_name.starts_with("model.layers.")) {
      const size_t dot = hf_name.find('.', 13);
      const std::string idx = hf_name.substr(13, dot - 13);
      if (dot != std::string::npos && !idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos &&
          std::stoll(idx) < h.all_layers()) {
        ONEBIT_ASSIGN_OR_RETURN(std::vector<OutTensor> ts, hybrid_tensors(t, hf_name.substr(dot + 1), std::stoll(idx), h,
                                                                         o.out_type, report));
        if (!ts.empty()) {
          for (OutTensor& ot : ts) out.push_back(std::move(ot));
          continue;
        }
      }
    }
    if (hf_name.ends_with("mlp.shared_expert_gate.weight")) {  // [1, hidden] -> 1-D F32 as llama.cpp
      ONEBIT_ASSIGN_OR_RETURN(std::string name, gguf_name(hf_name, h));
      ONEBIT_ASSIGN_OR_RETURN(OutTensor ot, encode_tensor(t, name, GgmlType::kF32));
      ot.ne = {ot.ne[0]};
      out.push_back(std::move(ot));
      continue;
    }
    ONEBIT_ASSIGN_OR_RETURN(std::string name, gguf_name(hf_name, h));
    if (name.empty() || (hf_name == "lm_head.weight" && h.tied)) continue;
    ONEBIT_ASSIGN_OR_RETURN(GgmlType type, storage_type(hf_name, t, o.out_type, report));
    if (name.ends_with("ffn_gate_inp.weight")) type = GgmlType::kF32;  // routers stay f32, as llama.cpp keeps them
    // llama: GGUF stores q/k for the "normal" RoPE ordering (convert_hf_to_gguf.py LlamaModel).
    int64_t permute = 0;
    if (h.arch == "llama" && (name.ends_with("attn_q.weight") || name.ends_with("attn_k.weight"))) permute = h.head_dim;
    ONEBIT_ASSIGN_OR_RETURN(OutTensor ot, encode_tensor(t, name, type, permute));
    out.push_back(std::move(ot));
  }
  for (const auto& [key, list] : experts) {
    const SafetensorsTensor* first = *std::find_if(list.begin(), list.end(), [](auto* t) { return t != nullptr; });
    ONEBIT_ASSIGN_OR_RETURN(GgmlType type, storage_type(first->name, *first, o.out_type, report));
    ONEBIT_ASSIGN_OR_RETURN(OutTensor ot, stack_experts(list, key.first, key.second, type));
    out.push_back(std::move(ot));
  }
  if (h.rope_scaling == "llama3") out.push_back(llama3_rope_freqs(h));
  if (embed->name == "lm_head.weight") {
    ONEBIT_ASSIGN_OR_RETURN(OutTensor ot, encode_tensor(*embed, "token_embd.weight", o.out_type));
    out.push_back(std::move(ot));
  }
  GgufWriter w;
  write_hparams(w, h, dir_name(o.hf_dir), o.out_type);
  add_vocab(w, o, report);
  ONEBIT_TRY(write_tensors(w, out, o.out_path, report));
  return report;
}

}  // namespace onebit
