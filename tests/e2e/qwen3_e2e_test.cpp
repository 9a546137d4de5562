// The native server on a small random-init Qwen3 made at test time (`1bit convert --random`) with
// the real Qwen3 tokenizer and chat template: /apply-template equals Python Jinja2's rendering
// (tests/golden/template/Qwen-Qwen3.jsonl) and a chat request's usage counts the rendered prompt.
#include <filesystem>
#include <fstream>

#include "e2e_util.h"
#include "run_command.h"

namespace onebit::e2e {
namespace {

namespace fs = std::filesystem;

class Qwen3E2e : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(testing::testdata_path("tokenizers/qwen3/tokenizer.json"))) return;
    dir_ = fs::temp_directory_path() / ("onebit_qwen3_e2e_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const std::string bin = testing::binary_path();
    const std::string vocab = (dir_ / "vocab.gguf").string();
    auto conv = testing::run_command(bin + " convert --vocab-only " + testing::testdata_path("tokenizers/qwen3") + " " + vocab);
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    auto info = testing::run_command(bin + " info --json " + vocab);
    ASSERT_EQ(info.exit_code, 0) << info.err;
    const int64_t n_vocab = json::parse(info.out)["vocab_size"];
    const json config = {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}, {"hidden_size", 64},
                         {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                         {"num_key_value_heads", 2}, {"head_dim", 16}, {"vocab_size", n_vocab},
                         {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0},
                         {"tie_word_embeddings", true}};
    std::ofstream((dir_ / "config.json").string()) << config.dump();
    model_ = (dir_ / "qwen3-random.gguf").string();
    auto random = testing::run_command(bin + " convert --random " + (dir_ / "config.json").string() + " --tokenizer " +
                                       vocab + " --type f32 " + model_);
    ASSERT_EQ(random.exit_code, 0) << random.err;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override { ONEBIT_REQUIRE_TESTDATA("tokenizers/qwen3/tokenizer.json"); }

  static inline fs::path dir_;
  static inline std::string model_;
};

TEST_F(Qwen3E2e, ApplyTemplateEqualsJinja2AndUsageCountsThePrompt) {
  ASSERT_FALSE(model_.empty());
  Server server;
  server.start(model_, {"--threads", "1"});
  std::ifstream goldens(testing::source_path("tests/golden/template/Qwen-Qwen3.jsonl"));
  int checked = 0;
  for (std::string line; std::getline(goldens, line);) {
    const json g = json::parse(line);
    if (!g["add_generation_prompt"].get<bool>() || !g["tools"].is_null() || !g.contains("output")) continue;
    json body = {{"messages", g["messages"]}};
    if (g["kwargs"].contains("enable_thinking")) {
      body["chat_template_kwargs"] = {{"enable_thinking", g["kwargs"]["enable_thinking"]}};
    }
    auto r = server.post("/apply-template", body);
    ASSERT_EQ(r.status, 200) << g["id"] << ": " << r.raw;
    EXPECT_EQ(r.body["prompt"], g["output"]) << g["id"];
    ++checked;
  }
  EXPECT_GE(checked, 10);

  // A chat request: the prompt it counts is the rendered template, tokenized with specials.
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi there!"}}};
  auto rendered = server.post("/apply-template", json{{"messages", messages}});
  auto tokens = server.post("/tokenize", json{{"content", rendered.body["prompt"]}});
  ASSERT_EQ(tokens.status, 200) << tokens.raw;
  auto chat = server.post("/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_EQ(chat.status, 200) << chat.raw;
  EXPECT_EQ(chat.body["usage"]["prompt_tokens"], tokens.body["tokens"].size()) << chat.raw;
  EXPECT_LE(chat.body["usage"]["completion_tokens"].get<int>(), 8);
  const std::string finish = chat.body["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "length" || finish == "stop") << finish;
}

}  // namespace
}  // namespace onebit::e2e
