// Pre-tokenizers of byte-level BPE vocabularies (tokenizer.ggml.pre): hand-written matchers over
// code points that split text exactly as the Hugging Face regexes (Oniguruma semantics) do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace onebit {

enum class PreTokenizerKind {
  kGpt2,         // ByteLevel regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,       // llama-bpe: (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|...
  kQwen2,        // as kLlama3 with \p{N} (one digit per piece)
  kDeepseekLlm,  // a sequence of Split regexes, then \p{N}+
  kStarcoder,    // Digits(individual) then the GPT-2 regex
};

// Parses a tokenizer.ggml.pre value. The error names the value and lists the supported ones.
Result<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name);
// "gpt-2, llama-bpe, qwen2, deepseek-llm, starcoder" (and the aliases accepted).
std::string supported_pre_tokenizer_names();

// A piece of the input: code points [begin, end).
struct PieceSpan {
  size_t begin;
  size_t end;
};

// Splits `cps` into consecutive pieces that cover it exactly, as the named pre-tokenizer does.
// Linear in the input length.
std::vector<PieceSpan> pre_tokenize(PreTokenizerKind kind, const std::vector<uint32_t>& cps);

}  // namespace onebit
