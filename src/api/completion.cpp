// A completion's replies, whole or streamed; see completion.h.
#include "api/completion.h"

#include "base/utf8.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace onebit {

using nlohmann::json;

json timings_json(const CompletionStats& s) {
  const int32_t prompt_n = s.n_prompt_tokens - s.n_cached_tokens;
  const int32_t predicted_n = s.n_completion_tokens;
  auto per_token = [](double ms, int32_t n) { return n > 0 ? ms / n : 0.0; };
  auto per_second = [](double ms, int32_t n) { return ms > 0.0 ? 1000.0 * n / ms : 0.0; };
  json out = {{"cache_n", s.n_cached_tokens},
          {"prompt_n", prompt_n},
          {"prompt_ms", s.prompt_ms},
          {"prompt_per_token_ms", per_token(s.prompt_ms, prompt_n)},
          {"prompt_per_second", per_second(s.prompt_ms, prompt_n)},
          {"predicted_n", predicted_n},
          {"predicted_ms", s.decode_ms},
          {"predicted_per_token_ms", per_token(s.decode_ms, predicted_n)},
          {"predicted_per_second", per_second(s.decode_ms, predicted_n)}};
  if (s.n_draft_tokens > 0) {  // as llama-server: only when a drafter drafted
    out["draft_n"] = s.n_draft_tokens;
    out["draft_n_accepted"] = s.n_draft_accepted;
    out["draft_steps"] = s.n_draft_steps;
  }
  return out;
}

namespace {

constexpr double kMinLogprob = -9999.0;  // stands for -inf, which JSON cannot hold (as vLLM)


json piece_bytes(const std::string& piece) {
  json out = json::array();
  for (unsigned char c : piece) out.push_back(int(c));
  return out;
}

double logprob_value(float lp) { return std::isfinite(lp) ? double(lp) : kMinLogprob; }

}  // namespace

Completion::Completion(CompletionSetup setup, std::vector<std::shared_ptr<SequenceHandle>> handles, const Tokenizer& tokenizer)
    : setup_(std::move(setup)), tokenizer_(tokenizer) {
  signal_ = handles.empty() ? nullptr : handles[0]->signal();
  for (size_t i = 0; i < handles.size(); ++i) {
    if (handles[i]->signal() != signal_) signal_ = nullptr;
    Choice c{std::move(handles[i]), TextStream(setup_.text)};
    c.prompt = i < setup_.choice_prompt.size() ? setup_.choice_prompt[i] : 0;
    c.logprobs = empty_logprobs();
    c.new_logprobs = empty_logprobs();
    choices_.push_back(std::move(c));
  }
}

Completion::~Completion() { cancel(); }

void Completion::cancel() {
  for (Choice& c : choices_) {
    if (!c.finished) c.handle->cancel();
  }
}

bool Completion::finished() const {
  for (const Choice& c : choices_) {
    if (!c.finished) return false;
  }
  return true;
}

json Completion::empty_logprobs() const {
  if (setup_.n_logprobs < 0) return nullptr;
  if (setup_.endpoint == Endpoint::kChat) return json::array();
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
}

void Completion::add_logprobs(Choice& c, const std::string& piece, const SampledLogprobs& lp) {
  const std::string text = utf8_sanitize(piece);
  for (json* to : {&c.logprobs, &c.new_logprobs}) {
    if (setup_.endpoint == Endpoint::kChat) {
      json top = json::array();
      for (const TokenLogprob& t : lp.top) {
        const std::string p = tokenizer_.token_to_piece(t.id);
        top.push_back({{"token", utf8_sanitize(p)}, {"logprob", logprob_value(t.logprob)}, {"bytes", piece_bytes(p)}});
      }
      to->push_back({{"token", text}, {"logprob", logprob_value(lp.logprob)}, {"bytes", piece_bytes(piece)}, {"top_logprobs", top}});
    } else {
      json top = json::object();
      for (const TokenLogprob& t : lp.top) top[utf8_sanitize(tokenizer_.token_to_piece(t.id))] = logprob_value(t.logprob);
      (*to)["tokens"].push_back(text);
      (*to)["token_logprobs"].push_back(logprob_value(lp.logprob));
      (*to)["top_logprobs"].push_back(top);
      (*to)["text_offset"].push_back(c.text_chars);
    }
  }
  // Code points so far: every byte that does not continue a UTF-8 sequence starts one.
  for (unsigned char b : piece) c.text_chars += (b & 0xC0) != 0x80;
}

void Completion::on_token(Choice& c, TokenId token, const SampledLogprobs* lp, TextDelta& out) {
  if (c.ended) return;
  ++c.stats.n_completion_tokens;
  if (tokenizer_.is_end_of_generation(token)) {
    c.ended = true;
    return;
  }
  const std::string piece = tokenizer_.token_to_piece(token);
  if (lp != nullptr && setup_.n_logprobs >= 0) add_logprobs(c, piece, *lp);
  TextDelta d = c.text.push(piece);
  out.content += d.content;
  out.reasoning += d.reasoning;
  if (c.text.stopped()) {
    c.ended = true;
    c.handle->cancel();  // a stop string matched: the engine need not go on
  }
}

void Completion::on_finish(Choice& c, const SequenceEvents& ev, TextDelta& out) {
  c.finished = true;
  c.stats.n_prompt_tokens = ev.stats.n_prompt_tokens;
  c.stats.n_cached_tokens = ev.stats.n_cached_tokens;
  c.stats.prompt_ms = ev.stats.prompt_ms;
  c.stats.decode_ms = ev.stats.decode_ms;
  c.stats.n_draft_tokens = ev.stats.n_draft_tokens;
  c.stats.n_draft_accepted = ev.stats.n_draft_accepted;
  c.stats.n_draft_steps = ev.stats.n_draft_steps;
  if ((ev.reason == FinishReason::kError || ev.reason == FinishReason::kAborted) && error_.empty()) {
    error_ = ev.error.empty() ? "generation failed" : ev.error;
    error_kind_ = ev.reason == FinishReason::kAborted ? ApiErrorKind::kUnavailable : ApiErrorKind::kServer;
    cancel();  // one choice failed: the reply fails, the others need not go on
  }
  c.length = ev.reason == FinishReason::kLength && !c.ended;
  TextDelta d = c.text.finish();
  out.content += d.content;
  out.reasoning += d.reasoning;
}

std::vector<TextDelta> Completion::poll(int timeout_ms) {
  std::vector<TextDelta> out(choices_.size());
  auto take = [&](size_t i, const SequenceEvents& ev) {
    Choice& c = choices_[i];
    for (size_t k = 0; k < ev.tokens.size(); ++k) {
      on_token(c, ev.tokens[k], k < ev.logprobs.size() ? &ev.logprobs[k] : nullptr, out[i]);
    }
    if (ev.finished) on_finish(c, ev, out[i]);
    return !ev.tokens.empty() || ev.finished;
  };
  if (finished()) return out;
  if (signal_ == nullptr) {
    // Handles made one by one: wait on the first unfinished one.
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (choices_[i].finished) continue;
      take(i, choices_[i].handle->wait(choices_.size() == 1 ? timeout_ms : std::min(timeout_ms, 10)));
      break;
    }
    return out;
  }
  for (int round = 0; round < 2; ++round) {
    const uint64_t seen = signal_->count();
    bool any = false;
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (!choices_[i].finished) any |= take(i, choices_[i].handle->wait(0));
    }
    if (any || round == 1) break;
    signal_->wait(seen, timeout_ms);
  }
  return out;
}

std::string Completion::finish_reason_text(const Choice& c) const {
  return c.length ? "length" : c.has_calls ? "tool_calls" : "stop";
}

json Completion::tool_calls_json(size_t choice, const std::vector<ToolCall>& calls) const {
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    // FNV-1a of (completion id, choice, call) in base 62: 24 characters after "call_", or the 9
    // that Mistral's templates require.
    uint64_t h = 1469598103934665603ull;
    for (char ch : setup_.id + "/" + std::to_string(choice) + "/" + std::to_string(k)) h = (h ^ uint8_t(ch)) * 1099511628211ull;
    static const char* kDigits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const bool mistral = setup_.tools == ToolFormat::kMistral;
    std::string id = mistral ? "" : "call_";
    for (int n = 0; n < (mistral ? 9 : 24); ++n) {
      id += kDigits[h % 62];
      h = h / 62 + (h % 62 == 0 ? 0x9E3779B97F4A7C15ull : 0) + uint64_t(n) * 0x100000001B3ull;
    }
    out.push_back({{"index", k}, {"id", id}, {"type", "function"},
                   {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}});
  }
  return out;
}

CompletionStats Completion::stats() const {
  CompletionStats s;
  std::vector<bool> counted;
  for (const Choice& c : choices_) {
    if (size_t(c.prompt) >= counted.size()) counted.resize(size_t(c.prompt) + 1, false);
    if (!counted[size_t(c.prompt)]) {  // a prompt of several choices counts once
      counted[size_t(c.prompt)] = true;
      s.n_prompt_tokens += c.stats.n_prompt_tokens;
      s.n_cached_tokens += c.stats.n_cached_tokens;
    }
    s.n_completion_tokens += c.stats.n_completion_tokens;
    s.prompt_ms = std::max(s.prompt_ms, c.stats.prompt_ms);
    s.decode_ms = std::max(s.decode_ms, c.stats.decode_ms);
    s.n_draft_tokens += c.stats.n_draft_tokens;
    s.n_draft_accepted += c.stats.n_draft_accepted;
    s.n_draft_steps += c.stats.n_draft_steps;
  }
  return s;
}

json Completion::usage_json() const {
  const CompletionStats s = stats();
  return {{"prompt_tokens", s.n_prompt_tokens},
          {"completion_tokens", s.n_completion_tokens},
          {"total_tokens", s.n_prompt_tokens + s.n_completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", s.n_cached_tokens}}}};
}

bool Completion::run_for(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!finished() && std::chrono::steady_clock::now() < deadline) {
    std::vector<TextDelta> d = poll(std::min(timeout_ms, 100));
    for (size_t i = 0; i < d.size(); ++i) {
      choices_[i].content += d[i].content;
      choices_[i].reasoning += d[i].reasoning;
    }
  }
  return finished();
}

ApiResult<json> Completion::run_to_end() {
  while (!run_for(1000)) {
  }
  return reply();
}

ApiResult<json> Completion::reply() const {
  if (!error_.empty()) return ApiError{error_kind_, error_};
  json list = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json choice = {{"index", i}};
    bool calls = false;
    if (setup_.endpoint == Endpoint::kChat) {
      json message = {{"role", "assistant"}, {"content", c.content}};
      if (setup_.tools) {
        ToolReply parsed = parse_tool_reply(*setup_.tools, c.content);
        if (!parsed.calls.empty()) {
          calls = true;
          message["content"] = parsed.content.empty() ? json(nullptr) : json(parsed.content);
          json list = tool_calls_json(i, parsed.calls);
          for (json& call : list) call.erase("index");
          message["tool_calls"] = std::move(list);
        }
      }
      if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
      choice["message"] = message;
      choice["logprobs"] = c.logprobs.is_null() ? json(nullptr) : json{{"content", c.logprobs}, {"refusal", nullptr}};
    } else {
      choice["text"] = c.content + c.reasoning;
      choice["logprobs"] = c.logprobs;
    }
    choice["finish_reason"] = c.length ? "length" : calls ? "tool_calls" : "stop";
    list.push_back(std::move(choice));
  }
  return json{{"id", setup_.id},
              {"object", setup_.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
              {"created", setup_.created},
              {"model", setup_.model},
              {"system_fingerprint", "1bit"},
              {"choices", std::move(list)},
              {"usage", usage_json()},
              {"timings", timings_json(stats())}};
}

json Completion::chunk(json choice) const {
  return {{"id", setup_.id},
          {"object", setup_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", setup_.created},
          {"model", setup_.model},
          {"system_fingerprint", "1bit"},
          {"choices", json::array({std::move(choice)})}};
}

json Completion::delta_choice(size_t i, const TextDelta& d) {
  Choice& c = choices_[i];
  json logprobs = nullptr;
  if (!c.new_logprobs.is_null()) {
    logprobs = setup_.endpoint == Endpoint::kChat ? json{{"content", c.new_logprobs}, {"refusal", nullptr}} : c.new_logprobs;
    c.new_logprobs = empty_logprobs();
  }
  if (setup_.endpoint == Endpoint::kCompletion) {
    return {{"index", i}, {"text", d.content + d.reasoning}, {"logprobs", logprobs}, {"finish_reason", nullptr}};
  }
  json delta = json::object();
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.content.empty()) delta["content"] = d.content;
  json out = {{"index", i}, {"delta", delta}};
  if (!logprobs.is_null()) out["logprobs"] = logprobs;
  out["finish_reason"] = nullptr;
  return out;
}

std::string Completion::next_sse(int timeout_ms, bool& done) {
  auto event = [](const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; };
  std::string out;
  done = false;
  for (size_t i = 0; i < choices_.size() && setup_.endpoint == Endpoint::kChat; ++i) {
    if (choices_[i].role_sent) continue;
    choices_[i].role_sent = true;
    out += event(chunk({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}}));
  }
  if (error_.empty()) {
    std::vector<TextDelta> d = poll(timeout_ms);
    for (size_t i = 0; i < d.size() && setup_.tools; ++i) {
      // Content before a call marker streams; from the marker on it is held for the parse at the end.
      Choice& c = choices_[i];
      c.tool_text += d[i].content;
      const size_t safe = std::max(c.tool_sent, tool_content_prefix(*setup_.tools, c.tool_text));
      d[i].content = c.tool_text.substr(c.tool_sent, safe - c.tool_sent);
      c.tool_sent = safe;
      if (!c.finished) continue;
      ToolReply parsed = parse_tool_reply(*setup_.tools, std::string_view(c.tool_text).substr(c.tool_sent));
      c.tool_sent = c.tool_text.size();
      d[i].content += parsed.content;
      if (parsed.calls.empty()) continue;
      c.has_calls = true;
      if (!d[i].empty()) out += event(chunk(delta_choice(i, d[i])));
      d[i] = TextDelta{};
      out += event(chunk({{"index", i}, {"delta", {{"tool_calls", tool_calls_json(i, parsed.calls)}}}, {"finish_reason", nullptr}}));
    }
    for (size_t i = 0; i < d.size(); ++i) {
      const bool new_logprobs = setup_.endpoint == Endpoint::kChat ? !choices_[i].new_logprobs.empty()
                                                                    : choices_[i].new_logprobs.is_object() && !choices_[i].new_logprobs["tokens"].empty();
      if (!d[i].empty() || (!choices_[i].new_logprobs.is_null() && new_logprobs)) out += event(chunk(delta_choice(i, d[i])));
    }
  }
  if (!error_.empty()) {
    out += event(error_body({error_kind_, error_}));
    out += "data: [DONE]\n\n";
    done = true;
    return out;
  }
  size_t n_final = 0;
  for (const Choice& c : choices_) n_final += c.final_sent;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    if (!c.finished || c.final_sent) continue;
    c.final_sent = true;
    json last = setup_.endpoint == Endpoint::kChat
                    ? json{{"index", i}, {"delta", json::object()}, {"finish_reason", finish_reason_text(c)}}
                    : json{{"index", i}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", finish_reason_text(c)}};
    json final_chunk = chunk(std::move(last));
    if (++n_final == choices_.size()) final_chunk["timings"] = timings_json(stats());
    out += event(final_chunk);
  }
  if (n_final < choices_.size()) return out;
  if (setup_.include_usage) {
    json usage = chunk(json::object());
    usage["choices"] = json::array();
    usage["usage"] = usage_json();
    out += event(usage);
  }
  out += "data: [DONE]\n\n";
  done = true;
  return out;
}

}  // namespace onebit
