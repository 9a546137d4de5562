// Black-box tests of the `1bit` front door: version, help, usage errors and their exit codes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <regex>

#include "run_command.h"
#include "serve/child_process.h"
#include "testdata.h"

namespace onebit {
namespace {

using ::onebit::testing::binary_path;
using ::onebit::testing::run_command;

TEST(Cli, VersionPrintsNameAndSemver) {
  auto r = run_command(binary_path() + " version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(std::regex_match(r.out, std::regex("1bit [0-9]+\\.[0-9]+\\.[0-9]+\n"))) << r.out;
  EXPECT_EQ(run_command(binary_path() + " --version").out, r.out);
}

TEST(Cli, HelpListsEveryCommand) {
  auto r = run_command(binary_path() + " --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* cmd : {"info", "version"}) EXPECT_NE(r.out.find(cmd), std::string::npos) << cmd;
}

TEST(Cli, CommandHelpListsOptions) {
  auto r = run_command(binary_path() + " info --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--json"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("usage: 1bit info"), std::string::npos) << r.out;
}

TEST(Cli, NoCommandIsUsageError) {
  auto r = run_command(binary_path());
  EXPECT_EQ(r.exit_code, 2);
}

TEST(Cli, UnknownCommandIsOneLineUsageError) {
  auto r = run_command(binary_path() + " frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "1bit: unknown command 'frobnicate' (see '1bit --help')\n");
}

TEST(Cli, UnknownOptionIsOneLineUsageError) {
  auto r = run_command(binary_path() + " info --frobnicate x.gguf");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "1bit info: unknown option '--frobnicate' (see '1bit info --help')\n");
}

TEST(Cli, VersionRejectsArguments) {
  auto r = run_command(binary_path() + " version extra");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("takes no arguments"), std::string::npos);
}

}  // namespace
}  // namespace onebit

namespace onebit {
namespace {

// A FIFO or a device as the model would block the open or never end: refused at once, by name.
TEST(Cli, SpecialFilesAreRefusedBeforeOpening) {
  const std::string fifo = ::testing::TempDir() + "onebit_fifo_" + std::to_string(::getpid());
  ASSERT_EQ(run_command("mkfifo " + fifo).exit_code, 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    for (const std::string& cmd : {" info ", " run -p hi -n 1 -m ", " serve --dry-run -m "}) {
      auto r = run_command("timeout 10 " + binary_path() + cmd + path);
      EXPECT_NE(r.exit_code, 124) << cmd << path << ": hung";
      EXPECT_NE(r.exit_code, 0) << cmd << path;
      EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << cmd << path << ": " << r.err;
    }
  }
  std::remove(fifo.c_str());
}

// Listening beyond loopback without a key is allowed, with a warning.
TEST(Cli, ServeWarnsWhenListeningBeyondLoopbackWithoutAKey) {
  const std::string model = ::onebit::testing::source_path("models/onebit-20m-q8_0.gguf");
  const std::string port = std::to_string(*find_free_loopback_port());
  auto r = run_command("timeout -s INT 4 " + binary_path() + " serve -m " + model +
                       " --device cpu --host 0.0.0.0 --port " + port);
  EXPECT_NE(r.err.find("without --api-key"), std::string::npos) << r.err;
  auto keyed = run_command("timeout -s INT 4 " + binary_path() + " serve -m " + model +
                           " --device cpu --host 0.0.0.0 --port " + port + " --api-key k");
  EXPECT_EQ(keyed.err.find("without --api-key"), std::string::npos) << keyed.err;
}

}  // namespace
}  // namespace onebit
