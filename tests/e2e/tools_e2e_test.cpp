// Issue 18's tool calls through the real `1bit serve` with the official `openai` client
// (tests/e2e/tools.py): every template family on a random-init model with its tokenizer, and our
// trained model; a round trip (call, result, answer), then seeded forced calls whose arguments
// Python's jsonschema validates. The full run (200 samples per template) is in docs/structured.md.
#include <gtest/gtest.h>

#include "e2e_util.h"
#include "run_command.h"
#include "testdata.h"

namespace onebit::e2e {
namespace {

TEST(Tools, RoundTripsAndForcedCallsOnEveryTemplate) {
  ONEBIT_REQUIRE_TESTDATA("tokenizers/llama3/tokenizer.json");
#ifdef ONEBIT_SANITIZED
  const std::string samples = "2";
#else
  const std::string samples = "6";
#endif
  const auto r = testing::run_command("python3 " + testing::source_path("tests/e2e/tools.py") + " --binary " +
                                      testing::binary_path() + " --model " + onebit_model() + " --testdata " +
                                      testing::testdata_path("") + " --samples " + samples);
  if (r.exit_code == 77) GTEST_SKIP() << r.out;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tools: ok"), std::string::npos) << r.out << r.err;
  std::printf("%s", r.out.c_str());
}

}  // namespace
}  // namespace onebit::e2e
