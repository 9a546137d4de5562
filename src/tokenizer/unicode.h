// Code points for the tokenizer: UTF-8 decoding that keeps invalid bytes, character classes
// (\p{L}, \p{N}, \s, ...) and NFC, all from the generated UCD tables. No ICU, no locale.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/utf8.h"
#include "tokenizer/unicode_tables.h"

namespace onebit {

// A byte that is not part of a valid UTF-8 sequence decodes to kInvalidByteBase + byte: it
// belongs to no class (not L, N, whitespace) and encodes back to that same byte.
inline constexpr uint32_t kInvalidByteBase = kMaxCodePoint + 1;

// Decodes one code point at `pos` < text.size() (advanced past it) with base/utf8.h's
// utf8_decode. Never fails: a byte that does not start a well-formed sequence (overlong forms,
// surrogates, values over U+10FFFF, truncated sequences) gives kInvalidByteBase + that byte and
// uses 1 byte.
uint32_t utf8_next(std::string_view text, size_t& pos);
// Decodes all of `text`.
std::vector<uint32_t> utf8_to_code_points(std::string_view text);
// Appends the UTF-8 of `cp`, or the raw byte of an invalid-byte code point, to `out`.
void append_code_point(uint32_t cp, std::string& out);
// The inverse of utf8_to_code_points.
std::string code_points_to_utf8(const std::vector<uint32_t>& cps);

// General category; kCn for unassigned code points and invalid bytes. Thread-safe.
GeneralCategory general_category(uint32_t cp);
bool is_letter(uint32_t cp);       // \p{L}
bool is_number(uint32_t cp);       // \p{N}
bool is_mark(uint32_t cp);         // \p{M}
bool is_punctuation(uint32_t cp);  // \p{P}
bool is_symbol(uint32_t cp);       // \p{S}
bool is_whitespace(uint32_t cp);   // \s as Oniguruma and Rust's char::is_whitespace (White_Space)
uint8_t combining_class(uint32_t cp);

// Unicode Normalization Form C (UAX #15). Invalid-byte code points pass through unchanged.
std::vector<uint32_t> nfc(const std::vector<uint32_t>& cps);
// NFC of UTF-8 text; returns the input unchanged (fast path) when it is plainly NFC already.
std::string nfc_utf8(std::string_view text);

}  // namespace onebit
