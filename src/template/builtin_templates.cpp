// The built-in chat templates (builtin_templates.h).
#include "template/builtin_templates.h"

#include <utility>

namespace onebit {
namespace {

// Every built-in refuses tools rather than dropping them (the API server describes tools in the
// system message for templates that do not render them: api/tool_calls.h).
constexpr const char* kNoTools =
    "{%- if tools -%}{{- raise_exception('this built-in chat template does not render tools; "
    "give one that does with --chat-template-file') -}}{%- endif -%}";

// ChatML: <|im_start|>role\ncontent<|im_end|>\n per message.
constexpr const char* kChatml =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] if message['content'] is string else '') + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

// Llama 3: BOS, then <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> per message.
constexpr const char* kLlama3 =
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + ((message['content'] if message['content'] is string else '') | trim) + '<|eot_id|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}";

// Qwen3: ChatML; with enable_thinking false the generation prompt carries an empty think block.
constexpr const char* kQwen3Prompt =
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{%- endif -%}";

}  // namespace

std::vector<std::string> builtin_chat_template_names() { return {"chatml", "llama3", "qwen3"}; }

std::optional<std::string> builtin_chat_template(const std::string& name) {
  if (name == "chatml") return std::string(kNoTools) + kChatml;
  if (name == "llama3") return std::string(kNoTools) + kLlama3;
  if (name == "qwen3") {
    std::string chatml = kChatml;
    chatml = chatml.substr(0, chatml.find("{%- if add_generation_prompt"));
    return std::string(kNoTools) + chatml + kQwen3Prompt;
  }
  return std::nullopt;
}

}  // namespace onebit
