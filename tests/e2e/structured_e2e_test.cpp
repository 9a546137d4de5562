// Issue 18's structured output through the real `1bit serve` on our trained model
// (tests/e2e/structured.py): every schema of tests/grammar/schemas.json on both endpoints,
// streamed and not, validated by Python's jsonschema; GBNF grammars checked by Python's re;
// refusals named.
#include <gtest/gtest.h>

#include "e2e_util.h"
#include "run_command.h"

namespace onebit::e2e {
namespace {

TEST(Structured, RepliesFollowTheirSchemasAndGrammars) {
  if (testing::run_command("python3 -c 'import jsonschema'").exit_code != 0) {
    GTEST_SKIP() << "python3-jsonschema is not installed (scripts/setup.sh installs it)";
  }
#ifdef ONEBIT_SANITIZED
  const std::string scale = " --per-schema 3 --per-grammar 3";
#else
  const std::string scale = " --per-grammar 12";  // the full run (25 per grammar, 500) is in docs/structured.md
#endif
  const auto r = testing::run_command("python3 " + testing::source_path("tests/e2e/structured.py") + " --binary " +
                                      testing::binary_path() + " --model " + onebit_model() + scale);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("structured: ok"), std::string::npos) << r.out << r.err;
  std::printf("%s", r.out.c_str());
}

}  // namespace
}  // namespace onebit::e2e
