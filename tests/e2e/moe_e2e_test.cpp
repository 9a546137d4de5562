// The native server on the tiny mixture-of-experts and hybrid checkpoints (tests/golden/model/
// tiny-qwen3moe, tiny-qwen2moe, and tiny-qwen3next, tiny-qwen3_5, tiny-qwen3_5moe whose gated
// delta-net layers keep a state row per running sequence; converted by `1bit convert` at test time): a greedy completion of the golden
// prompt equals Hugging Face transformers' 64 greedy tokens up to the first end token the server
// stops at (compared as text through /detokenize), and under --parallel 4 the four golden prompts
// sent at once get the replies each gets alone.
#include <filesystem>
#include <fstream>
#include <thread>

#include "e2e_util.h"
#include "run_command.h"

namespace onebit::e2e {
namespace {

namespace fs = std::filesystem;

class MoeE2e : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("onebit_moe_e2e_" + std::to_string(::getpid()) + "_" + GetParam());
    fs::create_directories(dir_);
    model_ = (dir_ / "model.gguf").string();
    const std::string src = testing::source_path("tests/golden/model/" + GetParam());
    auto conv = testing::run_command(testing::binary_path() + " convert " + src + " " + model_ + " --type f32");
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    std::ifstream in(src + "/golden.json");
    golden_ = json::parse(in);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The greedy reply to `ids` (up to max_tokens new tokens or an end token).
  static Reply complete(const Server& s, const json& ids, int max_tokens) {
    auto r = s.post("/v1/completions", json{{"prompt", ids}, {"max_tokens", max_tokens}, {"temperature", 0}});
    EXPECT_EQ(r.status, 200) << r.raw;
    return r;
  }
  static std::string text(const Reply& r) { return r.status == 200 ? r.body["choices"][0]["text"].get<std::string>() : ""; }

  fs::path dir_;
  std::string model_;
  json golden_;
};

TEST_P(MoeE2e, GreedyEqualsTransformersAloneAndUnderParallel4) {
  Server server;
  server.start(model_, {"--parallel", "4", "--threads", "1"});
  const std::vector<int> golden = golden_["greedy"].get<std::vector<int>>();
  const Reply got = complete(server, golden_["greedy_prompt"], int(golden.size()));
  ASSERT_EQ(got.status, 200);
  // completion_tokens counts the end token when the reply stops at one; the text does not hold it.
  const int c = got.body["usage"]["completion_tokens"];
  const bool stopped = got.body["choices"][0]["finish_reason"] == "stop";
  const int n_text = stopped ? c - 1 : c;
  ASSERT_TRUE(c <= int(golden.size()) && n_text >= 1) << got.raw;
  auto want = server.post("/detokenize", json{{"tokens", std::vector<int>(golden.begin(), golden.begin() + n_text)}});
  ASSERT_EQ(want.status, 200) << want.raw;
  EXPECT_EQ(text(got), want.body["content"].get<std::string>());
  if (stopped) {  // it stopped where transformers' token is an end token
    auto end = server.post("/detokenize", json{{"tokens", {golden[n_text]}}});
    EXPECT_TRUE(end.body["content"].get<std::string>().starts_with("<|")) << "stopped at token " << golden[n_text];
  } else {
    EXPECT_EQ(c, int(golden.size()));
  }
  std::printf("%s: %d of %zu golden greedy tokens compared\n", GetParam().c_str(), n_text, golden.size());

  // Four prompts at once: each reply equals the one it gets alone.
  std::vector<json> prompts;
  for (const json& p : golden_["prompts"]) prompts.push_back(p["ids"]);
  prompts.push_back(golden_["greedy_prompt"]);
  std::vector<std::string> solo, together(prompts.size());
  for (const json& p : prompts) solo.push_back(text(complete(server, p, 24)));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] { together[i] = text(complete(server, prompts[i], 24)); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i], solo[i]) << "prompt " << i;
}

// The hybrid checkpoints' own MTP layer (mtp.*, converted to nextn layers): `--mtp` without a head
// file drafts with it, every step at full length (--mtp-fixed), and the greedy replies equal those
// without drafting, alone and four at once with drafted and plain (speculative.n_max 0) requests
// mixed; the rejected drafts roll the delta nets' states back to their checkpoints.
class HybridMtpE2e : public MoeE2e {};

TEST_P(HybridMtpE2e, OwnMtpLayerKeepsTheGreedyReplies) {
  std::vector<json> prompts;
  for (const json& p : golden_["prompts"]) prompts.push_back(p["ids"]);
  prompts.push_back(golden_["greedy_prompt"]);
  std::vector<std::string> want;
  {
    Server plain;
    plain.start(model_, {"--threads", "1"});
    for (const json& p : prompts) want.push_back(text(complete(plain, p, 32)));
  }
  Server s;
  s.start(model_, {"--parallel", "4", "--threads", "1", "--mtp-fixed", "--mtp"});
  int64_t drafted = 0, accepted = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Reply r = complete(s, prompts[i], 32);
    EXPECT_EQ(text(r), want[i]) << "prompt " << i;
    drafted += r.body["timings"].value("draft_n", 0);
    accepted += r.body["timings"].value("draft_n_accepted", 0);
  }
  EXPECT_GT(drafted, 0) << "--mtp drafted nothing";
  std::vector<std::string> mixed(prompts.size());
  std::vector<json> timings(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      json body{{"prompt", prompts[i]}, {"max_tokens", 32}, {"temperature", 0}};
      if (i % 2) body["speculative.n_max"] = 0;
      auto r = s.post("/v1/completions", body);
      EXPECT_EQ(r.status, 200) << r.raw;
      mixed[i] = text(r);
      if (r.status == 200) timings[i] = r.body["timings"];
    });
  }
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(mixed[i], want[i]) << "prompt " << i << " under --parallel 4";
    if (i % 2) EXPECT_EQ(timings[i].value("draft_n", 0), 0) << "speculative.n_max 0 drafted";
  }
  std::printf("%s --mtp: %lld of %lld drafted tokens accepted\n", GetParam().c_str(), (long long)accepted,
              (long long)drafted);
}

INSTANTIATE_TEST_SUITE_P(Tiny, HybridMtpE2e, ::testing::Values("tiny-qwen3next", "tiny-qwen3_5", "tiny-qwen3_5moe"));

INSTANTIATE_TEST_SUITE_P(Tiny, MoeE2e, ::testing::Values("tiny-qwen3moe", "tiny-qwen2moe", "tiny-qwen3next", "tiny-qwen3_5",
                                                          "tiny-qwen3_5moe"));

}  // namespace
}  // namespace onebit::e2e
