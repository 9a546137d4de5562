// Qwen2 (Qwen3's tokenizer) and llama-bpe (Llama 3) vectors from llama.cpp, with the vocabulary
// read from the real tokenizer.json, both directly and through a converted vocab-only GGUF.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tokenizer/hf_vocab.h"
#include "tokenizer_test_util.h"

namespace onebit::testing {
namespace {

struct Family {
  const char* vectors;    // ggml-vocab-NAME
  const char* tokenizer;  // tokenizers/DIR
  const char* pre;
};

class HfVocabVectors : public ::testing::TestWithParam<Family> {};

void expect_vectors(const Tokenizer& t, const std::string& vectors) {
  const auto cases = read_vocab_cases(testdata_path("vocab/ggml-vocab-" + vectors + ".gguf"));
  ASSERT_EQ(cases.size(), 46u);
  int failures = 0;
  for (const auto& [text, expected] : cases) {
    const auto got = t.encode(text, {.add_bos = false, .parse_special = true});
    if (got != expected) {
      ++failures;
      ADD_FAILURE() << "input '" << text << "'\n  expected" << ids_to_string(expected) << "\n  got     "
                    << ids_to_string(got);
    }
    EXPECT_EQ(t.decode(got), text);
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(HfVocabVectors, FromTokenizerJsonAndConvertedGguf) {
  const Family fam = GetParam();
  const std::string json_rel = std::string("tokenizers/") + fam.tokenizer + "/tokenizer.json";
  ONEBIT_REQUIRE_TESTDATA(json_rel);
  auto hf = read_hf_tokenizer(testdata_path(json_rel));
  ASSERT_TRUE(hf.ok()) << hf.message();
  EXPECT_EQ(hf->vocab.pre, fam.pre);
  EXPECT_FALSE(hf->chat_template.empty());
  auto direct = Tokenizer::from_vocab(hf->vocab);
  ASSERT_TRUE(direct.ok()) << direct.message();
  expect_vectors(*direct, fam.vectors);

  const auto out = std::filesystem::temp_directory_path() / (std::string("onebit-vocab-") + fam.tokenizer + ".gguf");
  ASSERT_TRUE(write_vocab_gguf(*hf, out.string()).ok());
  auto loaded = load_gguf_tokenizer(out.string());
  ASSERT_TRUE(loaded.tokenizer.has_value()) << loaded.error;
  expect_vectors(*loaded.tokenizer, fam.vectors);
  EXPECT_EQ(loaded.tokenizer->bos_id(), direct->bos_id());
  EXPECT_EQ(loaded.tokenizer->eos_id(), direct->eos_id());
  EXPECT_EQ(loaded.tokenizer->adds_bos(), direct->adds_bos());
  std::filesystem::remove(out);
}

INSTANTIATE_TEST_SUITE_P(Hf, HfVocabVectors,
                         ::testing::Values(Family{"qwen2", "qwen3", "qwen2"}, Family{"llama-bpe", "llama3", "llama-bpe"}),
                         [](const auto& info) { return std::string(info.param.tokenizer); });

TEST(HfVocab, SpecialIdsFromConfig) {
  ONEBIT_REQUIRE_TESTDATA("tokenizers/llama3/tokenizer.json");
  auto hf = read_hf_tokenizer(testdata_path("tokenizers/llama3/tokenizer.json"));
  ASSERT_TRUE(hf.ok()) << hf.message();
  EXPECT_EQ(hf->vocab.bos_id, 128000);  // <|begin_of_text|>
  EXPECT_EQ(hf->vocab.eos_id, 128009);  // <|eot_id|>
  EXPECT_TRUE(hf->vocab.add_bos);
  EXPECT_TRUE(hf->vocab.ignore_merges);
  auto t = Tokenizer::from_vocab(hf->vocab);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->encode("<|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>", {.add_bos = true}),
            (std::vector<TokenId>{128000, 128006, 882, 128007, 271, 15339, 128009}));
  EXPECT_TRUE(t->is_end_of_generation(128009));
}

// TinyStories-656K: SentencePiece-style BPE (byte_fallback, "▁" normalizer, normalized added
// tokens) converted to a "llama" GGUF with merges; the GGUF must encode the HF goldens too.
TEST(HfVocab, TinyStoriesSpmStyleThroughGguf) {
  const std::string rel = "models/tinystories-656K/tokenizer.json";
  ONEBIT_REQUIRE_TESTDATA(rel);
  auto hf = read_hf_tokenizer(testdata_path(rel));
  ASSERT_TRUE(hf.ok()) << hf.message();
  EXPECT_EQ(hf->vocab.model, VocabModel::kSpm);
  EXPECT_TRUE(hf->vocab.normalized_specials);
  EXPECT_EQ(hf->vocab.bos_id, 1);  // <|start_story|>
  EXPECT_TRUE(hf->vocab.add_bos);
  const auto out = std::filesystem::temp_directory_path() / "onebit-vocab-tinystories.gguf";
  ASSERT_TRUE(write_vocab_gguf(*hf, out.string()).ok());
  auto loaded = load_gguf_tokenizer(out.string());
  ASSERT_TRUE(loaded.tokenizer.has_value()) << loaded.error;
  std::ifstream golden(source_path("tests/golden/tokenizer/tinystories-656k.jsonl"));
  int n = 0, bad = 0;
  for (std::string line; std::getline(golden, line); ++n) {
    auto j = nlohmann::json::parse(line);
    if (loaded.tokenizer->encode(j["text"].get<std::string>()) != j["ids"].get<std::vector<TokenId>>()) ++bad;
  }
  EXPECT_GE(n, 500);
  EXPECT_EQ(bad, 0);
  const auto ids = loaded.tokenizer->encode("Once upon a time", {.add_bos = true});
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(loaded.tokenizer->decode(ids, /*skip_special=*/true), "Once upon a time");
  std::filesystem::remove(out);
}

TEST(HfVocab, MissingFileIsAnError) {
  auto hf = read_hf_tokenizer("/nonexistent/tokenizer.json");
  ASSERT_FALSE(hf.ok());
  EXPECT_NE(hf.message().find("/nonexistent/tokenizer.json"), std::string::npos);
}

}  // namespace
}  // namespace onebit::testing
