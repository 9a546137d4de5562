// GBNF parsing and the checks that keep the matcher finite. The syntax follows llama.cpp's
// grammars/README.md (c392e50); the parser is ours.
#include "grammar/grammar.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>

#include "base/utf8.h"

namespace onebit::grammar {

bool Element::matches(uint32_t cp) const {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t c, const std::pair<uint32_t, uint32_t>& r) { return c < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->second;
}

bool Element::matches_any(uint32_t lo, uint32_t hi) const {
  for (const auto& [a, b] : ranges) {
    if (a > hi) break;
    if (b >= lo) return true;
  }
  return false;
}

int32_t Grammar::find_rule(std::string_view name) const {
  for (size_t i = 0; i < rules.size(); ++i) {
    if (rules[i].name == name) return static_cast<int32_t>(i);
  }
  return -1;
}

namespace {

using Ranges = CodeRanges;
constexpr auto normalize = normalize_ranges;

struct Elem {  // an element while parsing (Element without the flat layout)
  Element::Kind kind;
  int32_t rule = -1;
  Ranges ranges;
};
using Sequence = std::vector<Elem>;
using Alternatives = std::vector<Sequence>;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<Grammar> run() {
    if (text_.size() > kMaxGrammarBytes) {
      return fail_plain("the grammar is " + std::to_string(text_.size()) + " bytes; at most " +
                        std::to_string(kMaxGrammarBytes) + " are accepted");
    }
    skip_space(true);
    while (pos_ < text_.size() && error_.empty()) {
      const size_t name_at = pos_;
      const std::string name = parse_name();
      if (name.empty()) return fail("a rule name ([a-zA-Z0-9_-]+)");
      skip_space(false);
      if (text_.substr(pos_, 3) != "::=") return fail("'::=' after the rule name '" + name + "'");
      pos_ += 3;
      skip_space(true);
      const int32_t id = rule_id(name);
      if (defined_[size_t(id)]) {
        pos_ = name_at;
        return fail_plain("rule '" + name + "' is defined twice " + where() + "; give each rule one definition (use | for alternatives)");
      }
      defined_[size_t(id)] = true;
      Alternatives alts = parse_alternatives(name, false);
      if (!error_.empty()) break;
      rules_[size_t(id)] = std::move(alts);
      skip_space(false);
      if (pos_ < text_.size() && text_[pos_] != '\n' && text_[pos_] != '\r') return fail("the end of the line after rule '" + name + "'");
      skip_space(true);
    }
    if (!error_.empty()) return make_error(error_);
    return finish();
  }

 private:
  // --- errors --------------------------------------------------------------------------------
  std::string where() const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return "at line " + std::to_string(line) + ", column " + std::to_string(col);
  }
  Error fail(const std::string& expected) {
    std::string found = pos_ >= text_.size() ? "the end of the grammar" : "'" + std::string(text_.substr(pos_, 1)) + "'";
    if (error_.empty()) error_ = "grammar: expected " + expected + " " + where() + ", found " + found;
    return make_error(error_);
  }
  Error fail_plain(const std::string& message) {
    if (error_.empty()) error_ = "grammar: " + message;
    return make_error(error_);
  }

  // --- lexing --------------------------------------------------------------------------------
  void skip_space(bool newlines) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }
  // One character of a literal or class, escapes decoded; false (error set) on a bad one.
  bool parse_char(uint32_t& cp) {
    if (pos_ >= text_.size()) return fail("a character").message.empty();
    if (text_[pos_] == '\\') {
      if (pos_ + 1 >= text_.size()) return fail("an escape after '\\'").message.empty();
      const char e = text_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': cp = '\n'; return true;
        case 'r': cp = '\r'; return true;
        case 't': cp = '\t'; return true;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
          cp = uint32_t(e);
          return true;
        case 'x': return parse_hex(2, cp);
        case 'u': return parse_hex(4, cp);
        case 'U': return parse_hex(8, cp);
        default:
          pos_ -= 2;
          return fail("a known escape (\\n \\r \\t \\\\ \\\" \\[ \\] \\- \\^ \\xHH \\uHHHH \\UHHHHHHHH)").message.empty();
      }
    }
    const Utf8Char c = utf8_decode(text_, pos_);
    if (c.status != Utf8Status::kValid) return fail("well-formed UTF-8").message.empty();
    cp = c.cp;
    pos_ += c.n_bytes;
    return true;
  }
  bool parse_hex(int n, uint32_t& cp) {
    cp = 0;
    for (int i = 0; i < n; ++i) {
      if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_]))) {
        return fail(std::to_string(n) + " hex digits").message.empty();
      }
      const char c = text_[pos_++];
      cp = cp * 16 + uint32_t(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return fail_plain("the escape " + where() + " is not a Unicode scalar value").message.empty();
    }
    return true;
  }

  // --- rules ---------------------------------------------------------------------------------
  int32_t rule_id(const std::string& name, size_t at = SIZE_MAX) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const int32_t id = static_cast<int32_t>(names_.size());
    if (names_.size() == kMaxGrammarRules) {
      fail_plain("the grammar has more than " + std::to_string(kMaxGrammarRules) +
                 " rules (repetitions and groups make rules); make it smaller");
    }
    ids_[name] = id;
    names_.push_back(name);
    rules_.emplace_back();
    defined_.push_back(false);
    refs_at_.push_back(at == SIZE_MAX ? pos_ : at);
    return id;
  }
  // A rule made by the parser (a group or a repetition), named after the rule it serves.
  int32_t new_rule(const std::string& base, Alternatives alts) {
    std::string name;
    do {
      name = base + "-" + std::to_string(++generated_);
    } while (ids_.count(name));
    const int32_t id = rule_id(name);
    defined_[size_t(id)] = true;
    rules_[size_t(id)] = std::move(alts);
    return id;
  }
  bool count_elements(size_t n) {
    n_elements_ += n;
    if (n_elements_ > kMaxGrammarElements) {
      fail_plain("the grammar expands to more than " + std::to_string(kMaxGrammarElements) +
                 " elements (repetition counts multiply); make it smaller");
      return false;
    }
    return true;
  }

  Alternatives parse_alternatives(const std::string& rule, bool nested) {
    Alternatives alts;
    alts.push_back(parse_sequence(rule, nested));
    while (error_.empty() && pos_ < text_.size() && text_[pos_] == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(rule, nested));
    }
    return alts;
  }

  Sequence parse_sequence(const std::string& rule, bool nested) {
    Sequence seq;
    size_t atom_start = 0;  // where the last atom (the target of a postfix) begins in seq
    bool have_atom = false;
    while (error_.empty() && pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '|' || c == ')' || c == '\n' || c == '\r') break;
      if (c == '"') {
        ++pos_;
        atom_start = seq.size();
        while (error_.empty() && pos_ < text_.size() && text_[pos_] != '"') {
          uint32_t cp = 0;
          if (!parse_char(cp)) return seq;
          seq.push_back(Elem{Element::kChars, -1, {{cp, cp}}});
        }
        if (pos_ >= text_.size()) {
          fail("'\"' to close the literal");
          return seq;
        }
        ++pos_;
        have_atom = seq.size() > atom_start;  // "" is an empty atom: nothing to repeat
      } else if (c == '[') {
        ++pos_;
        bool negate = false;
        if (pos_ < text_.size() && text_[pos_] == '^') {
          negate = true;
          ++pos_;
        }
        Ranges ranges;
        while (error_.empty() && pos_ < text_.size() && text_[pos_] != ']') {
          uint32_t lo = 0, hi = 0;
          if (!parse_char(lo)) return seq;
          hi = lo;
          if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
            ++pos_;
            if (!parse_char(hi)) return seq;
            if (hi < lo) {
              fail_plain("the range " + where() + " ends below its start");
              return seq;
            }
          }
          ranges.emplace_back(lo, hi);
        }
        if (pos_ >= text_.size()) {
          fail("']' to close the character class");
          return seq;
        }
        ++pos_;
        ranges = normalize(std::move(ranges), negate);
        if (ranges.empty()) {
          fail_plain("the character class before " + where() + " matches no character");
          return seq;
        }
        atom_start = seq.size();
        seq.push_back(Elem{Element::kChars, -1, std::move(ranges)});
        have_atom = true;
      } else if (c == '.') {
        ++pos_;
        atom_start = seq.size();
        seq.push_back(Elem{Element::kChars, -1, {{0, kMaxCodePoint}}});
        have_atom = true;
      } else if (name_char(c)) {
        const size_t at = pos_;
        const std::string name = parse_name();
        atom_start = seq.size();
        seq.push_back(Elem{Element::kRule, rule_id(name, at), {}});
        have_atom = true;
      } else if (c == '(') {
        if (++nesting_ > kMaxGroupNesting) {
          fail_plain("groups nest deeper than " + std::to_string(kMaxGroupNesting) + " levels " + where());
          return seq;
        }
        ++pos_;
        skip_space(true);
        Alternatives inner = parse_alternatives(rule, true);
        if (!error_.empty()) return seq;
        if (pos_ >= text_.size() || text_[pos_] != ')') {
          fail("')' to close the group");
          return seq;
        }
        ++pos_;
        --nesting_;
        atom_start = seq.size();
        seq.push_back(Elem{Element::kRule, new_rule(rule, std::move(inner)), {}});
        have_atom = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_atom) {
          fail("something to repeat before '" + std::string(1, c) + "'");
          return seq;
        }
        int32_t lo = 0, hi = -1;
        if (!parse_repetition(lo, hi)) return seq;
        repeat(rule, seq, atom_start, lo, hi);
        have_atom = false;  // "x**" is an error, as in llama.cpp
      } else {
        fail("an element (\"literal\", [class], ., a rule name or a group)");
        return seq;
      }
      if (!count_elements(1)) return seq;
      skip_space(nested);
    }
    return seq;
  }

  bool parse_repetition(int32_t& lo, int32_t& hi) {
    const char c = text_[pos_++];
    if (c == '*') { lo = 0; hi = -1; return true; }
    if (c == '+') { lo = 1; hi = -1; return true; }
    if (c == '?') { lo = 0; hi = 1; return true; }
    auto number = [&](int32_t& out) {
      const size_t start = pos_;
      int64_t v = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        v = std::min<int64_t>(v * 10 + (text_[pos_++] - '0'), int64_t(1) << 40);
      }
      if (pos_ == start) return false;
      if (v > kMaxRepetition) {
        fail_plain("the repetition count " + std::to_string(v) + " " + where() + " is over " + std::to_string(kMaxRepetition));
        return false;
      }
      out = static_cast<int32_t>(v);
      return true;
    };
    skip_space(false);
    const bool has_lo = number(lo);
    if (!error_.empty()) return false;
    if (!has_lo) lo = 0;
    skip_space(false);
    if (pos_ < text_.size() && text_[pos_] == '}') {
      if (!has_lo) return fail("a count in '{}'").message.empty();
      ++pos_;
      hi = lo;
      return true;
    }
    if (pos_ >= text_.size() || text_[pos_] != ',') return fail("',' or '}' in a repetition").message.empty();
    ++pos_;
    skip_space(false);
    if (!number(hi)) {
      if (!error_.empty()) return false;
      hi = -1;
    }
    skip_space(false);
    if (pos_ >= text_.size() || text_[pos_] != '}') return fail("'}' to close the repetition").message.empty();
    ++pos_;
    if (hi >= 0 && hi < lo) return fail_plain("the repetition before " + where() + " has max < min").message.empty();
    if (!has_lo && hi < 0) return fail_plain("the repetition '{,}' before " + where() + " has no count; write '*'").message.empty();
    return true;
  }

  // Replaces seq[atom_start..] (one atom) with lo copies and the optional rest (hi - lo more, or
  // unbounded when hi < 0), as rules that the matcher walks without growing its stacks.
  void repeat(const std::string& rule, Sequence& seq, size_t atom_start, int32_t lo, int32_t hi) {
    Sequence atom(seq.begin() + ptrdiff_t(atom_start), seq.end());
    seq.resize(atom_start);
    Elem unit = atom.size() == 1 ? atom[0] : Elem{Element::kRule, new_rule(rule, {atom}), {}};
    if (!count_elements(size_t(lo) + size_t(std::max(hi - lo, 1)) * 2)) return;
    for (int32_t i = 0; i < lo; ++i) seq.push_back(unit);
    if (hi < 0) {
      // r ::= unit r | ε   (right recursion in tail position: the stack stays flat)
      const int32_t r = new_rule(rule, {});
      rules_[size_t(r)] = Alternatives{Sequence{unit, Elem{Element::kRule, r, {}}}, Sequence{}};
      seq.push_back(Elem{Element::kRule, r, {}});
    } else if (hi > lo) {
      // r1 ::= unit | ε ; rk ::= unit r(k-1) | ε
      int32_t prev = -1;
      for (int32_t k = 0; k < hi - lo; ++k) {
        Sequence with{unit};
        if (prev >= 0) with.push_back(Elem{Element::kRule, prev, {}});
        prev = new_rule(rule, Alternatives{with, Sequence{}});
      }
      seq.push_back(Elem{Element::kRule, prev, {}});
    }
  }

  // --- checks and layout ---------------------------------------------------------------------
  Result<Grammar> finish() {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (!defined_[i]) {
        pos_ = refs_at_[i];
        return fail_plain("rule '" + names_[i] + "' is used " + where() + " but never defined");
      }
    }
    auto root = ids_.find("root");
    if (root == ids_.end()) return fail_plain("no rule named 'root': the grammar starts at `root ::= ...`");
    ONEBIT_TRY(check_left_recursion());
    Grammar g;
    g.root = root->second;
    g.rules.resize(names_.size());
    for (size_t r = 0; r < names_.size(); ++r) {
      g.rules[r].name = names_[r];
      for (const Sequence& alt : rules_[r]) {
        g.rules[r].alternatives.push_back(static_cast<int32_t>(g.elements.size()));
        for (const Elem& e : alt) g.elements.push_back(Element{e.kind, e.rule, e.ranges});
        g.elements.push_back(Element{Element::kEnd, -1, {}});
      }
    }
    return g;
  }

  // The matcher expands rules leftmost first; a rule that can reach itself without consuming a
  // character would expand forever, so it is refused here.
  Status check_left_recursion() {
    const size_t n = names_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Sequence& alt : rules_[r]) {
          bool all = true;
          for (const Elem& e : alt) all = all && e.kind == Element::kRule && nullable[size_t(e.rule)];
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<int32_t>> left(n);  // rules that can start rule r
    for (size_t r = 0; r < n; ++r) {
      for (const Sequence& alt : rules_[r]) {
        for (const Elem& e : alt) {
          if (e.kind != Element::kRule) break;
          left[r].push_back(e.rule);
          if (!nullable[size_t(e.rule)]) break;
        }
      }
    }
    // Depth-first search for a cycle, with an explicit stack (a request's grammar may chain
    // thousands of rules).
    std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<int32_t, size_t>> stack;  // rule, next edge
    for (size_t start = 0; start < n; ++start) {
      if (color[start] != 0) continue;
      stack.emplace_back(static_cast<int32_t>(start), 0);
      color[start] = 1;
      while (!stack.empty()) {
        auto& [r, next] = stack.back();
        if (next == left[size_t(r)].size()) {
          color[size_t(r)] = 2;
          stack.pop_back();
          continue;
        }
        const int32_t s2 = left[size_t(r)][next++];
        if (color[size_t(s2)] == 1) {
          std::string cycle;
          size_t from = 0;
          while (stack[from].first != s2) ++from;
          for (size_t i = from; i < stack.size(); ++i) cycle += names_[size_t(stack[i].first)] + " -> ";
          cycle += names_[size_t(s2)];
          return make_error("grammar: left recursion (" + cycle +
                            ") can expand forever without matching a character; rewrite it with repetition "
                            "(e.g. `list ::= item (\",\" item)*`)");
        }
        if (color[size_t(s2)] == 0) {
          color[size_t(s2)] = 1;
          stack.emplace_back(s2, 0);
        }
      }
    }
    return ok_status();
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
  std::map<std::string, int32_t> ids_;
  std::vector<std::string> names_;
  std::vector<Alternatives> rules_;
  std::vector<bool> defined_;
  std::vector<size_t> refs_at_;  // where each rule name first appeared
  int32_t generated_ = 0;
  size_t n_elements_ = 0;
  int nesting_ = 0;
};

void append_char(uint32_t cp, bool in_class, std::string& out) {
  switch (cp) {
    case '\n': out += "\\n"; return;
    case '\r': out += "\\r"; return;
    case '\t': out += "\\t"; return;
    case '\\': out += "\\\\"; return;
    case '"': out += in_class ? "\"" : "\\\""; return;
    default: break;
  }
  if (in_class && (cp == ']' || cp == '-' || cp == '^' || cp == '[')) {
    out += '\\';
    out += char(cp);
  } else if (cp < 0x20 || cp == 0x7F || (cp >= 0xD800 && cp <= 0xDFFF)) {
    static const char* kHex = "0123456789ABCDEF";
    out += "\\x";
    out += kHex[(cp >> 4) & 15];
    out += kHex[cp & 15];
  } else {
    utf8_append(cp, out);
  }
}

}  // namespace

CodeRanges normalize_ranges(CodeRanges r, bool negate) {
  std::sort(r.begin(), r.end());
  CodeRanges merged;
  for (const auto& x : r) {
    if (!merged.empty() && x.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, x.second);
    } else {
      merged.push_back(x);
    }
  }
  if (!negate) return merged;
  CodeRanges out;
  uint32_t next = 0;
  for (const auto& [a, b] : merged) {
    if (a > next) out.emplace_back(next, a - 1);
    next = b + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

Result<Grammar> parse_gbnf(std::string_view text) { return Parser(text).run(); }

std::string to_gbnf(const Grammar& g) {
  std::string out;
  for (const Rule& rule : g.rules) {
    out += rule.name + " ::=";
    for (size_t a = 0; a < rule.alternatives.size(); ++a) {
      if (a > 0) out += " |";
      for (size_t i = size_t(rule.alternatives[a]); g.elements[i].kind != Element::kEnd; ++i) {
        const Element& e = g.elements[i];
        out += ' ';
        if (e.kind == Element::kRule) {
          out += g.rules[size_t(e.rule)].name;
        } else if (e.ranges.size() == 1 && e.ranges[0].first == e.ranges[0].second) {
          out += '"';
          append_char(e.ranges[0].first, false, out);
          out += '"';
        } else {
          out += '[';
          for (const auto& [lo, hi] : e.ranges) {
            append_char(lo, true, out);
            if (hi != lo) {
              out += '-';
              append_char(hi, true, out);
            }
          }
          out += ']';
        }
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace onebit::grammar
