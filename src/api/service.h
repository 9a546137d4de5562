// The OpenAI-compatible API over the native engine, as JSON in and JSON out: completions (chat
// template, tokens, the context check, submission), /tokenize, /detokenize, /apply-template,
// /props, /slots. Thread-safe: many HTTP threads call it at once. No HTTP library, no tensors.
#pragma once

#include <atomic>
#include <list>
#include <mutex>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "api/completion.h"
#include "api/request.h"
#include "engine/engine.h"
#include "grammar/matcher.h"
#include "template/template.h"
#include "tokenizer/tokenizer.h"

namespace onebit {

struct ServiceOptions {
  std::string alias;              // the model name in replies
  std::string model_path;         // for /props
  std::string template_source;    // tokenizer.chat_template; empty: the model has none
  int32_t pool = 0;               // the engine's slot pool this service submits to (--adaptive)
};

class ApiService {
 public:
  // `tokenizer` and `engine` must outlive the service. A template that does not parse is an error.
  static Result<std::unique_ptr<ApiService>> create(const Tokenizer& tokenizer, Engine& engine, ServiceOptions options);

  // Parses and checks a completion body, renders and tokenizes the prompt, and submits it.
  // Errors: 400 (field, template, exceed_context_size_error), 503 (queue full).
  ApiResult<std::unique_ptr<Completion>> start_completion(const std::string& body, Endpoint endpoint);

  // {"content", "add_special"?, "with_pieces"?} -> {"tokens": [...]}.
  ApiResult<nlohmann::json> tokenize(const std::string& body) const;
  // {"tokens": [...]} -> {"content"}.
  ApiResult<nlohmann::json> detokenize(const std::string& body) const;
  // A chat body -> {"prompt"}: the rendered template.
  ApiResult<nlohmann::json> apply_template(const std::string& body) const;
  nlohmann::json props() const;
  nlohmann::json slots() const;

 private:
  ApiService(const Tokenizer& tokenizer, Engine& engine, ServiceOptions options);
  ApiResult<std::string> render_chat(const CompletionRequest& r) const;
  // The tokens of prompt `index` (the chat's rendered messages, or r.prompts[index]).
  ApiResult<std::vector<TokenId>> prompt_tokens(const CompletionRequest& r, size_t index, std::string& rendered) const;
  // The sampler settings of `r`, checked (logit_bias ids against the vocabulary).
  ApiResult<SamplerParams> sampler_params(const CompletionRequest& r) const;

  // The compiled grammar of `gbnf` over this vocabulary: one of the recent ones (their mask caches
  // kept), else compiled now. The vocabulary table is built at the first use.
  std::shared_ptr<grammar::CompiledGrammar> compiled_grammar(const std::string& gbnf);

  const Tokenizer& tokenizer_;
  Engine& engine_;
  ServiceOptions options_;
  std::optional<ChatTemplate> template_;
  TemplateTools template_tools_;           // the template's tool-call format
  std::string template_tools_error_;       // non-empty: it writes calls in a form we do not parse
  nlohmann::ordered_json special_tokens_;  // bos_token, eos_token for the template
  size_t max_piece_bytes_ = 0;              // the vocabulary's longest token, in bytes
  std::atomic<int64_t> next_id_{0};
  std::mutex grammar_mu_;
  std::shared_ptr<const grammar::TokenTable> token_table_;
  std::list<std::pair<std::string, std::shared_ptr<grammar::CompiledGrammar>>> grammars_;  // most recent first
};

}  // namespace onebit
