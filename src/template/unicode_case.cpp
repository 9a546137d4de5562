// Python str.upper()/lower() for the scripts chat content commonly uses: ASCII, Latin-1,
// Latin Extended-A, Greek and Cyrillic (plus ß -> SS). Other code points pass through unchanged;
// docs/template.md lists this as a difference from Python.
#include <cstdint>

#include "base/utf8.h"
#include "template/builtins.h"

namespace onebit::tmpl {
namespace {

// Latin Extended-A pairs: upper at even code points except in these odd-first ranges.
bool odd_is_upper(uint32_t c) { return (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E); }

uint32_t lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0xC0) return c;
  if (c <= 0xDE) return c == 0xD7 ? c : c + 32;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';
    if (c == 0x178) return 0xFF;
    if (c == 0x138 || c == 0x149 || c == 0x17F || c == 0x131) return c;
    bool upper = odd_is_upper(c) ? (c & 1) : !(c & 1);
    return upper ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

uint32_t upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0xB5) return c;
  if (c == 0xB5) return 0x39C;
  if (c >= 0xE0 && c <= 0xFE) return c == 0xF7 ? c : c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (c == 0x138 || c == 0x149 || c == 0x130 || c == 0x178) return c;
    bool lower = odd_is_upper(c) ? !(c & 1) : (c & 1);
    return lower ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

}  // namespace

std::string py_upper(const std::string& s) {
  std::string out;
  for (const auto& ch : utf8_split(s)) {
    const Utf8Char d = utf8_decode(ch, 0);
    if (d.status != Utf8Status::kValid) {
      out += ch;  // an ill-formed byte stays as it is
      continue;
    }
    const uint32_t c = d.cp;
    if (c == 0xDF) out += "SS";
    else out += c < 0x80 || upper_cp(c) != c ? utf8_encode(upper_cp(c)) : ch;
  }
  return out;
}

std::string py_lower(const std::string& s) {
  std::string out;
  for (const auto& ch : utf8_split(s)) {
    const Utf8Char d = utf8_decode(ch, 0);
    if (d.status != Utf8Status::kValid) {
      out += ch;
      continue;
    }
    const uint32_t c = d.cp;
    out += c < 0x80 || lower_cp(c) != c ? utf8_encode(lower_cp(c)) : ch;
  }
  return out;
}

bool is_cased_letter(const std::string& ch) { return py_upper(ch) != py_lower(ch); }

}  // namespace onebit::tmpl
