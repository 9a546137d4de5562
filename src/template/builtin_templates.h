// Chat templates we ship, for models whose GGUF has none and for `--chat-template NAME`: the
// formats are the published ones (ChatML, Llama 3's header format, Qwen3's ChatML with its
// thinking switch); the Jinja text is ours. They render roles and text content; a request with
// tools raises (a template that renders tools must come with the model or --chat-template-file).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace onebit {

// The template called `name` ("chatml", "llama3", "qwen3"), or nullopt.
std::optional<std::string> builtin_chat_template(const std::string& name);
std::vector<std::string> builtin_chat_template_names();

}  // namespace onebit
