// The request field table (fields.h). Sources: OpenAI's API reference for chat completions and
// completions, llama.cpp's tools/server README (c392e50) for its extensions.
#include "api/fields.h"

#include <string_view>

namespace onebit {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr const char* kLogprobs = "llama-server's form; send OpenAI's logprobs (and top_logprobs in chat)";
constexpr const char* kSampler = "this sampler is not built (top_k, top_p, min_p and temperature are)";

// True when `value` is one of the '|'-separated JSON texts of `neutral` ("*": any).
bool is_neutral(const ordered_json& value, std::string_view neutral) {
  if (neutral == "*") return true;
  while (!neutral.empty()) {
    const size_t bar = neutral.find('|');
    const std::string_view one = neutral.substr(0, bar);
    const ordered_json want = ordered_json::parse(one, nullptr, /*allow_exceptions=*/false);
    // Numbers compare by value (0 == 0.0).
    if (value == want || (value.is_number() && want.is_number() && value.get<double>() == want.get<double>())) return true;
    if (bar == std::string_view::npos) break;
    neutral.remove_prefix(bar + 1);
  }
  return false;
}

std::string allowed_text(std::string_view neutral) {
  std::string out;
  while (!neutral.empty()) {
    const size_t bar = neutral.find('|');
    if (!out.empty()) out += " or ";
    out += neutral.substr(0, bar);
    if (bar == std::string_view::npos) break;
    neutral.remove_prefix(bar + 1);
  }
  return out;
}

}  // namespace

const std::vector<FieldInfo>& request_fields() {
  using S = FieldStatus;
  static const std::vector<FieldInfo> kFields = {
      // Implemented (docs/api.md "Completion request fields").
      {"messages", kChatOnly, S::kImplemented, "", ""},
      {"prompt", kCompletionOnly, S::kImplemented, "", ""},
      {"model", kBothEndpoints, S::kImplemented, "", ""},
      {"max_tokens", kBothEndpoints, S::kImplemented, "", ""},
      {"max_completion_tokens", kBothEndpoints, S::kImplemented, "", ""},
      {"n_predict", kBothEndpoints, S::kImplemented, "", ""},
      {"temperature", kBothEndpoints, S::kImplemented, "", ""},
      {"top_k", kBothEndpoints, S::kImplemented, "", ""},
      {"top_p", kBothEndpoints, S::kImplemented, "", ""},
      {"min_p", kBothEndpoints, S::kImplemented, "", ""},
      {"seed", kBothEndpoints, S::kImplemented, "", ""},
      {"response_format", kBothEndpoints, S::kImplemented, "", ""},
      {"json_schema", kBothEndpoints, S::kImplemented, "", ""},
      {"grammar", kBothEndpoints, S::kImplemented, "", ""},
      {"stop", kBothEndpoints, S::kImplemented, "", ""},
      {"stream", kBothEndpoints, S::kImplemented, "", ""},
      {"stream_options", kBothEndpoints, S::kImplemented, "", ""},
      {"reasoning_format", kBothEndpoints, S::kImplemented, "", ""},
      {"cache_prompt", kBothEndpoints, S::kImplemented, "", ""},
      {"ignore_eos", kBothEndpoints, S::kImplemented, "", ""},
      {"speculative.n_max", kBothEndpoints, S::kImplemented, "", ""},
      {"tools", kChatOnly, S::kImplemented, "", ""},
      {"tool_choice", kChatOnly, S::kImplemented, "", ""},
      {"parallel_tool_calls", kChatOnly, S::kImplemented, "", ""},
      {"chat_template_kwargs", kChatOnly, S::kImplemented, "", ""},
      {"n", kBothEndpoints, S::kImplemented, "", ""},
      {"presence_penalty", kBothEndpoints, S::kImplemented, "", ""},
      {"frequency_penalty", kBothEndpoints, S::kImplemented, "", ""},
      {"repeat_penalty", kBothEndpoints, S::kImplemented, "", ""},
      {"repeat_last_n", kBothEndpoints, S::kImplemented, "", ""},
      {"logit_bias", kBothEndpoints, S::kImplemented, "", ""},
      {"logprobs", kBothEndpoints, S::kImplemented, "", ""},
      {"top_logprobs", kChatOnly, S::kImplemented, "", ""},
      // Metadata for OpenAI's platform: no effect on a reply by definition.
      {"user", kBothEndpoints, S::kImplemented, "", ""},
      {"store", kChatOnly, S::kNeutralOnly, "false", "stored completions are an OpenAI platform feature"},
      {"metadata", kChatOnly, S::kImplemented, "", ""},
      {"service_tier", kChatOnly, S::kImplemented, "", ""},
      {"prompt_cache_key", kChatOnly, S::kImplemented, "", ""},
      {"safety_identifier", kChatOnly, S::kImplemented, "", ""},
      // Built only at their neutral values so far.
      {"best_of", kCompletionOnly, S::kNeutralOnly, "1", "ranking candidates is not built; n gives several choices"},
      {"echo", kCompletionOnly, S::kNeutralOnly, "false", "echoing the prompt is not built yet"},
      {"suffix", kCompletionOnly, S::kNeutralOnly, "\"\"", "insertion (a suffix after the completion) is not built"},
      {"penalize_nl", kBothEndpoints, S::kNeutralOnly, "false", "dropped by llama.cpp; newlines are penalized like any token"},
      {"n_probs", kBothEndpoints, S::kNeutralOnly, "0", kLogprobs},
      {"post_sampling_probs", kBothEndpoints, S::kNeutralOnly, "false", kLogprobs},
      {"typical_p", kBothEndpoints, S::kNeutralOnly, "1", kSampler},
      {"min_keep", kBothEndpoints, S::kNeutralOnly, "0", kSampler},
      {"mirostat", kBothEndpoints, S::kNeutralOnly, "0", kSampler},
      {"mirostat_tau", kBothEndpoints, S::kNeutralOnly, "*", ""},
      {"mirostat_eta", kBothEndpoints, S::kNeutralOnly, "*", ""},
      {"dry_multiplier", kBothEndpoints, S::kNeutralOnly, "0", kSampler},
      {"dry_base", kBothEndpoints, S::kNeutralOnly, "*", ""},
      {"dry_allowed_length", kBothEndpoints, S::kNeutralOnly, "*", ""},
      {"dry_penalty_last_n", kBothEndpoints, S::kNeutralOnly, "*", ""},
      {"dry_sequence_breakers", kBothEndpoints, S::kNeutralOnly, "*", ""},
      {"xtc_probability", kBothEndpoints, S::kNeutralOnly, "0", kSampler},
      {"xtc_threshold", kBothEndpoints, S::kNeutralOnly, "*", ""},
      {"id_slot", kBothEndpoints, S::kNeutralOnly, "-1", "slots are the engine's to choose"},
      {"n_keep", kBothEndpoints, S::kNeutralOnly, "0|-1", "context shifting is not built (a request must fit the context)"},
      {"n_indent", kBothEndpoints, S::kNeutralOnly, "0", "indentation stops are not built"},
      {"t_max_predict_ms", kBothEndpoints, S::kNeutralOnly, "0", "time limits are not built"},
      {"t_max_prompt_ms", kBothEndpoints, S::kNeutralOnly, "0", "time limits are not built"},
      {"timings_per_token", kBothEndpoints, S::kNeutralOnly, "false", "per-token timings are not built (each reply ends with its timings)"},
      {"return_tokens", kBothEndpoints, S::kNeutralOnly, "false", "token ids in replies are not built"},
      {"modalities", kChatOnly, S::kNeutralOnly, R"(["text"])", "only text is produced"},
      // Refused.
      {"functions", kChatOnly, S::kRefused, "", "deprecated by OpenAI; send `tools`"},
      {"function_call", kChatOnly, S::kRefused, "", "deprecated by OpenAI; send `tool_choice`"},
      {"audio", kChatOnly, S::kRefused, "", "only text is produced"},
      {"prediction", kChatOnly, S::kRefused, "", "predicted outputs are not built (speculative decoding needs no hint)"},
      {"reasoning_effort", kChatOnly, S::kRefused, "", "not built; with Qwen3 send chat_template_kwargs {\"enable_thinking\": false}"},
      {"verbosity", kChatOnly, S::kRefused, "", "not built"},
      {"web_search_options", kChatOnly, S::kRefused, "", "web search is not built"},
      {"samplers", kBothEndpoints, S::kRefused, "", "the sampler order is fixed"},
      {"lora", kBothEndpoints, S::kRefused, "", "LoRA adapters are not built"},
      {"image_data", kBothEndpoints, S::kRefused, "", "images are not built"},
      {"response_fields", kBothEndpoints, S::kRefused, "", "not built"},
      {"input_prefix", kBothEndpoints, S::kRefused, "", "infill is not built"},
      {"input_suffix", kBothEndpoints, S::kRefused, "", "infill is not built"},
  };
  return kFields;
}

ApiResult<bool> check_request_fields(const ordered_json& body, Endpoint endpoint) {
  const unsigned mine = endpoint == Endpoint::kChat ? kChatOnly : kCompletionOnly;
  const char* route = endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (it->is_null()) continue;
    const std::string& name = it.key();
    const FieldInfo* info = nullptr;
    for (const FieldInfo& f : request_fields()) {
      if (name == f.name) info = &f;
    }
    if (info == nullptr) {
      return invalid_request("'" + name.substr(0, 64) + "' is not a field of " + route + "; the fields are listed in docs/api.md");
    }
    if ((info->endpoints & mine) == 0) {
      return invalid_request("'" + name + "' is not a field of " + route + " (it belongs to " +
                             (endpoint == Endpoint::kChat ? "/v1/completions" : "/v1/chat/completions") + ")");
    }
    if (info->status == FieldStatus::kRefused) return invalid_request("'" + name + "' is not supported: " + info->why);
    if (info->status == FieldStatus::kNeutralOnly && !is_neutral(*it, info->neutral)) {
      std::string value = it->dump(-1, ' ', false, ordered_json::error_handler_t::replace);
      if (value.size() > 64) value = value.substr(0, 64) + "...";
      return invalid_request("'" + name + "' is " + value + ": only " + allowed_text(info->neutral) +
                             " is supported (" + info->why + ")");
    }
  }
  return true;
}

}  // namespace onebit
