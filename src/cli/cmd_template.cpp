// `1bit template`: renders a chat template with messages, tools and kwargs and prints the prompt
// exactly (no newline added), for tests and for users debugging a template.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/command.h"
#include "gguf/gguf_reader.h"
#include "template/template.h"
#include "tokenizer/tokenizer.h"

namespace onebit::cli {
namespace {

using nlohmann::ordered_json;

Result<std::string> read_text(const std::string& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error("cannot open " + what + " file '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result<ordered_json> read_json(const std::string& path, const std::string& what) {
  ONEBIT_ASSIGN_OR_RETURN(std::string text, read_text(path, what));
  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(what + " file '" + path + "' is not valid JSON");
  return j;
}

// Template source and special tokens from --model, when given.
struct ModelInfo {
  std::string chat_template;
  ordered_json special = ordered_json::object();
};

Result<ModelInfo> read_model(const std::string& path) {
  ONEBIT_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  ModelInfo info;
  if (file.find("tokenizer.chat_template")) {
    ONEBIT_ASSIGN_OR_RETURN(info.chat_template, file.get_string("tokenizer.chat_template"));
  }
  ONEBIT_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_gguf(file));
  if (tok.bos_id() >= 0) info.special["bos_token"] = std::string(tok.token_text(tok.bos_id()));
  if (tok.eos_id() >= 0) info.special["eos_token"] = std::string(tok.token_text(tok.eos_id()));
  return info;
}

int run_template(const ParsedArgs& args) {
  const std::string cmd = "template";
  if (!args.positionals().empty()) return usage_error(cmd, "takes no positional arguments, got '" + args.positionals()[0] + "'");
  if (!args.has("messages")) return usage_error(cmd, "--messages FILE.json is required");
  if (!args.has("template") && !args.has("model")) return usage_error(cmd, "give --template FILE.jinja or --model FILE.gguf");

  ChatInputs in;
  ordered_json special = ordered_json::object();
  std::string source;
  if (args.has("model")) {
    auto info = read_model(args.get("model"));
    if (!info.ok()) return failure(cmd, info.message());
    special = info->special;
    source = info->chat_template;
    if (source.empty() && !args.has("template")) {
      return failure(cmd, "model '" + args.get("model") + "' has no tokenizer.chat_template; pass --template FILE.jinja");
    }
  }
  if (args.has("bos")) special["bos_token"] = args.get("bos");
  if (args.has("eos")) special["eos_token"] = args.get("eos");
  if (args.has("template")) {
    auto text = read_text(args.get("template"), "template");
    if (!text.ok()) return failure(cmd, text.message());
    source = *text;
  }

  auto messages = read_json(args.get("messages"), "messages");
  if (!messages.ok()) return failure(cmd, messages.message());
  if (messages->is_object() && messages->contains("messages")) {  // an OpenAI request body
    in.messages = (*messages)["messages"];
    if (messages->contains("tools")) in.tools = (*messages)["tools"];
  } else if (messages->is_array()) {
    in.messages = *messages;
  } else {
    return failure(cmd, "messages file must hold a JSON array of messages (or an object with \"messages\")");
  }
  if (args.has("tools")) {
    auto tools = read_json(args.get("tools"), "tools");
    if (!tools.ok()) return failure(cmd, tools.message());
    if (!tools->is_array()) return failure(cmd, "tools file must hold a JSON array of tool definitions");
    in.tools = *tools;
  }
  in.kwargs = special;
  if (args.has("kwargs")) {
    ordered_json kw = ordered_json::parse(args.get("kwargs"), nullptr, /*allow_exceptions=*/false);
    if (kw.is_discarded() || !kw.is_object()) {
      return usage_error(cmd, "--kwargs must be a JSON object, e.g. '{\"enable_thinking\": false}'");
    }
    for (auto it = kw.begin(); it != kw.end(); ++it) in.kwargs[it.key()] = it.value();
  }
  in.add_generation_prompt = !args.has("no-generation-prompt");

  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl.ok()) return failure(cmd, tmpl.message());
  auto out = tmpl->render_chat(in);
  if (!out.ok()) return failure(cmd, out.message());
  std::fwrite(out->data(), 1, out->size(), stdout);
  return kExitOk;
}

}  // namespace

Command template_command() {
  return {"template",
          "render a chat template with messages (prints the prompt)",
          "1bit template --template FILE.jinja --messages FILE.json [--tools FILE.json] [--kwargs JSON] "
          "[--no-generation-prompt] [--model FILE.gguf]",
          {
              {"template", 0, "FILE", "Jinja chat template (default: the --model's tokenizer.chat_template)"},
              {"messages", 0, "FILE", "JSON array of messages (or an OpenAI request body with messages/tools)"},
              {"tools", 0, "FILE", "JSON array of tools (OpenAI function schemas)"},
              {"kwargs", 0, "JSON", "extra template variables, e.g. '{\"enable_thinking\": false}'"},
              {"no-generation-prompt", 0, "", "render without add_generation_prompt"},
              {"model", 'm', "FILE", "GGUF model: bos_token/eos_token (and the template) from its vocabulary"},
              {"bos", 0, "TEXT", "bos_token value (overrides --model's)"},
              {"eos", 0, "TEXT", "eos_token value (overrides --model's)"},
          },
          run_template};
}

}  // namespace onebit::cli
