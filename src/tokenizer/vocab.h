// The vocabulary a Tokenizer is built from, independent of where it came from (a GGUF's
// tokenizer.ggml.* keys or a Hugging Face tokenizer.json). Plain data, no behavior.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace onebit {

enum class VocabModel {
  kSpm,  // tokenizer.ggml.model = "llama": SentencePiece-style, scores and byte fallback
  kBpe,  // tokenizer.ggml.model = "gpt2": byte-level BPE with ranked merges
};

struct VocabData {
  VocabModel model = VocabModel::kSpm;
  std::string pre = "default";      // tokenizer.ggml.pre; ignored for kSpm
  std::vector<std::string> tokens;  // [n_vocab] token text as stored in the GGUF
  std::vector<float> scores;        // [n_vocab] or empty (all 0)
  std::vector<TokenKind> kinds;     // [n_vocab] or empty (all kNormal)
  std::vector<std::string> merges;  // "left right", rank order; kBpe only
  TokenId bos_id = -1;
  TokenId eos_id = -1;
  TokenId unk_id = -1;
  TokenId eot_id = -1;
  TokenId eom_id = -1;
  TokenId pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;  // kSpm: prefix a space to text at the start / after a special
  bool ignore_merges = false;    // kBpe: a piece that is a whole token is not merged (Llama 3)
  bool nfc = false;              // apply NFC to text segments before pre-tokenization (Qwen2)
  // kSpm: HF added tokens with "normalized": true: the whole text is normalized ("▁" prefix,
  // spaces to "▁") before special tokens, in their normalized form, are split out.
  bool normalized_specials = false;
};

// llama.cpp/HF defaults for a model family: ignore_merges for llama-bpe, NFC for qwen2.
void apply_pre_tokenizer_defaults(VocabData& vocab);

}  // namespace onebit
