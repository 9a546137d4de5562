// stories260K (llama2.c tinyllamas, llama architecture, F32) through the reference backend:
// greedy decoding from "Once upon a time" must print exactly the golden text that llama.cpp and
// llama2.c print (../shared/testdata/README.md). Token ids and text come from the GGUF's own
// vocabulary, so this test does not need the tokenizer.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/generate.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"
#include "testdata.h"

namespace onebit {
namespace {

constexpr const char* kModel = "models/stories260K.gguf";

// The first fenced block after "Golden:" in the test data README: prompt + 120 greedy tokens.
std::string golden_text() {
  std::ifstream in(testing::testdata_path("README.md"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  size_t at = readme.find("Golden:");
  at = readme.find("```\n", at);
  if (at == std::string::npos) return "";
  at += 4;
  const size_t end = readme.find("\n  ```", at);
  // The block is indented by two spaces in the README's list item.
  std::string text;
  std::istringstream lines(readme.substr(at, end - at));
  for (std::string line; std::getline(lines, line);) {
    if (!text.empty()) text += "\n";
    text += line.substr(line.rfind("  ", 0) == 0 ? 2 : 0);
  }
  return text;
}

// SentencePiece pieces as llama.cpp prints them: U+2581 -> space, <0xNN> -> the byte.
std::string piece(const GgufFile& f, TokenId id) {
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  std::string t(tokens.value().at(id));
  if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>') {
    return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
  }
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 2;
    } else {
      out += t[i];
    }
  }
  return out;
}

TEST(Stories260K, GreedyMatchesGoldenText) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  auto file = GgufFile::open(testing::testdata_path(kModel));
  ASSERT_TRUE(file.ok()) << file.message();
  auto backend = make_reference_backend();
  auto model = Model::load(*file, *backend);
  ASSERT_TRUE(model.ok()) << model.message();
  // <s> ▁Once ▁upon ▁a ▁time: SentencePiece's merges of "▁Once▁upon▁a▁time" in this 512-token
  // vocabulary (each word is one piece); the ids are checked against the vocabulary below.
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
  std::string text;
  for (size_t i = 1; i < prompt.size(); ++i) text += piece(*file, prompt[i]);
  ASSERT_EQ(text, " Once upon a time");
  text.erase(0, 1);  // SentencePiece drops the leading space of the first piece after BOS
  GenerateOptions options;
  options.n_predict = 120;
  options.sampler.temperature = 0.0f;
  std::vector<TokenId> generated;
  auto stats = generate(**model, prompt, options, [&](TokenId t) {
    generated.push_back(t);
    return true;
  });
  ASSERT_TRUE(stats.ok()) << stats.message();
  ASSERT_EQ(generated.size(), 120u);
  for (TokenId t : generated) text += piece(*file, t);
  const std::string golden = golden_text();
  ASSERT_TRUE(golden.rfind("Once upon a time, there was", 0) == 0 && golden.ends_with("but I can'"))
      << "the golden block in the test data README was not found:\n" << golden;
  EXPECT_EQ(text, golden);
}

// One step of two sequences over a shared pool with scattered blocks (all logits) equals running
// each token alone in a cache of its own; bad steps are errors, not aborts.
TEST(Stories260K, PagedStepOfTwoSequencesEqualsTokenByToken) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  auto file = GgufFile::open(testing::testdata_path(kModel));
  ASSERT_TRUE(file.ok()) << file.message();
  auto backend = make_reference_backend();
  auto model = Model::load(*file, *backend);
  ASSERT_TRUE(model.ok()) << model.message();
  Model& m = **model;
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378, 11, 300};
  const size_t vocab = m.config().vocab_size;
  auto pool = m.new_kv_pool(8, 4, GgmlType::kF32);
  ASSERT_TRUE(pool.ok()) << pool.message();
  ASSERT_TRUE(m.reserve(StepLimits{16, 2, 2, 16}).ok());
  // Sequence 0: the prompt in blocks {5, 0}; sequence 1: its first 3 tokens in block {2}.
  StepBatch b;
  b.max_blocks = 2;
  b.block_tables = {5, 0, 2, -1};
  for (int32_t i = 0; i < 7; ++i) {
    b.tokens.push_back(prompt[i]), b.positions.push_back(i), b.seq_ids.push_back(0);
    b.slots.push_back((i < 4 ? 5 : 0) * 4 + i % 4);
  }
  for (int32_t i = 0; i < 3; ++i) {
    b.tokens.push_back(prompt[i]), b.positions.push_back(i), b.seq_ids.push_back(1), b.slots.push_back(2 * 4 + i);
  }
  for (int32_t i = 0; i < 10; ++i) b.out_rows.push_back(i);
  std::vector<float> all;
  ASSERT_TRUE(m.forward(b, *pool, all).ok());
  ASSERT_EQ(all.size(), 10 * vocab);
  // One token at a time.
  auto kv = m.new_kv_cache(16);
  ASSERT_TRUE(kv.ok());
  for (size_t i = 0; i < prompt.size(); ++i) {
    std::vector<float> one;
    ASSERT_TRUE(m.forward(*kv, std::span(prompt).subspan(i, 1), false, one).ok());
    for (size_t j = 0; j < vocab; ++j) ASSERT_NEAR(one[j], all[i * vocab + j], 1e-4) << i << " " << j;
    if (i < 3) {
      for (size_t j = 0; j < vocab; ++j) ASSERT_NEAR(one[j], all[(prompt.size() + i) * vocab + j], 1e-4);
    }
  }
  EXPECT_EQ(kv->n_past, 7);
  // Block tables padded to a wider step shape (StepBatch::table_width: powers of two, so CUDA graphs
  // are shared by growing sequences) give the same logits.
  EXPECT_EQ(StepBatch::table_width(1, 64), 1);
  EXPECT_EQ(StepBatch::table_width(3, 64), 4);
  EXPECT_EQ(StepBatch::table_width(17, 20), 20);
  EXPECT_EQ(StepBatch::table_width(32, 64), 32);
  {
    ASSERT_TRUE(m.reserve(StepLimits{16, 2, 4, 16}).ok());
    StepBatch wide = b;
    wide.max_blocks = 4;
    wide.block_tables = {5, 0, -1, -1, 2, -1, -1, -1};
    std::vector<float> padded;
    ASSERT_TRUE(m.forward(wide, *pool, padded).ok());
    EXPECT_EQ(padded, all);
  }
  // A token id outside the vocabulary, an overflowing cache, a slot off its block table and a step
  // beyond the reserved size are errors, not aborts.
  std::vector<float> out;
  const std::vector<TokenId> bad = {static_cast<TokenId>(vocab)};
  auto r = m.forward(*kv, bad, false, out);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("outside the vocabulary"), std::string::npos) << r.message();
  const std::vector<TokenId> many(10, 5);
  r = m.forward(*kv, many, false, out);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("context"), std::string::npos) << r.message();
  ASSERT_TRUE(m.reserve(StepLimits{16, 2, 2, 16}).ok());
  StepBatch wrong = b;
  wrong.slots[5] = 3;
  r = m.forward(wrong, *pool, out);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("block table"), std::string::npos) << r.message();
  wrong = b;
  wrong.block_tables[0] = 8;  // past the pool's 8 blocks, the slots made to agree
  for (int32_t i = 0; i < 4; ++i) wrong.slots[i] = 8 * 4 + i;
  r = m.forward(wrong, *pool, out);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("the pool has 8 blocks"), std::string::npos) << r.message();
  ASSERT_TRUE(m.reserve(StepLimits{4, 2, 2, 4}).ok());
  r = m.forward(b, *pool, out);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("reserved"), std::string::npos) << r.message();
  m.free_kv_cache(*kv);
  m.free_kv_pool(*pool);
}

// Done-when (1) of issue 4, black-box: the `1bit run` command prints exactly the golden text.
TEST(Stories260K, RunCommandPrintsGoldenText) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  const std::string cmd = testing::binary_path() + " run -m " + testing::testdata_path(kModel) +
                          " -p \"Once upon a time\" -n 120 --temp 0 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(pipe), 0) << cmd;
  EXPECT_EQ(out, golden_text() + "\n");
}

}  // namespace
}  // namespace onebit
