// The API service over the engine; see service.h.
#include "api/service.h"

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

std::string safe_dump_string(const std::string& s) {
  // Replaces invalid UTF-8 (a token may hold half a character) so the reply stays valid JSON.
  std::string tail;
  std::string out = sanitize_utf8(s, tail);
  if (!tail.empty()) out += "\xEF\xBF\xBD";
  return out;
}

}  // namespace

ApiService::ApiService(const Tokenizer& tokenizer, Engine& engine, ServiceOptions options)
    : tokenizer_(tokenizer), engine_(engine), options_(std::move(options)), special_tokens_(ordered_json::object()) {}

Result<std::unique_ptr<ApiService>> ApiService::create(const Tokenizer& tokenizer, Engine& engine, ServiceOptions options) {
  std::unique_ptr<ApiService> s(new ApiService(tokenizer, engine, std::move(options)));
  if (!s->options_.template_source.empty()) {
    auto t = ChatTemplate::parse(s->options_.template_source);
    if (!t.ok()) return make_error("tokenizer.chat_template: " + t.message());
    s->template_ = std::move(*t);
  }
  if (tokenizer.bos_id() >= 0) s->special_tokens_["bos_token"] = std::string(tokenizer.token_text(tokenizer.bos_id()));
  if (tokenizer.eos_id() >= 0) s->special_tokens_["eos_token"] = std::string(tokenizer.token_text(tokenizer.eos_id()));
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
  in.messages = r.messages;
  in.tools = r.tools;
  in.kwargs = special_tokens_;
  if (r.template_kwargs.is_object()) {
    for (auto it = r.template_kwargs.begin(); it != r.template_kwargs.end(); ++it) in.kwargs[it.key()] = it.value();
  }
  auto out = template_->render_chat(in);
  if (!out.ok()) return invalid_request("chat template: " + out.message());
  return std::move(*out);
}

ApiResult<std::vector<TokenId>> ApiService::prompt_tokens(const CompletionRequest& r, std::string& rendered) const {
  if (r.endpoint == Endpoint::kCompletion && !r.prompt_tokens.empty()) {
    for (size_t i = 0; i < r.prompt_tokens.size(); ++i) {
      if (r.prompt_tokens[i] >= tokenizer_.vocab_size()) {
        return invalid_request("'prompt[" + std::to_string(i) + "]' is " + std::to_string(r.prompt_tokens[i]) +
                               "; token ids go from 0 to " + std::to_string(tokenizer_.vocab_size() - 1));
      }
    }
    return r.prompt_tokens;
  }
  if (r.endpoint == Endpoint::kChat) {
    auto text = render_chat(r);
    if (!text.ok()) return text.error;
    rendered = std::move(*text.value);
  } else {
    rendered = r.prompt_text;
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
  if (ids.empty()) return invalid_request("the prompt is empty (no tokens); give some text");
  return ids;
}

ApiResult<std::unique_ptr<Completion>> ApiService::start_completion(const std::string& body, Endpoint endpoint) {
  auto parsed = parse_completion_request(body, endpoint, max_json_values(engine_.n_ctx()));
  if (!parsed.ok()) return parsed.error;
  const CompletionRequest& r = *parsed.value;
  std::string rendered;
  auto ids = prompt_tokens(r, rendered);
  if (!ids.ok()) return ids.error;
  const int64_t n_prompt = static_cast<int64_t>(ids.value->size());
  const int64_t n_ctx = engine_.n_ctx();
  const int64_t wanted = r.max_tokens.value_or(1);
  if (n_prompt + wanted > n_ctx) {
    return ApiError{ApiErrorKind::kExceedContext,
                    "the request needs " + std::to_string(n_prompt + wanted) + " positions (prompt " + std::to_string(n_prompt) +
                        " tokens + max_tokens " + std::to_string(wanted) + "); the context is " + std::to_string(n_ctx) +
                        "; shorten the prompt, lower max_tokens, or raise --ctx-size"};
  }
  SequenceRequest seq;
  seq.prompt = std::move(*ids.value);
  seq.n_predict = static_cast<int32_t>(r.max_tokens.value_or(n_ctx - n_prompt));
  seq.sampler.temperature = static_cast<float>(r.temperature);
  seq.sampler.top_k = static_cast<int32_t>(r.top_k);
  seq.sampler.top_p = static_cast<float>(r.top_p);
  seq.sampler.min_p = static_cast<float>(r.min_p);
  seq.sampler.seed = r.seed ? *r.seed : std::random_device{}();
  seq.cache_prompt = r.cache_prompt;
  seq.ignore_eos = r.ignore_eos;
  seq.pool = options_.pool;
  if (auto st = validate(seq.sampler); !st.ok()) return invalid_request(st.message());
  auto handle = engine_.submit(std::move(seq));
  if (!handle.ok()) return ApiError{ApiErrorKind::kUnavailable, handle.message()};

  CompletionSetup setup;
  setup.endpoint = endpoint;
  setup.id = std::string(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_.fetch_add(1));
  setup.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  setup.model = options_.alias;
  setup.stream = r.stream;
  setup.include_usage = r.include_usage;
  setup.text.stop = r.stop;
  setup.text.split_reasoning = endpoint == Endpoint::kChat && r.split_reasoning;
  setup.text.starts_in_reasoning = setup.text.split_reasoning && ends_inside_think(rendered, setup.text.think_open);
  return std::make_unique<Completion>(std::move(setup), std::move(*handle), tokenizer_);
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
      tokens.push_back({{"id", id}, {"piece", safe_dump_string(tokenizer_.token_to_piece(id))}});
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
  return json{{"content", safe_dump_string(tokenizer_.decode(ids))}};
}

ApiResult<json> ApiService::apply_template(const std::string& body) const {
  auto parsed = parse_completion_request(body, Endpoint::kChat);
  if (!parsed.ok()) return parsed.error;
  auto text = render_chat(*parsed.value);
  if (!text.ok()) return text.error;
  return json{{"prompt", safe_dump_string(*text.value)}};
}

json ApiService::props() const {
  const SamplerParams d;
  return {{"default_generation_settings",
           {{"n_ctx", engine_.n_ctx()},
            {"params", {{"temperature", d.temperature}, {"top_k", d.top_k}, {"top_p", d.top_p}, {"min_p", d.min_p}}}}},
          {"total_slots", engine_.layout().pool_slots.at(static_cast<size_t>(options_.pool))},
          {"model_alias", options_.alias},
          {"model_path", options_.model_path},
          {"chat_template", safe_dump_string(options_.template_source)},
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
