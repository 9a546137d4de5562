// Speculative decoding through the server (docs/speculative.md): `1bit serve --ngram` gives the
// same greedy replies as the server without a drafter, for prompts that repeat themselves (the
// drafter drafts and is often right) and prompts that do not, one at a time and 4 at once under
// --parallel 4; the replies report what was drafted and accepted.
#include <gtest/gtest.h>

#include <thread>

#include "e2e_util.h"

namespace onebit::e2e {
namespace {

std::vector<std::string> prompts() {
  std::vector<std::string> p = {
      "Once upon a time",
      "Lily and Tom went to the park. Lily and Tom went to the park. Lily and Tom",
      "The cat sat on the mat. The dog sat on the mat. The bird sat on the",
      "one two three four one two three four one two",
      "Tim had a red ball. Tim had a blue ball. Tim had a",
      "\"I want to play!\" said Sue. \"I want to play!\" said Ben. \"I want to",
      "The sun was hot.",
      "Mom said, \"Be careful.\" Mom said, \"Be",
  };
#ifndef ONEBIT_SANITIZED
  for (int i = 0; i < 24; ++i) {
    const std::string name = std::string(1, char('A' + i % 26)) + "ob";
    p.push_back(name + " liked to run. " + name + " liked to jump. " + name + " liked to " + (i % 2 ? "sing" : "play"));
  }
#endif
  return p;
}

json greedy(const std::string& prompt) { return {{"prompt", prompt}, {"max_tokens", 48}, {"temperature", 0}}; }

TEST(SpeculativeE2e, NgramGreedyEqualsNoDrafterAloneAndUnderParallel) {
  ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
  const std::vector<std::string> ps = prompts();
  std::vector<std::string> want;
  {
    Server plain;
    plain.start(stories_model(), {"-c", "256"});
    for (const auto& p : ps) {
      auto r = plain.post("/v1/completions", greedy(p));
      ASSERT_EQ(r.status, 200) << r.raw;
      want.push_back(r.body["choices"][0]["text"]);
    }
  }
  Server spec;
  spec.start(stories_model(), {"-c", "256", "--parallel", "4", "--ngram", "--mtp-max", "4"});
  int64_t drafted = 0, accepted = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    auto r = spec.post("/v1/completions", greedy(ps[i]));
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["text"], want[i]) << "prompt " << i << ": " << ps[i];
    drafted += r.body["timings"].value("draft_n", 0);
    accepted += r.body["timings"].value("draft_n_accepted", 0);
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LE(accepted, drafted);
  EXPECT_EQ(metric(spec, "onebit_draft_tokens_total"), drafted);
  EXPECT_EQ(metric(spec, "onebit_draft_tokens_accepted_total"), accepted);
  std::printf("ngram alone: %lld drafted, %lld accepted\n", (long long)drafted, (long long)accepted);
  // Four clients at once: drafted and plain decodes share steps.
  std::vector<std::thread> clients;
  std::vector<std::string> got(ps.size());
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (size_t i = size_t(c); i < ps.size(); i += 4) {
        auto r = spec.post("/v1/completions", greedy(ps[i]));
        if (r.status == 200) got[i] = r.body["choices"][0]["text"];
      }
    });
  }
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(got[i], want[i]) << "prompt " << i << " under --parallel 4";
  // The prefix cache never holds an unverified draft: a repeat with the cache equals the cold reply.
  for (size_t i = 0; i < 3; ++i) {
    auto r = spec.post("/v1/completions", greedy(ps[i] + want[i]));
    ASSERT_EQ(r.status, 200);
    auto cold = spec.post("/v1/completions", [&] { json j = greedy(ps[i] + want[i]); j["cache_prompt"] = false; return j; }());
    EXPECT_EQ(r.body["choices"][0]["text"], cold.body["choices"][0]["text"]);
  }
}

}  // namespace
}  // namespace onebit::e2e
