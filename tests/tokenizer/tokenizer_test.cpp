// Tokenizer behaviour beyond the reference vectors: special tokens as text, BOS/EOS, decoding,
// invalid UTF-8, refusals of unsupported vocabularies, and the `1bit tokenize` command.
#include <gtest/gtest.h>

#include <cstdio>

#include "tokenizer/vocab.h"
#include "tokenizer_test_util.h"

namespace onebit::testing {
namespace {

TEST(Tokenizer, SpecialTokensCanBeText) {
  ONEBIT_REQUIRE_TESTDATA("vocab/ggml-vocab-gpt-2.gguf");
  auto loaded = load_gguf_tokenizer(testdata_path("vocab/ggml-vocab-gpt-2.gguf"));
  ASSERT_TRUE(loaded.tokenizer.has_value()) << loaded.error;
  const Tokenizer& t = *loaded.tokenizer;
  EXPECT_EQ(t.encode("a<|endoftext|>b"), (std::vector<TokenId>{64, 50256, 65}));
  const auto as_text = t.encode("a<|endoftext|>b", {.parse_special = false});
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 50256), 0);
  EXPECT_EQ(t.decode(as_text), "a<|endoftext|>b");
  EXPECT_EQ(t.decode({64, 50256, 65}, /*skip_special=*/true), "ab");
  EXPECT_TRUE(t.is_end_of_generation(50256));
  EXPECT_FALSE(t.is_end_of_generation(64));
}

TEST(Tokenizer, InvalidUtf8SurvivesByteLevel) {
  ONEBIT_REQUIRE_TESTDATA("vocab/ggml-vocab-gpt-2.gguf");
  auto loaded = load_gguf_tokenizer(testdata_path("vocab/ggml-vocab-gpt-2.gguf"));
  ASSERT_TRUE(loaded.tokenizer.has_value()) << loaded.error;
  const std::string text = "ok \xFF\xFE caf\xC3 \xE2\x82";
  EXPECT_EQ(loaded.tokenizer->decode(loaded.tokenizer->encode(text)), text);
}

// Arbitrary bytes (mostly invalid UTF-8, specials glued in) must never break the tokenizer, and
// GPT-2's vocabulary must give every byte back. Not starcoder: it has no tokens for bytes that
// never occur in UTF-8 (C0, C1, F5..FF), which HF's BPE drops, and so does this one. Not
// deepseek-llm: its user-defined tokens
// "ø", "ÿ", ... are also the byte-level characters of bytes F8, FF, ...; they decode as the text
// they stand for (as llama.cpp prints them), so a lone byte FF comes back as "ÿ".
TEST(Tokenizer, RandomBytesRoundTrip) {
  const char* files[] = {"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-deepseek-llm.gguf",
                         "vocab/ggml-vocab-starcoder.gguf", "vocab/ggml-vocab-llama-spm.gguf"};
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(state >> 33);
  };
  for (const char* rel : files) {
    if (!std::filesystem::exists(testdata_path(rel))) continue;
    auto loaded = load_gguf_tokenizer(testdata_path(rel));
    ASSERT_TRUE(loaded.tokenizer.has_value()) << loaded.error;
    const bool byte_level = std::string(rel).find("gpt-2") != std::string::npos;
    for (int i = 0; i < 300; ++i) {
      std::string text;
      const int n = next() % 64;
      for (int k = 0; k < n; ++k) {
        if (next() % 16 == 0) text += "<|endoftext|></s>"[next() % 13];
        else text.push_back(static_cast<char>(next() & 0xFF));
      }
      const auto ids = loaded.tokenizer->encode(text, {.parse_special = false});
      for (TokenId id : ids) ASSERT_TRUE(id >= 0 && id < loaded.tokenizer->vocab_size());
      if (byte_level) EXPECT_EQ(loaded.tokenizer->decode(ids), text) << rel;
    }
  }
}

TEST(Tokenizer, SpmDecodeAndByteFallback) {
  ONEBIT_REQUIRE_TESTDATA("vocab/ggml-vocab-llama-spm.gguf");
  auto loaded = load_gguf_tokenizer(testdata_path("vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(loaded.tokenizer.has_value()) << loaded.error;
  const Tokenizer& t = *loaded.tokenizer;
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  const std::string text = "Hello  world\n\t🦙 <0x41> 中文";
  const auto ids = t.encode(text, {.add_bos = true, .add_eos = true});
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), text);
  // 🦙 is not in the vocabulary: four <0xXX> byte tokens.
  const auto llama = t.encode("🦙");
  ASSERT_EQ(llama.size(), 5u);  // "▁" then F0 9F A6 99
  EXPECT_EQ(t.token_text(llama[1]), "<0xF0>");
  EXPECT_EQ(t.kind(llama[1]), TokenKind::kByte);
  EXPECT_EQ(t.token_to_piece(llama[1]), "\xF0");
  EXPECT_EQ(t.encode(""), std::vector<TokenId>{});
}

TEST(Tokenizer, RefusesUnsupportedVocabularies) {
  VocabData v;
  v.model = VocabModel::kBpe;
  v.pre = "falcon";
  v.tokens = {"a", "b"};
  auto t = Tokenizer::from_vocab(v);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("'falcon'"), std::string::npos) << t.message();
  EXPECT_NE(t.message().find("llama-bpe"), std::string::npos) << t.message();

  v.pre = "gpt-2";
  v.bos_id = 7;
  t = Tokenizer::from_vocab(v);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("7"), std::string::npos) << t.message();

  v.bos_id = -1;
  v.merges = {"ab"};
  t = Tokenizer::from_vocab(v);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("merges[0]"), std::string::npos) << t.message();
}

TEST(Tokenizer, InMemorySpmVocabulary) {
  VocabData v;
  v.model = VocabModel::kSpm;
  v.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "ab", "\xE2\x96\x81" "ab"};
  v.scores = {0, 0, 0, -4, -3, -3, -1, -2};
  v.kinds = {TokenKind::kUnknown, TokenKind::kControl, TokenKind::kControl, TokenKind::kNormal,
             TokenKind::kNormal,  TokenKind::kNormal,  TokenKind::kNormal,  TokenKind::kNormal};
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  auto t = Tokenizer::from_vocab(v);
  ASSERT_TRUE(t.ok()) << t.message();
  // "▁ab": the best pair is a+b (-1), then ▁+ab (-2).
  EXPECT_EQ(t->encode("ab"), (std::vector<TokenId>{7}));
  // No byte tokens: an unknown character becomes <unk> per byte.
  EXPECT_EQ(t->encode("abc"), (std::vector<TokenId>{7, 0}));
  EXPECT_EQ(t->encode("ab<s>ab"), (std::vector<TokenId>{7, 1, 7}));
}

std::string run_cli(const std::string& args, int* rc) {
  std::string out;
  FILE* p = popen((binary_path() + " " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  while (p != nullptr && std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  const int status = p != nullptr ? pclose(p) : -1;
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(TokenizeCommand, IdsJsonAndJsonl) {
  ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
  if (!std::filesystem::exists(binary_path())) GTEST_SKIP() << "1bit binary not built: " << binary_path();
  const std::string m = "-m " + testdata_path("models/stories260K.gguf");
  int rc = 0;
  EXPECT_EQ(run_cli("tokenize " + m + " --bos 'Once upon a time'", &rc), "1 403 407 261 378\n");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(run_cli("tokenize " + m + " 'Once upon a time'", &rc), "403 407 261 378\n");
  EXPECT_EQ(run_cli("tokenize " + m + " --json 'Once upon'", &rc), "{\"ids\":[403,407],\"pieces\":[\" Once\",\" upon\"]}\n");
  EXPECT_EQ(run_cli("tokenize " + m + " --jsonl < " + source_path("tests/tokenizer/jsonl_input.txt"), &rc),
            "{\"ids\":[403]}\n{\"ids\":[]}\n");
  EXPECT_EQ(rc, 0);
  run_cli("tokenize " + m, &rc);
  EXPECT_EQ(rc, 2);
  const std::string err = run_cli("tokenize -m /nonexistent.gguf x", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("/nonexistent.gguf"), std::string::npos);
}

TEST(ConvertCommand, VocabOnlyThenTokenize) {
  ONEBIT_REQUIRE_TESTDATA("tokenizers/qwen3/tokenizer.json");
  if (!std::filesystem::exists(binary_path())) GTEST_SKIP() << "1bit binary not built: " << binary_path();
  const auto out = std::filesystem::temp_directory_path() / "onebit-cli-qwen3-vocab.gguf";
  int rc = 0;
  run_cli("convert --vocab-only " + testdata_path("tokenizers/qwen3") + " " + out.string(), &rc);
  ASSERT_EQ(rc, 0);
  // Qwen3: "Hello world" is [9707, 1879]; <|im_start|> is 151644 (HF tokenizer.json).
  EXPECT_EQ(run_cli("tokenize -m " + out.string() + " '<|im_start|>Hello world'", &rc), "151644 9707 1879\n");
  std::filesystem::remove(out);
  // A checkpoint directory that does not exist: a one-line error naming it.
  const std::string msg = run_cli("convert /nonexistent-hf-dir " + out.string(), &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(msg.find("/nonexistent-hf-dir"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace onebit::testing
