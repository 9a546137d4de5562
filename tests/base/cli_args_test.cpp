// Tests of the command-line parser: values, flags, errors that name the option.
#include "base/cli_args.h"

#include <gtest/gtest.h>

namespace onebit {
namespace {

const std::vector<OptionSpec> kSpecs = {
    {"model", 'm', "FILE", "model file"},
    {"json", 0, "", "json output"},
    {"threads", 't', "N", "threads"},
    {"config", 0, "NAME=OPTS", "config", /*repeatable=*/true},
    {"mtp", 0, "HEAD", "mtp", /*repeatable=*/false, /*value_optional=*/true},
};

TEST(CliArgs, OptionalValue) {
  auto a = parse_args({"--mtp", "--json"}, kSpecs);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->has("mtp"));
  EXPECT_EQ(a->get("mtp", "unset"), "");  // present, no value
  EXPECT_TRUE(a->has("json"));
  auto b = parse_args({"--mtp", "head.gguf"}, kSpecs);
  EXPECT_EQ(b->get("mtp"), "head.gguf");
  auto c = parse_args({"--mtp"}, kSpecs);
  EXPECT_TRUE(c->has("mtp"));
}

TEST(CliArgs, ParsesLongShortInlineAndPositionals) {
  auto r = parse_args({"-m", "a.gguf", "--json", "--threads=4", "x", "--", "--not-an-option"}, kSpecs);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->get("model"), "a.gguf");
  EXPECT_TRUE(r->has("json"));
  EXPECT_EQ(*r->get_int("threads", 1, 1, 64), 4);
  ASSERT_EQ(r->positionals().size(), 2u);
  EXPECT_EQ(r->positionals()[1], "--not-an-option");
}

TEST(CliArgs, UnknownOptionNamesIt) {
  auto r = parse_args({"--frobnicate"}, kSpecs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "unknown option '--frobnicate'");
}

TEST(CliArgs, MissingValueAndFlagWithValue) {
  EXPECT_NE(parse_args({"--model"}, kSpecs).message().find("needs a value"), std::string::npos);
  EXPECT_NE(parse_args({"--json=1"}, kSpecs).message().find("takes no value"), std::string::npos);
  EXPECT_NE(parse_args({"-m", "a", "-m", "b"}, kSpecs).message().find("more than once"), std::string::npos);
}

TEST(CliArgs, RepeatableAccumulates) {
  auto r = parse_args({"--config", "a=1", "--config", "b=2"}, kSpecs);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->get_all("config"), (std::vector<std::string>{"a=1", "b=2"}));
}

TEST(CliArgs, IntegerRangeErrors) {
  auto r = parse_args({"--threads", "0"}, kSpecs);
  ASSERT_TRUE(r.ok());
  auto t = r->get_int("threads", 1, 1, 64);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.message(), "--threads must be an integer from 1 to 64, got '0'");
  auto r2 = parse_args({"--threads", "4x"}, kSpecs);
  EXPECT_FALSE(r2->get_int("threads", 1, 1, 64).ok());
  auto r3 = parse_args({"--threads", "99999999999999999999999"}, kSpecs);
  EXPECT_FALSE(r3->get_int("threads", 1, 1, 64).ok());
}

TEST(CliArgs, FloatRange) {
  auto r = parse_args({"--threads", "nan"}, kSpecs);
  EXPECT_FALSE(r->get_float("threads", 1, 0, 2).ok());
  auto r2 = parse_args({"--threads", "0.5"}, kSpecs);
  EXPECT_DOUBLE_EQ(*r2->get_float("threads", 1, 0, 2), 0.5);
}

}  // namespace
}  // namespace onebit
