// `1bit serve` on stories260K as a black box: greedy /v1/completions equals `1bit run` token for
// token, stream and non-stream agree with exactly one final chunk, usage equals /tokenize's
// counts, stop strings truncate, max_tokens gives length, the prefix cache reports cached tokens,
// the context check, a client disconnect frees the engine, and the official openai client.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "e2e_util.h"
#include "run_command.h"

namespace onebit::e2e {
namespace {

constexpr const char* kPrompt = "Once upon a time";

class E2eCompletions : public ::testing::Test {
 protected:
  void SetUp() override {
    ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
    server_.start(stories_model(), {"-c", "256", "--alias", "stories"});
  }
  json greedy(int max_tokens, const std::string& prompt = kPrompt) const {
    return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
  }
  Server server_;
};

TEST_F(E2eCompletions, GreedyEqualsRunTokenForToken) {
  auto run = testing::run_command(testing::binary_path() + " run -m " + stories_model() + " -p '" + kPrompt +
                                  "' -n 60 --temp 0");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(run.out.rfind(kPrompt, 0), 0u);
  const std::string expected = run.out.substr(std::string(kPrompt).size(), run.out.size() - std::string(kPrompt).size() - 1);
  auto r = server_.post("/v1/completions", greedy(60));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["text"], expected);
  EXPECT_EQ(r.body["object"], "text_completion");
  EXPECT_EQ(r.body["model"], "stories");
  // The unprefixed alias serves the same.
  auto r2 = server_.post("/completions", greedy(60));
  EXPECT_EQ(r2.body["choices"][0]["text"], expected);
}

TEST_F(E2eCompletions, StreamEqualsNonStreamWithOneFinalChunk) {
  json req = greedy(40);
  req["stream_options"] = {{"include_usage", true}};
  auto whole = server_.post("/v1/completions", greedy(40));
  auto s = server_.stream("/v1/completions", req);
  ASSERT_EQ(s.status, 200) << s.raw;
  EXPECT_TRUE(s.done);
  std::string text;
  int finals = 0;
  json usage;
  for (const auto& e : s.events) {
    ASSERT_TRUE(e.is_object()) << s.raw;
    if (e.contains("usage")) usage = e["usage"];
    for (const auto& c : e["choices"]) {
      text += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) {
        ++finals;
        EXPECT_EQ(c["finish_reason"], "length");
        EXPECT_TRUE(e["timings"]["predicted_n"].is_number());
      }
    }
  }
  EXPECT_EQ(finals, 1);
  EXPECT_EQ(text, whole.body["choices"][0]["text"]);
  EXPECT_EQ(usage["completion_tokens"], whole.body["usage"]["completion_tokens"]);
  EXPECT_EQ(usage["prompt_tokens"], whole.body["usage"]["prompt_tokens"]);
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], cached_of_repeat(usage["prompt_tokens"].get<int>()));
  EXPECT_TRUE(s.events.back().contains("usage"));
  EXPECT_TRUE(s.events.back()["choices"].empty());
}

TEST_F(E2eCompletions, UsageEqualsTokenizerCountsAndLengthFinish) {
  auto tok = server_.post("/tokenize", json{{"content", kPrompt}, {"add_special", true}});
  ASSERT_EQ(tok.status, 200) << tok.raw;
  auto r = server_.post("/v1/completions", greedy(17));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], tok.body["tokens"].size());
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 17);
  EXPECT_EQ(r.body["usage"]["total_tokens"], tok.body["tokens"].size() + 17);
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  const json t = r.body["timings"];
  for (const char* k : {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
                        "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}) {
    EXPECT_TRUE(t.contains(k)) << k;
  }
  EXPECT_EQ(t["predicted_n"], 17);
  EXPECT_EQ(t["prompt_n"].get<int>() + t["cache_n"].get<int>(), r.body["usage"]["prompt_tokens"].get<int>());
  // Detokenize gives the text back.
  auto de = server_.post("/detokenize", json{{"tokens", tok.body["tokens"]}});
  EXPECT_NE(de.body["content"].get<std::string>().find(kPrompt), std::string::npos) << de.raw;
  // A token-id prompt is the same prompt.
  json ids = greedy(17);
  ids["prompt"] = tok.body["tokens"];
  EXPECT_EQ(server_.post("/v1/completions", ids).body["choices"][0]["text"], r.body["choices"][0]["text"]);
}

TEST_F(E2eCompletions, StopStringsTruncate) {
  auto full = server_.post("/v1/completions", greedy(40));
  const std::string text = full.body["choices"][0]["text"];
  ASSERT_GT(text.size(), 20u);
  const std::string stop = text.substr(12, 4);
  const std::string expected = text.substr(0, text.find(stop));
  json req = greedy(40);
  req["stop"] = json::array({"never-appears", stop});
  auto r = server_.post("/v1/completions", req);
  EXPECT_EQ(r.body["choices"][0]["text"], expected);
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
  auto s = server_.stream("/v1/completions", req);
  std::string streamed;
  for (const auto& e : s.events)
    for (const auto& c : e["choices"]) streamed += c["text"].get<std::string>();
  EXPECT_EQ(streamed, expected);
}

TEST_F(E2eCompletions, PrefixCacheReportsCachedTokens) {
  // A prompt of several K/V blocks: the repeat takes its full blocks from the cache.
  json req = greedy(8);
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += std::string(i ? " " : "") + kPrompt;
  req["prompt"] = prompt;
  auto first = server_.post("/v1/completions", req);
  auto second = server_.post("/v1/completions", req);
  const int n_prompt = second.body["usage"]["prompt_tokens"];
  ASSERT_GT(n_prompt, 32);
  EXPECT_EQ(first.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(second.body["usage"]["prompt_tokens_details"]["cached_tokens"], cached_of_repeat(n_prompt));
  EXPECT_EQ(second.body["timings"]["cache_n"], cached_of_repeat(n_prompt));
  EXPECT_EQ(second.body["choices"][0]["text"], first.body["choices"][0]["text"]);
  json nocache = req;
  nocache["cache_prompt"] = false;
  auto third = server_.post("/v1/completions", nocache);
  EXPECT_EQ(third.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(third.body["choices"][0]["text"], first.body["choices"][0]["text"]);
}

TEST_F(E2eCompletions, ExceedContextSize) {
  auto r = server_.post("/v1/completions", greedy(252));  // 5 prompt tokens + 252 > 256
  expect_error_body(r, 400, "exceed_context_size_error");
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += " the";
  expect_error_body(server_.post("/v1/completions", json{{"prompt", long_prompt}}), 400, "exceed_context_size_error");
  EXPECT_EQ(server_.post("/v1/completions", greedy(251)).status, 200);
}

TEST_F(E2eCompletions, ClientDisconnectFreesTheEngine) {
  // A long stream (to the end of the context) that the client drops after a few chunks.
  auto c = server_.client();
  std::atomic<int> chunks{0};
  const json req = {{"prompt", kPrompt}, {"temperature", 1.0}, {"seed", 1}, {"stream", true}, {"min_p", 0}};
  httplib::Request hr;
  hr.method = "POST";
  hr.path = "/v1/completions";
  hr.body = req.dump();
  hr.set_header("Content-Type", "application/json");
  hr.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 4; };
  c.send(hr);
  EXPECT_GE(chunks.load(), 4);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = server_.post("/v1/completions", greedy(4));
  EXPECT_EQ(r.status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  auto slots = server_.get("/slots");
  ASSERT_EQ(slots.status, 200) << slots.raw;
  EXPECT_TRUE(slots.body.is_array() && slots.body.empty()) << slots.raw;
  EXPECT_EQ(metric(server_, "onebit_kv_blocks_used"), 0);
}

TEST_F(E2eCompletions, AuxiliaryRoutes) {
  auto models = server_.get("/v1/models");
  EXPECT_EQ(models.body["data"][0]["id"], "stories");
  auto props = server_.get("/props");
  EXPECT_EQ(props.body["default_generation_settings"]["n_ctx"], 256);
  server_.post("/v1/completions", greedy(3));
  auto metrics = server_.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  for (const char* k : {"onebit_requests_total", "onebit_prompt_tokens_total", "onebit_tokens_predicted_total",
                        "onebit_prompt_seconds_total", "onebit_tokens_predicted_seconds_total", "onebit_requests_queued"}) {
    EXPECT_NE(metrics->body.find(k), std::string::npos) << k;
  }
  // No chat template in stories260K: chats use ChatML (as llama-server's do; chat_template_e2e_test).
  auto chat = server_.post("/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}});
  EXPECT_EQ(chat.status, 200) << chat.raw;
}

TEST(E2eParallel, ConcurrentRequestsGetTheirOwnGreedyText) {
  ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
  Server server;
  server.start(stories_model(), {"-c", "256", "--parallel", "2"});
  const json a = {{"prompt", kPrompt}, {"max_tokens", 60}, {"temperature", 0}, {"cache_prompt", false}};
  const json b = {{"prompt", "The cat"}, {"max_tokens", 50}, {"temperature", 0}, {"cache_prompt", false}};
  const std::string text_a = server.post("/v1/completions", a).body["choices"][0]["text"];
  const std::string text_b = server.post("/v1/completions", b).body["choices"][0]["text"];
  for (int round = 0; round < 3; ++round) {
    std::thread other([&] { EXPECT_EQ(server.post("/v1/completions", b).body["choices"][0]["text"], text_b); });
    EXPECT_EQ(server.post("/v1/completions", a).body["choices"][0]["text"], text_a);
    other.join();
  }
  EXPECT_EQ(server.get("/props").body["total_slots"], 2);
  EXPECT_EQ(metric(server, "onebit_kv_blocks_used"), 0);
}

TEST_F(E2eCompletions, OfficialOpenAiClient) {
  auto r = testing::run_command(testing::source_path("tests/e2e/run_openai_client.sh") + " " + server_.base_url() +
                                " completion");
  if (r.exit_code == 77) GTEST_SKIP() << "node/npm or the openai package is unavailable";
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ok"), std::string::npos);
}

}  // namespace
}  // namespace onebit::e2e
