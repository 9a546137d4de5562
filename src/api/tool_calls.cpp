#include "api/tool_calls.h"

#include <cctype>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace onebit {

using nlohmann::ordered_json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";

bool valid_function_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// {"name": ..., "arguments"/"parameters": {...} or "..."} -> a call; false when it is not one.
bool call_from_json(const ordered_json& j, ToolCall& out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
  out.name = j["name"].get<std::string>();
  if (!key) {
    out.arguments = "{}";
    return true;
  }
  const ordered_json& a = j[key];
  if (a.is_string()) {
    out.arguments = a.get<std::string>();
  } else if (a.is_object()) {
    out.arguments = a.dump(-1, ' ', false);
  } else {
    return false;
  }
  return true;
}

// The length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes: return "hermes";
    case ToolFormat::kLlama3: return "llama3";
    case ToolFormat::kMistral: return "mistral";
  }
  return "?";
}

Result<TemplateTools> template_tools(std::string_view src, bool renders_tools) {
  TemplateTools t;
  t.renders_tools = renders_tools;
  if (!renders_tools) return t;
  if (src.find(kHermesOpen) != std::string_view::npos) {
    t.format = ToolFormat::kHermes;
  } else if (src.find(kMistralOpen) != std::string_view::npos) {
    t.format = ToolFormat::kMistral;
  } else if (src.find(kPythonTag) != std::string_view::npos) {
    t.format = ToolFormat::kLlama3;
  } else {
    return make_error("this model's chat template writes tool calls in a form this server does not parse (it parses "
                      "Hermes/Qwen <tool_call>, Llama 3.x JSON and Mistral [TOOL_CALLS]); call without `tools`, or "
                      "serve with --chat-template-file a template of those families");
  }
  return t;
}

Result<ToolRequest> parse_tool_request(const ordered_json& body) {
  ToolRequest r;
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return make_error("'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
    for (size_t i = 0; i < it->size(); ++i) {
      const ordered_json& t = (*it)[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) return make_error("'" + at + "' must be an object");
      for (const auto& [key, unused] : t.items()) {
        if (key != "type" && key != "function") return make_error("'" + at + "." + key + "' is not a field of a tool (type, function)");
      }
      if (t.value("type", "") != "function") return make_error("'" + at + ".type' must be \"function\"");
      if (!t.contains("function") || !t["function"].is_object()) return make_error("'" + at + ".function' must be an object");
      const ordered_json& f = t["function"];
      for (const auto& [key, value] : f.items()) {
        if (key == "name" || key == "description") {
          if (!value.is_string()) return make_error("'" + at + ".function." + key + "' must be a string");
        } else if (key == "parameters") {
          if (!value.is_object()) return make_error("'" + at + ".function.parameters' must be a JSON schema (an object)");
        } else if (key == "strict") {
          if (!value.is_boolean() && !value.is_null()) return make_error("'" + at + ".function.strict' must be a boolean");
        } else {
          return make_error("'" + at + ".function." + key + "' is not a field of a function (name, description, parameters, strict)");
        }
      }
      const std::string name = f.value("name", "");
      if (!valid_function_name(name)) {
        return make_error("'" + at + ".function.name' is '" + name + "'; a name is 1 to 64 of a-z, A-Z, 0-9, _ and -");
      }
      for (size_t k = 0; k < i; ++k) {
        if ((*it)[k]["function"]["name"] == name) return make_error("'" + at + ".function.name' '" + name + "' is given twice");
      }
    }
    if (!it->empty()) r.tools = *it;
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      const std::string c = it->get<std::string>();
      if (c == "auto") r.choice = ToolChoice::kAuto;
      else if (c == "none") r.choice = ToolChoice::kNone;
      else if (c == "required") r.choice = ToolChoice::kRequired;
      else return make_error("'tool_choice' is '" + c + "'; allowed: auto, none, required, or {\"type\": \"function\", \"function\": {\"name\"}}");
    } else if (it->is_object() && it->value("type", "") == "function" && it->contains("function") &&
               (*it)["function"].is_object() && (*it)["function"].contains("name") && (*it)["function"]["name"].is_string()) {
      r.choice = ToolChoice::kNamed;
      r.named = (*it)["function"]["name"].get<std::string>();
      bool found = false;
      for (const ordered_json& t : r.tools) found = found || t["function"]["name"] == r.named;
      if (!found) return make_error("'tool_choice' names the function '" + r.named + "', which is not in 'tools'");
    } else {
      return make_error("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if ((r.choice == ToolChoice::kRequired || r.choice == ToolChoice::kNamed) && r.tools.empty()) {
      return make_error("'tool_choice' asks for a call but 'tools' is empty; give the functions in 'tools'");
    }
  }
  if (auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return make_error("'parallel_tool_calls' must be a boolean");
    r.parallel = it->get<bool>();
  }
  return r;
}

Result<std::string> tool_call_grammar(ToolFormat format, const ToolRequest& request) {
  std::string rules;
  std::string calls;  // alternatives: one per allowed function
  for (size_t i = 0; i < request.tools.size(); ++i) {
    const ordered_json& f = request.tools[i]["function"];
    const std::string name = f["name"].get<std::string>();
    if (request.choice == ToolChoice::kNamed && name != request.named) continue;
    const ordered_json params = f.contains("parameters") ? f["parameters"]
                                                         : ordered_json{{"type", "object"}, {"properties", ordered_json::object()},
                                                                        {"additionalProperties", false}};
    const std::string prefix = "t" + std::to_string(i) + "-";
    auto args = grammar::json_schema_rules(params, prefix);
    if (!args.ok()) {
      return make_error("'tools[" + std::to_string(i) + "].function.parameters': " + args.message());
    }
    rules += *args;
    const std::string key = format == ToolFormat::kLlama3 ? "parameters" : "arguments";
    const std::string head = grammar::gbnf_literal("{\"name\": \"" + name + "\", \"" + key + "\": ");
    calls += (calls.empty() ? "" : " | ") + head + " " + prefix + "root \"}\"";
  }
  std::string root;
  switch (format) {
    case ToolFormat::kHermes: {
      const std::string one = "\"<tool_call>\\n\" call \"\\n</tool_call>\"";
      root = request.parallel ? one + " (\"\\n\" " + one + ")*" : one;
      break;
    }
    case ToolFormat::kLlama3:  // Llama 3.x calls one function per message
      root = "call";
      break;
    case ToolFormat::kMistral:
      root = request.parallel ? "\"[TOOL_CALLS][\" call (\", \" call)* \"]\"" : "\"[TOOL_CALLS][\" call \"]\"";
      break;
  }
  std::string gbnf = "root ::= " + root + "\ncall ::= " + calls + "\n" + rules;
  auto check = grammar::parse_gbnf(gbnf);
  if (!check.ok()) return make_error("internal error: the tool-call grammar does not parse (" + check.message() + ")");
  return gbnf;
}

std::string tool_system_prompt(const ordered_json& tools) {
  std::string s =
      "# Tools\n\nYou can call functions to answer. Their signatures are inside <tools></tools>:\n<tools>\n";
  for (const ordered_json& t : tools) s += t.dump(-1, ' ', false) + "\n";
  s += "</tools>\n\nTo call a function, reply with a JSON object of its name and arguments inside "
       "<tool_call></tool_call>:\n<tool_call>\n{\"name\": <function name>, \"arguments\": <arguments object>}\n</tool_call>";
  return s;
}

ToolReply parse_tool_reply(ToolFormat format, std::string_view text) {
  ToolReply out;
  switch (format) {
    case ToolFormat::kHermes: {
      size_t at = 0;
      while (at < text.size()) {
        const size_t open = text.find(kHermesOpen, at);
        if (open == std::string_view::npos) {
          out.content += text.substr(at);
          break;
        }
        const size_t body = open + kHermesOpen.size();
        size_t close = text.find(kHermesClose, body);
        const size_t end = close == std::string_view::npos ? text.size() : close + kHermesClose.size();
        if (close == std::string_view::npos) close = text.size();
        ToolCall call;
        const ordered_json j = ordered_json::parse(trim(text.substr(body, close - body)), nullptr, false);
        if (!j.is_discarded() && call_from_json(j, call)) {
          out.content += text.substr(at, open - at);
          out.calls.push_back(std::move(call));
        } else {
          out.content += text.substr(at, end - at);  // not a call: it stays text
        }
        at = end;
      }
      break;
    }
    case ToolFormat::kLlama3: {
      std::string_view t = trim(text);
      if (t.substr(0, kPythonTag.size()) == kPythonTag) t = trim(t.substr(kPythonTag.size()));
      ToolCall call;
      const ordered_json j = ordered_json::parse(t, nullptr, false);
      if (!t.empty() && t.front() == '{' && !j.is_discarded() && call_from_json(j, call)) {
        out.calls.push_back(std::move(call));
      } else {
        out.content = std::string(text);
      }
      break;
    }
    case ToolFormat::kMistral: {
      const size_t open = text.find(kMistralOpen);
      if (open == std::string_view::npos) {
        out.content = std::string(text);
        break;
      }
      const ordered_json j = ordered_json::parse(trim(text.substr(open + kMistralOpen.size())), nullptr, false);
      std::vector<ToolCall> calls;
      bool ok = !j.is_discarded() && j.is_array() && !j.empty();
      for (size_t i = 0; ok && i < j.size(); ++i) {
        ToolCall c;
        ok = call_from_json(j[i], c);
        calls.push_back(std::move(c));
      }
      if (ok) {
        out.content = std::string(text.substr(0, open));
        out.calls = std::move(calls);
      } else {
        out.content = std::string(text);
      }
      break;
    }
  }
  if (!out.calls.empty()) out.content = std::string(trim(out.content));
  return out;
}

size_t tool_content_prefix(ToolFormat format, std::string_view text) {
  switch (format) {
    case ToolFormat::kHermes:
    case ToolFormat::kMistral: {
      const std::string_view marker = format == ToolFormat::kHermes ? kHermesOpen : kMistralOpen;
      const size_t at = text.find(marker);
      if (at != std::string_view::npos) return at;
      return text.size() - partial_marker(text, marker);
    }
    case ToolFormat::kLlama3: {
      // A call is the whole reply: hold everything while the reply may still be one.
      const std::string_view t = trim(text);
      if (t.empty() || t.front() == '{' || kPythonTag.substr(0, std::min(t.size(), kPythonTag.size())) ==
                                               t.substr(0, std::min(t.size(), kPythonTag.size()))) {
        return 0;
      }
      return text.size();
    }
  }
  return text.size();
}

ordered_json messages_for_template(const ordered_json& messages) {
  ordered_json out = messages;
  for (ordered_json& m : out) {
    // An assistant message that only calls tools has content null (OpenAI's form); templates test
    // and concatenate content as a string, so it becomes "" (as llama.cpp's server does).
    if (m.is_object() && m.contains("content") && m["content"].is_null()) m["content"] = "";
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (ordered_json& call : m["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      ordered_json& f = call["function"];
      if (f.contains("arguments") && f["arguments"].is_string()) {
        const ordered_json parsed = ordered_json::parse(f["arguments"].get<std::string>(), nullptr, false);
        if (!parsed.is_discarded() && parsed.is_object()) f["arguments"] = parsed;
      }
    }
  }
  return out;
}

}  // namespace onebit
