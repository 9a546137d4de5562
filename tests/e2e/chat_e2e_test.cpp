// `1bit serve` on onebit-20m (Qwen3 architecture, Qwen3-style chat template with <think>) as a
// black box: chat ends at the end of turn, thinking is split into reasoning_content or kept in
// content (reasoning_format none), stream and non-stream agree, /apply-template and usage agree
// with /tokenize, a client disconnect mid-stream frees the engine, the official openai client.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>

#include "e2e_util.h"
#include "run_command.h"

namespace onebit::e2e {
namespace {

json story_request(int max_tokens) {
  // Sampled at 0.7 with seed 1 this conversation ends at <|im_end|> (docs/models.md).
  return {{"messages", {{{"role", "user"}, {"content", "Write a story for a small child."}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0.7},
          {"seed", 1}};
}

class E2eChat : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(onebit_model())) GTEST_SKIP() << "missing " << onebit_model();
    server_.start(onebit_model(), {"-c", "4096"});
  }
  Server server_;
};

TEST_F(E2eChat, EndsAtEndOfTurnAndStreamAgrees) {
  auto r = server_.post("/v1/chat/completions", story_request(400));
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& choice = r.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["message"]["role"], "assistant");
  const std::string content = choice["message"]["content"];
  EXPECT_FALSE(content.empty());
  EXPECT_EQ(content.find("<|im_end|>"), std::string::npos);
  EXPECT_EQ(content.find("<think>"), std::string::npos);  // the (empty) think block is split off
  EXPECT_EQ(r.body["object"], "chat.completion");

  json req = story_request(400);
  req["stream_options"] = {{"include_usage", true}};
  auto s = server_.stream("/v1/chat/completions", req);
  ASSERT_TRUE(s.done);
  std::string streamed, reasoning;
  int finals = 0, roles = 0;
  for (const auto& e : s.events) {
    for (const auto& c : e["choices"]) {
      if (c["delta"].contains("role")) ++roles;
      streamed += c["delta"].value("content", "");
      reasoning += c["delta"].value("reasoning_content", "");
      if (!c["finish_reason"].is_null()) {
        ++finals;
        EXPECT_TRUE(e.contains("timings"));
      }
    }
  }
  EXPECT_EQ(roles, 1);
  EXPECT_EQ(finals, 1);
  EXPECT_EQ(streamed, content);
  EXPECT_EQ(reasoning, choice["message"].value("reasoning_content", ""));
  // The same counts (the second request found its prompt in the prefix cache).
  EXPECT_EQ(s.events.back()["usage"]["completion_tokens"], r.body["usage"]["completion_tokens"]);
  EXPECT_EQ(s.events.back()["usage"]["prompt_tokens"], r.body["usage"]["prompt_tokens"]);
  EXPECT_EQ(s.events.front()["choices"][0]["delta"]["role"], "assistant");
}

TEST_F(E2eChat, GreedyCompletionEqualsRunTokenForToken) {
  const std::string prompt = "Once upon a time";
  auto run = testing::run_command(testing::binary_path() + " run -m " + onebit_model() + " -p '" + prompt + "' -n 48 --temp 0");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(run.out.rfind(prompt, 0), 0u);
  const std::string expected = run.out.substr(prompt.size(), run.out.size() - prompt.size() - 1);
  auto r = server_.post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 48}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["text"], expected);
}

TEST_F(E2eChat, UsageMatchesTheRenderedPromptsTokens) {
  json req = story_request(5);
  auto prompt = server_.post("/apply-template", req);
  ASSERT_EQ(prompt.status, 200) << prompt.raw;
  const std::string text = prompt.body["prompt"];
  EXPECT_NE(text.find("<|im_start|>assistant\n"), std::string::npos) << text;
  auto tok = server_.post("/tokenize", json{{"content", text}, {"add_special", true}});
  auto r = server_.post("/v1/chat/completions", req);
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], tok.body["tokens"].size());
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 5);
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
}

TEST_F(E2eChat, ThinkingSplitBothWays) {
  json none = story_request(12);
  none["reasoning_format"] = "none";
  auto kept = server_.post("/v1/chat/completions", none);
  ASSERT_EQ(kept.status, 200) << kept.raw;
  const std::string content = kept.body["choices"][0]["message"]["content"];
  EXPECT_EQ(content.rfind("<think>", 0), 0u) << content;
  EXPECT_FALSE(kept.body["choices"][0]["message"].contains("reasoning_content"));

  auto split = server_.post("/v1/chat/completions", story_request(12));
  const std::string split_content = split.body["choices"][0]["message"]["content"];
  EXPECT_EQ(split_content.find("<think>"), std::string::npos) << split_content;
  EXPECT_EQ(split_content.find("</think>"), std::string::npos) << split_content;

  // Thinking off: the template writes the empty think block; the reply is content only.
  json off = story_request(12);
  off["chat_template_kwargs"] = {{"enable_thinking", false}};
  auto rendered = server_.post("/apply-template", off);
  EXPECT_NE(rendered.body["prompt"].get<std::string>().find("<think>\n\n</think>"), std::string::npos);
  auto r = server_.post("/v1/chat/completions", off);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body["choices"][0]["message"]["content"].get<std::string>().find("think>"), std::string::npos);
}

// Predicted tokens so far, from /metrics.
int64_t predicted_total(const Server& s) { return metric(s, "onebit_tokens_predicted_total"); }

TEST_F(E2eChat, ClientDisconnectMidStreamFreesTheEngine) {
  json req = story_request(4000);
  req["temperature"] = 1.5;  // long and rambling
  req["min_p"] = 0;
  req["cache_prompt"] = false;  // the same tokens both times
  auto full = server_.post("/v1/chat/completions", req);
  const int n_full = full.body["usage"]["completion_tokens"];
  if (n_full < 100) GTEST_SKIP() << "this reply ends after " << n_full << " tokens: too short to interrupt";
  const int64_t before = predicted_total(server_);
  auto c = server_.client();
  std::atomic<int> chunks{0};
  req["stream"] = true;
  httplib::Request hr;
  hr.method = "POST";
  hr.path = "/v1/chat/completions";
  hr.body = req.dump();
  hr.set_header("Content-Type", "application/json");
  hr.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 5; };
  c.send(hr);
  ASSERT_GE(chunks.load(), 5);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = server_.post("/v1/chat/completions", story_request(3));
  EXPECT_EQ(r.status, 200) << r.raw;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  auto slots = server_.get("/slots");
  EXPECT_TRUE(slots.body.is_array() && slots.body.empty()) << slots.raw;
  EXPECT_EQ(metric(server_, "onebit_kv_blocks_used"), 0);
  EXPECT_LT(predicted_total(server_) - before, n_full) << "the engine went on after the client left";
}

TEST(E2eChatWholeReply, ClientDisconnectFreesTheEngine) {
  if (!std::filesystem::exists(onebit_model())) GTEST_SKIP() << "missing " << onebit_model();
  // Long replies that are not streamed are sent chunked with keep-alive blanks at once.
  Server server;
  server.start(onebit_model(), {"-c", "4096"}, {{"ONEBIT_WHOLE_REPLY_WAIT_MS", "0"}});
  // ignore_eos: the whole reply is all 1000 tokens, far more than the engine makes in the two
  // keep-alive intervals (200 ms each) it may take to notice the client left.
#ifdef ONEBIT_SANITIZED
  json req = story_request(300);  // the sanitized engine is tens of times slower
#else
  json req = story_request(1000);
#endif
  req["ignore_eos"] = true;
  req["cache_prompt"] = false;  // the same tokens both times
  auto full = server.post("/v1/chat/completions", req);
  ASSERT_EQ(full.status, 200) << full.raw.substr(0, 300);
  const int n_full = full.body["usage"]["completion_tokens"];
  if (n_full < 100) GTEST_SKIP() << "this reply ends after " << n_full << " tokens: too short to interrupt";
  const int64_t before = predicted_total(server);

  auto c = server.client();
  httplib::Request hr;
  hr.method = "POST";
  hr.path = "/v1/chat/completions";
  hr.body = req.dump();
  hr.set_header("Content-Type", "application/json");
  bool got_blank = false;
  hr.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    got_blank = n > 0 && data[0] == ' ';
    return false;  // hang up at the first keep-alive blank
  };
  c.send(hr);
  EXPECT_TRUE(got_blank);
  auto r = server.post("/v1/chat/completions", story_request(3));
  EXPECT_EQ(r.status, 200) << r.raw;
  // The interrupted reply stopped early: fewer tokens than the whole one (the 3 of r included).
  EXPECT_LT(predicted_total(server) - before, n_full) << "the engine went on after the client left";
}

TEST_F(E2eChat, OfficialOpenAiClient) {
  auto r = testing::run_command(testing::source_path("tests/e2e/run_openai_client.sh") + " " + server_.base_url() + " chat");
  if (r.exit_code == 77) GTEST_SKIP() << "node/npm or the openai package is unavailable";
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

}  // namespace
}  // namespace onebit::e2e
