// Reads a GGUF's tokenizer.ggml.* keys into a VocabData (llama.cpp's key names and defaults)
// and builds the Tokenizer from it. Every error names the key and the value found.
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace onebit {
namespace {

// An optional token-id key: absent or 0xFFFFFFFF (llama.cpp's "none") gives -1.
Result<TokenId> optional_token_id(const GgufFile& f, std::string_view key, size_t n_vocab) {
  if (f.find(key) == nullptr) return TokenId{-1};
  ONEBIT_ASSIGN_OR_RETURN(int64_t v, f.get_int(key));
  if (v == -1 || v == 0xFFFFFFFFLL) return TokenId{-1};
  if (v < 0 || static_cast<uint64_t>(v) >= n_vocab) {
    return make_error(std::string(key) + " = " + std::to_string(v) + " is outside the vocabulary [0, " +
                      std::to_string(n_vocab) + "); re-convert the model or remove the key");
  }
  return static_cast<TokenId>(v);
}

Result<bool> optional_bool(const GgufFile& f, std::string_view key, bool fallback) {
  if (f.find(key) == nullptr) return fallback;
  return f.get_bool(key);
}

Status read_token_arrays(const GgufFile& f, VocabData& v) {
  ONEBIT_ASSIGN_OR_RETURN(auto tokens, f.get_string_array("tokenizer.ggml.tokens"));
  v.tokens.assign(tokens.begin(), tokens.end());
  const size_t n = v.tokens.size();
  if (f.find("tokenizer.ggml.scores") != nullptr) {
    ONEBIT_ASSIGN_OR_RETURN(v.scores, f.get_float_array("tokenizer.ggml.scores"));
    if (v.scores.size() != n) {
      return make_error("tokenizer.ggml.scores has " + std::to_string(v.scores.size()) +
                        " entries; tokenizer.ggml.tokens has " + std::to_string(n) + "; they must match");
    }
  }
  if (f.find("tokenizer.ggml.token_type") != nullptr) {
    ONEBIT_ASSIGN_OR_RETURN(auto types, f.get_int_array("tokenizer.ggml.token_type"));
    if (types.size() != n) {
      return make_error("tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                        " entries; tokenizer.ggml.tokens has " + std::to_string(n) + "; they must match");
    }
    v.kinds.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > 6) {
        return make_error("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(types[i]) +
                          " is not a token type (0..6)");
      }
      v.kinds.push_back(static_cast<TokenKind>(types[i]));
    }
  }
  // SPM vocabularies converted from an HF BPE tokenizer.json carry merges too (ranked merging).
  if (v.model == VocabModel::kBpe || f.find("tokenizer.ggml.merges") != nullptr) {
    ONEBIT_ASSIGN_OR_RETURN(auto merges, f.get_string_array("tokenizer.ggml.merges"));
    v.merges.assign(merges.begin(), merges.end());
  }
  return ok_status();
}

Result<VocabData> read_vocab(const GgufFile& f) {
  VocabData v;
  ONEBIT_ASSIGN_OR_RETURN(std::string model, f.get_string("tokenizer.ggml.model"));
  if (model == "llama") {
    v.model = VocabModel::kSpm;
  } else if (model == "gpt2") {
    v.model = VocabModel::kBpe;
  } else {
    return make_error("tokenizer.ggml.model = '" + model +
                      "' is not supported; supported: 'llama' (SentencePiece-style) and 'gpt2' (byte-level BPE)");
  }
  if (f.find("tokenizer.ggml.pre") != nullptr) {
    ONEBIT_ASSIGN_OR_RETURN(v.pre, f.get_string("tokenizer.ggml.pre"));
  }
  ONEBIT_TRY(read_token_arrays(f, v));
  const size_t n = v.tokens.size();
  ONEBIT_ASSIGN_OR_RETURN(v.bos_id, optional_token_id(f, "tokenizer.ggml.bos_token_id", n));
  ONEBIT_ASSIGN_OR_RETURN(v.eos_id, optional_token_id(f, "tokenizer.ggml.eos_token_id", n));
  ONEBIT_ASSIGN_OR_RETURN(v.unk_id, optional_token_id(f, "tokenizer.ggml.unknown_token_id", n));
  ONEBIT_ASSIGN_OR_RETURN(v.eot_id, optional_token_id(f, "tokenizer.ggml.eot_token_id", n));
  ONEBIT_ASSIGN_OR_RETURN(v.eom_id, optional_token_id(f, "tokenizer.ggml.eom_token_id", n));
  ONEBIT_ASSIGN_OR_RETURN(v.pad_id, optional_token_id(f, "tokenizer.ggml.padding_token_id", n));
  // llama.cpp defaults: SPM adds BOS and a space prefix; BPE adds neither.
  const bool spm = v.model == VocabModel::kSpm;
  ONEBIT_ASSIGN_OR_RETURN(v.add_bos, optional_bool(f, "tokenizer.ggml.add_bos_token", spm));
  ONEBIT_ASSIGN_OR_RETURN(v.add_eos, optional_bool(f, "tokenizer.ggml.add_eos_token", false));
  ONEBIT_ASSIGN_OR_RETURN(v.add_space_prefix, optional_bool(f, "tokenizer.ggml.add_space_prefix", spm));
  apply_pre_tokenizer_defaults(v);
  // Written by `1bit convert --vocab-only` from tokenizer.json, overriding the family defaults.
  ONEBIT_ASSIGN_OR_RETURN(v.ignore_merges, optional_bool(f, "tokenizer.ggml.ignore_merges", v.ignore_merges));
  ONEBIT_ASSIGN_OR_RETURN(v.nfc, optional_bool(f, "tokenizer.ggml.nfc", v.nfc));
  ONEBIT_ASSIGN_OR_RETURN(v.normalized_specials, optional_bool(f, "tokenizer.ggml.normalized_specials", false));
  return v;
}

}  // namespace

Result<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  auto vocab = read_vocab(file);
  if (!vocab.ok()) return with_context("vocab (" + file.name() + ")", vocab.error());
  return from_vocab(*vocab);
}

}  // namespace onebit
