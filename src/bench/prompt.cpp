// The prompt-speed text fitted to the model; see prompt.h.
#include "bench/prompt.h"

#include <algorithm>
#include <charconv>

#include "bench/protocol.h"
#include "serve/native_backend.h"

namespace onebit {
namespace {

// The value of a config's --ctx-size / -c (the last one given), or 0.
int64_t ctx_size_of(const BenchConfig& c) {
  int64_t value = 0;
  auto number = [](const std::string& s) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && end == s.data() + s.size() ? v : 0;
  };
  for (size_t i = 0; i < c.args.size(); ++i) {
    const std::string& a = c.args[i];
    if ((a == "--ctx-size" || a == "-c") && i + 1 < c.args.size()) value = number(c.args[++i]);
    else if (a.rfind("--ctx-size=", 0) == 0) value = number(a.substr(11));
  }
  return value;
}

std::vector<TokenId> encode(const Tokenizer& tok, const std::string& text) {
  return tok.encode(text, EncodeOptions{.parse_special = false});
}

}  // namespace

ServedContext served_context(int64_t model_context, const std::vector<BenchConfig>& configs) {
  const int64_t by_default = model_context > 0 ? std::min(model_context, kDefaultMaxCtx) : kDefaultMaxCtx;
  ServedContext out;
  for (const BenchConfig& c : configs) {
    const int64_t set = ctx_size_of(c);
    const int64_t n = set > 0 ? set : by_default;
    if (out.n_ctx == 0 || n < out.n_ctx) {
      out.n_ctx = n;
      out.source = set > 0 ? "config '" + c.name + "' sets --ctx-size " + std::to_string(set)
                           : "the model's context is " + std::to_string(n);
    }
  }
  return out;
}

Result<PromptFit> fit_prompt(const Tokenizer& tok, const std::string& text, int64_t max_tokens,
                             const ServedContext& context, int64_t reserved) {
  PromptFit fit;
  fit.context = context;
  fit.text = text;
  std::vector<TokenId> ids = encode(tok, text);
  if (max_tokens > 0 && int64_t(ids.size()) > max_tokens) {
    ids.resize(size_t(max_tokens));
    fit.text = tok.decode(ids);
  }
  fit.uncapped_tokens = fit.tokens = int64_t(ids.size());
  if (context.n_ctx <= 0) return fit;
  const int64_t room = context.n_ctx - reserved;
  if (room < 1) {
    return make_error("the prompt measurement needs more than " + std::to_string(reserved) + " positions and " + context.source +
                      "; raise --ctx-size or leave out the prompt (--only decode,concurrency)");
  }
  // Decoding a cut and encoding it again can give a token more: cut until the text fits.
  for (int64_t limit = room; fit.tokens > room && limit > 0; --limit) {
    ids.resize(size_t(std::min<int64_t>(limit, int64_t(ids.size()))));
    fit.text = tok.decode(ids);
    fit.tokens = int64_t(encode(tok, fit.text).size());
  }
  return fit;
}

int64_t prompt_reserved_tokens(const Tokenizer& tok, const BenchOptions& o) {
  int64_t line = 0;
  for (const BenchConfig& c : o.configs) {
    for (int run : {0, o.prompt_runs}) {
      line = std::max(line, int64_t(encode(tok, prompt_first_line(o.rounds, run, c.name)).size()));
    }
  }
  return line + (tok.adds_bos() ? 1 : 0) + kPromptMaxTokens + 1;
}

std::string prompt_cap_note(const PromptFit& fit) {
  if (!fit.capped_to_context()) return "";
  return "prompt capped from " + std::to_string(fit.uncapped_tokens) + " to " + std::to_string(fit.tokens) +
         " tokens: " + fit.context.source + " (the rest holds each request's first line and " +
         std::to_string(kPromptMaxTokens) + " generated token)";
}

}  // namespace onebit
