// `1bit convert --random CONFIG.json --tokenizer TOKENIZER OUT.gguf`: a random-weight model of a
// Hugging Face config's shape (model/random_model), for benchmarks at realistic sizes.
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "model/random_model.h"

namespace onebit::cli {

int convert_random(const ParsedArgs& args) {
  constexpr const char* kName = "convert";
  if (args.positionals().size() != 1) return usage_error(kName, "--random takes one output path: OUT.gguf");
  if (!args.has("tokenizer")) return usage_error(kName, "--random needs --tokenizer FILE (a .gguf or tokenizer.json)");
  RandomModelOptions o;
  o.config_path = args.get("random");
  o.tokenizer_path = args.get("tokenizer");
  o.out_path = args.positionals()[0];
  const std::string type = args.get("type", "f16");
  const auto t = ggml_type_from_name(type);
  if (!t) return usage_error(kName, "--type '" + type + "' is not a type; use f32, f16, bf16 or q8_0");
  o.out_type = *t;
  auto seed = args.get_int("seed", 1, 0, INT64_MAX);
  if (!seed.ok()) return usage_error(kName, seed.message());
  o.seed = uint64_t(*seed);
  auto st = write_random_model(o);
  if (!st.ok()) return failure(kName, st.message());
  std::fprintf(stderr, "1bit convert: wrote %s (random weights, seed %lld)\n", o.out_path.c_str(),
               static_cast<long long>(*seed));
  return kExitOk;
}

}  // namespace onebit::cli
