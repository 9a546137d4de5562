// Batch invariance through the whole server: 32 greedy requests (prompts of 5 to 1,500 tokens,
// many sharing long prefixes) under --parallel 8 with a small step budget, so that prefill is
// chunked and every step mixes prompt chunks of some sequences with decode tokens of others. Each
// reply must equal the same request served alone with a cold cache; then again with the prefix
// cache on (replies equal the cold ones, cached tokens reported); and no K/V block stays held.
// Models: our trained onebit-20m (Q8_0), and random-init Llama and Qwen3 models in Q4_0, Q4_K_M
// and F16 made here (stories260K's 512-token vocabulary keeps them small).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "e2e_util.h"
#include "model/quantize_model.h"
#include "model/random_model.h"

namespace onebit::e2e {
namespace {

namespace fs = std::filesystem;

#ifdef ONEBIT_SANITIZED
constexpr int kRequests = 6, kMaxPrompt = 160;  // the same paths, at sanitizer speed
#else
constexpr int kRequests = 32, kMaxPrompt = 1500;
#endif
constexpr int kNewTokens = 10;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("onebit_identity_" + std::to_string(::getpid()) + "_" + name)).string();
}

// The models made here are removed when the test program ends.
struct RemoveModels {
  ~RemoveModels() {
    for (const char* arch : {"llama", "qwen3"})
      for (const char* type : {"F16", "Q4_0", "Q4_K_M"}) fs::remove(temp_path(std::string(arch) + "-" + type + ".gguf"));
  }
} remove_models;

// A random-init model of `arch` in `type` (F16, Q4_0, Q4_K_M); returns its path, or "" on error.
std::string make_model(const std::string& arch, const std::string& type) {
  const std::string f16 = temp_path(arch + "-F16.gguf"), out = temp_path(arch + "-" + type + ".gguf");
  if (fs::exists(out)) return out;
  if (!fs::exists(f16)) {
    nlohmann::json c = {{"model_type", arch},       {"hidden_size", 256},   {"intermediate_size", 768},
                        {"num_hidden_layers", 2},   {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                        {"vocab_size", 512},        {"max_position_embeddings", 4096},
                        {"tie_word_embeddings", arch == "qwen3"}, {"output_init_std", 0.5}};
    if (arch == "qwen3") c["head_dim"] = 64;
    const std::string config = temp_path(arch + ".json");
    std::ofstream(config) << c.dump();
    RandomModelOptions o;
    o.config_path = config;
    o.tokenizer_path = stories_model();
    o.out_path = f16;
    o.out_type = GgmlType::kF16;
    auto st = write_random_model(o);
    fs::remove(config);
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok()) return "";
  }
  if (type == "F16") return f16;
  QuantizeOptions q;
  q.in_path = f16;
  q.out_path = out;
  q.target = *parse_quant_target(type);
  auto st = quantize_model(q);
  EXPECT_TRUE(st.ok()) << st.message();
  return st.ok() ? out : "";
}

struct Request {
  std::vector<int> prompt;
};

// kRequests prompts of 5 .. kMaxPrompt tokens: a third alone, the rest continuing one of three
// long shared prefixes.
std::vector<Request> make_requests(uint32_t seed) {
  std::mt19937 rng(seed);
  auto tokens = [&](int n) {
    std::vector<int> t(static_cast<size_t>(n));
    for (int& x : t) x = 3 + static_cast<int>(rng() % 509);
    return t;
  };
  std::vector<std::vector<int>> prefixes = {tokens(kMaxPrompt / 3), tokens(kMaxPrompt / 2), tokens(kMaxPrompt * 2 / 3)};
  std::vector<Request> out;
  for (int i = 0; i < kRequests; ++i) {
    const int len = 5 + static_cast<int>(rng() % (kMaxPrompt - 4));
    std::vector<int> p;
    if (i % 3 != 0) {
      const auto& pre = prefixes[i % prefixes.size()];
      p.assign(pre.begin(), pre.begin() + std::min<size_t>(pre.size(), static_cast<size_t>(len)));
    }
    const auto rest = tokens(len - static_cast<int>(p.size()));
    p.insert(p.end(), rest.begin(), rest.end());
    out.push_back({p});
  }
  return out;
}

json body(const Request& r, bool cache) {
  return {{"prompt", r.prompt}, {"max_tokens", kNewTokens}, {"temperature", 0},
          {"ignore_eos", true}, {"cache_prompt", cache}};
}

// Serves `model` and checks the three passes.
void check_identity(const std::string& model) {
  ASSERT_FALSE(model.empty());
  Server server;
  server.start(model, {"-c", "2048", "--parallel", "8", "--batch-tokens", "96", "--threads", "2"});
  const std::vector<Request> requests = make_requests(7);
  // 1. Each alone, cold.
  std::vector<std::string> solo;
  for (const Request& r : requests) {
    auto reply = server.post("/v1/completions", body(r, false));
    ASSERT_EQ(reply.status, 200) << reply.raw;
    ASSERT_EQ(reply.body["usage"]["completion_tokens"], kNewTokens);
    solo.push_back(reply.body["choices"][0]["text"]);
  }
  // 2. All at once, cold; 3. all at once with the prefix cache (the solo runs filled it).
  for (bool cache : {false, true}) {
    std::vector<Reply> replies(requests.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < requests.size(); ++i) {
      clients.emplace_back([&, i] {
        // A burst of connections is sometimes reset before the front reads it (issue 14): that
        // request is sent again; a reply that comes is never retried.
        for (int attempt = 0; attempt < 3 && replies[i].status == 0; ++attempt) {
          replies[i] = server.post("/v1/completions", body(requests[i], cache));
        }
      });
    }
    for (auto& t : clients) t.join();
    int64_t cached = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_EQ(replies[i].status, 200) << replies[i].raw;
      EXPECT_EQ(replies[i].body["choices"][0]["text"], solo[i])
          << "request " << i << " (" << requests[i].prompt.size() << " prompt tokens, cache " << cache << ")";
      const int c = replies[i].body["usage"]["prompt_tokens_details"]["cached_tokens"];
      if (!cache) EXPECT_EQ(c, 0);
      cached += c;
    }
    if (cache) EXPECT_GT(cached, kRequests * kMaxPrompt / 8) << "the prefix cache served too little";
  }
  EXPECT_EQ(metric(server, "onebit_kv_blocks_used"), 0);
  EXPECT_GT(metric(server, "onebit_prefix_cache_hit_tokens_total"), 0);
}

TEST(E2eIdentity, TrainedQ8_0) {
  if (!fs::exists(onebit_model())) GTEST_SKIP() << "missing " << onebit_model();
  check_identity(onebit_model());
}

class E2eIdentityRandom : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(E2eIdentityRandom, ConcurrentEqualsSolo) {
  ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
#ifdef ONEBIT_SANITIZED
  // Under sanitizers one type per architecture: the others differ only in matmul kernels, which
  // the backend tests cover under sanitizers too.
  if (std::string(GetParam().second) != "Q4_K_M") GTEST_SKIP() << "one type per architecture under sanitizers";
#endif
  check_identity(make_model(GetParam().first, GetParam().second));
}

INSTANTIATE_TEST_SUITE_P(Models, E2eIdentityRandom,
                         ::testing::Values(std::pair{"llama", "Q4_0"}, std::pair{"llama", "Q4_K_M"},
                                           std::pair{"llama", "F16"}, std::pair{"qwen3", "Q4_0"},
                                           std::pair{"qwen3", "Q4_K_M"}, std::pair{"qwen3", "F16"}),
                         [](const auto& info) { return std::string(info.param.first) + "_" + info.param.second; });

}  // namespace
}  // namespace onebit::e2e
