// `1bit convert`: Hugging Face -> GGUF. `--vocab-only tokenizer.json OUT.gguf` writes a
// vocab-only GGUF (src/tokenizer/hf_vocab); full checkpoint conversion is wired in separately.
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/command.h"
#include "tokenizer/hf_vocab.h"

namespace onebit::cli {
namespace {

constexpr const char* kName = "convert";

int run_vocab_only(const ParsedArgs& args) {
  if (args.positionals().size() != 2) {
    return usage_error(kName, "--vocab-only takes TOKENIZER.json (or its directory) and OUT.gguf; got " +
                                  std::to_string(args.positionals().size()) + " arguments");
  }
  std::string in = args.positionals()[0];
  if (std::filesystem::is_directory(in)) in = (std::filesystem::path(in) / "tokenizer.json").string();
  auto tok = read_hf_tokenizer(in);
  if (!tok.ok()) return failure(kName, tok.message());
  const std::string out = args.positionals()[1];
  auto st = write_vocab_gguf(*tok, out);
  if (!st.ok()) return failure(kName, st.message());
  std::fprintf(stderr, "1bit convert: wrote %s (%zu tokens, %zu merges, pre '%s')\n", out.c_str(),
               tok->vocab.tokens.size(), tok->vocab.merges.size(), tok->vocab.pre.c_str());
  return kExitOk;
}

int run(const ParsedArgs& args) {
  if (args.has("vocab-only")) return run_vocab_only(args);
  return failure(kName, "full checkpoint conversion not built yet");
}

}  // namespace

Command convert_command() {
  return {kName,
          "convert a Hugging Face tokenizer (or checkpoint) to GGUF",
          "1bit convert --vocab-only TOKENIZER.json OUT.gguf",
          {{"vocab-only", 0, "", "write only the vocabulary (tokenizer.json + tokenizer_config.json beside it)"}},
          run};
}

}  // namespace onebit::cli
