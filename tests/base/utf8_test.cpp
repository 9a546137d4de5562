// base/utf8.h: a table of well-formed and ill-formed sequences (RFC 3629, Markus Kuhn's stress
// test), a round trip over every scalar value, the streaming helpers, and a comparison with an
// independent decoder: CPython's (bytes.decode 'replace' / 'surrogateescape', its incremental one).
#include "base/utf8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "run_command.h"

namespace onebit {
namespace {

using namespace std::string_view_literals;

struct DecodeCase {
  std::string_view bytes;
  Utf8Status status;
  uint32_t n_bytes;
  uint32_t cp;  // when kValid
  const char* what;
};

constexpr auto kValid = Utf8Status::kValid;
constexpr auto kInvalid = Utf8Status::kInvalid;
constexpr auto kIncomplete = Utf8Status::kIncomplete;

const DecodeCase kDecodeCases[] = {
    {"\x00"sv, kValid, 1, 0x00, "NUL"},
    {"\x7F"sv, kValid, 1, 0x7F, "last 1-byte"},
    {"\xC2\x80"sv, kValid, 2, 0x80, "first 2-byte"},
    {"\xDF\xBF"sv, kValid, 2, 0x7FF, "last 2-byte"},
    {"\xE0\xA0\x80"sv, kValid, 3, 0x800, "first 3-byte"},
    {"\xED\x9F\xBF"sv, kValid, 3, 0xD7FF, "before the surrogates"},
    {"\xEE\x80\x80"sv, kValid, 3, 0xE000, "after the surrogates"},
    {"\xEF\xBF\xBD"sv, kValid, 3, 0xFFFD, "U+FFFD"},
    {"\xEF\xBF\xBF"sv, kValid, 3, 0xFFFF, "last 3-byte (a noncharacter is still valid)"},
    {"\xF0\x90\x80\x80"sv, kValid, 4, 0x10000, "first 4-byte"},
    {"\xF0\x9F\x98\x80"sv, kValid, 4, 0x1F600, "emoji"},
    {"\xF4\x8F\xBF\xBF"sv, kValid, 4, 0x10FFFF, "last code point"},
    {"\xC3\xA9z"sv, kValid, 2, 0xE9, "followed by more text"},
    {"\x80"sv, kInvalid, 1, 0, "lone continuation byte"},
    {"\xBF\x80"sv, kInvalid, 1, 0, "continuation bytes only"},
    {"\xC0\x80"sv, kInvalid, 1, 0, "overlong NUL"},
    {"\xC1\xBF"sv, kInvalid, 1, 0, "overlong U+007F"},
    {"\xC0"sv, kInvalid, 1, 0, "C0 can never complete"},
    {"\xE0\x80\x80"sv, kInvalid, 1, 0, "overlong 3-byte NUL"},
    {"\xE0\x9F\xBF"sv, kInvalid, 1, 0, "overlong U+07FF"},
    {"\xE0\x80"sv, kInvalid, 1, 0, "overlong prefix at the end: never completes"},
    {"\xF0\x80\x80\x80"sv, kInvalid, 1, 0, "overlong 4-byte NUL"},
    {"\xF0\x8F\xBF\xBF"sv, kInvalid, 1, 0, "overlong U+FFFF"},
    {"\xED\xA0\x80"sv, kInvalid, 1, 0, "surrogate U+D800"},
    {"\xED\xBF\xBF"sv, kInvalid, 1, 0, "surrogate U+DFFF"},
    {"\xED\xA0"sv, kInvalid, 1, 0, "surrogate prefix at the end: never completes"},
    {"\xF4\x90\x80\x80"sv, kInvalid, 1, 0, "U+110000"},
    {"\xF5\x80\x80\x80"sv, kInvalid, 1, 0, "F5 leads only values over U+10FFFF"},
    {"\xF7\xBF\xBF\xBF"sv, kInvalid, 1, 0, "U+1FFFFF"},
    {"\xF8\x88\x80\x80\x80"sv, kInvalid, 1, 0, "old 5-byte form"},
    {"\xFC\x84\x80\x80\x80\x80"sv, kInvalid, 1, 0, "old 6-byte form"},
    {"\xFE"sv, kInvalid, 1, 0, "FE"},
    {"\xFF"sv, kInvalid, 1, 0, "FF"},
    {"\xC3\x28"sv, kInvalid, 1, 0, "second byte not a continuation"},
    {"\xE2\x28\xA1"sv, kInvalid, 1, 0, "second of three not a continuation"},
    {"\xE2\x82\x28"sv, kInvalid, 2, 0, "third of three: the maximal subpart is two bytes"},
    {"\xF0\x9F\x98\x41"sv, kInvalid, 3, 0, "fourth of four: three bytes"},
    {"\xF0\x9F\xF0\x9F\x98\x80"sv, kInvalid, 2, 0, "a new lead inside a sequence"},
    {"\xC3"sv, kIncomplete, 1, 0, "2-byte lead at the end"},
    {"\xE2\x82"sv, kIncomplete, 2, 0, "3-byte sequence cut after two"},
    {"\xF0"sv, kIncomplete, 1, 0, "4-byte lead at the end"},
    {"\xF0\x9F\x98"sv, kIncomplete, 3, 0, "4-byte sequence cut after three"},
    {"\xF4\x8F"sv, kIncomplete, 2, 0, "highest plane, cut"},
    {"\xED\x9F"sv, kIncomplete, 2, 0, "below the surrogates, cut"},
};

TEST(Utf8, DecodeTable) {
  for (const auto& c : kDecodeCases) {
    const Utf8Char d = utf8_decode(c.bytes, 0);
    EXPECT_EQ(d.status, c.status) << c.what;
    EXPECT_EQ(d.n_bytes, c.n_bytes) << c.what;
    if (c.status == kValid) {
      EXPECT_EQ(d.cp, c.cp) << c.what;
    }
    EXPECT_EQ(utf8_valid(c.bytes.substr(0, d.n_bytes)), c.status == kValid) << c.what;
    EXPECT_EQ(utf8_char_length(c.bytes, 0), c.status == kValid ? c.n_bytes : 1u) << c.what;
  }
}

TEST(Utf8, DecodeAtAPosition) {
  const std::string_view s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"sv;
  EXPECT_EQ(utf8_decode(s, 1).cp, 0xE9u);
  EXPECT_EQ(utf8_decode(s, 3).cp, 0x20ACu);
  EXPECT_EQ(utf8_decode(s, 6).cp, 0x1F600u);
  EXPECT_EQ(utf8_decode(s, 2).status, kInvalid);  // inside a character: a stray continuation byte
}

TEST(Utf8, SequenceLengthFromTheLeadByte) {
  for (int b = 0; b < 256; ++b) {
    const size_t expected = b < 0x80 ? 1 : b < 0xC0 ? 0 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF8 ? 4 : 0;
    EXPECT_EQ(utf8_sequence_length(static_cast<uint8_t>(b)), expected) << b;
  }
}

TEST(Utf8, EveryScalarValueRoundTrips) {
  std::string s;
  for (uint32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
    if (cp == 0xD800) cp = 0xE000;
    s.clear();
    utf8_append(cp, s);
    const size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;  // the shortest form
    ASSERT_EQ(s.size(), n) << std::hex << cp;
    ASSERT_EQ(utf8_sequence_length(static_cast<uint8_t>(s[0])), n) << std::hex << cp;
    const Utf8Char d = utf8_decode(s, 0);
    ASSERT_EQ(d.status, kValid) << std::hex << cp;
    ASSERT_EQ(d.cp, cp);
    ASSERT_EQ(d.n_bytes, n);
    ASSERT_EQ(utf8_complete_prefix(s), n);
    for (size_t k = 1; k < n; ++k) ASSERT_EQ(utf8_decode(s.substr(0, k), 0).status, kIncomplete) << std::hex << cp;
  }
}

TEST(Utf8, NonScalarValuesEncodeAsReplacement) {
  for (uint32_t cp : {0xD800u, 0xDBFFu, 0xDC00u, 0xDFFFu, 0x110000u, 0xFFFFFFFFu}) {
    EXPECT_EQ(utf8_encode(cp), kReplacementUtf8) << std::hex << cp;
  }
  EXPECT_EQ(utf8_encode(0x20AC), "\xE2\x82\xAC");
}

TEST(Utf8, IllFormedBytesStandAloneInCountsAndSplits) {
  const std::string_view s = "a\xC3\xA9\xFF\xE2\x82z\xED\xA0\x80"sv;
  const std::vector<std::string> expected = {"a", "\xC3\xA9", "\xFF", "\xE2", "\x82", "z", "\xED", "\xA0", "\x80"};
  EXPECT_EQ(utf8_split(s), expected);
  EXPECT_EQ(utf8_count(s), expected.size());
  EXPECT_EQ(utf8_count(""), 0u);
  EXPECT_TRUE(utf8_split("").empty());
}

TEST(Utf8, HoldsBackIncompleteCharacters) {
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  const std::string euro = "\xE2\x82\xAC";       // U+20AC, 3 bytes
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, 4 bytes
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
  EXPECT_EQ(utf8_complete_prefix("a\xC0"), 2u);              // overlong lead
  EXPECT_EQ(utf8_complete_prefix("a\xE0\x80"), 3u);          // overlong prefix
  EXPECT_EQ(utf8_complete_prefix("a\xED\xA0"), 3u);          // surrogate prefix
  EXPECT_EQ(utf8_complete_prefix("a\xF4\x90"), 3u);          // over U+10FFFF
  EXPECT_EQ(utf8_complete_prefix("a\xE2\x28"), 3u);          // cut by a non-continuation
}

TEST(Utf8, SanitizeReplacesMaximalSubpartsAndHoldsTheTail) {
  std::string tail = "stale";
  EXPECT_EQ(utf8_sanitize("a\xFF" "b", tail), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(tail, "");
  EXPECT_EQ(utf8_sanitize("a\xE2\x82", tail), "a");
  EXPECT_EQ(tail, "\xE2\x82");
  EXPECT_EQ(utf8_sanitize(tail + "\xAC", tail), "\xE2\x82\xAC");  // the stream's next token
  EXPECT_EQ(tail, "");
  EXPECT_EQ(utf8_sanitize("\xE2\x82\x28"), "\xEF\xBF\xBD(");                              // one U+FFFD
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");       // three
  EXPECT_EQ(utf8_sanitize("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                       // two
  EXPECT_EQ(utf8_sanitize("x\xF0\x9F\x98"), "x\xEF\xBF\xBD");  // the whole text: the tail too
}

// Inputs for the comparison with CPython: every string of 1 and 2 bytes, 3- and 4-byte strings
// over the bytes where the rules change, and random strings biased towards UTF-8's edges.
std::vector<std::string> comparison_inputs() {
  std::vector<std::string> in;
  for (int a = 0; a < 256; ++a) {
    in.emplace_back(1, static_cast<char>(a));
    for (int b = 0; b < 256; ++b) in.push_back({static_cast<char>(a), static_cast<char>(b)});
  }
  const uint8_t edges[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xE0, 0xED, 0xF0, 0xF4, 0xFF};
  for (int a = 0xC0; a < 256; ++a) {
    for (uint8_t b : edges) {
      for (uint8_t c : edges) {
        in.push_back({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
        if (a < 0xF0 || a > 0xF8) continue;
        for (uint8_t d : edges) {
          in.push_back({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c), static_cast<char>(d)});
        }
      }
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k) {
      switch (rng() % 4) {
        case 0: s.push_back(static_cast<char>(edges[rng() % std::size(edges)])); break;
        case 1: s.push_back(static_cast<char>(rng() % 256)); break;
        case 2: s.push_back(static_cast<char>(0x80 + rng() % 64)); break;
        default: utf8_append(static_cast<uint32_t>(rng() % (kMaxCodePoint + 1)), s); break;
      }
    }
    in.push_back(s);
  }
  return in;
}

std::string hex(std::string_view s) {
  std::string out;
  char b[3];
  for (unsigned char c : s) {
    std::snprintf(b, sizeof(b), "%02x", c);
    out += b;
  }
  return out.empty() ? "-" : out;
}

// Per input line (hex): decode 'replace' (final), the incremental decoder's text and held tail
// (final=False), the 'surrogateescape' code points, strict validity.
constexpr const char* kPythonOracle = R"(
import codecs, sys
out = []
for line in open(sys.argv[1]):
    b = bytes.fromhex(line.strip())
    full = b.decode('utf-8', 'replace').encode().hex()
    d = codecs.getincrementaldecoder('utf-8')('replace')
    part = d.decode(b, final=False).encode().hex()
    tail = d.getstate()[0].hex()
    cps = ','.join('%x' % ord(c) for c in b.decode('utf-8', 'surrogateescape'))
    try:
        b.decode('utf-8')
        valid = 1
    except UnicodeDecodeError:
        valid = 0
    out.append(' '.join([full or '-', part or '-', tail or '-', cps or '-', str(valid)]))
open(sys.argv[2], 'w').write('\n'.join(out) + '\n')
)";

// The code points of `s` under the 'surrogateescape' rule: an ill-formed byte b stands alone as
// U+DC00 + b (no well-formed character decodes to a surrogate), as hex joined by ','.
std::string escaped_code_points(std::string_view s) {
  std::string out;
  for (size_t pos = 0; pos < s.size();) {
    const Utf8Char c = utf8_decode(s, pos);
    const uint32_t cp = c.status == kValid ? c.cp : 0xDC00u + static_cast<uint8_t>(s[pos]);
    pos += utf8_char_length(s, pos);
    char b[16];
    std::snprintf(b, sizeof(b), "%s%x", out.empty() ? "" : ",", cp);
    out += b;
  }
  return out.empty() ? "-" : out;
}

// What differs between CPython's line (see kPythonOracle) and ours for `s`; empty when nothing.
std::string compare_with_python(const std::string& s, const std::string& line) {
  std::istringstream fields(line);
  std::string full, part, tail, cps;
  int valid = -1;
  fields >> full >> part >> tail >> cps >> valid;
  if (hex(utf8_sanitize(s)) != full) return "utf8_sanitize";
  if (escaped_code_points(s) != cps) return "utf8_decode";
  const auto n_cps = static_cast<size_t>(cps == "-" ? 0 : std::count(cps.begin(), cps.end(), ',') + 1);
  if (utf8_count(s) != n_cps) return "utf8_count";
  std::string joined;
  for (const auto& ch : utf8_split(s)) joined += ch;
  if (joined != s || utf8_split(s).size() != n_cps) return "utf8_split";
  if (utf8_valid(s) != (valid == 1)) return "utf8_valid";
  std::string our_tail;
  const std::string our_part = utf8_sanitize(s, our_tail);
  // CPython's incremental decoder also holds ED A0..BF (a surrogate's prefix, which only its
  // 'surrogatepass' handler could complete); Table 3-7 makes it ill-formed at once.
  const bool surrogate_tail = tail.size() >= 4 && tail.compare(0, 2, "ed") == 0 && tail[2] >= 'a';
  if (surrogate_tail) return our_tail.empty() && hex(our_part) == full ? "" : "utf8_sanitize's tail";
  if (hex(our_part) != part || hex(our_tail) != tail) return "utf8_sanitize's tail";
  if (utf8_complete_prefix(s) != s.size() - our_tail.size()) return "utf8_complete_prefix";
  return "";
}

TEST(Utf8, AgreesWithCPython) {
  if (testing::run_command("python3 -c pass").exit_code != 0) GTEST_SKIP() << "python3 is not installed";
  const auto dir = std::filesystem::temp_directory_path() / ("onebit_utf8_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<std::string> inputs = comparison_inputs();
  {
    std::ofstream(dir / "oracle.py") << kPythonOracle;
    std::ofstream f(dir / "in.txt");
    for (const auto& s : inputs) f << (s.empty() ? "" : hex(s)) << "\n";
  }
  const auto r = testing::run_command("python3 " + (dir / "oracle.py").string() + " " +
                                      (dir / "in.txt").string() + " " + (dir / "out.txt").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream f(dir / "out.txt");
  size_t n_lines = 0, n_mismatches = 0;
  for (std::string line; n_lines < inputs.size() && std::getline(f, line); ++n_lines) {
    const std::string what = compare_with_python(inputs[n_lines], line);
    if (!what.empty() && ++n_mismatches <= 10) {
      ADD_FAILURE() << what << " differs for " << hex(inputs[n_lines]) << "; python: " << line;
    }
  }
  EXPECT_EQ(n_lines, inputs.size());
  EXPECT_EQ(n_mismatches, 0u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace onebit
