// Tool calls: the call syntax of a model family (read from its chat template), the grammar that
// forces a call (tool_choice "required" or a named function), and the parser that turns a reply's
// text into OpenAI tool_calls. Formats: Hermes / Qwen (`<tool_call>{"name", "arguments"}</tool_call>`),
// Llama 3.x (`{"name", "parameters"}`, optionally after <|python_tag|>), Mistral
// (`[TOOL_CALLS][{"name", "arguments"}]`). docs/structured.md. No tensors, no HTTP.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace onebit {

enum class ToolFormat { kHermes, kLlama3, kMistral };

const char* tool_format_name(ToolFormat f);

// The format a chat template's tool calls take, by the markers it writes. `renders_tools`: a
// prompt rendered with tools differs from one without (the caller renders both). A template that
// ignores tools gets them described in a system message, with the Hermes form asked for; one that
// renders them in a form we do not parse is an error.
struct TemplateTools {
  ToolFormat format = ToolFormat::kHermes;
  bool renders_tools = false;
};
Result<TemplateTools> template_tools(std::string_view template_source, bool renders_tools);

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct ToolRequest {
  nlohmann::ordered_json tools;  // the request's tools, checked: [{type, function: {name, ...}}]
  ToolChoice choice = ToolChoice::kAuto;
  std::string named;             // kNamed: the function
  bool parallel = true;          // parallel_tool_calls
};

// Checks `tools` (each {"type": "function", "function": {"name", "description"?, "parameters"?,
// "strict"?}}), `tool_choice` and `parallel_tool_calls` from a request body. Errors name the field.
Result<ToolRequest> parse_tool_request(const nlohmann::ordered_json& body);

// The GBNF of one or more calls (parallel) of the allowed functions (kRequired: any; kNamed: the
// one), their arguments following each function's parameter schema. Errors name the tool and the
// schema keyword.
Result<std::string> tool_call_grammar(ToolFormat format, const ToolRequest& request);

// The system text that describes the tools and the call form, for templates that ignore `tools`.
std::string tool_system_prompt(const nlohmann::ordered_json& tools);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON text (OpenAI's form)
};
struct ToolReply {
  std::string content;          // the text outside the calls
  std::vector<ToolCall> calls;  // in order
};

// Splits a reply into text and calls. A call block that does not parse stays in the content.
ToolReply parse_tool_reply(ToolFormat format, std::string_view text);

// How many leading bytes of `text` (a reply so far) are surely content: everything before the
// first call marker, less a trailing partial marker. Streams send these and hold the rest.
size_t tool_content_prefix(ToolFormat format, std::string_view text);

// The messages as templates expect them: tool_calls arguments given as JSON strings become
// objects (templates write them with tojson or iterate them), content null becomes "".
nlohmann::ordered_json messages_for_template(const nlohmann::ordered_json& messages);

}  // namespace onebit
