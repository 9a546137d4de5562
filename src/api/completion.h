// One completion in flight: turns a sequence's tokens from the engine into the reply a client
// sees, as one JSON body or as Server-Sent Events (role chunk, delta chunks, one final chunk with
// finish_reason and timings, a usage chunk when asked, then [DONE]). Text rules come from
// TextStream; end-of-generation tokens end the text and are never shown. No HTTP, no tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "api/request.h"
#include "api/tool_calls.h"
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
  TextStreamOptions text;            // every choice's text rules
  int32_t n_logprobs = -1;           // -1: no logprobs; else alternatives per token
  std::vector<int32_t> choice_prompt;  // [choices] the prompt each choice continues; empty: 0 for all
  std::optional<ToolFormat> tools;     // chat with tools: the reply's calls become tool_calls
};

// Usage and timings of a finished completion (summed over choices; the prompt of several choices
// counted once).
struct CompletionStats {
  int32_t n_prompt_tokens = 0;
  int32_t n_cached_tokens = 0;
  int32_t n_completion_tokens = 0;  // tokens turned into the reply (an end token included)
  double prompt_ms = 0.0;           // the longest over choices
  double decode_ms = 0.0;
  int32_t n_draft_tokens = 0;       // speculative decoding: tokens drafted, and of those accepted
  int32_t n_draft_accepted = 0;
  int32_t n_draft_steps = 0;
};

// Not thread-safe: one HTTP thread drives it. Destroying it cancels the sequences still running.
// Choice i of the reply is handles[i]'s sequence (OpenAI's order: prompt-major, then n).
class Completion {
 public:
  Completion(CompletionSetup setup, std::vector<std::shared_ptr<SequenceHandle>> handles, const Tokenizer& tokenizer);
  Completion(CompletionSetup setup, std::shared_ptr<SequenceHandle> handle, const Tokenizer& tokenizer)
      : Completion(std::move(setup), std::vector<std::shared_ptr<SequenceHandle>>{std::move(handle)}, tokenizer) {}
  ~Completion();

  // Waits for the end and returns the reply body, or the error (500) the engine reported.
  ApiResult<nlohmann::json> run_to_end();
  // Collects the text for up to timeout_ms; true once the engine reported the end of every choice.
  bool run_for(int timeout_ms);
  // The whole reply (after run_for returned true).
  ApiResult<nlohmann::json> reply() const;
  // The next Server-Sent Events bytes, waiting up to timeout_ms (may be empty); `done` turns true
  // with the bytes that end in "data: [DONE]".
  std::string next_sse(int timeout_ms, bool& done);
  // The client left: the engine drops the sequences at its next step.
  void cancel();

  bool streaming() const { return setup_.stream; }
  bool finished() const;
  bool failed() const { return !error_.empty(); }
  CompletionStats stats() const;

 private:
  // One choice: its sequence and what became of its text.
  struct Choice {
    std::shared_ptr<SequenceHandle> handle;
    TextStream text;
    int32_t prompt = 0;
    CompletionStats stats;
    bool ended = false;     // an end token or a stop string ended the text; later tokens are dropped
    bool finished = false;  // the engine reported the end
    bool length = false;
    bool role_sent = false, final_sent = false;
    std::string content, reasoning;     // the whole text, for a reply that is not streamed
    nlohmann::json logprobs;            // the whole reply's entries (chat: array; completions: object)
    nlohmann::json new_logprobs;        // entries not yet streamed
    size_t text_chars = 0;              // code points of the token pieces so far (text_offset)
    std::string tool_text;              // streamed chat with tools: the content so far
    size_t tool_sent = 0;               // of it, bytes sent as content (before any call marker)
    bool has_calls = false;             // the reply's text held tool calls
  };
  // The reply's tool_calls array (OpenAI's form), ids derived from the completion id.
  nlohmann::json tool_calls_json(size_t choice, const std::vector<ToolCall>& calls) const;
  // Waits for engine events of any choice and feeds its text stream; returns each choice's new text.
  std::vector<TextDelta> poll(int timeout_ms);
  void on_token(Choice& c, TokenId token, const SampledLogprobs* lp, TextDelta& out);
  void on_finish(Choice& c, const SequenceEvents& ev, TextDelta& out);
  void add_logprobs(Choice& c, const std::string& piece, const SampledLogprobs& lp);
  nlohmann::json chunk(nlohmann::json choice) const;
  nlohmann::json delta_choice(size_t i, const TextDelta& d);
  std::string finish_reason_text(const Choice& c) const;
  nlohmann::json usage_json() const;
  nlohmann::json empty_logprobs() const;

  CompletionSetup setup_;
  std::vector<Choice> choices_;
  const Tokenizer& tokenizer_;
  std::shared_ptr<HandleSignal> signal_;  // shared by every handle, or null (wait on one)
  std::string error_;
  ApiErrorKind error_kind_ = ApiErrorKind::kServer;  // kUnavailable when the server aborted it
};

// Timings as llama-server reports them (cache_n, prompt_n, prompt_ms, ..., predicted_per_second).
nlohmann::json timings_json(const CompletionStats& s);

}  // namespace onebit
