// Parsing and validation of completion request bodies.
#include "api/request.h"

#include "api/fields.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace onebit {
namespace {

using nlohmann::ordered_json;

constexpr int kMaxJsonDepth = 64;    // deeper bodies are refused before parsing (copies recurse)
constexpr size_t kMaxStopWords = 16;
constexpr int64_t kMaxTokens = int64_t{1} << 24;

// The shape of a JSON text before it is parsed: nesting depth of brackets outside strings, and
// an upper bound on its values (every value but the first follows a ',' or opens a container).
// Stops early once the depth passes `depth_limit`.
struct JsonShape {
  int max_depth = 0;
  int64_t n_values = 1;
};

JsonShape json_shape(const std::string& body, int depth_limit) {
  JsonShape shape;
  int depth = 0;
  int& max_depth = shape.max_depth;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
      ++shape.n_values;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',') {
      ++shape.n_values;
    }
    if (max_depth > depth_limit) break;
  }
  return shape;
}

std::string type_name(const ordered_json& v) { return v.type_name(); }


// Message content as text: a string, or the text parts of an array of content parts joined with
// "\n" (as llama.cpp and vLLM join them).
ApiResult<ordered_json> content_text(const ordered_json& content, size_t idx) {
  const std::string name = "messages[" + std::to_string(idx) + "].content";
  if (content.is_null() || content.is_string()) return ordered_json(content);
  if (!content.is_array()) return wrong_type(name, "a string or an array of content parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const auto& part = content[i];
    const std::string pname = name + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return wrong_type(pname, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string() || *type != "text") {
      return invalid_request("'" + pname + ".type' must be \"text\" (this server reads text only)");
    }
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) return invalid_request("'" + pname + ".text' must be a string");
    if (i > 0) text += '\n';
    text += t->get<std::string>();
  }
  return ordered_json(text);
}

ApiResult<ordered_json> parse_messages(const ordered_json& body) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return invalid_request("'messages' is required: an array of {role, content}");
  if (!it->is_array()) return wrong_type("messages", "an array", *it);
  if (it->empty()) return invalid_request("'messages' is empty; give at least one message");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& m = (*it)[i];
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return wrong_type(name, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return invalid_request("'" + name + ".role' must be a string");
    ordered_json copy = m;
    if (auto c = m.find("content"); c != m.end()) {
      auto text = content_text(*c, i);
      if (!text.ok()) return text.error;
      copy["content"] = std::move(*text.value);
    }
    out.push_back(std::move(copy));
  }
  return out;
}

// A token id list at `name`: integers 0 to 2^31-1 (the vocabulary check comes later).
ApiResult<std::vector<int32_t>> token_list(const ordered_json& list, const std::string& name) {
  if (list.empty()) return invalid_request("'" + name + "' is an empty array; give a string or token ids");
  std::vector<int32_t> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& t = list[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return invalid_request("'" + name + "[" + std::to_string(i) + "]' must be a token id (an integer >= 0); "
                             "a prompt is a string, an array of strings, token ids, or an array of token-id arrays");
    }
    out.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return out;
}

// prompt: a string, an array of strings, an array of token ids, or an array of token-id arrays
// (OpenAI's batch forms: every prompt becomes its own choices).
ApiResult<bool> parse_prompt(const ordered_json& body, CompletionRequest& r) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return invalid_request("'prompt' is required: a string or an array of token ids");
  if (it->is_string()) {
    r.prompts.push_back({it->get<std::string>(), {}, false});
    return true;
  }
  if (!it->is_array()) return wrong_type("prompt", "a string, an array of strings or an array of token ids", *it);
  if (it->empty()) return invalid_request("'prompt' is an empty array; give a string or token ids");
  if (it->size() > size_t(kMaxPrompts)) {
    return invalid_request("'prompt' holds " + std::to_string(it->size()) + " prompts; allowed at most " + std::to_string(kMaxPrompts));
  }
  const auto& first = (*it)[0];
  if (first.is_number()) {
    auto ids = token_list(*it, "prompt");
    if (!ids.ok()) return ids.error;
    r.prompts.push_back({"", std::move(*ids.value), true});
    return true;
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& p = (*it)[i];
    const std::string name = "prompt[" + std::to_string(i) + "]";
    if (p.is_string() && first.is_string()) {
      r.prompts.push_back({p.get<std::string>(), {}, false});
    } else if (p.is_array() && first.is_array()) {
      auto ids = token_list(p, name);
      if (!ids.ok()) return ids.error;
      r.prompts.push_back({"", std::move(*ids.value), true});
    } else {
      return invalid_request("'" + name + "' is " + type_name(p) + ", unlike prompt[0] (" + type_name(first) +
                             "); a prompt array holds strings, token ids, or token-id arrays, not a mix");
    }
  }
  return true;
}

ApiResult<bool> parse_stop(const ordered_json& body, CompletionRequest& r) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return true;
  if (it->is_string()) {
    if (!it->get<std::string>().empty()) r.stop.push_back(it->get<std::string>());
    return true;
  }
  if (!it->is_array()) return wrong_type("stop", "a string or an array of strings", *it);
  if (it->size() > kMaxStopWords) {
    return invalid_request("'stop' has " + std::to_string(it->size()) + " strings; allowed at most " + std::to_string(kMaxStopWords));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    if (!(*it)[i].is_string()) return wrong_type("stop[" + std::to_string(i) + "]", "a string", (*it)[i]);
    if (!(*it)[i].get<std::string>().empty()) r.stop.push_back((*it)[i].get<std::string>());
  }
  return true;
}

// The token limit under any of its three names (the first given wins).
ApiResult<bool> parse_limits(const ordered_json& body, CompletionRequest& r) {
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    auto v = read_int(body, name, 1, kMaxTokens);
    if (!v.ok()) return v.error;
    if (*v.value && !r.max_tokens) r.max_tokens = **v.value;
  }
  // llama-server's n_predict: -1 means "until the context is full".
  auto predict = read_int(body, "n_predict", -1, kMaxTokens);
  if (!predict.ok()) return predict.error;
  if (*predict.value && **predict.value == 0) return invalid_request("'n_predict' is 0; allowed -1 (no limit) or 1 to " + std::to_string(kMaxTokens));
  if (*predict.value && **predict.value > 0 && !r.max_tokens) r.max_tokens = **predict.value;
  auto n = read_int(body, "n", 1, kMaxChoices);
  if (!n.ok()) return n.error;
  r.n = n.value->value_or(1);
  return true;
}

ApiResult<bool> parse_sampling(const ordered_json& body, CompletionRequest& r) {
  auto temp = read_number(body, "temperature", 0.0, 100.0);
  if (!temp.ok()) return temp.error;
  if (*temp.value) r.temperature = **temp.value;
  auto top_p = read_number(body, "top_p", 0.0, 1.0);
  if (!top_p.ok()) return top_p.error;
  if (*top_p.value) {
    if (**top_p.value <= 0.0) return invalid_request("'top_p' is 0; allowed > 0 to 1 (1 = off)");
    r.top_p = **top_p.value;
  }
  auto min_p = read_number(body, "min_p", 0.0, 1.0);
  if (!min_p.ok()) return min_p.error;
  if (*min_p.value) r.min_p = **min_p.value;
  auto top_k = read_int(body, "top_k", 0, kMaxTokens);
  if (!top_k.ok()) return top_k.error;
  if (*top_k.value) r.top_k = **top_k.value;
  auto it = body.find("seed");
  if (it != body.end() && !it->is_null()) {
    if (it->is_number_unsigned()) r.seed = it->get<uint64_t>();
    else if (it->is_number_integer() && it->get<int64_t>() == -1) r.seed = std::nullopt;  // llama-server: random
    else return invalid_request("'seed' must be an integer from 0 to 18446744073709551615 (or -1 for random), got " + it->dump());
  }
  return true;
}

// logit_bias: {"token id": bias} (OpenAI) or [[id, bias], ...] (llama-server); a bias is a
// number -100 to 100, or false (llama-server's ban).
ApiResult<bool> parse_logit_bias(const ordered_json& body, CompletionRequest& r) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return true;
  auto add = [&](const std::string& where, int64_t id, const ordered_json& bias) -> ApiResult<bool> {
    double b = 0.0;
    if (bias.is_boolean() && !bias.get<bool>()) b = -100.0;
    else if (bias.is_number() && std::isfinite(bias.get<double>()) && bias.get<double>() >= -100.0 && bias.get<double>() <= 100.0) b = bias.get<double>();
    else return invalid_request("'" + where + "' is " + bias.dump() + "; allowed a number -100 to 100 (-100 bans the token) or false");
    r.logit_bias.emplace_back(id, b);
    return true;
  };
  if (it->is_object()) {
    for (auto e = it->begin(); e != it->end(); ++e) {
      const std::string& key = e.key();
      const std::string where = "logit_bias[\"" + key.substr(0, 32) + "\"]";
      char* end = nullptr;
      const long long id = key.empty() || key.size() > 10 ? -1 : std::strtoll(key.c_str(), &end, 10);
      if (id < 0 || end == nullptr || *end != '\0' || !std::isdigit(static_cast<unsigned char>(key[0])) || id > std::numeric_limits<int32_t>::max()) {
        return invalid_request("'logit_bias' key \"" + key.substr(0, 32) + "\" is not a token id; keys are token ids as decimal strings, e.g. {\"50256\": -100}");
      }
      auto st = add(where, id, e.value());
      if (!st.ok()) return st.error;
    }
    return true;
  }
  if (!it->is_array()) return wrong_type("logit_bias", "an object {\"token id\": bias} or an array of [token id, bias] pairs", *it);
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& pair = (*it)[i];
    const std::string where = "logit_bias[" + std::to_string(i) + "]";
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || pair[0].get<int64_t>() < 0 ||
        pair[0].get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return invalid_request("'" + where + "' must be a pair [token id, bias], got " + pair.dump().substr(0, 64));
    }
    auto st = add(where + "[1]", pair[0].get<int64_t>(), pair[1]);
    if (!st.ok()) return st.error;
  }
  return true;
}

ApiResult<bool> parse_penalties(const ordered_json& body, CompletionRequest& r) {
  auto presence = read_number(body, "presence_penalty", -2.0, 2.0);
  if (!presence.ok()) return presence.error;
  r.presence_penalty = presence.value->value_or(0.0);
  auto frequency = read_number(body, "frequency_penalty", -2.0, 2.0);
  if (!frequency.ok()) return frequency.error;
  r.frequency_penalty = frequency.value->value_or(0.0);
  auto repeat = read_number(body, "repeat_penalty", 0.0, 10.0);
  if (!repeat.ok()) return repeat.error;
  if (*repeat.value && **repeat.value <= 0.0) return invalid_request("'repeat_penalty' is 0; allowed > 0 to 10 (1 = off)");
  r.repeat_penalty = repeat.value->value_or(1.0);
  auto last_n = read_int(body, "repeat_last_n", -1, kMaxTokens);
  if (!last_n.ok()) return last_n.error;
  r.repeat_last_n = last_n.value->value_or(64);
  return parse_logit_bias(body, r);
}

// Chat: logprobs (boolean) and top_logprobs (0 to 20, needs logprobs); completions: logprobs as
// the number of alternatives (0 to 20).
ApiResult<bool> parse_logprobs(const ordered_json& body, CompletionRequest& r) {
  const std::string range = "0 to " + std::to_string(kMaxLogprobsAsked);
  if (r.endpoint == Endpoint::kChat) {
    auto on = read_bool(body, "logprobs");
    if (!on.ok()) return on.error;
    auto top = read_int(body, "top_logprobs", 0, kMaxLogprobsAsked);
    if (!top.ok()) return top.error;
    if (*top.value && **top.value > 0 && !on.value->value_or(false)) {
      return invalid_request("'top_logprobs' needs 'logprobs': true");
    }
    if (on.value->value_or(false)) r.logprobs = top.value->value_or(0);
    return true;
  }
  auto it = body.find("logprobs");
  if (it == body.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) return true;
  if (it->is_boolean()) {
    return invalid_request("'logprobs' is true; in /v1/completions it is the number of alternatives per token, " + range);
  }
  auto n = read_int(body, "logprobs", 0, kMaxLogprobsAsked);
  if (!n.ok()) return n.error;
  r.logprobs = **n.value;
  return true;
}

ApiResult<bool> parse_options(const ordered_json& body, CompletionRequest& r) {
  auto stream = read_bool(body, "stream");
  if (!stream.ok()) return stream.error;
  r.stream = stream.value->value_or(false);
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return wrong_type("stream_options", "an object", *it);
    auto usage = read_bool(*it, "include_usage");
    if (!usage.ok()) return invalid_request("'stream_options." + usage.error.message.substr(1));
    r.include_usage = usage.value->value_or(false);
  }
  auto cache = read_bool(body, "cache_prompt");
  if (!cache.ok()) return cache.error;
  r.cache_prompt = cache.value->value_or(true);
  auto draft_max = read_int(body, "speculative.n_max", 0, 64);
  if (!draft_max.ok()) return draft_max.error;
  r.draft_max = static_cast<int32_t>(draft_max.value->value_or(-1));
  auto ignore_eos = read_bool(body, "ignore_eos");
  if (!ignore_eos.ok()) return ignore_eos.error;
  r.ignore_eos = ignore_eos.value->value_or(false);
  auto format = read_string(body, "reasoning_format");
  if (!format.ok()) return format.error;
  if (*format.value) {
    const std::string& f = **format.value;
    if (f != "none" && f != "auto" && f != "deepseek" && f != "deepseek-legacy") {
      return invalid_request("'reasoning_format' is '" + f + "'; allowed: none, auto, deepseek, deepseek-legacy");
    }
    r.split_reasoning = f != "none";
  }
  auto model = body.find("model");
  if (model != body.end() && !model->is_null() && !model->is_string()) return wrong_type("model", "a string", *model);
  return true;
}

// A JSON schema as GBNF; `where` names the field in errors.
ApiResult<bool> schema_grammar(const ordered_json& schema, const std::string& where, CompletionRequest& r) {
  if (!schema.is_object() && !schema.is_boolean()) return wrong_type(where, "a JSON schema (an object)", schema);
  auto gbnf = grammar::json_schema_to_gbnf(schema);
  if (!gbnf.ok()) return invalid_request("'" + where + "': " + gbnf.message());
  r.grammar = std::move(*gbnf);
  r.grammar_field = where;
  return true;
}

// Structured output: OpenAI's response_format, llama-server's json_schema and grammar; one at most.
ApiResult<bool> parse_structured(const ordered_json& body, CompletionRequest& r) {
  std::vector<std::string> given;
  for (const char* name : {"response_format", "json_schema", "grammar"}) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) continue;
    if (std::string(name) == "response_format" && it->is_object() && it->value("type", "") == "text" && it->size() == 1) continue;
    given.push_back(name);
  }
  if (given.size() > 1) {
    return invalid_request("'" + given[0] + "' and '" + given[1] + "' both constrain the output; send one of them");
  }
  if (given.empty()) return true;
  const ordered_json& v = body[given[0]];
  if (given[0] == "grammar") {
    if (!v.is_string()) return wrong_type("grammar", "a string (GBNF)", v);
    auto g = grammar::parse_gbnf(v.get<std::string>());
    if (!g.ok()) return invalid_request("'grammar': " + g.message());
    r.grammar = v.get<std::string>();
    r.grammar_field = "grammar";
    return true;
  }
  if (given[0] == "json_schema") return schema_grammar(v, "json_schema", r);
  // response_format
  if (!v.is_object()) return wrong_type("response_format", "an object", v);
  const std::string type = v.contains("type") && v["type"].is_string() ? v["type"].get<std::string>() : "";
  if (type == "json_object") {
    for (const auto& [key, unused] : v.items()) {
      if (key != "type" && key != "schema") {
        return invalid_request("'response_format." + key + "' is not a field of the json_object format (type, schema)");
      }
    }
    if (v.contains("schema")) return schema_grammar(v["schema"], "response_format.schema", r);
    r.grammar = grammar::json_object_gbnf();
    r.grammar_field = "response_format";
    return true;
  }
  if (type == "json_schema") {
    for (const auto& [key, unused] : v.items()) {
      if (key != "type" && key != "json_schema") {
        return invalid_request("'response_format." + key + "' is not a field of the json_schema format (type, json_schema)");
      }
    }
    auto js = v.find("json_schema");
    if (js == v.end() || !js->is_object()) {
      return invalid_request("'response_format.json_schema' must be an object {\"name\", \"schema\", \"strict\"}");
    }
    for (const auto& [key, value] : js->items()) {
      if (key == "name" || key == "description") {
        if (!value.is_string()) return wrong_type("response_format.json_schema." + key, "a string", value);
      } else if (key == "strict") {
        if (!value.is_boolean() && !value.is_null()) return wrong_type("response_format.json_schema.strict", "a boolean", value);
      } else if (key != "schema") {
        return invalid_request("'response_format.json_schema." + key +
                               "' is not a field of json_schema (name, description, schema, strict)");
      }
    }
    // Without a schema any JSON value is allowed (OpenAI requires one; llama-server does not).
    if (!js->contains("schema")) return schema_grammar(ordered_json::object(), "response_format.json_schema.schema", r);
    return schema_grammar((*js)["schema"], "response_format.json_schema.schema", r);
  }
  return invalid_request("'response_format.type' is '" + type + "'; allowed: text, json_object, json_schema");
}

ApiResult<bool> parse_chat_fields(const ordered_json& body, CompletionRequest& r) {
  auto messages = parse_messages(body);
  if (!messages.ok()) return messages.error;
  r.messages = std::move(*messages.value);
  auto tool = parse_tool_request(body);
  if (!tool.ok()) return invalid_request(tool.message());
  r.tool = std::move(*tool);
  r.tools = r.tool.tools;
  if (auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return wrong_type("chat_template_kwargs", "an object", *it);
    r.template_kwargs = *it;
  }
  return true;
}

}  // namespace

ApiError wrong_type(const std::string& name, const std::string& expected, const ordered_json& v) {
  return invalid_request("'" + name + "' must be " + expected + ", got " + v.type_name());
}

ApiResult<ordered_json> parse_json_object(const std::string& body, int64_t max_values) {
  const JsonShape shape = json_shape(body, kMaxJsonDepth);
  if (shape.max_depth > kMaxJsonDepth) {
    return invalid_request("the JSON body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  // Parsed JSON takes tens of bytes per value: a body of millions of tiny values would cost far
  // more memory than its size, so it is refused before parsing.
  if (shape.n_values > max_values) {
    return ApiError{ApiErrorKind::kPayloadTooLarge, "the body holds about " + std::to_string(shape.n_values) +
                                                        " JSON values, more than the " + std::to_string(max_values) +
                                                        " this server's context can use; send less"};
  }
  ordered_json j = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_request("the body is not valid JSON (or not valid UTF-8)");
  if (!j.is_object()) return invalid_request("the body must be a JSON object, got " + type_name(j));
  return j;
}

ApiResult<std::optional<bool>> read_bool(const ordered_json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::optional<bool>{};
  if (!it->is_boolean()) return wrong_type(name, "a boolean", *it);
  return std::optional<bool>{it->get<bool>()};
}

ApiResult<std::optional<int64_t>> read_int(const ordered_json& obj, const char* name, int64_t lo, int64_t hi) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::optional<int64_t>{};
  const std::string range = "; allowed " + std::to_string(lo) + " to " + std::to_string(hi);
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || d < double(lo) || d > double(hi)) {
      return invalid_request("'" + std::string(name) + "' is " + it->dump() + "; must be an integer" + range);
    }
    return std::optional<int64_t>{static_cast<int64_t>(d)};
  }
  if (!it->is_number()) return invalid_request("'" + std::string(name) + "' must be an integer, got " + type_name(*it) + range);
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return invalid_request("'" + std::string(name) + "' is " + it->dump() + range);
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) return invalid_request("'" + std::string(name) + "' is " + it->dump() + range);
  return std::optional<int64_t>{v};
}

ApiResult<std::optional<double>> read_number(const ordered_json& obj, const char* name, double lo, double hi) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::optional<double>{};
  if (!it->is_number()) return wrong_type(name, "a number", *it);
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    char range[96];
    std::snprintf(range, sizeof(range), "; allowed %g to %g", lo, hi);
    return invalid_request("'" + std::string(name) + "' is " + it->dump() + range);
  }
  return std::optional<double>{v};
}

ApiResult<std::optional<std::string>> read_string(const ordered_json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::optional<std::string>{};
  if (!it->is_string()) return wrong_type(name, "a string", *it);
  return std::optional<std::string>{it->get<std::string>()};
}

ApiResult<CompletionRequest> parse_completion_request(const std::string& body, Endpoint endpoint, int64_t max_values) {
  auto json = parse_json_object(body, max_values);
  if (!json.ok()) return json.error;
  const ordered_json& j = *json.value;
  if (auto fields = check_request_fields(j, endpoint); !fields.ok()) return fields.error;
  CompletionRequest r;
  r.endpoint = endpoint;
  for (auto step : {parse_limits, parse_sampling, parse_penalties, parse_logprobs, parse_stop, parse_options,
                    parse_structured}) {
    auto st = step(j, r);
    if (!st.ok()) return st.error;
  }
  auto fields = endpoint == Endpoint::kChat ? parse_chat_fields(j, r) : parse_prompt(j, r);
  if (!fields.ok()) return fields.error;
  return r;
}

}  // namespace onebit
