// Tests of the client-visible text stream: streamed in any token split, the text equals the
// one-shot rule applied to the whole output (UTF-8 repair, first stop string, leading think block).
#include "api/text_stream.h"

#include <gtest/gtest.h>

#include <random>

#include "base/utf8.h"

namespace onebit {
namespace {

std::string trim(std::string s, bool left, bool right) {
  auto sp = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  if (right) while (!s.empty() && sp(s.back())) s.pop_back();
  size_t i = 0;
  if (left) while (i < s.size() && sp(s[i])) ++i;
  return s.substr(i);
}

// The rule applied once to the whole output: the oracle for streaming.
TextDelta one_shot(const std::string& bytes, const TextStreamOptions& o) {
  std::string text = utf8_sanitize(bytes);
  size_t cut = std::string::npos;
  for (const auto& w : o.stop)
    if (!w.empty()) cut = std::min(cut, text.find(w));
  if (cut != std::string::npos) text = text.substr(0, cut);
  TextDelta d;
  if (!o.split_reasoning) {
    d.content = text;
    return d;
  }
  std::string region;
  if (o.starts_in_reasoning) {
    region = text;
  } else {
    std::string l = trim(text, true, false);
    if (l.rfind(o.think_open, 0) != 0) {
      d.content = text;
      return d;
    }
    region = l.substr(o.think_open.size());
  }
  size_t close = region.find(o.think_close);
  if (close == std::string::npos) {
    d.reasoning = trim(region, true, true);
  } else {
    d.reasoning = trim(region.substr(0, close), true, true);
    d.content = trim(region.substr(close + o.think_close.size()), true, false);
  }
  return d;
}

TextDelta streamed(const std::vector<std::string>& pieces, const TextStreamOptions& o, TextStream* out = nullptr) {
  TextStream s(o);
  TextDelta all;
  for (const auto& p : pieces) {
    auto d = s.push(p);
    all.content += d.content;
    all.reasoning += d.reasoning;
  }
  auto d = s.finish();
  all.content += d.content;
  all.reasoning += d.reasoning;
  if (out) *out = std::move(s);
  return all;
}

std::vector<std::string> random_split(const std::string& s, std::mt19937& rng) {
  std::vector<std::string> pieces;
  size_t i = 0;
  while (i < s.size()) {
    size_t n = std::min<size_t>(s.size() - i, 1 + rng() % 5);
    pieces.push_back(s.substr(i, n));
    i += n;
  }
  return pieces;
}

TEST(TextStream, Utf8IsNeverSplit) {
  TextStream s({});
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s.push(emoji.substr(i, 1)).empty()) << i;
  EXPECT_EQ(s.push(emoji.substr(3)).content, emoji);
}

TEST(TextStream, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(streamed({"a\xFF", "b"}, {}).content, "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(streamed({"a\xE2\x82"}, {}).content, "a\xEF\xBF\xBD");   // ends inside a character
  EXPECT_EQ(streamed({"\xED\xA0\x80"}, {}).content, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(streamed({"\xC0\xAF"}, {}).content, "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
}

TEST(TextStream, StopStringIsHeldThenDropped) {
  TextStreamOptions o;
  o.stop = {"Hello"};
  TextStream s(o);
  EXPECT_EQ(s.push("say Hel").content, "say ");
  EXPECT_EQ(s.push("lo there").content, "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.stop_word(), "Hello");
  EXPECT_TRUE(s.push("more").empty());
}

TEST(TextStream, HeldTextIsReleasedWhenItCannotMatch) {
  TextStreamOptions o;
  o.stop = {"Hello"};
  TextStream s(o);
  EXPECT_EQ(s.push("Hel").content, "");
  EXPECT_EQ(s.push("p").content, "Help");
  EXPECT_EQ(s.push("He").content, "");
  EXPECT_EQ(s.finish().content, "He");
  EXPECT_FALSE(s.stopped());
}

TEST(TextStream, ThinkingGoesToReasoning) {
  auto d = streamed({"<thi", "nk>\nLet me", " think.\n", "</th", "ink>\n\nThe answer."}, {});
  EXPECT_EQ(d.reasoning, "Let me think.");
  EXPECT_EQ(d.content, "The answer.");
}

TEST(TextStream, PromptEndingInThinkStartsInReasoning) {
  TextStreamOptions o;
  o.starts_in_reasoning = true;
  auto d = streamed({"\nhmm", "</think>", "ok"}, o);
  EXPECT_EQ(d.reasoning, "hmm");
  EXPECT_EQ(d.content, "ok");
}

TEST(TextStream, ReasoningFormatNoneKeepsThinkingInContent) {
  TextStreamOptions o;
  o.split_reasoning = false;
  auto d = streamed({"<think>x</think>y"}, o);
  EXPECT_EQ(d.content, "<think>x</think>y");
  EXPECT_EQ(d.reasoning, "");
}

TEST(TextStream, OnlyALeadingThinkBlockIsReasoning) {
  auto d = streamed({"Sure. <think>not reasoning</think>"}, {});
  EXPECT_EQ(d.content, "Sure. <think>not reasoning</think>");
}

TEST(TextStream, PartialSuffixMatch) {
  EXPECT_EQ(partial_match_suffix("abcHe", {"Hello"}), 2u);
  EXPECT_EQ(partial_match_suffix("abc", {"Hello"}), 0u);
  EXPECT_EQ(partial_match_suffix("xx</th", {"</think>", "x</"}), 4u);
  EXPECT_EQ(partial_match_suffix("Hello", {"Hello"}), 0u);  // a whole match is not partial
}

// Random outputs split at random points equal the one-shot rule, for many option sets.
TEST(TextStream, AnySplitEqualsOneShot) {
  std::mt19937 rng(1234);
  const std::vector<std::string> atoms = {"a", "b", " ", "\n", "<think>", "</think>", "<th", "ink>", "STOP",
                                          "ST", "\xC3\xA9", "\xF0\x9F\x98\x80", "\xE2\x82", "\xAC", "\xFF", "\n\n"};
  std::vector<TextStreamOptions> option_sets(5);
  option_sets[1].stop = {"STOP"};
  option_sets[2].stop = {"b\n", "ab", "STOP"};
  option_sets[3].split_reasoning = false;
  option_sets[3].stop = {"</think>"};
  option_sets[4].starts_in_reasoning = true;
  option_sets[4].stop = {"\xC3\xA9"};
  for (int iter = 0; iter < 4000; ++iter) {
    std::string text;
    const int n = rng() % 14;
    for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
    const auto& o = option_sets[iter % option_sets.size()];
    auto want = one_shot(text, o);
    auto got = streamed(random_split(text, rng), o);
    ASSERT_EQ(got.content, want.content) << "iter " << iter << " text [" << text << "]";
    ASSERT_EQ(got.reasoning, want.reasoning) << "iter " << iter << " text [" << text << "]";
  }
}

}  // namespace
}  // namespace onebit
