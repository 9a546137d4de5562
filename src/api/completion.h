// One completion in flight: turns a sequence's tokens from the engine into the reply a client
// sees, as one JSON body or as Server-Sent Events (role chunk, delta chunks, one final chunk with
// finish_reason and timings, a usage chunk when asked, then [DONE]). Text rules come from
// TextStream; end-of-generation tokens end the text and are never shown. No HTTP, no tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "api/request.h"
#include "api/text_stream.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace onebit {

struct CompletionSetup {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;        // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;   // unix seconds
  std::string model;     // the alias
  bool stream = false;
  bool include_usage = false;
  TextStreamOptions text;
};

// Usage and timings of a finished completion.
struct CompletionStats {
  int32_t n_prompt_tokens = 0;
  int32_t n_cached_tokens = 0;
  int32_t n_completion_tokens = 0;  // tokens turned into the reply (an end token included)
  double prompt_ms = 0.0;
  double decode_ms = 0.0;
};

// Not thread-safe: one HTTP thread drives it. Destroying it cancels the sequence if still running.
class Completion {
 public:
  Completion(CompletionSetup setup, std::shared_ptr<SequenceHandle> handle, const Tokenizer& tokenizer);
  ~Completion();

  // Waits for the end and returns the reply body, or the error (500) the engine reported.
  ApiResult<nlohmann::json> run_to_end();
  // Collects the text for up to timeout_ms; true once the engine reported the end.
  bool run_for(int timeout_ms);
  // The whole reply (after run_for returned true).
  ApiResult<nlohmann::json> reply() const;
  // The next Server-Sent Events bytes, waiting up to timeout_ms (may be empty); `done` turns true
  // with the bytes that end in "data: [DONE]".
  std::string next_sse(int timeout_ms, bool& done);
  // The client left: the engine drops the sequence at its next step.
  void cancel() { handle_->cancel(); }

  bool streaming() const { return setup_.stream; }
  bool finished() const { return finished_; }
  bool failed() const { return !error_.empty(); }
  const CompletionStats& stats() const { return stats_; }

 private:
  // Waits for engine events and feeds the text stream; returns the text that became safe.
  TextDelta poll(int timeout_ms);
  void on_token(TokenId token, TextDelta& out);
  void on_finish(const SequenceEvents& ev, TextDelta& out);
  nlohmann::json chunk(nlohmann::json choice) const;
  nlohmann::json delta_choice(const TextDelta& d) const;
  std::string finish_reason_text() const;
  nlohmann::json usage_json() const;
  nlohmann::json timings_json() const;

  CompletionSetup setup_;
  std::shared_ptr<SequenceHandle> handle_;
  const Tokenizer& tokenizer_;
  TextStream text_;
  CompletionStats stats_;
  bool ended_ = false;      // an end token or a stop string ended the text; later tokens are dropped
  bool finished_ = false;   // the engine reported the end
  bool length_ = false;
  std::string error_;
  ApiErrorKind error_kind_ = ApiErrorKind::kServer;  // kUnavailable when the server aborted it
  bool role_sent_ = false;
  std::string content_, reasoning_;  // the whole text, for a reply that is not streamed
};

// Timings as llama-server reports them (cache_n, prompt_n, prompt_ms, ..., predicted_per_second).
nlohmann::json timings_json(const CompletionStats& s);

}  // namespace onebit
