// utf8_complete_prefix: whole characters pass, a character cut by a token boundary waits.
#include <gtest/gtest.h>

#include "engine/utf8.h"

namespace onebit {
namespace {

TEST(Utf8, HoldsBackIncompleteCharacters) {
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  const std::string euro = "\xE2\x82\xAC";         // U+20AC, 3 bytes
  const std::string emoji = "\xF0\x9F\x98\x80";    // U+1F600, 4 bytes
  EXPECT_EQ(utf8_complete_prefix("a" + euro), 4u);
  EXPECT_EQ(utf8_complete_prefix("a" + euro.substr(0, 1)), 1u);
  EXPECT_EQ(utf8_complete_prefix("a" + euro.substr(0, 2)), 1u);
  EXPECT_EQ(utf8_complete_prefix("ab" + emoji.substr(0, 3)), 2u);
  EXPECT_EQ(utf8_complete_prefix(emoji + "\xC3"), 4u);  // U+00E9's lead byte alone
  EXPECT_EQ(utf8_complete_prefix(emoji + "\xC3\xA9"), 6u);
}

TEST(Utf8, InvalidBytesAreNotHeldForever) {
  EXPECT_EQ(utf8_complete_prefix("\x80\x80"), 2u);           // continuation bytes only
  EXPECT_EQ(utf8_complete_prefix("a\xFF"), 2u);              // never valid in UTF-8
  EXPECT_EQ(utf8_complete_prefix("a\x80\x80\x80\x80"), 5u);  // more than 3 continuations
}

}  // namespace
}  // namespace onebit
