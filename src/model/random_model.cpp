// Random weights (normal, std = initializer_range, as HF's _init_weights; norms 1) in llama.cpp's
// tensor names and metadata keys; the optional config key output_init_std sets the std of the
// output matrix alone (real models' logits are far from the near-uniform ones of std 0.02). Rows
// are generated from a per-tensor seed, so the bytes do not depend on thread count or order.
#include "model/random_model.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/fp16.h"
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "gguf/quants.h"
#include "model/convert_common.h"
#include "tokenizer/hf_vocab.h"

namespace onebit {
namespace {

namespace fs = std::filesystem;

struct Shape {
  std::string arch;
  int64_t hidden = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, ffn = 0, vocab = 0, head_dim = 0;
  int64_t context = 2048;
  double eps = 1e-6, rope_theta = 10000.0;
  double output_std = 0;  // output_init_std; 0: the options' init_std
  bool tied = false;
  int64_t n_experts = 0, n_experts_used = 0, expert_ffn = 0, shared_ffn = 0;  // *_moe model types
  bool norm_topk = false;
};

Result<Shape> read_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error("config: cannot open " + path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return make_error("config: " + path + " is not a JSON object");
  Shape s;
  s.arch = j.value("model_type", std::string());
  if (s.arch == "qwen2_moe" || s.arch == "qwen3_moe") s.arch.erase(5, 1);  // the GGUF names
  if (s.arch != "llama" && s.arch != "qwen2" && s.arch != "qwen3" && s.arch != "qwen2moe" && s.arch != "qwen3moe") {
    return make_error("config: model_type '" + j.value("model_type", std::string()) +
                      "' is not supported; use llama, qwen2, qwen3, qwen2_moe or qwen3_moe");
  }
  auto get = [&](const char* key, int64_t& dst, bool required) -> Status {
    if (!j.contains(key)) return required ? Status(make_error(std::string("config: missing ") + key)) : ok_status();
    if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0 || j[key].get<int64_t>() > (1 << 24)) {
      return make_error(std::string("config: ") + key + " must be an integer in 1..16777216");
    }
    dst = j[key].get<int64_t>();
    return ok_status();
  };
  ONEBIT_TRY(get("hidden_size", s.hidden, true));
  ONEBIT_TRY(get("num_hidden_layers", s.n_layers, true));
  ONEBIT_TRY(get("num_attention_heads", s.n_heads, true));
  ONEBIT_TRY(get("intermediate_size", s.ffn, true));
  ONEBIT_TRY(get("vocab_size", s.vocab, true));
  s.n_kv_heads = s.n_heads;
  ONEBIT_TRY(get("num_key_value_heads", s.n_kv_heads, false));
  ONEBIT_TRY(get("max_position_embeddings", s.context, false));
  s.head_dim = s.hidden / s.n_heads;
  if (j.contains("head_dim") && !j["head_dim"].is_null()) ONEBIT_TRY(get("head_dim", s.head_dim, false));
  if (s.n_heads % s.n_kv_heads != 0) return make_error("config: num_attention_heads must be a multiple of num_key_value_heads");
  if (j.contains("rms_norm_eps") && j["rms_norm_eps"].is_number()) s.eps = j["rms_norm_eps"].get<double>();
  if (j.contains("rope_theta") && j["rope_theta"].is_number()) s.rope_theta = j["rope_theta"].get<double>();
  s.tied = j.value("tie_word_embeddings", false);
  if (s.arch.ends_with("moe")) {
    ONEBIT_TRY(get(j.contains("num_experts") ? "num_experts" : "num_local_experts", s.n_experts, true));
    ONEBIT_TRY(get("num_experts_per_tok", s.n_experts_used, true));
    ONEBIT_TRY(get("moe_intermediate_size", s.expert_ffn, true));
    if (j.contains("shared_expert_intermediate_size") && j["shared_expert_intermediate_size"] != 0) {
      ONEBIT_TRY(get("shared_expert_intermediate_size", s.shared_ffn, false));
    }
    if (s.n_experts_used > s.n_experts) return make_error("config: num_experts_per_tok exceeds the expert count");
    s.norm_topk = j.value("norm_topk_prob", s.arch == "qwen3moe");
  }
  if (j.contains("output_init_std")) {
    const nlohmann::json& v = j["output_init_std"];
    if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 100) {
      return make_error("config: output_init_std must be a number in (0, 100] (the std of output.weight)");
    }
    s.output_std = v.get<double>();
  }
  return s;
}

// The tokenizer.* keys of a GGUF, or of a tokenizer.json through a vocab-only GGUF.
Status copy_vocab(GgufWriter& w, const std::string& path, const std::string& out_path, int64_t vocab) {
  std::string gguf_path = path;
  const bool from_json = fs::path(path).extension() == ".json";
  if (from_json) {
    auto tok = read_hf_tokenizer(path);
    if (!tok.ok()) return make_error("tokenizer: " + path + ": " + tok.message());
    gguf_path = out_path + ".vocab.tmp";
    ONEBIT_TRY(write_vocab_gguf(*tok, gguf_path));
  }
  auto f = GgufFile::open(gguf_path);
  Status st = ok_status();
  if (!f.ok()) {
    st = make_error("tokenizer: " + f.message());
  } else {
    auto tokens = f->get_string_array("tokenizer.ggml.tokens");
    if (!tokens.ok()) {
      st = make_error("tokenizer: " + path + " has no tokenizer.ggml.tokens");
    } else if (int64_t(tokens->size()) != vocab) {
      st = make_error("tokenizer: " + path + " has " + std::to_string(tokens->size()) +
                      " tokens but config vocab_size is " + std::to_string(vocab) + "; make them equal");
    } else {
      for (const GgufKeyValue& kv : f->metadata()) {
        if (kv.key.rfind("tokenizer.", 0) == 0) w.set_value(kv.key, kv.value);
      }
    }
  }
  if (from_json) {
    std::error_code ec;
    fs::remove(gguf_path, ec);
  }
  return st;
}

// A [rows, cols] tensor of N(0, std) (or all `fill` when std == 0) encoded as `type`; with
// n_stack > 0, n_stack such matrices stacked as one 3-D tensor (experts).
OutTensor make_tensor(std::string name, GgmlType type, int64_t rows, int64_t cols, float std, float fill,
                      uint64_t seed, int64_t n_stack) {
  if (cols % 256 != 0 && type != GgmlType::kF32 && type != GgmlType::kF16 && type != GgmlType::kBF16) {
    if (cols % 32 != 0) type = GgmlType::kF16;  // the block types need whole blocks per row
  }
  OutTensor t{std::move(name), type, {uint64_t(cols)}, {}};
  if (rows > 1 || n_stack > 0) t.ne.push_back(uint64_t(rows));
  if (n_stack > 0) {
    t.ne.push_back(uint64_t(n_stack));
    rows *= n_stack;
  }
  const size_t rb = row_size(type, cols).value();
  t.bytes.resize(rb * rows);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, std);
  std::vector<float> row(size_t(cols), fill);
  for (int64_t r = 0; r < rows; ++r) {
    if (std > 0) for (float& x : row) x = dist(rng);
    encode_row(type, row.data(), cols, t.bytes.data() + r * rb);
  }
  return t;
}

// make_tensor's arguments.
using TensorSpec = std::tuple<std::string, GgmlType, int64_t, int64_t, float, float, uint64_t, int64_t>;

}  // namespace

Status write_random_model(const RandomModelOptions& o) {
  if (o.out_type != GgmlType::kF32 && o.out_type != GgmlType::kF16 && o.out_type != GgmlType::kBF16 &&
      o.out_type != GgmlType::kQ8_0) {
    return make_error("random model: --type must be f32, f16, bf16 or q8_0 (then `1bit quantize` for others)");
  }
  ONEBIT_ASSIGN_OR_RETURN(Shape s, read_config(o.config_path));
  GgufWriter w;
  const std::string a = s.arch + ".";
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", "random " + fs::path(o.config_path).parent_path().filename().string());
  w.set_uint32("general.file_type", llama_file_type(o.out_type));
  w.set_uint32(a + "vocab_size", uint32_t(s.vocab));
  w.set_uint32(a + "context_length", uint32_t(s.context));
  w.set_uint32(a + "embedding_length", uint32_t(s.hidden));
  w.set_uint32(a + "block_count", uint32_t(s.n_layers));
  w.set_uint32(a + "feed_forward_length", uint32_t(s.ffn));
  w.set_uint32(a + "attention.head_count", uint32_t(s.n_heads));
  w.set_uint32(a + "attention.head_count_kv", uint32_t(s.n_kv_heads));
  w.set_float32(a + "attention.layer_norm_rms_epsilon", float(s.eps));
  w.set_float32(a + "rope.freq_base", float(s.rope_theta));
  w.set_uint32(a + "rope.dimension_count", uint32_t(s.head_dim));
  w.set_uint32(a + "attention.key_length", uint32_t(s.head_dim));
  w.set_uint32(a + "attention.value_length", uint32_t(s.head_dim));
  if (s.n_experts > 0) {
    w.set_uint32(a + "expert_count", uint32_t(s.n_experts));
    w.set_uint32(a + "expert_used_count", uint32_t(s.n_experts_used));
    w.set_uint32(a + "expert_feed_forward_length", uint32_t(s.expert_ffn));
    if (s.shared_ffn > 0) w.set_uint32(a + "expert_shared_feed_forward_length", uint32_t(s.shared_ffn));
    w.set_bool(a + "expert_weights_norm", s.norm_topk);
  }
  ONEBIT_TRY(copy_vocab(w, o.tokenizer_path, o.out_path, s.vocab));

  std::vector<TensorSpec> ts;  // made in parallel below (each from its own seed)
  const auto Spec = [](std::string name, GgmlType type, int64_t rows, int64_t cols, float std, float fill,
                       uint64_t seed, int64_t n_stack = 0) {
    return TensorSpec(std::move(name), type, rows, cols, std, fill, seed, n_stack);
  };
  uint64_t seed = o.seed * 1000003u;
  const float sd = o.init_std;
  const float out_sd = s.output_std > 0 ? float(s.output_std) : sd;  // tied: the embedding is the output
  const GgmlType mt = o.out_type;
  const int64_t q_dim = s.n_heads * s.head_dim, kv_dim = s.n_kv_heads * s.head_dim;
  ts.push_back(Spec("token_embd.weight", mt, s.vocab, s.hidden, s.tied ? out_sd : sd, 0, ++seed));
  ts.push_back(Spec("output_norm.weight", GgmlType::kF32, 1, s.hidden, 0, 1, ++seed));
  if (!s.tied) ts.push_back(Spec("output.weight", mt, s.vocab, s.hidden, out_sd, 0, ++seed));
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    ts.push_back(Spec(p + "attn_norm.weight", GgmlType::kF32, 1, s.hidden, 0, 1, ++seed));
    ts.push_back(Spec(p + "attn_q.weight", mt, q_dim, s.hidden, sd, 0, ++seed));
    ts.push_back(Spec(p + "attn_k.weight", mt, kv_dim, s.hidden, sd, 0, ++seed));
    ts.push_back(Spec(p + "attn_v.weight", mt, kv_dim, s.hidden, sd, 0, ++seed));
    if (s.arch == "qwen2" || s.arch == "qwen2moe") {
      ts.push_back(Spec(p + "attn_q.bias", GgmlType::kF32, 1, q_dim, sd, 0, ++seed));
      ts.push_back(Spec(p + "attn_k.bias", GgmlType::kF32, 1, kv_dim, sd, 0, ++seed));
      ts.push_back(Spec(p + "attn_v.bias", GgmlType::kF32, 1, kv_dim, sd, 0, ++seed));
    }
    if (s.arch == "qwen3" || s.arch == "qwen3moe") {
      ts.push_back(Spec(p + "attn_q_norm.weight", GgmlType::kF32, 1, s.head_dim, 0, 1, ++seed));
      ts.push_back(Spec(p + "attn_k_norm.weight", GgmlType::kF32, 1, s.head_dim, 0, 1, ++seed));
    }
    ts.push_back(Spec(p + "attn_output.weight", mt, s.hidden, q_dim, sd, 0, ++seed));
    ts.push_back(Spec(p + "ffn_norm.weight", GgmlType::kF32, 1, s.hidden, 0, 1, ++seed));
    if (s.n_experts == 0) {
      ts.push_back(Spec(p + "ffn_gate.weight", mt, s.ffn, s.hidden, sd, 0, ++seed));
      ts.push_back(Spec(p + "ffn_up.weight", mt, s.ffn, s.hidden, sd, 0, ++seed));
      ts.push_back(Spec(p + "ffn_down.weight", mt, s.hidden, s.ffn, sd, 0, ++seed));
      continue;
    }
    const int64_t e = s.n_experts, f = s.expert_ffn;
    ts.push_back(Spec(p + "ffn_gate_inp.weight", GgmlType::kF32, e, s.hidden, sd, 0, ++seed));
    ts.push_back(Spec(p + "ffn_gate_exps.weight", mt, f, s.hidden, sd, 0, ++seed, e));
    ts.push_back(Spec(p + "ffn_up_exps.weight", mt, f, s.hidden, sd, 0, ++seed, e));
    ts.push_back(Spec(p + "ffn_down_exps.weight", mt, s.hidden, f, sd, 0, ++seed, e));
    if (s.shared_ffn > 0) {
      ts.push_back(Spec(p + "ffn_gate_inp_shexp.weight", GgmlType::kF32, 1, s.hidden, sd, 0, ++seed));
      ts.push_back(Spec(p + "ffn_gate_shexp.weight", mt, s.shared_ffn, s.hidden, sd, 0, ++seed));
      ts.push_back(Spec(p + "ffn_up_shexp.weight", mt, s.shared_ffn, s.hidden, sd, 0, ++seed));
      ts.push_back(Spec(p + "ffn_down_shexp.weight", mt, s.hidden, s.shared_ffn, sd, 0, ++seed));
    }
  }
  std::vector<OutTensor> out(ts.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i) {
    pool.emplace_back([&] {
      for (size_t j; (j = next++) < ts.size();) out[j] = std::apply(make_tensor, std::move(ts[j]));
    });
  }
  for (std::thread& t : pool) t.join();
  for (const OutTensor& t : out) ONEBIT_TRY(w.add_tensor(t.name, uint32_t(t.type), t.ne, t.bytes));
  return w.write_file(o.out_path);
}

}  // namespace onebit
