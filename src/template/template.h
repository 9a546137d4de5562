// Chat templates: parse a Jinja chat template once, render it with messages, tools and kwargs
// byte-identically to transformers' apply_chat_template (Python Jinja2). See docs/template.md.
// Depends on base/ and nlohmann-json only; the GGUF/tokenizer plumbing lives with the callers.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "template/interpreter.h"

namespace onebit {

using tmpl::RenderLimits;
using tmpl::RenderOptions;

// What apply_chat_template passes to the template. JSON objects must be ordered_json so that
// key order (and so tojson output) is kept as the request gave it.
struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: no tools (the template sees `tools` as None)
  bool add_generation_prompt = true;
  // Extra variables: special tokens (bos_token, eos_token...) then chat_template_kwargs
  // (enable_thinking, date_string...). Must be an object or null.
  nlohmann::ordered_json kwargs;
};

// A parsed template. Immutable after parse(); render() may run on several threads at once.
class ChatTemplate {
 public:
  // Parses Jinja source. Syntax errors name the line and column ("template syntax error at line
  // 3, column 9: ...").
  static Result<ChatTemplate> parse(const std::string& source);

  // Renders with `context` (a JSON object of top-level variables). Errors name the line and
  // column; a template's raise_exception(msg) fails with exactly `msg`. Bounded by options.limits.
  Result<std::string> render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

  // Renders as apply_chat_template does: messages, tools, documents (None),
  // add_generation_prompt, then every key of inputs.kwargs.
  Result<std::string> render_chat(const ChatInputs& inputs, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const tmpl::Body> body_;
};

}  // namespace onebit
