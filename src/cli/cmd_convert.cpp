// `1bit convert`: Hugging Face -> GGUF. `--vocab-only tokenizer.json OUT.gguf` writes a
// vocab-only GGUF (src/tokenizer/hf_vocab); `HF_DIR OUT.gguf` converts a checkpoint (model/convert_hf,
// model/convert_drafters); `--random` makes random weights of a config's shape.
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/command.h"
#include "model/convert_drafters.h"
#include "model/convert_hf.h"
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

// A checkpoint directory (config.json + safetensors + tokenizer.json): a llama/qwen2/qwen3 model,
// or one of our drafters (MTP head, DFlash drafter; docs/models.md).
int run_checkpoint(const ParsedArgs& args) {
  if (args.positionals().size() != 2) {
    return usage_error(kName, "takes HF_DIR and OUT.gguf; got " + std::to_string(args.positionals().size()) +
                                  " arguments");
  }
  const std::string type_name = args.get("type", "f16");
  auto type = ggml_type_from_name(type_name);
  if (!type || (*type != GgmlType::kF32 && *type != GgmlType::kF16 && *type != GgmlType::kBF16 &&
                *type != GgmlType::kQ8_0)) {
    return usage_error(kName, "--type must be f32, f16, bf16 or q8_0, got '" + type_name +
                                  "' (other types: convert, then 1bit quantize)");
  }
  ConvertOptions o{args.positionals()[0], args.positionals()[1], *type};
  auto r = is_drafter_checkpoint(o.hf_dir) ? convert_drafter(o) : convert_hf(o);
  if (!r.ok()) return failure(kName, r.message());
  for (const auto& w : r->warnings) std::fprintf(stderr, "1bit convert: warning: %s\n", w.c_str());
  std::fprintf(stderr, "1bit convert: wrote %s (%s, %d tensors, %llu bytes)\n", o.out_path.c_str(),
               r->architecture.c_str(), r->n_tensors, static_cast<unsigned long long>(r->n_bytes));
  return kExitOk;
}

int run(const ParsedArgs& args) {
  if (args.has("vocab-only")) return run_vocab_only(args);
  if (args.has("random")) return convert_random(args);  // cmd_convert_random.cpp
  return run_checkpoint(args);
}

}  // namespace

Command convert_command() {
  return {kName,
          "convert a Hugging Face tokenizer (or checkpoint) to GGUF",
          "1bit convert HF_DIR OUT.gguf [--type f32|f16|bf16|q8_0] | --vocab-only TOKENIZER.json OUT.gguf | "
          "--random CONFIG.json --tokenizer FILE OUT.gguf",
          {{"vocab-only", 0, "", "write only the vocabulary (tokenizer.json + tokenizer_config.json beside it)"},
           {"random", 0, "CONFIG.json", "random weights of this HF config's shape (with --tokenizer; --type f32|f16|bf16|q8_0; --seed)"},
           {"tokenizer", 0, "FILE", "--random: vocabulary from a GGUF's tokenizer.* keys or a tokenizer.json"},
           {"type", 0, "TYPE", "matrix type: f32, f16 (default), bf16 or q8_0"},
           {"seed", 0, "N", "--random: seed of the weights (default 1)"}},
          run};
}

}  // namespace onebit::cli
