// `1bit bench` prompt fitting: the served context per configuration, the cut of the protocol
// prompt to it by the model's own tokenizer, and the report's sentence saying so.
#include <gtest/gtest.h>

#include "base/cli_args.h"
#include "bench/options.h"
#include "bench/prompt.h"
#include "bench/protocol.h"
#include "gguf/gguf_reader.h"
#include "run_command.h"
#include "testdata.h"

namespace onebit {
namespace {

using ::onebit::testing::read_whole_file;
using ::onebit::testing::source_path;

BenchConfig config(const std::string& spec) {
  auto c = parse_bench_config(spec);
  EXPECT_TRUE(c.ok()) << c.message();
  return *c;
}

TEST(BenchPrompt, ServedContextIsTheSmallestOfTheConfigs) {
  const BenchConfig plain = config("base=--threads 2");
  EXPECT_EQ(served_context(1024, {plain}).n_ctx, 1024);
  EXPECT_EQ(served_context(1024, {plain}).source, "the model's context is 1024");
  EXPECT_EQ(served_context(32768, {plain}).n_ctx, 8192) << "serve caps a large training context";
  EXPECT_EQ(served_context(0, {plain}).n_ctx, 8192);
  const ServedContext small = served_context(1024, {plain, config("small=-c 512 --parallel 2")});
  EXPECT_EQ(small.n_ctx, 512);
  EXPECT_EQ(small.source, "config 'small' sets --ctx-size 512");
  EXPECT_EQ(served_context(1024, {config("big=--ctx-size=4096")}).n_ctx, 4096);
  EXPECT_EQ(served_context(1024, {config("big=--ctx-size 4096"), plain}).n_ctx, 1024);
}

class BenchPromptFit : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = GgufFile::open(source_path("models/onebit-20m-q8_0.gguf"));
    ASSERT_TRUE(file.ok()) << file.message();
    auto tok = Tokenizer::from_gguf(*file);
    ASSERT_TRUE(tok.ok()) << tok.message();
    tok_ = std::make_unique<Tokenizer>(std::move(*tok));
    text_ = read_whole_file(source_path("docs/bench.md")) + read_whole_file(source_path("docs/api.md"));
  }
  size_t count(const std::string& s) const { return tok_->encode(s, EncodeOptions{.parse_special = false}).size(); }

  std::unique_ptr<Tokenizer> tok_;
  std::string text_;
};

// The protocol's 1,800 tokens against a 1,024-token context: every request bench will send (its
// longest first line, the text, one generated token) fits, and the note names both counts.
TEST_F(BenchPromptFit, CapsToTheContextAndSaysSo) {
  BenchOptions o;
  o.configs = {config("default="), config("a-long-name=--threads 2")};
  o.rounds = 12;
  const int64_t reserved = prompt_reserved_tokens(*tok_, o);
  const ServedContext ctx = served_context(1024, o.configs);
  auto fit = fit_prompt(*tok_, text_, 1800, ctx, reserved);
  ASSERT_TRUE(fit.ok()) << fit.message();
  EXPECT_EQ(fit->uncapped_tokens, 1800);
  EXPECT_TRUE(fit->capped_to_context());
  EXPECT_EQ(text_.rfind(fit->text, 0), 0u) << "a prefix of the text";
  EXPECT_EQ(size_t(fit->tokens), count(fit->text));
  EXPECT_GE(fit->tokens, 1024 - 30) << "the cut leaves only the first line's room";
  for (const BenchConfig& c : o.configs) {
    for (int run : {0, 1, o.prompt_runs}) {
      const std::string sent = prompt_first_line(o.rounds, run, c.name) + fit->text;
      EXPECT_LE(count(sent) + (tok_->adds_bos() ? 1 : 0) + kPromptMaxTokens, 1024u) << c.name << " run " << run;
    }
  }
  EXPECT_EQ(prompt_cap_note(*fit), "prompt capped from 1800 to " + std::to_string(fit->tokens) +
                                       " tokens: the model's context is 1024 (the rest holds each request's first line and 1 "
                                       "generated token)");
}

TEST_F(BenchPromptFit, NoNoteWhenItFits) {
  BenchOptions o;
  o.configs = {config("default=")};
  auto fit = fit_prompt(*tok_, text_, 1800, served_context(4096, o.configs), prompt_reserved_tokens(*tok_, o));
  ASSERT_TRUE(fit.ok()) << fit.message();
  EXPECT_EQ(fit->tokens, 1800);
  EXPECT_FALSE(fit->capped_to_context());
  EXPECT_EQ(prompt_cap_note(*fit), "");
  auto whole = fit_prompt(*tok_, "Hello world.", 0, served_context(1024, o.configs), 14);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->text, "Hello world.");
  EXPECT_EQ(prompt_cap_note(*whole), "");
}

TEST_F(BenchPromptFit, AContextWithNoRoomIsAnError) {
  BenchOptions o;
  o.configs = {config("tiny=-c 8")};
  auto fit = fit_prompt(*tok_, text_, 1800, served_context(1024, o.configs), prompt_reserved_tokens(*tok_, o));
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.message().find("config 'tiny' sets --ctx-size 8"), std::string::npos) << fit.message();
}

}  // namespace
}  // namespace onebit
