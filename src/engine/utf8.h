// Streaming text out of tokens: a token's bytes may end inside a UTF-8 character, so output
// waits for the character to complete. Pure functions; no model knowledge.
#pragma once

#include <cstddef>
#include <string_view>

namespace onebit {

// Length of the longest prefix of `s` that does not end inside an incomplete UTF-8 sequence
// (at most the last 3 bytes are held back). Invalid bytes (a stray continuation byte, a byte that
// cannot lead) are let through, so nothing is held forever.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace onebit
