// Long inputs stay linear-ish (a 1 MB line without spaces, issue 3), and the encode speed on
// War and Peace with the Qwen3 vocabulary is measured and printed (not asserted).
#include <gtest/gtest.h>

#include <ctime>

#include "tokenizer/hf_vocab.h"
#include "tokenizer_test_util.h"

namespace onebit::testing {
namespace {

#ifdef ONEBIT_SANITIZED
// The same ratio at a quarter of the size: sanitized builds run tens of times slower.
constexpr size_t kSmall = 64 << 10, kLarge = 256 << 10;
#else
constexpr size_t kSmall = 256 << 10, kLarge = 1 << 20;
#endif

double cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

// CPU seconds to encode `text` (best of two, to damp noise from other processes).
double encode_seconds(const Tokenizer& t, const std::string& text, size_t* n_tokens = nullptr) {
  double best = 1e9;
  for (int rep = 0; rep < 2; ++rep) {
    const double t0 = cpu_seconds();
    const auto ids = t.encode(text);
    best = std::min(best, cpu_seconds() - t0);
    if (n_tokens != nullptr) *n_tokens = ids.size();
  }
  return best;
}

// A line of `n_bytes` without spaces, cycling through `unit`.
std::string line_of(const std::string& unit, size_t n_bytes) {
  std::string s;
  s.reserve(n_bytes + unit.size());
  while (s.size() < n_bytes) s += unit;
  return s;
}

void expect_linear(const Tokenizer& t, const std::string& unit, const char* label) {
  const double small = encode_seconds(t, line_of(unit, kSmall));
  const double large = encode_seconds(t, line_of(unit, kLarge));
  std::printf("%-28s %zu KB %.3fs, %zu KB %.3fs (x%.1f)\n", label, kSmall >> 10, small, kLarge >> 10, large,
              large / std::max(small, 1e-3));
  // Linear is x4 and n log n a little more; a quadratic tokenizer would be x16.
  EXPECT_LT(large, std::max(small, 0.02) * 12.0) << label;
  EXPECT_LT(large, 20.0) << label;
}

TEST(LongInput, OneMegabyteLineIsLinearQwen2) {
  ONEBIT_REQUIRE_TESTDATA("tokenizers/qwen3/tokenizer.json");
  auto hf = read_hf_tokenizer(testdata_path("tokenizers/qwen3/tokenizer.json"));
  ASSERT_TRUE(hf.ok()) << hf.message();
  auto t = Tokenizer::from_vocab(hf->vocab);
  ASSERT_TRUE(t.ok());
  expect_linear(*t, "a", "qwen2 'aaaa...'");
  expect_linear(*t, "tokenizerHuggingFace", "qwen2 mixed letters");
  expect_linear(*t, "\xE4\xB8\xAD\xE6\x96\x87", "qwen2 CJK");
  expect_linear(*t, "!?#", "qwen2 punctuation");
  expect_linear(*t, "e\xCC\x81", "qwen2 e + combining acute");
}

TEST(LongInput, OneMegabyteLineIsLinearSpm) {
  ONEBIT_REQUIRE_TESTDATA("vocab/ggml-vocab-llama-spm.gguf");
  auto loaded = load_gguf_tokenizer(testdata_path("vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(loaded.tokenizer.has_value()) << loaded.error;
  expect_linear(*loaded.tokenizer, "a", "llama-spm 'aaaa...'");
  expect_linear(*loaded.tokenizer, "tokenizerHuggingFace", "llama-spm mixed letters");
  expect_linear(*loaded.tokenizer, "\xF0\x9F\xA6\x99", "llama-spm byte fallback");
}

TEST(Speed, WarAndPeaceQwen3OneCore) {
#ifdef ONEBIT_SANITIZED
  GTEST_SKIP() << "a speed measurement; meaningless in a sanitized build";
#endif
  ONEBIT_REQUIRE_TESTDATA("text/war-and-peace.txt");
  ONEBIT_REQUIRE_TESTDATA("tokenizers/qwen3/tokenizer.json");
  auto hf = read_hf_tokenizer(testdata_path("tokenizers/qwen3/tokenizer.json"));
  ASSERT_TRUE(hf.ok()) << hf.message();
  auto t = Tokenizer::from_vocab(hf->vocab);
  ASSERT_TRUE(t.ok());
  const std::string text = read_file(testdata_path("text/war-and-peace.txt"));
  size_t n_tokens = 0;
  const double s = encode_seconds(*t, text, &n_tokens);
  std::printf("war-and-peace.txt: %zu bytes -> %zu tokens in %.3f CPU s: %.0f tokens/s, %.1f MB/s\n", text.size(),
              n_tokens, s, n_tokens / s, text.size() / s / 1e6);
  EXPECT_GT(n_tokens, 0u);
  EXPECT_EQ(t->decode(t->encode(text)), text);
}

}  // namespace
}  // namespace onebit::testing
