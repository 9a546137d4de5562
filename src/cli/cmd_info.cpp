// `1bit info FILE.gguf [--json]`: what a GGUF file holds (model facts, tensor types and sizes, a
// memory estimate) as text or one JSON object. Reads metadata and the tensor directory only.
#include <cinttypes>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/command.h"
#include "gguf/gguf_reader.h"

namespace onebit::cli {
namespace {

using Json = nlohmann::ordered_json;

struct TypeUse {
  uint64_t count = 0;
  uint64_t bytes = 0;
};

// The facts `info` reports; absent metadata stays nullopt (printed as "-" or null).
struct ModelFacts {
  std::optional<std::string> architecture, name, tokenizer_model, tokenizer_pre;
  std::optional<uint64_t> n_layers, n_heads, n_kv_heads, context_length, embedding_length;
  std::optional<uint64_t> key_length, value_length, vocab_size;
  std::optional<uint64_t> pooling_type;  // <arch>.pooling_type (embedding models)
  std::optional<uint64_t> n_nextn;       // <arch>.nextn_predict_layers: MTP layers among n_layers
  uint64_t n_params = 0;
  uint64_t tensor_bytes = 0;
  std::map<uint32_t, TypeUse> types;  // by ggml type id
  std::optional<uint64_t> template_bytes;
  std::optional<uint64_t> kv_cache_bytes;  // F16 K and V for context_length tokens
  std::optional<uint64_t> kv_token_bytes;  // F16 K and V of one position (every layer)
};

std::optional<std::string> opt_string(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr || v->type != GgufValueType::kString) return std::nullopt;
  return std::string(v->str);
}

// A non-negative integer; for a per-layer array (some architectures) the largest element.
std::optional<uint64_t> opt_uint(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_integer()) return v->as_int() < 0 && v->type != GgufValueType::kUint64 ? std::nullopt
                                                                                   : std::optional(v->as_uint());
  if (v->type != GgufValueType::kArray || v->array_count == 0) return std::nullopt;
  if (v->array_type == GgufValueType::kString || v->array_type == GgufValueType::kArray ||
      v->array_type == GgufValueType::kFloat32 || v->array_type == GgufValueType::kFloat64) {
    return std::nullopt;
  }
  int64_t best = 0;
  for (uint64_t i = 0; i < v->array_count; ++i) best = std::max(best, v->array_int(i));
  return static_cast<uint64_t>(best);
}

ModelFacts gather(const GgufFile& f) {
  ModelFacts m;
  m.architecture = opt_string(f, "general.architecture");
  m.name = opt_string(f, "general.name");
  const std::string a = m.architecture.value_or("?");
  m.n_layers = opt_uint(f, a + ".block_count");
  m.n_heads = opt_uint(f, a + ".attention.head_count");
  m.n_kv_heads = opt_uint(f, a + ".attention.head_count_kv");
  if (!m.n_kv_heads) m.n_kv_heads = m.n_heads;  // no GQA key: one KV head per head
  m.context_length = opt_uint(f, a + ".context_length");
  m.embedding_length = opt_uint(f, a + ".embedding_length");
  m.key_length = opt_uint(f, a + ".attention.key_length");
  m.value_length = opt_uint(f, a + ".attention.value_length");
  m.pooling_type = opt_uint(f, a + ".pooling_type");
  m.n_nextn = opt_uint(f, a + ".nextn_predict_layers");
  if (m.n_heads && *m.n_heads > 0 && m.embedding_length) {
    if (!m.key_length) m.key_length = *m.embedding_length / *m.n_heads;
    if (!m.value_length) m.value_length = *m.embedding_length / *m.n_heads;
  }
  if (const GgufValue* t = f.find("tokenizer.ggml.tokens"); t && t->type == GgufValueType::kArray) {
    m.vocab_size = t->array_count;
  } else {
    m.vocab_size = opt_uint(f, a + ".vocab_size");
  }
  m.tokenizer_model = opt_string(f, "tokenizer.ggml.model");
  m.tokenizer_pre = opt_string(f, "tokenizer.ggml.pre");
  for (const auto& t : f.tensors()) {
    m.n_params += t.n_elements;
    m.tensor_bytes += t.n_bytes;
    auto& use = m.types[t.raw_type];
    use.count += 1;
    use.bytes += t.n_bytes;
  }
  if (const GgufValue* t = f.find("tokenizer.chat_template"); t && t->type == GgufValueType::kString) {
    m.template_bytes = t->str.size();
  }
  if (m.n_layers && m.context_length && m.n_kv_heads && m.key_length && m.value_length) {
    // Layers with K/V: those with an attn_k tensor (a hybrid's recurrent layers keep a fixed state
    // per sequence instead), else every layer; not the MTP layers (the drafter's own pool).
    const uint64_t trunk = *m.n_layers - std::min(*m.n_layers, m.n_nextn.value_or(0));
    uint64_t attention_layers = 0;
    for (const GgufTensorInfo& t : f.tensors()) {
      unsigned long long l = 0;
      attention_layers += t.name.ends_with(".attn_k.weight") && std::sscanf(std::string(t.name).c_str(), "blk.%llu.", &l) == 1 && l < trunk;
    }
    if (attention_layers == 0 || attention_layers > *m.n_layers) attention_layers = *m.n_layers;
    // Doubles: a hostile file's values must not overflow into a small estimate.
    const double per_token = static_cast<double>(*m.n_kv_heads) * static_cast<double>(*m.key_length + *m.value_length);
    const double total = static_cast<double>(attention_layers) * static_cast<double>(*m.context_length) * per_token * 2;
    if (total < 1e18) m.kv_cache_bytes = static_cast<uint64_t>(total);
    const double token = static_cast<double>(attention_layers) * per_token * 2;
    if (token < 1e18) m.kv_token_bytes = static_cast<uint64_t>(token);
  }
  return m;
}

std::string commas(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string human_bytes(uint64_t v) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(v);
  int u = 0;
  while (x >= 1024 && u < 4) {
    x /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", x, units[u]);
  return buf;
}

std::string human_count(uint64_t v) {
  const char* units[] = {"", "K", "M", "B", "T"};
  double x = static_cast<double>(v);
  int u = 0;
  while (x >= 1000 && u < 4) {
    x /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f%s" : "%.1f%s", x, units[u]);
  return buf;
}

std::string or_dash(const std::optional<uint64_t>& v) { return v ? commas(*v) : "-"; }

// llama.cpp's pooling types: "last" for 3; a value past them stays a number.
std::string pooling_text(uint64_t v) {
  static const char* kNames[] = {"none", "mean", "cls", "last", "rank"};
  return v < 5 ? kNames[v] : "unknown (" + std::to_string(v) + ")";
}
std::string or_dash(const std::optional<std::string>& v) { return v ? *v : "-"; }

void print_text(const GgufFile& f, const ModelFacts& m) {
  std::string out;
  auto line = [&out](const std::string& label, const std::string& value) {
    out += label + ":" + std::string(label.size() < 17 ? 17 - label.size() : 1, ' ') + value + "\n";
  };
  line("file", f.name() + " (" + commas(f.bytes().size()) + " bytes, GGUF v" + std::to_string(f.version()) +
                   ", alignment " + std::to_string(f.alignment()) + ")");
  line("architecture", or_dash(m.architecture));
  line("name", or_dash(m.name));
  line("parameters", commas(m.n_params) + " (" + human_count(m.n_params) + ")");
  const uint64_t nextn = m.n_layers ? std::min(*m.n_layers, m.n_nextn.value_or(0)) : 0;
  line("layers", or_dash(m.n_layers) + (nextn > 0 ? " (" + std::to_string(*m.n_layers - nextn) + " + " +
                                                       std::to_string(nextn) + " MTP: serve --mtp drafts with it)"
                                                 : ""));
  line("heads", or_dash(m.n_heads) + " (KV heads " + or_dash(m.n_kv_heads) + ")");
  line("context length", or_dash(m.context_length));
  line("embedding length", or_dash(m.embedding_length));
  line("vocabulary", or_dash(m.vocab_size) + " (tokenizer " + or_dash(m.tokenizer_model) + ", pre " +
                         or_dash(m.tokenizer_pre) + ")");
  line("tensors", commas(f.tensors().size()) + ", " + commas(m.tensor_bytes) + " bytes (" +
                      human_bytes(m.tensor_bytes) + ")");
  for (const auto& [type, use] : m.types) {
    std::string name = ggml_type_name(type);
    out += "  " + name + std::string(name.size() < 15 ? 15 - name.size() : 1, ' ') + commas(use.count) +
           " tensors, " + commas(use.bytes) + " bytes\n";
  }
  if (m.pooling_type) line("pooling", pooling_text(*m.pooling_type) + " (" + m.architecture.value_or("?") + ".pooling_type)");
  line("chat template", m.template_bytes ? "present (" + commas(*m.template_bytes) + " bytes)" : "none");
  if (m.kv_cache_bytes) {
    line("memory estimate", human_bytes(m.tensor_bytes) + " weights + " + human_bytes(*m.kv_cache_bytes) +
                                " KV cache (F16, " + commas(*m.context_length) + " tokens) = " +
                                human_bytes(m.tensor_bytes + *m.kv_cache_bytes));
  } else {
    line("memory estimate", human_bytes(m.tensor_bytes) + " weights (KV cache unknown: metadata incomplete)");
  }
  if (m.kv_token_bytes) {
    // The serving engine's K/V pool: context x slots positions (or --kv-memory) in blocks of 16.
    line("K/V per position", commas(*m.kv_token_bytes) + " bytes F16 (" + commas(2 * *m.kv_token_bytes) +
                                 " F32); a block of 16 positions " + human_bytes(16 * *m.kv_token_bytes) +
                                 "; serve's pool is --ctx-size x --parallel positions, or --kv-memory");
  }
  std::fputs(out.c_str(), stdout);
}

Json value_json(const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::kString: return std::string(v.str);
    case GgufValueType::kBool: return v.as_bool();
    case GgufValueType::kFloat32: case GgufValueType::kFloat64: return v.as_float();
    case GgufValueType::kUint64: return v.as_uint();
    case GgufValueType::kArray:
      return Json{{"type", "array"},
                  {"element_type", std::string(gguf_value_type_name(v.array_type))},
                  {"length", v.array_count}};
    default: return v.as_int();
  }
}

template <typename T>
Json opt_json(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

void print_json(const GgufFile& f, const ModelFacts& m) {
  Json j;
  j["file"] = f.name();
  j["file_bytes"] = f.bytes().size();
  j["gguf_version"] = f.version();
  j["alignment"] = f.alignment();
  j["architecture"] = opt_json(m.architecture);
  j["name"] = opt_json(m.name);
  j["n_params"] = m.n_params;
  j["n_layers"] = opt_json(m.n_layers);
  j["nextn_predict_layers"] = opt_json(m.n_nextn);
  j["n_heads"] = opt_json(m.n_heads);
  j["n_kv_heads"] = opt_json(m.n_kv_heads);
  j["context_length"] = opt_json(m.context_length);
  j["embedding_length"] = opt_json(m.embedding_length);
  j["vocab_size"] = opt_json(m.vocab_size);
  j["tokenizer_model"] = opt_json(m.tokenizer_model);
  j["tokenizer_pre"] = opt_json(m.tokenizer_pre);
  j["pooling"] = m.pooling_type ? Json(pooling_text(*m.pooling_type)) : Json(nullptr);
  j["n_tensors"] = f.tensors().size();
  j["tensor_bytes"] = m.tensor_bytes;
  Json types = Json::object();
  for (const auto& [type, use] : m.types) types[ggml_type_name(type)] = {{"count", use.count}, {"bytes", use.bytes}};
  j["tensor_types"] = types;
  j["chat_template"] = {{"present", m.template_bytes.has_value()}, {"bytes", m.template_bytes.value_or(0)}};
  j["memory_estimate"] = {{"weights_bytes", m.tensor_bytes},
                          {"kv_cache_bytes", opt_json(m.kv_cache_bytes)},
                          {"kv_cache_type", "f16"},
                          {"kv_cache_tokens", opt_json(m.context_length)},
                          {"kv_bytes_per_token", opt_json(m.kv_token_bytes)},
                          {"total_bytes", m.tensor_bytes + m.kv_cache_bytes.value_or(0)}};
  Json md = Json::object();
  for (const auto& kv : f.metadata()) md[std::string(kv.key)] = value_json(kv.value);
  j["metadata"] = md;
  Json tensors = Json::array();
  for (const auto& t : f.tensors()) {
    Json shape = Json::array();
    for (uint32_t d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
    tensors.push_back({{"name", std::string(t.name)}, {"type", ggml_type_name(t.raw_type)}, {"ne", shape},
                       {"offset", t.offset}, {"bytes", t.n_bytes}});
  }
  j["tensors"] = tensors;
  // Strings from the file may not be UTF-8; replace bad bytes rather than fail.
  const std::string text = j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
  std::fputs(text.c_str(), stdout);
}

int run_info(const ParsedArgs& args) {
  const auto& files = args.positionals();
  if (files.size() != 1) {
    return usage_error("info", "expected one FILE.gguf, got " + std::to_string(files.size()) +
                                   " (see '1bit info --help')");
  }
  auto f = GgufFile::open(files[0]);
  if (!f.ok()) return failure("info", f.message());
  const ModelFacts m = gather(*f);
  if (args.has("json")) {
    print_json(*f, m);
  } else {
    print_text(*f, m);
  }
  return kExitOk;
}

}  // namespace

Command info_command() {
  return {"info", "print a GGUF file's metadata, tensors and sizes", "1bit info [--json] FILE.gguf",
          {{"json", 0, "", "print one JSON object (all metadata; arrays summarised by type and length)"}},
          run_info};
}

}  // namespace onebit::cli
