// `1bit tokenize -m FILE.gguf [--json] [--no-special] [--bos] TEXT | --file PATH | --jsonl`:
// token ids of a text with the GGUF's own vocabulary (issue 3); --jsonl for bulk checks.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "gguf/gguf_reader.h"
#include "tokenizer/tokenizer.h"

namespace onebit::cli {
namespace {

constexpr const char* kName = "tokenize";

std::string dump(const nlohmann::json& j) {
  // Pieces can be partial UTF-8 (one byte of a character); replace rather than throw.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ids_line(const std::vector<TokenId>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

int run_jsonl(const Tokenizer& t, const EncodeOptions& opts) {
  std::string line;
  for (int64_t line_no = 1; std::getline(std::cin, line); ++line_no) {
    if (line.empty()) continue;
    nlohmann::json in = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!in.is_object() || !in.contains("text") || !in["text"].is_string()) {
      return failure(kName, "standard input line " + std::to_string(line_no) +
                                " is not a JSON object with a string \"text\"; each line must look like {\"text\": \"...\"}");
    }
    const auto ids = t.encode(in["text"].get<std::string>(), opts);
    std::fputs((dump(nlohmann::json{{"ids", ids}}) + "\n").c_str(), stdout);
  }
  return kExitOk;
}

int run(const ParsedArgs& args) {
  const std::string model = args.get("model");
  if (model.empty()) return usage_error(kName, "-m/--model FILE.gguf is required");
  const bool jsonl = args.has("jsonl");
  const size_t n_inputs = args.positionals().size() + (args.has("file") ? 1 : 0) + (jsonl ? 1 : 0);
  if (n_inputs != 1) {
    return usage_error(kName, "give exactly one of TEXT, --file PATH or --jsonl (got " + std::to_string(n_inputs) + ")");
  }
  auto file = GgufFile::open(model);
  if (!file.ok()) return failure(kName, file.message());
  auto tok = Tokenizer::from_gguf(*file);
  if (!tok.ok()) return failure(kName, tok.message());
  EncodeOptions opts;
  opts.parse_special = !args.has("no-special");
  opts.add_bos = args.has("bos") && tok->adds_bos();
  opts.add_eos = args.has("bos") && tok->adds_eos();
  if (jsonl) return run_jsonl(*tok, opts);

  std::string text;
  if (args.has("file")) {
    std::ifstream f(args.get("file"), std::ios::binary);
    if (!f) return failure(kName, "--file " + args.get("file") + ": cannot open (check the path)");
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  } else {
    text = args.positionals()[0];
  }
  const auto ids = tok->encode(text, opts);
  if (!args.has("json")) {
    std::fputs((ids_line(ids) + "\n").c_str(), stdout);
    return kExitOk;
  }
  nlohmann::json pieces = nlohmann::json::array();
  for (TokenId id : ids) pieces.push_back(tok->token_to_piece(id));
  std::fputs((dump(nlohmann::json{{"ids", ids}, {"pieces", pieces}}) + "\n").c_str(), stdout);
  return kExitOk;
}

}  // namespace

Command tokenize_command() {
  return {kName,
          "print the token ids of a text with a GGUF's vocabulary",
          "1bit tokenize -m FILE.gguf [--json] [--no-special] [--bos] (TEXT | --file PATH | --jsonl)",
          {{"model", 'm', "FILE", "GGUF file whose tokenizer.ggml.* vocabulary to use"},
           {"json", 0, "", "print {\"ids\":[...],\"pieces\":[...]}"},
           {"no-special", 0, "", "treat control tokens written in the text as plain text"},
           {"bos", 0, "", "add BOS/EOS as the GGUF asks (tokenizer.ggml.add_bos_token/add_eos_token)"},
           {"file", 0, "PATH", "tokenize the contents of PATH instead of TEXT"},
           {"jsonl", 0, "", "read {\"text\": ...} lines on standard input, write one {\"ids\":[...]} line each"}},
          run};
}

}  // namespace onebit::cli
