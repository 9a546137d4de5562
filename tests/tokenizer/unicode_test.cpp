// Unicode tables and NFC against the UCD's own conformance data (NormalizationTest.txt from
// Debian's unicode-data package) and known code point properties.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace onebit {
namespace {

std::vector<uint32_t> parse_hex_list(const std::string& field) {
  std::vector<uint32_t> out;
  std::istringstream ss(field);
  for (std::string h; ss >> h;) out.push_back(static_cast<uint32_t>(std::stoul(h, nullptr, 16)));
  return out;
}

TEST(Unicode, NfcConformance) {
  const char* path = "/usr/share/unicode/NormalizationTest.txt.bz2";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " missing (apt-get install unicode-data)";
  FILE* p = popen((std::string("bzcat ") + path).c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  int n_lines = 0, n_bad = 0;
  while (std::fgets(buf, sizeof(buf), p) != nullptr) {
    std::string line(buf);
    if (line.empty() || line[0] == '#' || line[0] == '@') continue;
    std::vector<std::vector<uint32_t>> cols;
    std::istringstream ss(line);
    for (std::string field; cols.size() < 5 && std::getline(ss, field, ';');) cols.push_back(parse_hex_list(field));
    if (cols.size() < 5) continue;
    ++n_lines;
    // NFC(c1) == NFC(c2) == NFC(c3) == c2 and NFC(c4) == NFC(c5) == c4.
    const std::pair<int, int> checks[] = {{0, 1}, {1, 1}, {2, 1}, {3, 3}, {4, 3}};
    for (auto [src, want] : checks) {
      if (nfc(cols[src]) != cols[want] && ++n_bad <= 5) ADD_FAILURE() << "NFC mismatch on line: " << line;
    }
  }
  pclose(p);
  EXPECT_GT(n_lines, 15000);
  EXPECT_EQ(n_bad, 0);
}

TEST(Unicode, Categories) {
  EXPECT_TRUE(is_letter('a'));
  EXPECT_TRUE(is_letter(0x4E2D));   // 中 Lo
  EXPECT_TRUE(is_letter(0xAC00));   // 가 (range entry in UnicodeData.txt)
  EXPECT_TRUE(is_letter(0x20000));  // CJK Extension B (range entry)
  EXPECT_FALSE(is_letter('1'));
  EXPECT_TRUE(is_number(0xBD));     // ½ No
  EXPECT_TRUE(is_number(0x216B));   // Ⅻ Nl
  EXPECT_TRUE(is_number(0x0663));   // ٣ Nd
  EXPECT_TRUE(is_mark(0x0301));
  EXPECT_TRUE(is_punctuation('!'));
  EXPECT_TRUE(is_symbol('$'));
  EXPECT_TRUE(is_symbol(0x1F600));  // 😀 So
  EXPECT_EQ(general_category(0x0378), GeneralCategory::kCn);  // unassigned
  for (uint32_t ws : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au, 0x2028u,
                      0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_TRUE(is_whitespace(ws)) << std::hex << ws;
  }
  EXPECT_FALSE(is_whitespace(0x200B));  // ZERO WIDTH SPACE is Cf, not White_Space
  EXPECT_FALSE(is_whitespace(kInvalidByteBase + 0x80));
}

TEST(Unicode, Utf8KeepsInvalidBytes) {
  const std::string text = "a\xC3\xA9\xFF\xE2\x82z\xF0\x9F\x98\x80\xED\xA0\x80";
  const auto cps = utf8_to_code_points(text);
  EXPECT_EQ(cps[0], 'a');
  EXPECT_EQ(cps[1], 0xE9u);
  EXPECT_EQ(cps[2], kInvalidByteBase + 0xFF);
  EXPECT_EQ(cps[3], kInvalidByteBase + 0xE2);  // truncated sequence: one byte at a time
  EXPECT_EQ(cps[4], kInvalidByteBase + 0x82);
  EXPECT_EQ(cps[5], 'z');
  EXPECT_EQ(cps[6], 0x1F600u);
  EXPECT_EQ(cps[7], kInvalidByteBase + 0xED);  // a surrogate is not valid UTF-8
  EXPECT_EQ(code_points_to_utf8(cps), text);
}

TEST(PreTokenizer, UnknownNameIsRefusedWithTheList) {
  auto r = pre_tokenizer_from_name("falcon");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("'falcon'"), std::string::npos);
  EXPECT_NE(r.message().find("qwen2"), std::string::npos);
}

std::vector<std::string> pieces(PreTokenizerKind kind, const std::string& text) {
  const auto cps = utf8_to_code_points(text);
  std::vector<std::string> out;
  for (const auto& s : pre_tokenize(kind, cps)) {
    out.push_back(code_points_to_utf8(std::vector<uint32_t>(cps.begin() + s.begin, cps.begin() + s.end)));
  }
  return out;
}

// Splits worked out by hand from the regexes (Oniguruma: leftmost match, first alternative).
TEST(PreTokenizer, Gpt2Regex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(PreTokenizerKind::kGpt2, "Hello  world's 42!!\n\n x"),
            (V{"Hello", " ", " world", "'s", " 42", "!!", "\n\n", " x"}));
  EXPECT_EQ(pieces(PreTokenizerKind::kGpt2, "a   "), (V{"a", "   "}));
}

TEST(PreTokenizer, Llama3AndQwen2Regex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(PreTokenizerKind::kLlama3, "I'LL pay 12345 \t\n\nnow!\n"),
            (V{"I", "'LL", " pay", " ", "123", "45", " \t\n\n", "now", "!\n"}));
  EXPECT_EQ(pieces(PreTokenizerKind::kQwen2, "x 123"), (V{"x", " ", "1", "2", "3"}));
}

}  // namespace
}  // namespace onebit
