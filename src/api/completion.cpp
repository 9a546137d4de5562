// A completion's replies, whole or streamed; see completion.h.
#include "api/completion.h"

#include <algorithm>
#include <chrono>

namespace onebit {

using nlohmann::json;

json timings_json(const CompletionStats& s) {
  const int32_t prompt_n = s.n_prompt_tokens - s.n_cached_tokens;
  const int32_t predicted_n = s.n_completion_tokens;
  auto per_token = [](double ms, int32_t n) { return n > 0 ? ms / n : 0.0; };
  auto per_second = [](double ms, int32_t n) { return ms > 0.0 ? 1000.0 * n / ms : 0.0; };
  return {{"cache_n", s.n_cached_tokens},
          {"prompt_n", prompt_n},
          {"prompt_ms", s.prompt_ms},
          {"prompt_per_token_ms", per_token(s.prompt_ms, prompt_n)},
          {"prompt_per_second", per_second(s.prompt_ms, prompt_n)},
          {"predicted_n", predicted_n},
          {"predicted_ms", s.decode_ms},
          {"predicted_per_token_ms", per_token(s.decode_ms, predicted_n)},
          {"predicted_per_second", per_second(s.decode_ms, predicted_n)}};
}

Completion::Completion(CompletionSetup setup, std::shared_ptr<SequenceHandle> handle, const Tokenizer& tokenizer)
    : setup_(std::move(setup)), handle_(std::move(handle)), tokenizer_(tokenizer), text_(setup_.text) {}

Completion::~Completion() {
  if (!finished_) handle_->cancel();
}

void Completion::on_token(TokenId token, TextDelta& out) {
  if (ended_) return;
  ++stats_.n_completion_tokens;
  if (tokenizer_.is_end_of_generation(token)) {
    ended_ = true;
    return;
  }
  TextDelta d = text_.push(tokenizer_.token_to_piece(token));
  out.content += d.content;
  out.reasoning += d.reasoning;
  if (text_.stopped()) {
    ended_ = true;
    handle_->cancel();  // a stop string matched: the engine need not go on
  }
}

void Completion::on_finish(const SequenceEvents& ev, TextDelta& out) {
  finished_ = true;
  stats_.n_prompt_tokens = ev.stats.n_prompt_tokens;
  stats_.n_cached_tokens = ev.stats.n_cached_tokens;
  stats_.prompt_ms = ev.stats.prompt_ms;
  stats_.decode_ms = ev.stats.decode_ms;
  if (ev.reason == FinishReason::kError || ev.reason == FinishReason::kAborted) {
    error_ = ev.error.empty() ? "generation failed" : ev.error;
    error_kind_ = ev.reason == FinishReason::kAborted ? ApiErrorKind::kUnavailable : ApiErrorKind::kServer;
  }
  length_ = ev.reason == FinishReason::kLength && !ended_;
  TextDelta d = text_.finish();
  out.content += d.content;
  out.reasoning += d.reasoning;
}

TextDelta Completion::poll(int timeout_ms) {
  TextDelta out;
  if (finished_) return out;
  SequenceEvents ev = handle_->wait(timeout_ms);
  for (TokenId t : ev.tokens) on_token(t, out);
  if (ev.finished) on_finish(ev, out);
  return out;
}

std::string Completion::finish_reason_text() const { return length_ ? "length" : "stop"; }

json Completion::usage_json() const {
  return {{"prompt_tokens", stats_.n_prompt_tokens},
          {"completion_tokens", stats_.n_completion_tokens},
          {"total_tokens", stats_.n_prompt_tokens + stats_.n_completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", stats_.n_cached_tokens}}}};
}

json Completion::timings_json() const { return onebit::timings_json(stats_); }

bool Completion::run_for(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!finished_ && std::chrono::steady_clock::now() < deadline) {
    TextDelta d = poll(std::min(timeout_ms, 100));
    content_ += d.content;
    reasoning_ += d.reasoning;
  }
  return finished_;
}

ApiResult<json> Completion::run_to_end() {
  while (!run_for(1000)) {
  }
  return reply();
}

ApiResult<json> Completion::reply() const {
  const std::string& content = content_;
  const std::string& reasoning = reasoning_;
  if (!error_.empty()) return ApiError{error_kind_, error_};
  json choice = {{"index", 0}, {"finish_reason", finish_reason_text()}};
  if (setup_.endpoint == Endpoint::kChat) {
    json message = {{"role", "assistant"}, {"content", content}};
    if (!reasoning.empty()) message["reasoning_content"] = reasoning;
    choice["message"] = message;
  } else {
    choice["text"] = content + reasoning;
    choice["logprobs"] = nullptr;
  }
  json reply = {{"id", setup_.id},
                {"object", setup_.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
                {"created", setup_.created},
                {"model", setup_.model},
                {"system_fingerprint", "1bit"},
                {"choices", json::array({choice})},
                {"usage", usage_json()},
                {"timings", timings_json()}};
  return reply;
}

json Completion::chunk(json choice) const {
  return {{"id", setup_.id},
          {"object", setup_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", setup_.created},
          {"model", setup_.model},
          {"system_fingerprint", "1bit"},
          {"choices", json::array({std::move(choice)})}};
}

json Completion::delta_choice(const TextDelta& d) const {
  if (setup_.endpoint == Endpoint::kCompletion) {
    return {{"index", 0}, {"text", d.content + d.reasoning}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  }
  json delta = json::object();
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.content.empty()) delta["content"] = d.content;
  return {{"index", 0}, {"delta", delta}, {"finish_reason", nullptr}};
}

std::string Completion::next_sse(int timeout_ms, bool& done) {
  auto event = [](const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; };
  std::string out;
  if (!role_sent_ && setup_.endpoint == Endpoint::kChat) {
    role_sent_ = true;
    out += event(chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}}));
  }
  done = false;
  if (finished_) return out;
  TextDelta d = poll(timeout_ms);
  if (!d.empty()) out += event(chunk(delta_choice(d)));
  if (!finished_) return out;
  if (!error_.empty()) {
    out += event(error_body({error_kind_, error_}));
  } else {
    json last = setup_.endpoint == Endpoint::kChat
                    ? json{{"index", 0}, {"delta", json::object()}, {"finish_reason", finish_reason_text()}}
                    : json{{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", finish_reason_text()}};
    json final_chunk = chunk(std::move(last));
    final_chunk["timings"] = timings_json();
    out += event(final_chunk);
    if (setup_.include_usage) {
      json usage = chunk(json::object());
      usage["choices"] = json::array();
      usage["usage"] = usage_json();
      out += event(usage);
    }
  }
  out += "data: [DONE]\n\n";
  done = true;
  return out;
}

}  // namespace onebit
