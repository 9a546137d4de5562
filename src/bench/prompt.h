// The prompt-speed text fitted to the model under test: at most --prompt-tokens tokens of its own
// vocabulary, and short enough that each prompt request (its first line, the text, one generated
// token) fits the context the servers run with; when that cut the text, the report says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/options.h"
#include "tokenizer/tokenizer.h"

namespace onebit {

// The smallest context (positions per sequence) among the configurations, and what set it.
struct ServedContext {
  int64_t n_ctx = 0;      // 0: unknown (no cap)
  std::string source;     // "the model's context", "config 'small' sets --ctx-size"
};

// `model_context` is the GGUF's <arch>.context_length (0 when absent): `serve` runs each config
// with its --ctx-size / -c when given, else the model's context capped at its default maximum.
ServedContext served_context(int64_t model_context, const std::vector<BenchConfig>& configs);

struct PromptFit {
  std::string text;              // what the prompt requests send after their first line
  int64_t tokens = 0;            // its tokens (the model's tokenizer)
  int64_t uncapped_tokens = 0;   // before the context cap (after --prompt-tokens)
  ServedContext context;
  bool capped_to_context() const { return tokens < uncapped_tokens; }
};

// Cuts `text` to at most `max_tokens` tokens (0: no limit) and to `context.n_ctx - reserved`
// tokens (`reserved`: the request's first line, BOS and generated tokens). An error when the
// context leaves no room for the text.
Result<PromptFit> fit_prompt(const Tokenizer& tok, const std::string& text, int64_t max_tokens,
                             const ServedContext& context, int64_t reserved);

// Positions a prompt request needs besides its text: the longest first line of these options,
// BOS when the vocabulary adds it, the generated token, and one for the line/text boundary.
int64_t prompt_reserved_tokens(const Tokenizer& tok, const BenchOptions& options);

// "prompt capped from 1800 to 1004 tokens: the model's context is 1024 (...)"; empty when the
// context did not cut the prompt.
std::string prompt_cap_note(const PromptFit& fit);

}  // namespace onebit
