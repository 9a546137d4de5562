// `1bit run` without -p: an interactive chat. Each line read is a user message; the conversation
// is rendered with the model's chat template (as /v1/chat/completions renders it), encoded, and
// the reply streams to `out` until an end-of-generation token or the per-reply token limit.
#pragma once

#include <cstdio>
#include <string>

#include "engine/generate.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace onebit::cli {

struct ChatOptions {
  std::string template_source;  // the model's tokenizer.chat_template
  std::string system;           // optional system message
  GenerateOptions generate;     // per reply: n_predict, sampler; n_ctx is the chat's context
                                // (0 = the model's, at most 8192)
  bool show_prompt = false;     // write "> " before each read (an interactive terminal)
};

// Reads lines from `in` until EOF or "/exit"; "/clear" forgets the conversation. Returns the
// process exit code (1 for a template that does not parse). A message that the template refuses
// or that does not fit the context is reported on stderr and left out, and the chat goes on.
int run_chat(Model& model, const Tokenizer& tokenizer, const ChatOptions& options, std::FILE* in, std::FILE* out);

}  // namespace onebit::cli
