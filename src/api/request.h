// Request bodies of the OpenAI-compatible API parsed into plain structs, every field checked:
// a wrong type or an out-of-range value is a 400 naming the field, the value and the allowed
// range; a field we do not implement is refused by name (fields.h); null counts as absent. No tokens, no engine, no HTTP.
// Fields: product.md ("HTTP API"), docs/api.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/tool_calls.h"

#include "api/openai_error.h"

namespace onebit {

// Either a value or an ApiError (the kind gives the HTTP status).
template <typename T>
struct ApiResult {
  std::optional<T> value;
  ApiError error{ApiErrorKind::kServer, ""};

  ApiResult(T v) : value(std::move(v)) {}           // NOLINT(google-explicit-constructor)
  ApiResult(ApiError e) : error(std::move(e)) {}    // NOLINT(google-explicit-constructor)
  bool ok() const { return value.has_value(); }
};

inline ApiError invalid_request(std::string message) { return {ApiErrorKind::kInvalidRequest, std::move(message)}; }
// "'name' must be EXPECTED, got TYPE".
ApiError wrong_type(const std::string& name, const std::string& expected, const nlohmann::ordered_json& v);

enum class Endpoint { kChat, kCompletion };

// One prompt of /v1/completions: text, or token ids (used as given).
struct PromptInput {
  std::string text;
  std::vector<int32_t> tokens;
  bool is_tokens = false;
};

inline constexpr int64_t kMaxChoices = 128;    // n at most
inline constexpr int64_t kMaxPrompts = 2048;   // prompts of one /v1/completions request at most
inline constexpr int64_t kMaxLogprobsAsked = 20;

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChat;
  nlohmann::ordered_json messages;         // chat: the messages, content parts joined into text
  nlohmann::ordered_json tools;            // chat: null or an array (checked: tool_calls.h)
  ToolRequest tool;                        // chat: tools, tool_choice, parallel_tool_calls
  nlohmann::ordered_json template_kwargs;  // chat_template_kwargs: null or an object
  std::vector<PromptInput> prompts;        // completion: one or more prompts (a batch)
  int64_t n = 1;                           // choices per prompt
  std::optional<int64_t> max_tokens;       // max_tokens | max_completion_tokens | n_predict; absent: to the context
  double temperature = 0.8;                // 0 = greedy
  int64_t top_k = 40;
  double top_p = 0.95;
  double min_p = 0.05;
  std::optional<uint64_t> seed;            // absent: random
  double presence_penalty = 0.0;           // OpenAI's, over the reply's tokens
  double frequency_penalty = 0.0;
  double repeat_penalty = 1.0;             // llama-server's, over the last repeat_last_n tokens
  int64_t repeat_last_n = 64;              // -1: the whole context
  std::vector<std::pair<int64_t, double>> logit_bias;  // token id -> bias; -100 bans
  int64_t logprobs = -1;                   // -1: none; else top alternatives per token (0..20)
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;              // stream_options.include_usage
  bool split_reasoning = true;             // reasoning_format != "none"
  bool cache_prompt = true;
  int32_t draft_max = -1;                 // speculative.n_max: drafted tokens per step at most (0: this
                                          // request drafts nothing); -1: the server's --mtp-max
  bool ignore_eos = false;                 // end-of-generation tokens are never sampled (llama-server's)
  std::string grammar;                     // structured output as GBNF (checked); empty: free text
  std::string grammar_field;               // the field it came from (response_format, json_schema, grammar)
};

// JSON values a body may hold by default (see max_json_values).
inline constexpr int64_t kDefaultMaxJsonValues = int64_t{1} << 20;
// The JSON values a request for a context of n_ctx tokens can use: every message, part or prompt
// token costs at least one token, so more than a few per token is never needed (tools and schemas
// get a fixed allowance).
inline int64_t max_json_values(int64_t n_ctx) { return 16 * n_ctx + 65536; }

// Parses a /v1/chat/completions or /v1/completions body (raw bytes: bad JSON is a 400 too; more
// than `max_values` JSON values a 413, before parsing).
ApiResult<CompletionRequest> parse_completion_request(const std::string& body, Endpoint endpoint,
                                                      int64_t max_values = kDefaultMaxJsonValues);

// Parses the body as a JSON object; the error names what is wrong.
ApiResult<nlohmann::ordered_json> parse_json_object(const std::string& body, int64_t max_values = kDefaultMaxJsonValues);

// Field readers over an object; absent or null gives nullopt; the wrong type or range is an error.
ApiResult<std::optional<bool>> read_bool(const nlohmann::ordered_json& obj, const char* name);
ApiResult<std::optional<int64_t>> read_int(const nlohmann::ordered_json& obj, const char* name, int64_t lo, int64_t hi);
ApiResult<std::optional<double>> read_number(const nlohmann::ordered_json& obj, const char* name, double lo, double hi);
ApiResult<std::optional<std::string>> read_string(const nlohmann::ordered_json& obj, const char* name);

}  // namespace onebit
