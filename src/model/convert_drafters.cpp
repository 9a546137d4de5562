// MTP head and DFlash drafter checkpoints -> GGUF (layout in docs/models.md). Names follow
// llama.cpp where it has them (blk.N.nextn.* for DeepSeek-V3 / GLM-4.5 MTP layers, the usual
// blk.N.attn_* for transformer blocks). Depends on the safetensors reader and the GGUF writer only.
#include "model/convert_drafters.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/fp16.h"
#include "gguf/gguf_writer.h"
#include "gguf/quants.h"
#include "model/convert_common.h"
#include "model/safetensors.h"

namespace onebit {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kMtpArch = "qwen3_mtp";
constexpr const char* kDflashArch = "qwen3_dflash";

struct DrafterConfig {
  std::string arch;  // kMtpArch or kDflashArch
  int64_t hidden_size = 0, intermediate_size = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t context_length = 0, vocab_size = 0, n_layers = 1;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
  int64_t draft_length = 3;             // MTP: tokens drafted per step it was trained for
  int64_t block_size = 0;               // DFlash
  std::vector<uint32_t> target_layers;  // DFlash: target layer outputs it reads, 0-based
  bool add_last_context = false;        // DFlash: block inputs add the context of anchor-1
};

Result<json> read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return make_error("convert: cannot open " + path.string());
  json c = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (c.is_discarded() || !c.is_object())
    return make_error("convert: " + path.string() + " is not a JSON object");
  return c;
}

Result<int64_t> field(const json& c, const char* key, int64_t min, int64_t max) {
  if (!c.contains(key) || !c[key].is_number_integer()) {
    return make_error(std::string("convert: drafter config.json: missing integer field ") + key);
  }
  const int64_t v = c[key].get<int64_t>();
  if (v < min || v > max) {
    return make_error(std::string("convert: drafter config.json: ") + key + " is " + std::to_string(v) +
                      "; allowed " + std::to_string(min) + ".." + std::to_string(max));
  }
  return v;
}

Result<DrafterConfig> read_config(const std::string& dir) {
  ONEBIT_ASSIGN_OR_RETURN(json c, read_json(fs::path(dir) / "config.json"));
  DrafterConfig d;
  d.arch = c.value("model_type", "");
  if (d.arch != kMtpArch && d.arch != kDflashArch) {
    return make_error("convert: config.json model_type '" + d.arch +
                      "' is not a drafter (qwen3_mtp, qwen3_dflash)");
  }
  ONEBIT_ASSIGN_OR_RETURN(d.hidden_size, field(c, "hidden_size", 1, 1 << 16));
  ONEBIT_ASSIGN_OR_RETURN(d.intermediate_size, field(c, "intermediate_size", 1, 1 << 20));
  ONEBIT_ASSIGN_OR_RETURN(d.n_heads, field(c, "num_attention_heads", 1, 1024));
  ONEBIT_ASSIGN_OR_RETURN(d.n_kv_heads, field(c, "num_key_value_heads", 1, d.n_heads));
  ONEBIT_ASSIGN_OR_RETURN(d.head_dim, field(c, "head_dim", 2, 1 << 14));
  ONEBIT_ASSIGN_OR_RETURN(d.context_length, field(c, "max_position_embeddings", 1, 1 << 24));
  ONEBIT_ASSIGN_OR_RETURN(d.vocab_size, field(c, "vocab_size", 1, 1 << 24));
  if (c.contains("rms_norm_eps") && c["rms_norm_eps"].is_number())
    d.rms_norm_eps = c["rms_norm_eps"].get<double>();
  if (c.contains("rope_theta") && c["rope_theta"].is_number()) d.rope_theta = c["rope_theta"].get<double>();
  if (d.arch == kMtpArch) {
    if (c.contains("num_speculative_tokens")) {
      ONEBIT_ASSIGN_OR_RETURN(d.draft_length, field(c, "num_speculative_tokens", 1, 64));
    }
    return d;
  }
  ONEBIT_ASSIGN_OR_RETURN(d.n_layers, field(c, "num_hidden_layers", 1, 64));
  ONEBIT_ASSIGN_OR_RETURN(d.block_size, field(c, "block_size", 2, 256));
  d.add_last_context = c.value("add_last_context", false);
  if (!c.contains("target_layer_ids") || !c["target_layer_ids"].is_array() || c["target_layer_ids"].empty()) {
    return make_error(
        "convert: drafter config.json: target_layer_ids must be a non-empty array of layer indices");
  }
  for (const json& v : c["target_layer_ids"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 4096) {
      return make_error("convert: drafter config.json: target_layer_ids holds " + v.dump() +
                        "; expected 0..4096");
    }
    d.target_layers.push_back(static_cast<uint32_t>(v.get<int64_t>()));
  }
  return d;
}

// Per-block names (HF Qwen3DecoderLayer -> gguf-py tensor_mapping.py).
const std::map<std::string, std::string>& block_names() {
  static const std::map<std::string, std::string> kNames = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  return kNames;
}

// "<prefix>layers.<i>.<rest>" -> "blk.<i>.<gguf rest>"; "" when `hf` is not a block tensor.
std::string block_tensor_name(const std::string& hf, const std::string& prefix, int64_t n_layers) {
  const std::string p = prefix + "layers.";
  if (hf.rfind(p, 0) != 0) return "";
  const size_t dot = hf.find('.', p.size());
  if (dot == std::string::npos) return "";
  const std::string idx = hf.substr(p.size(), dot - p.size());
  if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos || std::stoll(idx) >= n_layers)
    return "";
  auto it = block_names().find(hf.substr(dot + 1));
  return it == block_names().end() ? "" : "blk." + idx + "." + it->second;
}

Result<std::string> gguf_name(const std::string& hf, const DrafterConfig& d) {
  static const std::map<std::string, std::string> kMtp = {
      {"mtp.enorm.weight", "blk.0.nextn.enorm.weight"},
      {"mtp.hnorm.weight", "blk.0.nextn.hnorm.weight"},
      {"mtp.eh_proj.weight", "blk.0.nextn.eh_proj.weight"},
      {"mtp.norm.weight", "blk.0.nextn.shared_head_norm.weight"},
  };
  static const std::map<std::string, std::string> kDflash = {
      {"dflash.fc.weight", "dflash.fc.weight"},
      {"dflash.hidden_norm.weight", "dflash.hidden_norm.weight"},
      {"dflash.mask_embd", "dflash.mask_embd.weight"},
      {"dflash.norm.weight", "output_norm.weight"},
  };
  const bool mtp = d.arch == kMtpArch;
  const auto& fixed = mtp ? kMtp : kDflash;
  if (auto it = fixed.find(hf); it != fixed.end()) return it->second;
  std::string name = block_tensor_name(hf, mtp ? "mtp." : "dflash.", d.n_layers);
  if (!name.empty()) return name;
  return make_error("convert: tensor " + hf + " is not part of a " + d.arch + " drafter");
}

void write_hparams(GgufWriter& w, const DrafterConfig& d, const std::string& name, GgmlType out_type) {
  const std::string a = d.arch + ".";
  w.set_string("general.architecture", d.arch);
  w.set_string("general.name", name);
  w.set_uint32("general.file_type", llama_file_type(out_type));
  w.set_string(a + "target_architecture", "qwen3");
  w.set_uint32(a + "vocab_size", static_cast<uint32_t>(d.vocab_size));
  w.set_uint32(a + "context_length", static_cast<uint32_t>(d.context_length));
  w.set_uint32(a + "embedding_length", static_cast<uint32_t>(d.hidden_size));
  w.set_uint32(a + "block_count", static_cast<uint32_t>(d.n_layers));
  w.set_uint32(a + "feed_forward_length", static_cast<uint32_t>(d.intermediate_size));
  w.set_uint32(a + "attention.head_count", static_cast<uint32_t>(d.n_heads));
  w.set_uint32(a + "attention.head_count_kv", static_cast<uint32_t>(d.n_kv_heads));
  w.set_uint32(a + "attention.key_length", static_cast<uint32_t>(d.head_dim));
  w.set_uint32(a + "attention.value_length", static_cast<uint32_t>(d.head_dim));
  w.set_float32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(d.rms_norm_eps));
  w.set_float32(a + "rope.freq_base", static_cast<float>(d.rope_theta));
  w.set_uint32(a + "rope.dimension_count", static_cast<uint32_t>(d.head_dim));
  if (d.arch == kMtpArch) {
    w.set_uint32(a + "nextn_predict_layers", 1);
    w.set_uint32(a + "draft_length", static_cast<uint32_t>(d.draft_length));
  } else {
    w.set_uint32(a + "block_size", static_cast<uint32_t>(d.block_size));
    w.set_array<uint32_t>(a + "target_layers", d.target_layers);
    w.set_bool(a + "add_last_context", d.add_last_context);
  }
}

}  // namespace

bool is_drafter_checkpoint(const std::string& hf_dir) {
  auto c = read_json(fs::path(hf_dir) / "config.json");
  if (!c.ok()) return false;
  const std::string type = c->value("model_type", "");
  return type == kMtpArch || type == kDflashArch;
}

Result<ConvertReport> convert_drafter(const ConvertOptions& o) {
  if (o.out_type != GgmlType::kF32 && o.out_type != GgmlType::kF16 && o.out_type != GgmlType::kBF16 &&
      o.out_type != GgmlType::kQ8_0) {
    return make_error("convert: output type " + ggml_type_name(static_cast<uint32_t>(o.out_type)) +
                      " is not supported for drafters; use f32, f16, bf16 or q8_0");
  }
  ONEBIT_ASSIGN_OR_RETURN(DrafterConfig d, read_config(o.hf_dir));
  ONEBIT_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::open_dir(o.hf_dir));
  ConvertReport report;
  report.architecture = d.arch;
  std::vector<OutTensor> out;
  for (const auto& [hf_name, t] : ckpt.tensors()) {
    ONEBIT_ASSIGN_OR_RETURN(std::string name, gguf_name(hf_name, d));
    ONEBIT_ASSIGN_OR_RETURN(GgmlType type, storage_type(hf_name, t, o.out_type, report));
    ONEBIT_ASSIGN_OR_RETURN(OutTensor ot, encode_tensor(t, name, type));
    out.push_back(std::move(ot));
  }
  GgufWriter w;
  write_hparams(w, d, dir_name(o.hf_dir), o.out_type);
  ONEBIT_TRY(write_tensors(w, out, o.out_path, report));
  return report;
}

}  // namespace onebit
