// Issue 14's hostile-client suite (tests/e2e/hostile.py) against the real `1bit serve` on our
// trained model: slowloris, idle connections, hundreds of streams, connection bursts, pipelining,
// malformed framing, storms of oversized bodies. The clients are Python's own http.client and
// sockets.
#include <gtest/gtest.h>

#include "e2e_util.h"
#include "run_command.h"

namespace onebit::e2e {
namespace {

TEST(Hostile, ServerHoldsUnderHostileAndBusyClients) {
  if (testing::run_command("python3 -c 'import http.client'").exit_code != 0) {
    GTEST_SKIP() << "python3 is not installed (scripts/setup.sh installs it)";
  }
#ifdef ONEBIT_SANITIZED
  // The same cases at a scale a sanitized build can serve in a minute; no memory storm (the
  // sanitizer's quarantine keeps freed memory resident on purpose).
  const std::string scale =
      " --slowloris 100 --idle 200 --streams 64 --burst-rounds 10 --burst-clients 32 --seconds 3 --storm-rounds 0";
#else
  const std::string scale = "";
#endif
  const auto r = testing::run_command("python3 " + testing::source_path("tests/e2e/hostile.py") + " --binary " +
                                      testing::binary_path() + " --model " + onebit_model() + scale);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("hostile: ok"), std::string::npos) << r.out << r.err;
  std::printf("%s", r.out.c_str());
}

}  // namespace
}  // namespace onebit::e2e
