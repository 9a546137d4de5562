// UTF-8 for every layer (RFC 3629): decoding with one rule for ill-formed bytes, encoding,
// validation, the streaming helpers (complete prefix, U+FFFD repair with a held tail) and splits
// into characters. Pure functions over bytes; depends on nothing.
//
// Well-formed means RFC 3629 / Unicode Table 3-7: no overlong forms, no surrogates
// (U+D800..U+DFFF), nothing over U+10FFFF, so bytes C0, C1 and F5..FF never occur.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace onebit {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";  // U+FFFD

enum class Utf8Status {
  kValid,       // a well-formed sequence
  kInvalid,     // an ill-formed one: never becomes valid whatever follows
  kIncomplete,  // a proper prefix of a valid sequence that runs to the end of the text
};

struct Utf8Char {
  uint32_t cp = 0;       // the code point when kValid, else 0
  uint32_t n_bytes = 1;  // kValid: the sequence; otherwise its maximal subpart (1 to 3 bytes)
  Utf8Status status = Utf8Status::kValid;
};

// Decodes the character at text[pos] (pos < text.size(), checked). An ill-formed sequence spans
// its maximal subpart (Unicode 3.9 D93b: the longest prefix of a valid sequence, at least 1 byte).
Utf8Char utf8_decode(std::string_view text, size_t pos);

// Length that lead byte `b` announces by its high bits: 1 (00..7F), 2 (C0..DF), 3 (E0..EF),
// 4 (F0..F7); 0 for a continuation byte (80..BF) or F8..FF. It says nothing of validity (C0, C1
// and F5..F7 lead only ill-formed sequences): utf8_decode does. llama.cpp's unicode_len_utf8.
size_t utf8_sequence_length(uint8_t b);

// Bytes of the character at text[pos] (pos < text.size()): its sequence when well-formed, else 1
// (an ill-formed byte stands alone, the rule of utf8_count, utf8_split and the tokenizer).
size_t utf8_char_length(std::string_view text, size_t pos);
// Number of characters in `text`, each ill-formed byte counting as one.
size_t utf8_count(std::string_view text);
// `text` cut into characters (each ill-formed byte alone); joined, they give `text` back.
std::vector<std::string> utf8_split(std::string_view text);

// Appends the UTF-8 of `cp` to `out`; a surrogate or a value over U+10FFFF (not a Unicode scalar
// value, so it has no UTF-8) appends U+FFFD instead.
void utf8_append(uint32_t cp, std::string& out);
// utf8_append into a new string.
std::string utf8_encode(uint32_t cp);

// Whether all of `text` is well-formed UTF-8.
bool utf8_valid(std::string_view text);
// Length of the longest prefix of `text` that does not end inside an incomplete character: only a
// trailing proper prefix of a valid sequence (1 to 3 bytes) is held back. Ill-formed bytes count
// as complete, so nothing waits forever.
size_t utf8_complete_prefix(std::string_view text);

// Well-formed UTF-8 from `bytes`: each maximal ill-formed subpart becomes one U+FFFD (Unicode's
// "substitution of maximal subparts", as Python's bytes.decode('utf-8', 'replace')), except a
// trailing incomplete character, which is moved to `tail` (cleared otherwise) so that a stream can
// put it before its next bytes.
std::string utf8_sanitize(std::string_view bytes, std::string& tail);
// The same for a whole text: a trailing incomplete character becomes one U+FFFD too.
std::string utf8_sanitize(std::string_view bytes);

}  // namespace onebit
