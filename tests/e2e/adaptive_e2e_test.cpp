// `1bit serve --adaptive` on the native engine: two engine instances behind the Router; a request
// goes to the overflow engine while the primary is full, and both answer correctly.
#include <future>
#include <regex>

#include "e2e_util.h"

namespace onebit::e2e {
namespace {

// The value of `onebit_backend_requests_*{backend="LABEL"}` in a /metrics text, or -1.
int64_t metric(const std::string& text, const std::string& name, const std::string& label) {
  std::smatch m;
  const std::regex re(name + "\\{backend=\"" + label + "\"\\} ([0-9]+)");
  return std::regex_search(text, m, re) ? std::stoll(m[1]) : -1;
}

TEST(AdaptiveE2e, OverflowEngineTakesWhatThePrimaryCannot) {
  Server server;
  server.start(onebit_model(), {"--adaptive", "--adaptive-at", "1", "--threads", "1"});
  auto metrics = server.get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(metric(metrics.raw, "onebit_backend_requests_total", "primary/cpu"), 0) << metrics.raw;
  EXPECT_EQ(metric(metrics.raw, "onebit_backend_requests_total", "overflow/cpu"), 0) << metrics.raw;

  // A long request holds the primary's only place...
  auto long_request = std::async(std::launch::async, [&] {
    return server.post("/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"temperature", 0}});
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (metric(server.get("/metrics").raw, "onebit_backend_requests_in_flight", "primary/cpu") != 1 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // ...so the next one is served by the overflow engine, with the same greedy text as the primary.
  auto short_request = server.post("/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}});
  auto first = long_request.get();
  ASSERT_EQ(first.status, 200) << first.raw;
  ASSERT_EQ(short_request.status, 200) << short_request.raw;
  const std::string long_text = first.body["choices"][0]["text"], short_text = short_request.body["choices"][0]["text"];
  EXPECT_EQ(long_text.rfind(short_text, 0), 0u) << "overflow: [" << short_text << "] primary: [" << long_text << "]";
  metrics = server.get("/metrics");
  EXPECT_EQ(metric(metrics.raw, "onebit_backend_requests_total", "primary/cpu"), 1) << metrics.raw;
  EXPECT_EQ(metric(metrics.raw, "onebit_backend_requests_total", "overflow/cpu"), 1) << metrics.raw;
  EXPECT_EQ(metric(metrics.raw, "onebit_backend_requests_in_flight", "primary/cpu"), 0) << metrics.raw;
}

}  // namespace
}  // namespace onebit::e2e
