// Implementation of TextStream: UTF-8 hold -> stop-string hold -> reasoning split.
#include "api/text_stream.h"

#include <algorithm>

namespace onebit {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace

size_t partial_match_suffix(std::string_view text, const std::vector<std::string>& words) {
  size_t best = 0;
  for (const auto& w : words) {
    const size_t max_len = std::min(text.size(), w.empty() ? 0 : w.size() - 1);
    for (size_t len = max_len; len > best; --len) {
      if (text.substr(text.size() - len) == std::string_view(w).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

TextStream::TextStream(TextStreamOptions options) : options_(std::move(options)) {
  options_.stop.erase(std::remove(options_.stop.begin(), options_.stop.end(), ""), options_.stop.end());
  if (options_.split_reasoning && options_.starts_in_reasoning) {
    phase_ = Phase::kReasoning;
    skip_space_ = true;
  }
  if (!options_.split_reasoning) phase_ = Phase::kContent;
}

TextDelta TextStream::push(std::string_view bytes) {
  if (stopped_) return {};
  std::string tail;
  stop_pending_ += utf8_sanitize(utf8_pending_ + std::string(bytes), tail);
  utf8_pending_ = tail;
  return route(take_safe_text(/*final=*/false), /*final=*/false);
}

TextDelta TextStream::finish() {
  if (!stopped_ && !utf8_pending_.empty()) {
    stop_pending_ += kReplacementUtf8;  // the generation ended inside a character
    utf8_pending_.clear();
  }
  return route(stopped_ ? std::string() : take_safe_text(/*final=*/true), /*final=*/true);
}

// Text of stop_pending_ that can no longer be part of a stop string; detects a match.
std::string TextStream::take_safe_text(bool final) {
  size_t first = std::string::npos;
  for (const auto& w : options_.stop) {
    size_t pos = stop_pending_.find(w);
    if (pos != std::string::npos && (first == std::string::npos || pos < first ||
                                     (pos == first && w.size() > stop_word_.size()))) {
      first = pos;
      stop_word_ = w;
    }
  }
  std::string safe;
  if (first != std::string::npos) {
    stopped_ = true;
    safe = stop_pending_.substr(0, first);
    stop_pending_.clear();
    utf8_pending_.clear();
    return safe;
  }
  const size_t hold = final ? 0 : partial_match_suffix(stop_pending_, options_.stop);
  safe = stop_pending_.substr(0, stop_pending_.size() - hold);
  stop_pending_.erase(0, stop_pending_.size() - hold);
  return safe;
}

// Drops leading whitespace while `skip_space_` is set; clears it once text remains.
void TextStream::skip_leading_space() {
  if (!skip_space_) return;
  size_t i = 0;
  while (i < split_pending_.size() && is_space(split_pending_[i])) ++i;
  split_pending_.erase(0, i);
  if (!split_pending_.empty()) skip_space_ = false;
}

// Splits safe text into content and reasoning: only a leading <think> block is reasoning, and
// the reasoning and the content after it are trimmed of surrounding whitespace.
TextDelta TextStream::route(std::string text, bool final) {
  TextDelta d;
  const bool ending = final || stopped_;
  split_pending_ += text;
  if (phase_ == Phase::kStart) {
    size_t i = 0;
    while (i < split_pending_.size() && is_space(split_pending_[i])) ++i;
    const std::string_view rest = std::string_view(split_pending_).substr(i);
    const std::string& open = options_.think_open;
    if (rest.size() >= open.size() && rest.substr(0, open.size()) == open) {
      split_pending_ = std::string(rest.substr(open.size()));
      phase_ = Phase::kReasoning;
      skip_space_ = true;
    } else if (!ending && open.compare(0, rest.size(), rest) == 0) {
      return d;  // may still become the open tag
    } else {
      phase_ = Phase::kContent;
    }
  }
  if (phase_ == Phase::kReasoning) {
    skip_leading_space();
    const std::string& close = options_.think_close;
    const size_t pos = split_pending_.find(close);
    if (pos != std::string::npos) {
      d.reasoning = split_pending_.substr(0, pos);
      while (!d.reasoning.empty() && is_space(d.reasoning.back())) d.reasoning.pop_back();
      split_pending_.erase(0, pos + close.size());
      phase_ = Phase::kContent;
      skip_space_ = true;
    } else {
      size_t end = split_pending_.size() - (ending ? 0 : partial_match_suffix(split_pending_, {close}));
      while (end > 0 && is_space(split_pending_[end - 1])) --end;  // trailing space may precede the tag
      d.reasoning = split_pending_.substr(0, end);
      split_pending_.erase(0, end);
      if (ending) split_pending_.clear();
      return d;
    }
  }
  skip_leading_space();
  d.content = split_pending_;
  split_pending_.clear();
  return d;
}

}  // namespace onebit
