// Black-box tests of the `1bit` front door: version, help, usage errors and their exit codes.
#include <gtest/gtest.h>

#include <regex>

#include "run_command.h"
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
