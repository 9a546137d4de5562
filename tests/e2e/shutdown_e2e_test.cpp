// SIGTERM during replies: every client gets its complete reply (within --shutdown-timeout) or a
// well-formed error ending (a stream: an error event with code 503, then [DONE]; a whole reply:
// a 503 body), nothing new is accepted meanwhile, and the server exits 0.
#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "e2e_util.h"

namespace onebit::e2e {
namespace {

using namespace std::chrono_literals;

#ifdef ONEBIT_SANITIZED
constexpr int kTokens = 24;  // an unoptimized sanitized engine is tens of times slower
#else
constexpr int kTokens = 200;
#endif

struct Outcome {
  bool stream = false;
  Stream s;
  Reply r;
};

// Starts 8 streams and 4 whole replies of `tokens` tokens, sends SIGTERM once all are running,
// and returns what each client got and the server's exit status.
std::vector<Outcome> terminate_during_replies(Server& server, int tokens, int& exit_status, bool& refused_new) {
  std::vector<Outcome> out(12);
  std::vector<std::thread> clients;
  for (int i = 0; i < 12; ++i) {
    clients.emplace_back([&, i] {
      json body = {{"prompt", "Once upon a time " + std::to_string(i)}, {"max_tokens", tokens},
                   {"temperature", 0}, {"ignore_eos", true}};
      out[i].stream = i < 8;
      if (out[i].stream) {
        out[i].s = server.stream("/v1/completions", body);
      } else {
        out[i].r = server.post("/v1/completions", body);
      }
    });
  }
  // All twelve running or queued in the engine.
  for (int i = 0; i < 500 && metric(server, "onebit_requests_processing") + metric(server, "onebit_requests_queued") < 12; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(300ms);
  const pid_t pid = server.pid();
  EXPECT_EQ(kill(pid, SIGTERM), 0);
  std::this_thread::sleep_for(200ms);
  // Draining: a new request is not served (refused, or the listener is gone).
  const Reply late = server.post("/v1/completions", json{{"prompt", "late"}, {"max_tokens", 1}});
  refused_new = late.status != 200;
  for (auto& t : clients) t.join();
  exit_status = server.wait_exit(60s);
  return out;
}

TEST(Shutdown, RepliesInProgressFinishWithinTheTimeout) {
  Server server;
  server.start(onebit_model(), {"--parallel", "12", "--shutdown-timeout", "120"});
  int status = -1;
  bool refused = false;
  auto outcomes = terminate_during_replies(server, kTokens, status, refused);
  EXPECT_EQ(status, 0);
  EXPECT_TRUE(refused);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    if (o.stream) {
      EXPECT_EQ(o.s.status, 200) << i;
      EXPECT_TRUE(o.s.done) << i << ": " << o.s.raw.substr(0, 300);
      ASSERT_FALSE(o.s.events.empty()) << i;
      int n_text = 0;
      for (const json& e : o.s.events) {
        EXPECT_FALSE(e.contains("error")) << i << ": " << e.dump();
        if (e.contains("choices") && !e["choices"].empty() && e["choices"][0].value("finish_reason", json()).is_string()) {
          EXPECT_EQ(e["choices"][0]["finish_reason"], "length") << i;
        }
        n_text += e.contains("choices") && !e["choices"].empty() ? 1 : 0;
      }
      EXPECT_GT(n_text, 1) << i;
    } else {
      EXPECT_EQ(o.r.status, 200) << i << ": " << o.r.raw.substr(0, 300);
      EXPECT_EQ(o.r.body["usage"]["completion_tokens"], kTokens) << i << ": " << o.r.raw.substr(0, 300);
    }
  }
}

TEST(Shutdown, RepliesPastTheTimeoutEndWithAnError) {
  Server server;
  // Whole replies stay plain (not chunked keep-alive) for the test's length, so they can be 503s.
  server.start(onebit_model(), {"--parallel", "12", "--shutdown-timeout", "1"}, {{"ONEBIT_WHOLE_REPLY_WAIT_MS", "600000"}});
  int status = -1;
  bool refused = false;
  auto outcomes = terminate_during_replies(server, 1000, status, refused);
  EXPECT_EQ(status, 0);
  EXPECT_TRUE(refused);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    if (o.stream) {
      EXPECT_EQ(o.s.status, 200) << i;
      EXPECT_TRUE(o.s.done) << i << ": [DONE] ends the stream: " << o.s.raw.substr(o.s.raw.size() > 300 ? o.s.raw.size() - 300 : 0);
      ASSERT_FALSE(o.s.events.empty()) << i;
      const json& last = o.s.events.back();
      ASSERT_TRUE(last.contains("error")) << i << ": " << last.dump();
      EXPECT_EQ(last["error"]["code"], 503) << last.dump();
      EXPECT_NE(last["error"]["message"].get<std::string>().find("shutting down"), std::string::npos) << last.dump();
    } else {
      expect_error_body(o.r, 503, "unavailable_error");
    }
  }
}

}  // namespace
}  // namespace onebit::e2e
