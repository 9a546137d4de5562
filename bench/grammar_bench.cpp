// The one-time and per-token costs of structured output, per vocabulary: building the token table,
// compiling each schema of tests/grammar/schemas.json (JSON Schema -> GBNF -> parsed grammar ->
// compiled over the vocabulary), and along a seeded walk of 64 tokens through each grammar the
// time of a mask on the first visit of a state (cold), of the same walk again (warm: every mask
// cached) and of applying a mask to a logits row. docs/bench.md, "Structured output".
//   grammar_bench VOCAB [VOCAB...]   (a .gguf or a tokenizer.json; schemas from the source tree)
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf_reader.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/hf_vocab.h"
#include "tokenizer/tokenizer.h"

using namespace onebit;

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

Result<Tokenizer> load(const std::string& path) {
  if (path.size() > 5 && path.substr(path.size() - 5) == ".gguf") {
    ONEBIT_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
    return Tokenizer::from_gguf(f);
  }
  ONEBIT_ASSIGN_OR_RETURN(HfTokenizer hf, read_hf_tokenizer(path));
  return Tokenizer::from_vocab(hf.vocab);
}

// A seeded walk of up to `steps` tokens; returns the summed mask time (ms) and the apply time.
void walk(std::shared_ptr<grammar::CompiledGrammar> g, uint64_t seed, int steps, double& mask_ms, double& apply_ms, int& n) {
  std::mt19937_64 rng(seed);
  grammar::GrammarConstraint con(g);
  std::vector<float> logits(size_t(g->table().size()));
  for (int s = 0; s < steps && !con.finished(); ++s) {
    auto t0 = std::chrono::steady_clock::now();
    const auto bits = g->mask(con.state());
    mask_ms += ms_since(t0);
    std::fill(logits.begin(), logits.end(), 0.0f);
    t0 = std::chrono::steady_clock::now();
    con.mask(logits, 1 << 20);
    apply_ms += ms_since(t0);
    std::vector<int32_t> allowed;
    for (size_t w = 0; w < bits->size(); ++w) {
      for (uint64_t b = (*bits)[w]; b; b &= b - 1) allowed.push_back(int32_t(w * 64 + size_t(std::countr_zero(b))));
    }
    if (allowed.empty()) break;
    int32_t pick = allowed[rng() % allowed.size()];
    for (int t = 0; t < 3 && g->table().piece(pick).size() > 2; ++t) pick = allowed[rng() % allowed.size()];
    if (!con.accept(pick)) break;
    ++n;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: grammar_bench VOCAB.gguf|tokenizer.json [...]\n");
    return 2;
  }
  std::ifstream f(std::string(ONEBIT_SOURCE_DIR) + "/tests/grammar/schemas.json");
  const auto schemas = nlohmann::ordered_json::parse(f);
  for (int a = 1; a < argc; ++a) {
    auto tok = load(argv[a]);
    if (!tok.ok()) {
      std::fprintf(stderr, "grammar_bench: %s\n", tok.message().c_str());
      return 1;
    }
    auto t0 = std::chrono::steady_clock::now();
    auto table = grammar::TokenTable::from_tokenizer(*tok);
    std::printf("\n%s: %d tokens, token table %.1f ms\n\n", argv[a], tok->vocab_size(), ms_since(t0));
    std::printf("| schema | compile ms | cold mask ms/token | warm mask ms/token | apply ms/token | tokens |\n|---|---|---|---|---|---|\n");
    double sum_compile = 0, sum_cold = 0, sum_warm = 0, sum_apply = 0;
    int sum_n = 0;
    for (const auto& s : schemas) {
      t0 = std::chrono::steady_clock::now();
      auto gbnf = grammar::json_schema_to_gbnf(s["schema"]);
      auto g = grammar::parse_gbnf(*gbnf);
      auto compiled = std::make_shared<grammar::CompiledGrammar>(std::move(*g), table);
      const double compile = ms_since(t0);
      double cold = 0, warm = 0, apply = 0, apply2 = 0;
      int n = 0, n2 = 0;
      walk(compiled, 7, 64, cold, apply, n);
      walk(compiled, 7, 64, warm, apply2, n2);
      std::printf("| %s | %.2f | %.3f | %.4f | %.4f | %d |\n", s["name"].get<std::string>().c_str(), compile,
                  cold / std::max(n, 1), warm / std::max(n2, 1), apply2 / std::max(n2, 1), n);
      sum_compile += compile;
      sum_cold += cold;
      sum_warm += warm;
      sum_apply += apply2;
      sum_n += n;
    }
    std::printf("| **all %zu** | %.2f (mean) | %.3f | %.4f | %.4f | %d |\n", schemas.size(), sum_compile / double(schemas.size()),
                sum_cold / std::max(sum_n, 1), sum_warm / std::max(sum_n, 1), sum_apply / std::max(sum_n, 1), sum_n);
  }
  return 0;
}
