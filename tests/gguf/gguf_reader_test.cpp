// GgufFile on real files: stories260K and llama.cpp's vocab files. Expected values come from the
// testdata README and from the public tokenizers (GPT-2: 50,257 tokens and 50,000 merges, etc.).
#include "gguf/gguf_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iterator>

#include "testdata.h"

namespace onebit {
namespace {

using ::onebit::testing::testdata_path;
using ::testing::HasSubstr;

constexpr const char* kStories = "models/stories260K.gguf";

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(GgufReader, Stories260KHeaderAndMetadata) {
  ONEBIT_REQUIRE_TESTDATA(kStories);
  auto f = GgufFile::open(testdata_path(kStories));
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->bytes().size(), 1185376u);  // README
  EXPECT_EQ(f->metadata().size(), 19u);
  EXPECT_EQ(f->metadata().front().key, "tokenizer.ggml.tokens");  // file order is kept
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_uint("llama.block_count"), 5u);          // README: 5 layers
  EXPECT_EQ(*f->get_uint("llama.embedding_length"), 64u);    // width 64
  EXPECT_EQ(*f->get_uint("llama.attention.head_count"), 8u);
  EXPECT_EQ(*f->get_int("llama.attention.head_count_kv"), 4);
  EXPECT_NEAR(*f->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
  auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.message();
  EXPECT_EQ(tokens->size(), 512u);  // vocabulary of 512
  auto scores = f->get_float_array("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.ok());
  EXPECT_EQ(scores->size(), 512u);
  const GgufValue* sv = f->find("tokenizer.ggml.scores");
  ASSERT_NE(sv, nullptr);
  EXPECT_EQ(sv->array_type, GgufValueType::kFloat32);
  EXPECT_EQ(sv->raw.size(), 512u * 4);
  EXPECT_EQ(sv->array_float(7), (*scores)[7]);
  auto types = f->get_int_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.ok());
  EXPECT_EQ(types->size(), 512u);
  EXPECT_EQ(f->find("no.such.key"), nullptr);
}

TEST(GgufReader, Stories260KTensors) {
  ONEBIT_REQUIRE_TESTDATA(kStories);
  auto f = GgufFile::open(testdata_path(kStories));
  ASSERT_TRUE(f.ok()) << f.message();
  ASSERT_EQ(f->tensors().size(), 48u);  // 5 layers x 9 + embedding, final norm, output
  const GgufTensorInfo* emb = f->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type(), GgmlType::kF32);  // README: all tensors F32
  EXPECT_EQ(emb->n_dims, 2u);
  EXPECT_EQ(emb->ne[0], 64u);
  EXPECT_EQ(emb->ne[1], 512u);
  EXPECT_EQ(emb->n_elements, 64u * 512);
  EXPECT_EQ(emb->n_bytes, 64u * 512 * 4);
  EXPECT_EQ(emb->data, f->bytes().data() + f->data_offset() + emb->offset);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  uint64_t total = 0;
  for (const auto& t : f->tensors()) {
    EXPECT_EQ(t.type(), GgmlType::kF32) << t.name;
    EXPECT_EQ(t.offset % f->alignment(), 0u) << t.name;
    total += t.n_bytes;
  }
  // The last tensor ends exactly at the end of the file.
  const auto& last = f->tensors().back();
  EXPECT_EQ(f->data_offset() + last.offset + last.n_bytes, f->bytes().size());
  EXPECT_LE(total, f->bytes().size());
  EXPECT_EQ(f->find_tensor("blk.5.attn_q.weight"), nullptr);
  EXPECT_NE(f->find_tensor("blk.4.ffn_norm.weight"), nullptr);
}

TEST(GgufReader, TypedGetterErrorsNameKeyAndTypes) {
  ONEBIT_REQUIRE_TESTDATA(kStories);
  auto f = GgufFile::open(testdata_path(kStories));
  ASSERT_TRUE(f.ok());
  auto s = f->get_string("llama.block_count");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("'llama.block_count' has type uint32; expected string"));
  auto m = f->get_uint("llama.missing");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.message(), HasSubstr("'llama.missing' is missing"));
  auto a = f->get_int_array("tokenizer.ggml.tokens");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.message(), HasSubstr("array of string; expected array of integers"));
  auto b = f->get_bool("general.architecture");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.message(), HasSubstr("expected bool"));
  std::cout << "  " << s.message() << "\n  " << m.message() << "\n";
}

TEST(GgufReader, FromMemoryAndVersion2) {
  ONEBIT_REQUIRE_TESTDATA(kStories);
  auto bytes = read_all(testdata_path(kStories));
  auto f = GgufFile::from_memory(bytes, "stories-copy");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->name(), "stories-copy");
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->tensors()[0].data, bytes.data() + f->data_offset());
  // v2 has the same layout as v3 for little-endian files (64-bit counts and dims).
  bytes[4] = 2;
  auto f2 = GgufFile::from_memory(bytes);
  ASSERT_TRUE(f2.ok()) << f2.message();
  EXPECT_EQ(f2->version(), 2u);
  EXPECT_EQ(f2->metadata().size(), 19u);
}

TEST(GgufReader, MissingFileNamesPath) {
  auto f = GgufFile::open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.message(), HasSubstr("/nonexistent/dir/model.gguf"));
  EXPECT_THAT(f.message(), HasSubstr("No such file"));
}

struct VocabCase {
  const char* file;
  uint64_t n_tokens;
  const char* model;
  std::vector<std::string> first_tokens;
  uint64_t n_merges;  // 0: no merges array
};

TEST(GgufReader, VocabFiles) {
  // Sizes and first tokens are those of the public tokenizers these files were made from.
  const std::vector<VocabCase> cases = {
      {"vocab/ggml-vocab-llama-spm.gguf", 32000, "llama", {"<unk>", "<s>", "</s>"}, 0},
      {"vocab/ggml-vocab-phi-3.gguf", 32064, "llama", {"<unk>", "<s>", "</s>"}, 0},
      {"vocab/ggml-vocab-gpt-2.gguf", 50257, "gpt2", {"!", "\"", "#"}, 50000},
      {"vocab/ggml-vocab-starcoder.gguf", 49152, "gpt2", {"<|endoftext|>"}, 0},
      {"vocab/ggml-vocab-deepseek-llm.gguf", 102400, "gpt2", {}, 0},
  };
  for (const auto& c : cases) {
    if (!std::filesystem::exists(testdata_path(c.file))) GTEST_SKIP() << "missing " << c.file;
    const auto start = std::chrono::steady_clock::now();
    auto f = GgufFile::open(testdata_path(c.file));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(f.ok()) << f.message();
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->data_offset(), f->bytes().size()) << c.file;  // no padding after metadata
    auto tokens = f->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.message();
    EXPECT_EQ(tokens->size(), c.n_tokens) << c.file;
    for (size_t i = 0; i < c.first_tokens.size(); ++i) EXPECT_EQ((*tokens)[i], c.first_tokens[i]) << c.file;
    EXPECT_EQ(*f->get_string("tokenizer.ggml.model"), c.model) << c.file;
    auto arch = f->get_string("general.architecture");
    ASSERT_TRUE(arch.ok());
    if (auto vs = f->get_uint(*arch + ".vocab_size"); vs.ok()) {
      EXPECT_EQ(*vs, c.n_tokens) << c.file;
    }
    if (c.n_merges) {
      EXPECT_EQ(f->get_string_array("tokenizer.ggml.merges")->size(), c.n_merges);
    }
    std::cout << "  " << c.file << ": " << tokens->size() << " tokens parsed in " << ms << " ms\n";
    EXPECT_LT(ms, 500.0) << "parsing a vocabulary must stay fast (views, no copies)";
  }
}

TEST(GgufReader, ValueTypeNamesAndSizes) {
  EXPECT_EQ(gguf_value_type_name(GgufValueType::kFloat64), "float64");
  EXPECT_EQ(gguf_value_type_name(static_cast<GgufValueType>(13)), "unknown");
  EXPECT_EQ(gguf_value_type_size(GgufValueType::kUint16), 2u);
  EXPECT_EQ(gguf_value_type_size(GgufValueType::kString), 0u);
  EXPECT_TRUE(gguf_value_type_known(12));
  EXPECT_FALSE(gguf_value_type_known(13));
}

}  // namespace
}  // namespace onebit
