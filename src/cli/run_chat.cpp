#include "cli/run_chat.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/utf8.h"
#include "template/template.h"

namespace onebit::cli {
namespace {

using nlohmann::ordered_json;

// The chat's context when neither -c nor the model gives a smaller one (K/V memory).
constexpr int64_t kChatMaxCtx = 8192;

// One line of `in` without its newline; false at EOF with nothing read.
bool read_line(std::FILE* in, std::string& line) {
  line.clear();
  int c;
  while ((c = std::fgetc(in)) != EOF && c != '\n') line.push_back(static_cast<char>(c));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return c != EOF || !line.empty();
}

}  // namespace

int run_chat(Model& model, const Tokenizer& tokenizer, const ChatOptions& options, std::FILE* in, std::FILE* out) {
  auto tmpl = ChatTemplate::parse(options.template_source);
  if (!tmpl.ok()) {
    std::fprintf(stderr, "1bit run: tokenizer.chat_template: %s\n", tmpl.message().c_str());
    return 1;
  }
  ChatInputs inputs;
  inputs.kwargs = ordered_json::object();
  if (tokenizer.bos_id() >= 0) inputs.kwargs["bos_token"] = std::string(tokenizer.token_text(tokenizer.bos_id()));
  if (tokenizer.eos_id() >= 0) inputs.kwargs["eos_token"] = std::string(tokenizer.token_text(tokenizer.eos_id()));
  auto reset = [&] {
    inputs.messages = ordered_json::array();
    if (!options.system.empty()) inputs.messages.push_back({{"role", "system"}, {"content", options.system}});
  };
  reset();
  // One engine for the whole chat: each turn's prompt is the last one plus the reply and the new
  // message, so the prefix cache serves all but the new tokens.
  const int64_t train = model.config().context_length > 0 ? model.config().context_length : kChatMaxCtx;
  const int64_t context = options.generate.n_ctx > 0 ? options.generate.n_ctx : std::min(train, kChatMaxCtx);
  EngineOptions eo;
  eo.n_ctx = static_cast<int32_t>(context);
  eo.cache_type = options.generate.cache_type;
  eo.is_end = options.generate.is_end;
  auto engine = Engine::start(model, std::move(eo));
  if (!engine.ok()) {
    std::fprintf(stderr, "1bit run: %s\n", engine.message().c_str());
    return 1;
  }

  std::string line;
  while (true) {
    if (options.show_prompt) {
      std::fputs("> ", out);
      std::fflush(out);
    }
    if (!read_line(in, line) || line == "/exit" || line == "/quit") break;
    if (line == "/clear") {
      reset();
      continue;
    }
    if (line.empty()) continue;
    inputs.messages.push_back({{"role", "user"}, {"content", line}});
    auto rendered = tmpl->render_chat(inputs);
    if (!rendered.ok()) {  // e.g. a template's raise_exception: the message is dropped
      std::fprintf(stderr, "1bit run: chat template: %s; the message was not added\n", rendered.message().c_str());
      inputs.messages.erase(inputs.messages.size() - 1);
      continue;
    }
    const std::vector<TokenId> ids = encode_rendered_chat(tokenizer, *rendered);

    // A reply gets what is left of the context, up to -n: a long chat shortens its replies before
    // a message has to be refused.
    GenerateOptions turn = options.generate;
    if (context > static_cast<int64_t>(ids.size())) {
      turn.n_predict = static_cast<int32_t>(std::min<int64_t>(turn.n_predict, context - static_cast<int64_t>(ids.size())));
    }
    // Stream whole UTF-8 characters; keep the reply's text for the next turn's history.
    std::string reply, pending;
    auto stats = generate(**engine, ids, turn, [&](TokenId t) {
      if (tokenizer.is_end_of_generation(t)) return false;
      pending += tokenizer.token_to_piece(t);
      const size_t n = utf8_complete_prefix(pending);
      std::fwrite(pending.data(), 1, n, out);
      std::fflush(out);
      reply.append(pending, 0, n);
      pending.erase(0, n);
      return true;
    });
    std::fwrite(pending.data(), 1, pending.size(), out);
    reply += pending;
    std::fputs("\n", out);
    std::fflush(out);
    if (!stats.ok()) {  // the prompt does not fit (nothing was generated): the message is dropped
      std::fprintf(stderr, "1bit run: %s; the conversation is %zu tokens with this message, which was not "
                           "added (/clear starts over; -n sets the reply limit)\n", stats.message().c_str(), ids.size());
      inputs.messages.erase(inputs.messages.size() - 1);
      continue;
    }
    inputs.messages.push_back({{"role", "assistant"}, {"content", reply}});
  }
  return 0;
}

}  // namespace onebit::cli
