// Reading Hugging Face tokenizer.json into VocabData, as llama.cpp's convert_hf_to_gguf.py
// does for byte-level BPE (tokens, token types, merges, pre-tokenizer name, special ids), and
// writing it as a vocab-only GGUF. Knows no model weights.
#include "tokenizer/hf_vocab.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "gguf/gguf_writer.h"
#include "tokenizer/pre_tokenizer.h"

namespace onebit {
namespace {

using json = nlohmann::json;

constexpr std::string_view kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

Result<json> read_json(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(path.string() + ": cannot open (check the path)");
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    return make_error(path.string() + ": not valid JSON: " + e.what());
  }
}

bool is_byte_level(const json& j) { return j.is_object() && j.value("type", "") == "ByteLevel"; }

// The tokenizer.ggml.pre name for a tokenizer.json pre_tokenizer, judged by its regex (llama.cpp
// hashes the tokenization of a probe text instead; the regex is what decides it).
Result<std::string> detect_pre(const json& pre) {
  if (is_byte_level(pre) && pre.value("use_regex", true) && !pre.value("add_prefix_space", false)) return std::string("gpt-2");
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers")) {
    const json& seq = pre["pretokenizers"];
    if (seq.size() == 2 && is_byte_level(seq[1]) && !seq[1].value("add_prefix_space", false)) {
      const json& first = seq[0];
      if (first.value("type", "") == "Split" && first.contains("pattern") && first["pattern"].contains("Regex") &&
          !seq[1].value("use_regex", true)) {
        const std::string re = first["pattern"]["Regex"].get<std::string>();
        if (re == kLlama3Regex) return std::string("llama-bpe");
        if (re == kQwen2Regex) return std::string("qwen2");
      }
      if (first.value("type", "") == "Digits" && first.value("individual_digits", false) &&
          seq[1].value("use_regex", true)) {
        return std::string("starcoder");
      }
    }
  }
  return make_error("pre_tokenizer " + pre.dump().substr(0, 300) +
                    " is not one this converter recognizes; supported families: " +
                    supported_pre_tokenizer_names());
}

// A special-token entry of tokenizer_config.json: a string, {"content": ...}, or null.
std::string config_token(const json& config, const char* key) {
  if (!config.contains(key)) return {};
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return {};
}

Status read_model(const json& tj, const std::string& where, VocabData& v) {
  if (!tj.contains("model") || tj["model"].value("type", "") != "BPE") {
    return make_error(where + ": model.type must be \"BPE\" (byte-level BPE); other models are not converted yet");
  }
  const json& m = tj["model"];
  const json prefix = m.value("continuing_subword_prefix", json());
  const json suffix = m.value("end_of_word_suffix", json());
  if ((prefix.is_string() && !prefix.get<std::string>().empty()) || (suffix.is_string() && !suffix.get<std::string>().empty())) {
    return make_error(where + ": model.continuing_subword_prefix / end_of_word_suffix are set; such BPE models "
                              "are not supported (byte-level or SentencePiece-style BPE only)");
  }
  v.ignore_merges = m.value("ignore_merges", false);
  std::map<int64_t, std::string> by_id;
  for (const auto& [text, id] : m["vocab"].items()) by_id[id.get<int64_t>()] = text;
  std::map<int64_t, TokenKind> added_kind;
  bool any_normalized = false;
  for (const json& a : tj.value("added_tokens", json::array())) {
    const int64_t id = a.value("id", -1);
    by_id[id] = a.value("content", "");
    added_kind[id] = a.value("special", false) ? TokenKind::kControl : TokenKind::kUserDefined;
    any_normalized = any_normalized || a.value("normalized", false);
  }
  if (by_id.empty() || by_id.begin()->first < 0) return make_error(where + ": the vocabulary is empty or has negative ids");
  const int64_t n = by_id.rbegin()->first + 1;
  v.tokens.resize(n);
  v.kinds.assign(n, TokenKind::kNormal);
  for (int64_t i = 0; i < n; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      v.tokens[i] = "[PAD" + std::to_string(i) + "]";  // as convert_hf_to_gguf.py fills id gaps
      v.kinds[i] = TokenKind::kUnused;
      continue;
    }
    v.tokens[i] = it->second;
    if (auto k = added_kind.find(i); k != added_kind.end()) v.kinds[i] = k->second;
    if (m.contains("unk_token") && m["unk_token"].is_string() && v.tokens[i] == m["unk_token"].get<std::string>()) {
      v.kinds[i] = TokenKind::kUnknown;
      v.unk_id = static_cast<TokenId>(i);
    }
    if (v.tokens[i].size() == 6 && v.tokens[i].rfind("<0x", 0) == 0 && v.tokens[i][5] == '>') v.kinds[i] = TokenKind::kByte;
  }
  v.normalized_specials = any_normalized;
  for (const json& merge : m.value("merges", json::array())) {
    if (merge.is_string()) v.merges.push_back(merge.get<std::string>());
    else if (merge.is_array() && merge.size() == 2) v.merges.push_back(merge[0].get<std::string>() + " " + merge[1].get<std::string>());
    else return make_error(where + ": model.merges has an entry that is neither \"A B\" nor [\"A\", \"B\"]");
  }
  return ok_status();
}

// HF's SentencePiece-style BPE (transformers' LlamaConverter, legacy): byte_fallback, no
// pre-tokenizer, normalizer Prepend("▁") + Replace(" ", "▁").
bool is_spm_style(const json& tj) {
  const json n = tj.value("normalizer", json());
  if (!tj.value("pre_tokenizer", json()).is_null() || !n.is_object() || n.value("type", "") != "Sequence") return false;
  const json& seq = n["normalizers"];
  return seq.size() == 2 && seq[0].value("type", "") == "Prepend" && seq[0].value("prepend", "") == "\u2581" &&
         seq[1].value("type", "") == "Replace" && seq[1].value("content", "") == "\u2581" &&
         seq[1]["pattern"].value("String", "") == " ";
}

// Scores for the SPM vocabulary: -(rank + 1) of the first merge that makes a token, so that
// llama.cpp's score-driven merging of this GGUF follows the merge order; 0 for the rest.
void spm_scores_from_merges(VocabData& v) {
  std::unordered_map<std::string, size_t> first_rank;
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) continue;
    first_rank.emplace(m.substr(0, space) + m.substr(space + 1), r);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (auto it = first_rank.find(v.tokens[i]); it != first_rank.end()) v.scores[i] = -static_cast<float>(it->second + 1);
  }
}

Status read_normalizer(const json& tj, const std::string& where, VocabData& v) {
  const json n = tj.value("normalizer", json());
  if (n.is_null()) return ok_status();
  if (n.value("type", "") == "NFC") {
    v.nfc = true;
    return ok_status();
  }
  return make_error(where + ": normalizer " + n.dump().substr(0, 200) + " is not supported (only none or NFC)");
}

TokenId id_of(const VocabData& v, const std::string& text) {
  if (text.empty()) return -1;
  for (size_t i = v.tokens.size(); i-- > 0;) {
    if (v.tokens[i] == text) return static_cast<TokenId>(i);
  }
  return -1;
}

void read_specials(const json& tj, const json& config, HfTokenizer& out) {
  VocabData& v = out.vocab;
  v.bos_id = id_of(v, config_token(config, "bos_token"));
  v.eos_id = id_of(v, config_token(config, "eos_token"));
  if (TokenId unk = id_of(v, config_token(config, "unk_token")); unk >= 0) v.unk_id = unk;
  v.pad_id = id_of(v, config_token(config, "pad_token"));
  v.add_bos = config.value("add_bos_token", false);
  v.add_eos = config.value("add_eos_token", false);
  // A TemplateProcessing post-processor that starts with a special token adds it as BOS (Llama 3).
  const json pp = tj.value("post_processor", json());
  const json* procs = nullptr;
  if (pp.is_object() && pp.value("type", "") == "Sequence") procs = &pp["processors"];
  auto check = [&](const json& p) {
    if (!p.is_object() || p.value("type", "") != "TemplateProcessing" || !p.contains("single")) return;
    const json& first = p["single"][0];
    if (first.contains("SpecialToken")) {
      const TokenId id = id_of(v, first["SpecialToken"].value("id", ""));
      if (id >= 0 && (v.bos_id < 0 || v.bos_id == id)) {
        v.bos_id = id;
        v.add_bos = true;
      }
    }
  };
  if (procs != nullptr) {
    for (const json& p : *procs) check(p);
  } else {
    check(pp);
  }
  if (config.contains("chat_template") && config["chat_template"].is_string()) {
    out.chat_template = config["chat_template"].get<std::string>();
  }
}

}  // namespace

Result<HfTokenizer> read_hf_tokenizer(const std::string& tokenizer_json_path) {
  namespace fs = std::filesystem;
  const fs::path path(tokenizer_json_path);
  ONEBIT_ASSIGN_OR_RETURN(json tj, read_json(path));
  const std::string where = path.string();
  HfTokenizer out;
  VocabData& v = out.vocab;
  ONEBIT_TRY(read_model(tj, where, v));
  if (is_spm_style(tj)) {
    v.model = VocabModel::kSpm;
    v.add_space_prefix = true;
    v.pre = "default";
    spm_scores_from_merges(v);
  } else {
    v.model = VocabModel::kBpe;
    v.add_space_prefix = false;
    v.normalized_specials = false;  // no normalizer that changes them (NFC leaves ASCII alone)
    ONEBIT_TRY(read_normalizer(tj, where, v));
    auto pre = detect_pre(tj.value("pre_tokenizer", json()));
    if (!pre.ok()) return with_context(where, pre.error());
    v.pre = *pre;
    if (!is_byte_level(tj.value("decoder", json()))) {
      return make_error(where + ": decoder is not ByteLevel; only byte-level and SentencePiece-style BPE are converted");
    }
  }
  json config = json::object();
  const fs::path config_path = path.parent_path() / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    ONEBIT_ASSIGN_OR_RETURN(config, read_json(config_path));
  }
  read_specials(tj, config, out);
  const fs::path model_config = path.parent_path() / "config.json";
  if (fs::exists(model_config)) {
    ONEBIT_ASSIGN_OR_RETURN(json mc, read_json(model_config));
    out.architecture = mc.value("model_type", "");
  }
  out.name = fs::absolute(path).parent_path().filename().string();
  return out;
}

Status write_vocab_gguf(const HfTokenizer& tok, const std::string& out_path) {
  const VocabData& v = tok.vocab;
  GgufWriter w;
  w.set_string("general.architecture", tok.architecture.empty() ? "llama" : tok.architecture);
  w.set_string("general.name", tok.name);
  w.set_string("tokenizer.ggml.model", v.model == VocabModel::kBpe ? "gpt2" : "llama");
  w.set_string("tokenizer.ggml.pre", v.pre);
  w.set_string_array("tokenizer.ggml.tokens", std::span<const std::string>(v.tokens));
  std::vector<int32_t> types;
  types.reserve(v.kinds.size());
  for (TokenKind k : v.kinds) types.push_back(static_cast<int32_t>(k));
  w.set_array<int32_t>("tokenizer.ggml.token_type", types);
  if (v.model == VocabModel::kSpm) {
    w.set_array<float>("tokenizer.ggml.scores", v.scores);
    w.set_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  }
  if (!v.merges.empty()) w.set_string_array("tokenizer.ggml.merges", std::span<const std::string>(v.merges));
  const std::pair<const char*, TokenId> ids[] = {{"tokenizer.ggml.bos_token_id", v.bos_id},
                                                 {"tokenizer.ggml.eos_token_id", v.eos_id},
                                                 {"tokenizer.ggml.unknown_token_id", v.unk_id},
                                                 {"tokenizer.ggml.padding_token_id", v.pad_id}};
  for (const auto& [key, id] : ids) {
    if (id >= 0) w.set_uint32(key, static_cast<uint32_t>(id));
  }
  w.set_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", v.add_eos);
  // Only where tokenizer.json departs from the family default that the reader assumes.
  VocabData defaults;
  defaults.model = v.model;
  defaults.pre = v.pre;
  apply_pre_tokenizer_defaults(defaults);
  if (v.ignore_merges != defaults.ignore_merges) w.set_bool("tokenizer.ggml.ignore_merges", v.ignore_merges);
  if (v.nfc != defaults.nfc) w.set_bool("tokenizer.ggml.nfc", v.nfc);
  if (v.normalized_specials) w.set_bool("tokenizer.ggml.normalized_specials", true);
  if (!tok.chat_template.empty()) w.set_string("tokenizer.chat_template", tok.chat_template);
  return w.write_file(out_path);
}

}  // namespace onebit
