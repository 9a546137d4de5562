// Random strings (tools/tokenizer/gen_cases.py) against ids from Hugging Face `tokenizers`
// (tools/tokenizer/hf_reference.py, run on the GPU machine): the committed subset in
// tests/golden/tokenizer/SET.jsonl, and the full set when ONEBIT_HF_REF_DIR names a folder
// with cases.jsonl and hf_SET.txt (one line of ids per case). SET is FAMILY or FAMILY.nospecial.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "tokenizer/hf_vocab.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace onebit::testing {
namespace {

struct Case {
  std::string text;
  std::vector<TokenId> ids;
};

// The tokenizer of a family: the shared GGUF, or the real tokenizer.json for qwen2/llama-bpe.
std::optional<Tokenizer> family_tokenizer(const std::string& family, LoadedTokenizer& holder, std::string& missing) {
  if (family == "qwen2" || family == "llama-bpe" || family == "tinystories-656k") {
    const std::string rel = family == "tinystories-656k" ? "models/tinystories-656K/tokenizer.json"
                            : std::string("tokenizers/") + (family == "qwen2" ? "qwen3" : "llama3") + "/tokenizer.json";
    if (!std::filesystem::exists(testdata_path(rel))) {
      missing = testdata_path(rel);
      return std::nullopt;
    }
    auto hf = read_hf_tokenizer(testdata_path(rel));
    if (!hf.ok()) return std::nullopt;
    auto t = Tokenizer::from_vocab(hf->vocab);
    if (!t.ok()) return std::nullopt;
    return std::move(t).value();
  }
  const std::string rel = "vocab/ggml-vocab-" + family + ".gguf";
  if (!std::filesystem::exists(testdata_path(rel))) {
    missing = testdata_path(rel);
    return std::nullopt;
  }
  holder = load_gguf_tokenizer(testdata_path(rel));
  if (!holder.tokenizer) return std::nullopt;
  return std::move(*holder.tokenizer);
}

std::vector<Case> read_golden(const std::string& path) {
  std::vector<Case> cases;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    cases.push_back({j["text"].get<std::string>(), j["ids"].get<std::vector<TokenId>>()});
  }
  return cases;
}

std::vector<Case> read_full(const std::string& dir, const std::string& family) {
  std::vector<Case> cases;
  std::ifstream texts(dir + "/cases.jsonl"), ids(dir + "/hf_" + family + ".txt");
  for (std::string t, i; std::getline(texts, t) && std::getline(ids, i);) {
    Case c{nlohmann::json::parse(t)["text"].get<std::string>(), {}};
    std::istringstream ls(i);
    for (TokenId id; ls >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

// `round_trip`: check decode(encode(x)) == x, after NFC when `nfc` (Qwen2 normalizes its input).
int count_mismatches(const Tokenizer& t, const std::vector<Case>& cases, bool check_round_trip, bool nfc = false,
                     bool parse_special = true) {
  int bad = 0;
  for (const Case& c : cases) {
    const auto got = t.encode(c.text, {.add_bos = false, .parse_special = parse_special});
    if (got != c.ids && ++bad <= 5) {
      ADD_FAILURE() << "input " << nlohmann::json(c.text).dump() << "\n  hf  " << ids_to_string(c.ids)
                    << "\n  got " << ids_to_string(got);
    }
    if (check_round_trip) {
      EXPECT_EQ(t.decode(got), nfc ? nfc_utf8(c.text) : c.text) << nlohmann::json(c.text).dump();
    }
  }
  return bad;
}

// A golden set: "FAMILY" or "FAMILY.nospecial" (special tokens in the text kept as text).
struct GoldenSet {
  std::string family;
  bool parse_special = true;
  explicit GoldenSet(const std::string& name) : family(name.substr(0, name.find('.'))), parse_special(name.find(".nospecial") == std::string::npos) {}
};

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, CommittedCasesMatchHuggingFace) {
  const GoldenSet set(GetParam());
  const std::string& family = set.family;
  LoadedTokenizer holder;
  std::string missing;
  auto t = family_tokenizer(family, holder, missing);
  if (!missing.empty()) GTEST_SKIP() << "test data missing: " << missing;
  ASSERT_TRUE(t.has_value()) << holder.error;
  const auto cases = read_golden(source_path("tests/golden/tokenizer/" + GetParam() + ".jsonl"));
  ASSERT_GE(cases.size(), 500u);
  // Byte-level BPE keeps every byte, so decode(encode(x)) == x for every case.
  const bool byte_level = family != "llama-spm" && family != "phi-3" && family != "tinystories-656k";
  EXPECT_EQ(count_mismatches(*t, cases, byte_level, /*nfc=*/family == "qwen2", set.parse_special), 0);
}

TEST_P(Golden, FullReferenceSetWhenGiven) {
  const char* dir = std::getenv("ONEBIT_HF_REF_DIR");
  if (dir == nullptr) GTEST_SKIP() << "set ONEBIT_HF_REF_DIR to run the full 20,000-case comparison";
  const GoldenSet set(GetParam());
  LoadedTokenizer holder;
  std::string missing;
  auto t = family_tokenizer(set.family, holder, missing);
  if (!missing.empty()) GTEST_SKIP() << "test data missing: " << missing;
  ASSERT_TRUE(t.has_value()) << holder.error;
  const auto cases = read_full(dir, GetParam());
  if (cases.empty()) GTEST_SKIP() << "no " << dir << "/hf_" << GetParam() << ".txt";
  const int bad = count_mismatches(*t, cases, /*check_round_trip=*/false, /*nfc=*/false, set.parse_special);
  std::printf("family %s: %d mismatches in %zu cases\n", GetParam().c_str(), bad, cases.size());
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, Golden,
                         ::testing::Values("gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "starcoder", "llama-spm",
                                           "phi-3", "tinystories-656k", "gpt-2.nospecial", "llama-bpe.nospecial",
                                           "qwen2.nospecial", "deepseek-llm.nospecial", "llama-spm.nospecial",
                                           "phi-3.nospecial"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) if (c == '-' || c == '.') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace onebit::testing
