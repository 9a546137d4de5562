// write_random_model's optional output_init_std: only the output matrix (the embedding when tied)
// changes std; without the key the weights are as before (N(0, init_std)); bad values are errors
// that name the key; the mixture-of-experts types give stacked expert tensors the model loads and
// runs. Tokenizer: stories260K's 512-token vocabulary.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"
#include "model/random_model.h"
#include "testdata.h"

namespace onebit {
namespace {

namespace fs = std::filesystem;
constexpr const char* kVocab = "models/stories260K.gguf";

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("onebit_random_" + std::to_string(::getpid()) + "_" + name)).string();
}

// Writes a tiny llama config (plus `extra` keys) and the F32 model made from it; returns the error.
std::string make_model(const std::string& name, const nlohmann::json& extra) {
  nlohmann::json c = {{"model_type", "llama"}, {"hidden_size", 64},   {"intermediate_size", 128},
                      {"num_hidden_layers", 1}, {"num_attention_heads", 4}, {"vocab_size", 512}};
  for (auto it = extra.begin(); it != extra.end(); ++it) c[it.key()] = it.value();
  const std::string config = temp_path(name + ".json");
  std::ofstream(config) << c.dump();
  RandomModelOptions o;
  o.config_path = config;
  o.tokenizer_path = testing::testdata_path(kVocab);
  o.out_path = temp_path(name + ".gguf");
  o.out_type = GgmlType::kF32;
  auto st = write_random_model(o);
  fs::remove(config);
  return st.ok() ? "" : st.message();
}

double tensor_std(const GgufFile& f, std::string_view name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (t == nullptr) return -1;
  double s2 = 0;
  for (uint64_t i = 0; i < t->n_elements; ++i) {
    float x;
    std::memcpy(&x, t->data + 4 * i, 4);
    s2 += double(x) * x;
  }
  return std::sqrt(s2 / double(t->n_elements));
}

TEST(RandomModel, OutputInitStdScalesOnlyTheOutput) {
  ONEBIT_REQUIRE_TESTDATA(kVocab);
  ASSERT_EQ(make_model("default", nlohmann::json::object()), "");
  ASSERT_EQ(make_model("wide", {{"output_init_std", 0.5}}), "");
  auto a = GgufFile::open(temp_path("default.gguf"));
  auto b = GgufFile::open(temp_path("wide.gguf"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(tensor_std(*a, "output.weight"), 0.02, 0.001);
  EXPECT_NEAR(tensor_std(*b, "output.weight"), 0.5, 0.02);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {  // everything else is byte-identical
    const GgufTensorInfo &x = a->tensors()[i], &y = b->tensors()[i];
    ASSERT_EQ(x.name, y.name);
    if (x.name == "output.weight") continue;
    ASSERT_EQ(x.n_bytes, y.n_bytes) << x.name;
    EXPECT_EQ(std::memcmp(x.data, y.data, x.n_bytes), 0) << x.name;
  }
  fs::remove(temp_path("default.gguf"));
  fs::remove(temp_path("wide.gguf"));
}

TEST(RandomModel, OutputInitStdGoesToTheEmbeddingWhenTied) {
  ONEBIT_REQUIRE_TESTDATA(kVocab);
  ASSERT_EQ(make_model("tied", {{"output_init_std", 0.25}, {"tie_word_embeddings", true}}), "");
  auto f = GgufFile::open(temp_path("tied.gguf"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  EXPECT_NEAR(tensor_std(*f, "token_embd.weight"), 0.25, 0.01);
  EXPECT_NEAR(tensor_std(*f, "blk.0.attn_q.weight"), 0.02, 0.001);
  fs::remove(temp_path("tied.gguf"));
}

TEST(RandomModel, BadOutputInitStdNamesTheKey) {
  ONEBIT_REQUIRE_TESTDATA(kVocab);
  for (const nlohmann::json& bad : {nlohmann::json(-1.0), nlohmann::json(0), nlohmann::json("0.1")}) {
    const std::string e = make_model("bad", {{"output_init_std", bad}});
    EXPECT_NE(e.find("output_init_std"), std::string::npos) << bad.dump() << ": " << e;
  }
  EXPECT_FALSE(fs::exists(temp_path("bad.gguf")));
}

}  // namespace
// qwen3_moe / qwen2_moe configs: routers, stacked experts ne = {cols, rows, n_experts}, the shared
// expert of qwen2moe; the file loads (config and every shape checked) and a forward runs.
TEST(RandomModel, MixtureOfExpertsTypesLoadAndRun) {
  ONEBIT_REQUIRE_TESTDATA(kVocab);
  for (const char* type : {"qwen3_moe", "qwen2_moe"}) {
    const bool shared = std::string(type) == "qwen2_moe";
    nlohmann::json extra = {{"model_type", type}, {"num_experts", 6}, {"num_experts_per_tok", 2},
                            {"moe_intermediate_size", 32}, {"num_key_value_heads", 2}};
    if (shared) extra["shared_expert_intermediate_size"] = 48;
    ASSERT_EQ(make_model(type, extra), "") << type;
    auto f = GgufFile::open(temp_path(std::string(type) + ".gguf"));
    ASSERT_TRUE(f.ok()) << f.message();
    const GgufTensorInfo* down = f->find_tensor("blk.0.ffn_down_exps.weight");
    ASSERT_NE(down, nullptr) << type;
    EXPECT_EQ(down->n_dims, 3u);
    EXPECT_EQ(down->ne[0], 32u);
    EXPECT_EQ(down->ne[1], 64u);
    EXPECT_EQ(down->ne[2], 6u);
    EXPECT_NE(f->find_tensor("blk.0.ffn_gate_inp.weight"), nullptr);
    EXPECT_EQ(f->find_tensor("blk.0.ffn_gate.weight"), nullptr);
    EXPECT_EQ(f->find_tensor("blk.0.ffn_gate_shexp.weight") != nullptr, shared) << type;
    auto be = make_reference_backend();
    auto m = Model::load(*f, *be);
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_EQ((*m)->config().n_experts, 6);
    EXPECT_EQ((*m)->config().shared_expert_ffn, shared ? 48 : 0);
    auto kv = (*m)->new_kv_cache(8);
    ASSERT_TRUE(kv.ok());
    std::vector<float> logits;
    ASSERT_TRUE((*m)->forward(*kv, std::vector<TokenId>{1, 2, 3}, false, logits).ok());
    EXPECT_EQ(logits.size(), 512u);
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    (*m)->free_kv_cache(*kv);
    fs::remove(temp_path(std::string(type) + ".gguf"));
  }
}

}  // namespace onebit
