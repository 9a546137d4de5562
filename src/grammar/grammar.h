// A context-free grammar over Unicode code points, read from GBNF (llama.cpp's grammar format,
// llama-server's `grammar` field) and checked so that the matcher (matcher.h) always terminates:
// every rule defined, `root` present, no left recursion (direct, indirect or through rules that
// can match nothing). Repetitions and groups are rewritten into plain rules at parse time.
// Depends on base/ only. docs/structured.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace onebit::grammar {

// One element of an alternative, stored in one flat array (Grammar::elements).
struct Element {
  enum Kind : uint8_t {
    kChars,  // one code point in `ranges`
    kRule,   // the rule `rule`
    kEnd,    // the end of an alternative
  };
  Kind kind = kEnd;
  int32_t rule = -1;                                  // kRule
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kChars: sorted, disjoint, inclusive [lo, hi]

  bool matches(uint32_t cp) const;
  // Whether some code point in [lo, hi] matches (a character still being decoded).
  bool matches_any(uint32_t lo, uint32_t hi) const;
};

struct Rule {
  std::string name;
  std::vector<int32_t> alternatives;  // index of each alternative's first element; each runs to a kEnd
};

using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive [lo, hi]

// Sorts and merges code point ranges; `negate` complements them over [0, U+10FFFF].
CodeRanges normalize_ranges(CodeRanges ranges, bool negate);

// Limits on what a grammar may be (a request sends it): the text, its rules, a repetition count.
inline constexpr size_t kMaxGrammarBytes = 1 << 18;
inline constexpr size_t kMaxGrammarElements = 1 << 16;
inline constexpr size_t kMaxGrammarRules = 8192;
inline constexpr int32_t kMaxRepetition = 1024;
inline constexpr int kMaxGroupNesting = 64;

struct Grammar {
  std::vector<Rule> rules;
  std::vector<Element> elements;
  int32_t root = -1;  // index of the rule named "root"

  int32_t find_rule(std::string_view name) const;  // -1 when none
};

// Parses GBNF: `name ::= alternatives` per rule; a rule ends at the end of its line except inside
// parentheses or after `|`; elements are "literal", [class] / [^class] (ranges a-z, escapes \n \r
// \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH), `.` (any character), rule names, ( groups ), and the
// postfixes * + ? {m} {m,} {m,n} {,n}; `#` comments to the end of the line. Errors name the line
// and column, what was found and what was expected.
Result<Grammar> parse_gbnf(std::string_view text);

// The grammar back as GBNF text (rewritten rules included): for errors, logs and tests.
std::string to_gbnf(const Grammar& g);

}  // namespace onebit::grammar
