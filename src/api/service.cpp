// The API service over the engine; see service.h.
#include "api/service.h"

#include "base/utf8.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace onebit {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

bool ends_inside_think(const std::string& prompt, const std::string& open) {
  size_t end = prompt.size();
  while (end > 0 && (prompt[end - 1] == '\n' || prompt[end - 1] == ' ' || prompt[end - 1] == '\r')) --end;
  return end >= open.size() && prompt.compare(end - open.size(), open.size(), open) == 0;
}


}  // namespace

ApiService::ApiService(const Tokenizer& tokenizer, Engine& engine, ServiceOptions options)
    : tokenizer_(tokenizer), engine_(engine), options_(std::move(options)), special_tokens_(ordered_json::object()) {}

Result<std::unique_ptr<ApiService>> ApiService::create(const Tokenizer& tokenizer, Engine& engine, ServiceOptions options) {
  std::unique_ptr<ApiService> s(new ApiService(tokenizer, engine, std::move(options)));
  if (tokenizer.bos_id() >= 0) s->special_tokens_["bos_token"] = std::string(tokenizer.token_text(tokenizer.bos_id()));
  if (tokenizer.eos_id() >= 0) s->special_tokens_["eos_token"] = std::string(tokenizer.token_text(tokenizer.eos_id()));
  if (!s->options_.template_source.empty()) {
    auto t = ChatTemplate::parse(s->options_.template_source);
    if (!t.ok()) return make_error("tokenizer.chat_template: " + t.message());
    s->template_ = std::move(*t);
    // Whether the template renders tools: a prompt with one tool against one without (a template
    // that fails without tools, as Hermes 3's tool_use, renders them too).
    ChatInputs probe;
    probe.messages = ordered_json::array({ordered_json{{"role", "user"}, {"content", "Hi"}}});
    probe.kwargs = s->special_tokens_;
    auto plain = s->template_->render_chat(probe);
    probe.tools = ordered_json::array({ordered_json{
        {"type", "function"},
        {"function", {{"name", "probe"}, {"description", "probe"}, {"parameters", {{"type", "object"}, {"properties", ordered_json::object()}}}}}}});
    auto with = s->template_->render_chat(probe);
    const bool renders = with.ok() && (!plain.ok() || *plain != *with);
    auto tools = template_tools(s->options_.template_source, renders);
    if (tools.ok()) {
      s->template_tools_ = *tools;
    } else {
      s->template_tools_error_ = tools.message();
    }
  }
  for (TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
    s->max_piece_bytes_ = std::max(s->max_piece_bytes_, tokenizer.token_to_piece(id).size());
  }
  return s;
}

ApiResult<std::string> ApiService::render_chat(const CompletionRequest& r) const {
  if (!template_) {
    return invalid_request("this model has no chat template (tokenizer.chat_template); use /v1/completions with a prompt");
  }
  ChatInputs in;
  in.messages = messages_for_template(r.messages);
  in.tools = r.tools;
  if (!r.tools.is_null() && !template_tools_.renders_tools) {
    // The template ignores `tools`: they are described in the system message (or, without one,
    // before the first user message, for templates that refuse a system role).
    const std::string prompt = tool_system_prompt(r.tools);
    in.tools = nullptr;
    ordered_json& msgs = in.messages;
    if (!msgs.empty() && msgs[0].value("role", "") == "system" && msgs[0]["content"].is_string()) {
      msgs[0]["content"] = msgs[0]["content"].get<std::string>() + "\n\n" + prompt;
    } else {
      bool placed = false;
      for (ordered_json& m : msgs) {
        if (m.value("role", "") == "user" && m["content"].is_string()) {
          m["content"] = prompt + "\n\n" + m["content"].get<std::string>();
          placed = true;
          break;
        }
      }
      if (!placed) msgs.insert(msgs.begin(), ordered_json{{"role", "system"}, {"content", prompt}});
    }
  }
  in.kwargs = special_tokens_;
  if (r.template_kwargs.is_object()) {
    for (auto it = r.template_kwargs.begin(); it != r.template_kwargs.end(); ++it) in.kwargs[it.key()] = it.value();
  }
  auto out = template_->render_chat(in);
  if (!out.ok()) return invalid_request("chat template: " + out.message());
  return std::move(*out);
}

ApiResult<std::vector<TokenId>> ApiService::prompt_tokens(const CompletionRequest& r, size_t index, std::string& rendered) const {
  const std::string name = r.prompts.size() > 1 ? "prompt[" + std::to_string(index) + "]" : "prompt";
  if (r.endpoint == Endpoint::kCompletion && r.prompts[index].is_tokens) {
    const std::vector<int32_t>& ids = r.prompts[index].tokens;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= tokenizer_.vocab_size()) {
        return invalid_request("'" + name + "[" + std::to_string(i) + "]' is " + std::to_string(ids[i]) +
                               "; token ids go from 0 to " + std::to_string(tokenizer_.vocab_size() - 1));
      }
    }
    return ids;
  }
  if (r.endpoint == Endpoint::kChat) {
    auto text = render_chat(r);
    if (!text.ok()) return text.error;
    rendered = std::move(*text.value);
  } else {
    rendered = r.prompts[index].text;
  }
  // A text longer than the context's tokens can cover at the vocabulary's longest piece cannot
  // fit: refused before tokenizing it.
  const size_t n_ctx = static_cast<size_t>(engine_.n_ctx());
  if (rendered.size() > n_ctx * std::max<size_t>(max_piece_bytes_, 1)) {
    return ApiError{ApiErrorKind::kExceedContext,
                    "the prompt is " + std::to_string(rendered.size()) + " bytes: more tokens than the context of " +
                        std::to_string(n_ctx) + " holds even at the vocabulary's longest token (" +
                        std::to_string(max_piece_bytes_) + " bytes); shorten the prompt or raise --ctx-size"};
  }
  std::vector<TokenId> ids = encode_rendered_chat(tokenizer_, rendered);
  if (ids.empty()) return invalid_request("'" + name + "' is empty (no tokens); give some text");
  return ids;
}

ApiResult<SamplerParams> ApiService::sampler_params(const CompletionRequest& r) const {
  SamplerParams p;
  p.temperature = static_cast<float>(r.temperature);
  p.top_k = static_cast<int32_t>(r.top_k);
  p.top_p = static_cast<float>(r.top_p);
  p.min_p = static_cast<float>(r.min_p);
  p.seed = r.seed ? *r.seed : std::random_device{}();
  p.presence_penalty = static_cast<float>(r.presence_penalty);
  p.frequency_penalty = static_cast<float>(r.frequency_penalty);
  p.repeat_penalty = static_cast<float>(r.repeat_penalty);
  p.repeat_last_n = static_cast<int32_t>(r.repeat_last_n);
  p.n_logprobs = static_cast<int32_t>(r.logprobs);
  for (const auto& [id, bias] : r.logit_bias) {
    if (id >= tokenizer_.vocab_size()) {
      return invalid_request("'logit_bias' names token " + std::to_string(id) + "; token ids go from 0 to " +
                             std::to_string(tokenizer_.vocab_size() - 1));
    }
    p.logit_bias.push_back({static_cast<int32_t>(id), static_cast<float>(bias)});
  }
  if (auto st = validate(p); !st.ok()) return invalid_request(st.message());
  return p;
}

std::shared_ptr<grammar::CompiledGrammar> ApiService::compiled_grammar(const std::string& gbnf) {
  constexpr size_t kKeep = 8;  // grammars kept with their masks (each mask cache is bounded)
  std::lock_guard<std::mutex> lock(grammar_mu_);
  for (auto it = grammars_.begin(); it != grammars_.end(); ++it) {
    if (it->first == gbnf) {
      grammars_.splice(grammars_.begin(), grammars_, it);
      return grammars_.front().second;
    }
  }
  if (!token_table_) token_table_ = grammar::TokenTable::from_tokenizer(tokenizer_);
  auto g = grammar::parse_gbnf(gbnf);
  if (!g.ok()) return nullptr;  // parse_completion_request checked it
  grammars_.emplace_front(gbnf, std::make_shared<grammar::CompiledGrammar>(std::move(*g), token_table_));
  if (grammars_.size() > kKeep) grammars_.pop_back();
  return grammars_.front().second;
}

ApiResult<std::unique_ptr<Completion>> ApiService::start_completion(const std::string& body, Endpoint endpoint) {
  auto parsed = parse_completion_request(body, endpoint, max_json_values(engine_.n_ctx()));
  if (!parsed.ok()) return parsed.error;
  const CompletionRequest& r = *parsed.value;
  auto sampler = sampler_params(r);
  if (!sampler.ok()) return sampler.error;
  // Tools: the template's call format parses the reply; a required or named call is forced by
  // the grammar of the format's call syntax with each function's parameter schema.
  std::string gbnf = r.grammar;
  std::optional<ToolFormat> tool_format;
  if (!r.tool.tools.is_null() && r.tool.choice != ToolChoice::kNone) {
    if (!template_tools_error_.empty()) return invalid_request("'tools': " + template_tools_error_);
    tool_format = template_tools_.format;
    if (r.tool.choice == ToolChoice::kRequired || r.tool.choice == ToolChoice::kNamed) {
      if (!gbnf.empty()) {
        return invalid_request("'tool_choice' asks for a tool call and '" + r.grammar_field +
                               "' for a format of the reply; send one of them");
      }
      auto calls = tool_call_grammar(template_tools_.format, r.tool);
      if (!calls.ok()) return invalid_request(calls.message());
      gbnf = std::move(*calls);
    }
  }
  std::shared_ptr<grammar::CompiledGrammar> compiled;
  if (!gbnf.empty()) {
    compiled = compiled_grammar(gbnf);
    if (!compiled) return invalid_request("'" + r.grammar_field + "': the grammar does not parse");
  }
  const size_t n_prompts = r.endpoint == Endpoint::kChat ? 1 : r.prompts.size();
  const int64_t n_ctx = engine_.n_ctx();
  std::string rendered;
  std::vector<SequenceRequest> seqs;
  CompletionSetup setup;
  for (size_t p = 0; p < n_prompts; ++p) {
    auto ids = prompt_tokens(r, p, rendered);
    if (!ids.ok()) return ids.error;
    const int64_t n_prompt = static_cast<int64_t>(ids.value->size());
    const int64_t wanted = r.max_tokens.value_or(1);
    if (n_prompt + wanted > n_ctx) {
      const std::string which = n_prompts > 1 ? "prompt[" + std::to_string(p) + "]" : "prompt";
      return ApiError{ApiErrorKind::kExceedContext,
                      "the request needs " + std::to_string(n_prompt + wanted) + " positions (" + which + " " +
                          std::to_string(n_prompt) + " tokens + max_tokens " + std::to_string(wanted) + "); the context is " +
                          std::to_string(n_ctx) + "; shorten the prompt, lower max_tokens, or raise --ctx-size"};
    }
    // n choices of one prompt: the first computes the prompt, the others take it from the prefix
    // cache (each gets its own seed, derived from the request's).
    const int32_t leader = static_cast<int32_t>(seqs.size());
    for (int64_t j = 0; j < r.n; ++j) {
      SequenceRequest seq;
      seq.prompt = *ids.value;
      seq.n_predict = static_cast<int32_t>(r.max_tokens.value_or(n_ctx - n_prompt));
      seq.sampler = *sampler.value;
      seq.sampler.seed = sampler.value->seed + static_cast<uint64_t>(seqs.size());
      seq.cache_prompt = r.cache_prompt;
      seq.ignore_eos = r.ignore_eos;
      seq.draft_max = r.draft_max;
      seq.pool = options_.pool;
      if (compiled) seq.constraint = std::make_shared<grammar::GrammarConstraint>(compiled);
      if (j > 0 && r.cache_prompt) seq.after = leader;
      seqs.push_back(std::move(seq));
      setup.choice_prompt.push_back(static_cast<int32_t>(p));
    }
  }
  auto handles = engine_.submit_all(std::move(seqs));
  if (!handles.ok()) return ApiError{ApiErrorKind::kUnavailable, handles.message()};

  setup.endpoint = endpoint;
  setup.id = std::string(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_.fetch_add(1));
  setup.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  setup.model = options_.alias;
  setup.stream = r.stream;
  setup.include_usage = r.include_usage;
  setup.tools = tool_format;
  setup.n_logprobs = static_cast<int32_t>(r.logprobs);
  setup.text.stop = r.stop;
  // Under a grammar (a schema, or a forced tool call) the reply is the grammar's text: no
  // reasoning is split out of it.
  setup.text.split_reasoning = endpoint == Endpoint::kChat && r.split_reasoning && gbnf.empty();
  setup.text.starts_in_reasoning = setup.text.split_reasoning && ends_inside_think(rendered, setup.text.think_open);
  return std::make_unique<Completion>(std::move(setup), std::move(*handles), tokenizer_);
}

ApiResult<json> ApiService::tokenize(const std::string& body) const {
  auto j = parse_json_object(body);
  if (!j.ok()) return j.error;
  auto content = read_string(*j.value, "content");
  if (!content.ok()) return content.error;
  if (!*content.value) return invalid_request("'content' is required: the text to tokenize");
  auto add_special = read_bool(*j.value, "add_special");
  if (!add_special.ok()) return add_special.error;
  auto with_pieces = read_bool(*j.value, "with_pieces");
  if (!with_pieces.ok()) return with_pieces.error;
  EncodeOptions enc;
  enc.add_bos = add_special.value->value_or(false) && tokenizer_.adds_bos();
  const std::vector<TokenId> ids = tokenizer_.encode(**content.value, enc);
  json tokens = json::array();
  for (TokenId id : ids) {
    if (with_pieces.value->value_or(false)) {
      tokens.push_back({{"id", id}, {"piece", utf8_sanitize(tokenizer_.token_to_piece(id))}});
    } else {
      tokens.push_back(id);
    }
  }
  return json{{"tokens", tokens}};
}

ApiResult<json> ApiService::detokenize(const std::string& body) const {
  auto j = parse_json_object(body);
  if (!j.ok()) return j.error;
  auto it = j.value->find("tokens");
  if (it == j.value->end() || !it->is_array()) return invalid_request("'tokens' is required: an array of token ids");
  std::vector<TokenId> ids;
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& t = (*it)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tokenizer_.vocab_size()) {
      return invalid_request("'tokens[" + std::to_string(i) + "]' is " + t.dump() + "; token ids go from 0 to " +
                             std::to_string(tokenizer_.vocab_size() - 1));
    }
    ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
  }
  return json{{"content", utf8_sanitize(tokenizer_.decode(ids))}};
}

ApiResult<json> ApiService::apply_template(const std::string& body) const {
  auto parsed = parse_completion_request(body, Endpoint::kChat);
  if (!parsed.ok()) return parsed.error;
  auto text = render_chat(*parsed.value);
  if (!text.ok()) return text.error;
  return json{{"prompt", utf8_sanitize(*text.value)}};
}

json ApiService::props() const {
  const SamplerParams d;
  return {{"default_generation_settings",
           {{"n_ctx", engine_.n_ctx()},
            {"params", {{"temperature", d.temperature}, {"top_k", d.top_k}, {"top_p", d.top_p}, {"min_p", d.min_p}}}}},
          {"total_slots", engine_.layout().pool_slots.at(static_cast<size_t>(options_.pool))},
          {"model_alias", options_.alias},
          {"model_path", options_.model_path},
          {"chat_template", utf8_sanitize(options_.template_source)},
          {"bos_token", special_tokens_.value("bos_token", "")},
          {"eos_token", special_tokens_.value("eos_token", "")},
          {"build_info", "1bit"}};
}

json ApiService::slots() const {
  const EngineState s = engine_.state();
  json out = json::array();
  for (const SequenceState& q : s.sequences) {
    out.push_back({{"id_task", q.id},
                   {"pool", q.pool == 0 ? "primary" : "overflow"},
                   {"n_ctx", engine_.n_ctx()},
                   {"state", q.state},
                   {"is_processing", q.state != "waiting"},
                   {"n_prompt_tokens", q.n_prompt},
                   {"n_tokens", q.n_tokens},
                   {"n_computed", q.n_computed},
                   {"n_cached_tokens", q.n_cached}});
  }
  return out;
}

}  // namespace onebit
