// The text a client sees from generated token bytes: UTF-8 never split (invalid bytes become
// U+FFFD), text that may begin a stop string held until it can't, a leading <think>...</think>
// split into reasoning. Pure: no tokens, no HTTP. Rules: product.md ("Text out").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/utf8.h"

namespace onebit {

struct TextStreamOptions {
  std::vector<std::string> stop;      // stop strings; the first match ends the text (not sent)
  bool split_reasoning = true;        // false: reasoning_format "none", thinking stays in content
  bool starts_in_reasoning = false;   // the prompt ended inside <think>
  std::string think_open = "<think>";
  std::string think_close = "</think>";
};

// What became safe to send since the last call.
struct TextDelta {
  std::string content;
  std::string reasoning;
  bool empty() const { return content.empty() && reasoning.empty(); }
};

// One generation's text. Not thread-safe.
class TextStream {
 public:
  explicit TextStream(TextStreamOptions options);

  // Appends the bytes of one token. After a stop string matched, further bytes are ignored.
  TextDelta push(std::string_view bytes);
  // Ends the generation: sends what was held (an unfinished UTF-8 sequence becomes U+FFFD).
  TextDelta finish();

  bool stopped() const { return stopped_; }              // a stop string matched
  const std::string& stop_word() const { return stop_word_; }
  bool in_reasoning() const { return phase_ == Phase::kReasoning; }

 private:
  enum class Phase { kStart, kReasoning, kContent };
  TextDelta route(std::string text, bool final);
  std::string take_safe_text(bool final);
  void skip_leading_space();

  TextStreamOptions options_;
  std::string utf8_pending_;   // raw bytes whose last sequence may still be incomplete
  std::string stop_pending_;   // valid UTF-8 that may still begin a stop string
  std::string split_pending_;  // text that may begin a think tag, or whitespace to trim
  Phase phase_ = Phase::kStart;
  bool skip_space_ = false;    // drop leading whitespace (after <think> and after </think>)
  bool stopped_ = false;
  std::string stop_word_;
};

// Length of the longest suffix of `text` that is a proper prefix of one of `words`.
size_t partial_match_suffix(std::string_view text, const std::vector<std::string>& words);

}  // namespace onebit
