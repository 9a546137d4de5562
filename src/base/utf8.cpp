// UTF-8 per RFC 3629 section 4 (the byte ranges of Unicode Table 3-7); see utf8.h.
#include "base/utf8.h"

#include "base/check.h"

namespace onebit {
namespace {

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

size_t utf8_sequence_length(uint8_t b) {
  if (b < 0x80) return 1;
  if (b < 0xC0) return 0;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  if (b < 0xF8) return 4;
  return 0;
}

Utf8Char utf8_decode(std::string_view text, size_t pos) {
  ONEBIT_CHECK(pos < text.size());
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) return {b0, 1, Utf8Status::kValid};
  if (b0 < 0xC2 || b0 > 0xF4) return {0, 1, Utf8Status::kInvalid};  // C0, C1: overlong; F5..: > U+10FFFF
  const auto n = static_cast<uint32_t>(utf8_sequence_length(b0));
  // The second byte's range is narrower after E0 and F0 (overlong forms), ED (surrogates) and F4
  // (over U+10FFFF); every other continuation byte is 80..BF.
  uint8_t lo = b0 == 0xE0 ? 0xA0 : b0 == 0xF0 ? 0x90 : 0x80;
  uint8_t hi = b0 == 0xED ? 0x9F : b0 == 0xF4 ? 0x8F : 0xBF;
  uint32_t cp = b0 & (0x7Fu >> n);
  for (uint32_t k = 1; k < n; ++k) {
    if (pos + k == text.size()) return {0, k, Utf8Status::kIncomplete};
    const auto b = static_cast<uint8_t>(text[pos + k]);
    if (b < lo || b > hi) return {0, k, Utf8Status::kInvalid};
    cp = (cp << 6) | (b & 0x3Fu);
    lo = 0x80;
    hi = 0xBF;
  }
  return {cp, n, Utf8Status::kValid};
}

size_t utf8_char_length(std::string_view text, size_t pos) {
  const Utf8Char c = utf8_decode(text, pos);
  return c.status == Utf8Status::kValid ? c.n_bytes : 1;
}

size_t utf8_count(std::string_view text) {
  size_t n = 0;
  for (size_t pos = 0; pos < text.size(); pos += utf8_char_length(text, pos)) ++n;
  return n;
}

std::vector<std::string> utf8_split(std::string_view text) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = utf8_char_length(text, pos);
    out.emplace_back(text.substr(pos, n));
    pos += n;
  }
  return out;
}

void utf8_append(uint32_t cp, std::string& out) {
  if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
    out += kReplacementUtf8;
  } else if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_encode(uint32_t cp) {
  std::string out;
  utf8_append(cp, out);
  return out;
}

bool utf8_valid(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = utf8_decode(text, pos);
    if (c.status != Utf8Status::kValid) return false;
    pos += c.n_bytes;
  }
  return true;
}

size_t utf8_complete_prefix(std::string_view text) {
  // A held tail is 1 to 3 bytes from a lead byte to the end; the lead is never a continuation
  // byte, so the last non-continuation byte among the last three decides.
  for (size_t k = 1; k <= 3 && k <= text.size(); ++k) {
    const size_t pos = text.size() - k;
    if (is_continuation(static_cast<uint8_t>(text[pos]))) continue;
    return utf8_decode(text, pos).status == Utf8Status::kIncomplete ? pos : text.size();
  }
  return text.size();
}

std::string utf8_sanitize(std::string_view bytes, std::string& tail) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    const Utf8Char c = utf8_decode(bytes, pos);
    if (c.status == Utf8Status::kIncomplete) {
      tail.assign(bytes.substr(pos));
      return out;
    }
    if (c.status == Utf8Status::kValid) out.append(bytes.substr(pos, c.n_bytes));
    else out += kReplacementUtf8;
    pos += c.n_bytes;
  }
  tail.clear();
  return out;
}

std::string utf8_sanitize(std::string_view bytes) {
  std::string tail;
  std::string out = utf8_sanitize(bytes, tail);
  if (!tail.empty()) out += kReplacementUtf8;
  return out;
}

}  // namespace onebit
