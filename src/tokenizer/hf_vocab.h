// Hugging Face tokenizer.json (+ tokenizer_config.json beside it) -> VocabData, and the
// vocab-only GGUF that `1bit convert --vocab-only` writes from it. Byte-level BPE and
// SentencePiece-style BPE (byte_fallback, Prepend/Replace "▁" normalizer).
#pragma once

#include <string>

#include "base/status.h"
#include "tokenizer/vocab.h"

namespace onebit {

struct HfTokenizer {
  VocabData vocab;
  std::string chat_template;  // tokenizer_config.json "chat_template"; empty when absent
  std::string name;           // the directory name, for general.name
  std::string architecture;   // config.json "model_type" when a config.json is beside it
};

// Reads `tokenizer_json_path` and, when present, tokenizer_config.json and config.json in the
// same directory. Errors name the file, the field and the value, and what is supported.
Result<HfTokenizer> read_hf_tokenizer(const std::string& tokenizer_json_path);

// Writes a vocab-only GGUF (no tensors) with llama.cpp's tokenizer.ggml.* keys and the chat
// template. Errors name the path and the reason.
Status write_vocab_gguf(const HfTokenizer& tok, const std::string& out_path);

}  // namespace onebit
