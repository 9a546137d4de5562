// llama.cpp's tokenizer test vectors (ids from Hugging Face tokenizers) for every vocabulary in
// ../shared/testdata/vocab, encoded as test-tokenizer-0 does: no BOS, special tokens parsed.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace onebit::testing {
namespace {

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, MatchesHuggingFace) {
  const std::string rel = "vocab/ggml-vocab-" + GetParam() + ".gguf";
  ONEBIT_REQUIRE_TESTDATA(rel);
  auto loaded = load_gguf_tokenizer(testdata_path(rel));
  ASSERT_TRUE(loaded.tokenizer.has_value()) << loaded.error;
  const auto cases = read_vocab_cases(testdata_path(rel));
  ASSERT_EQ(cases.size(), 46u);
  int failures = 0;
  for (const auto& [text, expected] : cases) {
    const auto got = loaded.tokenizer->encode(text, {.add_bos = false, .parse_special = true});
    if (got != expected) {
      ++failures;
      ADD_FAILURE() << "input '" << text << "'\n  expected" << ids_to_string(expected) << "\n  got     "
                    << ids_to_string(got);
    }
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Gguf, VocabVectors,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-llm", "starcoder"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) if (c == '-') c = '_';
                           return s;
                         });

TEST(Stories260K, OnceUponATimeWithBos) {
  ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
  auto loaded = load_gguf_tokenizer(testdata_path("models/stories260K.gguf"));
  ASSERT_TRUE(loaded.tokenizer.has_value()) << loaded.error;
  const Tokenizer& t = *loaded.tokenizer;
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_TRUE(t.adds_bos());
  const auto ids = t.encode("Once upon a time", {.add_bos = true});
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "Once upon a time");
}

}  // namespace
}  // namespace onebit::testing
