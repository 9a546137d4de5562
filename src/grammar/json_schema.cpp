// JSON Schema -> GBNF. Our own converter; llama.cpp's json-schema-to-grammar (c392e50) and
// OpenAI's structured-output notes were read for the keyword set and the whitespace rule.
#include "grammar/json_schema.h"

#include <map>
#include <set>
#include <vector>

#include "base/utf8.h"
#include "grammar/grammar.h"

namespace onebit::grammar {

using Json = nlohmann::ordered_json;

std::string gbnf_literal(const std::string& bytes) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out = "\"";
  for (unsigned char c : bytes) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += char(c);
        }
    }
  }
  return out + "\"";
}

namespace {

using Ranges = CodeRanges;

// Shared rules, added when first used.
const std::map<std::string, std::string>& primitives() {
  static const std::map<std::string, std::string> p = {
      {"ws", R"(| " " | "\n" [ \t]{0,20})"},
      {"boolean", R"("true" | "false")"},
      {"null", R"("null")"},
      {"int-digits", R"("0" | [1-9] [0-9]{0,15})"},
      {"integer", R"("-"? int-digits)"},
      {"number", R"("-"? int-digits ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?)"},
      {"hex", R"([0-9a-fA-F])"},
      {"char", R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] hex{3} | [dD] [0-7] hex{2})))"},
      {"string", R"("\"" char* "\"")"},
      {"value", R"(object | array | string | number | boolean | null)"},
      {"object", R"("{" ws (string ws ":" ws value ws ("," ws string ws ":" ws value ws)*)? "}")"},
      {"array", R"("[" ws (value ws ("," ws value ws)*)? "]")"},
      {"date", R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | "1" [0-9] | "2" [0-8]))"},
      {"time", R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
      {"date-time", R"(date "T" time)"},
      {"uuid", R"(hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12})"},
  };
  return p;
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> a = {"title",    "description", "default",  "examples", "$schema",
                                          "$id",      "$comment",    "deprecated", "readOnly", "writeOnly",
                                          "$defs",    "definitions"};
  return a;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> s = {"type",      "enum",       "const",      "anyOf",     "allOf",
                                          "$ref",      "properties", "required",   "additionalProperties",
                                          "items",     "prefixItems", "minItems",  "maxItems",  "minLength",
                                          "maxLength", "pattern",    "format",     "nullable"};
  return s;
}

const char* kSupportedList =
    "type, enum, const, anyOf, allOf (one schema), $ref ($defs/definitions), properties, required, "
    "additionalProperties, items, prefixItems, minItems, maxItems, minLength, maxLength, pattern, "
    "format (date, time, date-time, uuid), nullable";

std::string json_type_of(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

bool value_has_type(const Json& v, const std::string& type) {
  const std::string t = json_type_of(v);
  if (type == "number") return t == "integer" || t == "number";
  if (type == "integer" && t == "number") {
    const double d = v.get<double>();
    return d == double(int64_t(d));
  }
  return t == type;
}

// The JSON text of a string character class (code points of the decoded string): raw characters
// where JSON allows them, escapes for '"', '\' and control characters.
std::string json_char_class(Ranges ranges, bool negate) {
  const Ranges merged = normalize_ranges(std::move(ranges), negate);
  auto in = [&](uint32_t cp) {
    for (const auto& [a, b] : merged) {
      if (cp >= a && cp <= b) return true;
    }
    return false;
  };
  // Raw part: the set without controls, '"' and '\'.
  Ranges raw;
  for (auto [a, b] : merged) {
    a = std::max<uint32_t>(a, 0x20);
    if (a > b) continue;
    for (uint32_t special : {uint32_t('"'), uint32_t('\\')}) {
      if (special >= a && special <= b) {
        if (special > a) raw.emplace_back(a, special - 1);
        a = special + 1;
      }
    }
    if (a <= b) raw.emplace_back(a, b);
  }
  std::vector<std::string> alts;
  if (!raw.empty()) {
    std::string cls = "[";
    for (const auto& [a, b] : raw) {
      auto put = [&](uint32_t cp) {
        if (cp == ']' || cp == '[' || cp == '-' || cp == '^' || cp == '\\') {
          cls += '\\';
          cls += char(cp);
        } else if (cp >= 0xD800 && cp <= 0xDFFF) {
          cls += cp == 0xD800 ? "\\uD7FF" : "\\uE000";  // never produced: clamp out of the gap
        } else {
          utf8_append(cp, cls);
        }
      };
      if (a >= 0xD800 && b <= 0xDFFF) continue;
      put(a);
      if (b != a) {
        cls += '-';
        put(b);
      }
    }
    cls += "]";
    if (cls != "[]") alts.push_back(cls);
  }
  if (in('"')) alts.push_back(R"("\\\"")");
  if (in('\\')) alts.push_back(R"("\\\\")");
  static const char* kHex = "0123456789abcdef";
  for (uint32_t c = 0; c < 0x20; ++c) {
    if (!in(c)) continue;
    switch (c) {
      case '\n': alts.push_back(R"("\\n")"); break;
      case '\t': alts.push_back(R"("\\t")"); break;
      case '\r': alts.push_back(R"("\\r")"); break;
      default: alts.push_back(std::string(R"("\\u00)") + kHex[c >> 4] + kHex[c & 15] + "\"");
    }
  }
  if (alts.empty()) return "";
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// A regular expression (JSON Schema `pattern`, ECMA-262 / Python subset) as the GBNF of the JSON
// string content that matches it whole. A pattern matches anywhere, so matching it whole is a
// subset: every output validates.
class RegexToGbnf {
 public:
  explicit RegexToGbnf(const std::string& re) : re_(re) {}

  Result<std::string> run() {
    if (!re_.empty() && re_[0] == '^') pos_ = 1;
    std::string expr = alternation();
    if (!error_.empty()) return make_error(error_);
    if (pos_ < re_.size()) return fail("an unmatched ')' at offset " + std::to_string(pos_));
    return expr.empty() ? std::string("\"\"") : expr;
  }

 private:
  Error fail(const std::string& what) {
    if (error_.empty()) error_ = "pattern '" + re_ + "': " + what;
    return make_error(error_);
  }
  bool at_end_anchor() const { return pos_ + 1 == re_.size() && re_[pos_] == '$'; }

  std::string alternation() {
    std::vector<std::string> alts{sequence()};
    while (error_.empty() && pos_ < re_.size() && re_[pos_] == '|') {
      ++pos_;
      alts.push_back(sequence());
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + (alts[i].empty() ? std::string("\"\"") : alts[i]);
    return out + ")";
  }

  std::string sequence() {
    std::string out;
    while (error_.empty() && pos_ < re_.size() && re_[pos_] != '|' && re_[pos_] != ')') {
      if (at_end_anchor()) {
        ++pos_;
        break;
      }
      std::string a = atom();
      if (!error_.empty()) return out;
      a += quantifier();
      out += (out.empty() ? "" : " ") + a;
    }
    return out;
  }

  std::string quantifier() {
    if (pos_ >= re_.size()) return "";
    std::string q;
    const char c = re_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      const size_t close = re_.find('}', pos_);
      if (close == std::string::npos) {
        fail("'{' without '}'");
        return "";
      }
      const std::string body = re_.substr(pos_ + 1, close - pos_ - 1);
      for (char d : body) {
        if (!std::isdigit(static_cast<unsigned char>(d)) && d != ',') {
          fail("the repetition '{" + body + "}' is not {m}, {m,} or {m,n}");
          return "";
        }
      }
      q = "{" + body + "}";
      pos_ = close + 1;
    } else {
      return "";
    }
    if (pos_ < re_.size() && re_[pos_] == '?') ++pos_;  // lazy: the same language
    if (pos_ < re_.size() && re_[pos_] == '+') fail("possessive quantifiers are not supported");
    return q;
  }

  std::string atom() {
    const char c = re_[pos_];
    if (c == '(') {
      ++pos_;
      if (re_.compare(pos_, 2, "?:") == 0) {
        pos_ += 2;
      } else if (re_.compare(pos_, 3, "?P<") == 0 || (re_.compare(pos_, 2, "?<") == 0 && re_.compare(pos_, 3, "?<=") != 0 &&
                                                      re_.compare(pos_, 3, "?<!") != 0)) {
        const size_t close = re_.find('>', pos_);
        if (close == std::string::npos) {
          fail("a named group without '>'");
          return "";
        }
        pos_ = close + 1;
      } else if (pos_ < re_.size() && re_[pos_] == '?') {
        fail("'(?" + re_.substr(pos_ + 1, 1) + "' (lookaround, flags) is not supported");
        return "";
      }
      std::string inner = alternation();
      if (pos_ >= re_.size() || re_[pos_] != ')') {
        fail("'(' without ')'");
        return "";
      }
      ++pos_;
      return "(" + (inner.empty() ? std::string("\"\"") : inner) + ")";
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return json_char_class({{'\n', '\n'}}, true);
    }
    if (c == '^' || c == '$') {
      fail("anchors are supported only at the start (^) and the end ($)");
      return "";
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      fail("nothing to repeat at offset " + std::to_string(pos_));
      return "";
    }
    Ranges r;
    if (!escape_or_char(r, false)) return "";
    return json_char_class(r, false);
  }

  // One character or escape into `r` (a class escape like \d may set several ranges).
  bool escape_or_char(Ranges& r, bool in_class) {
    if (re_[pos_] != '\\') {
      const Utf8Char u = utf8_decode(re_, pos_);
      if (u.status != Utf8Status::kValid) return fail("ill-formed UTF-8").message.empty();
      pos_ += u.n_bytes;
      r.emplace_back(u.cp, u.cp);
      return true;
    }
    if (pos_ + 1 >= re_.size()) return fail("a '\\' at the end").message.empty();
    const char e = re_[pos_ + 1];
    pos_ += 2;
    // The negated class escapes keep to ASCII: a Unicode digit, word or space character outside
    // ASCII would match \d, \w or \s in Python's re, so it must not come out of \D, \W or \S.
    static const Ranges kDigit = {{'0', '9'}};
    static const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};
    static const Ranges kNotDigit = {{0x20, '0' - 1}, {'9' + 1, 0x7E}};
    static const Ranges kNotWord = {{0x20, '0' - 1}, {'9' + 1, 'A' - 1}, {'Z' + 1, '_' - 1}, {'`', '`'}, {'{', 0x7E}};
    static const Ranges kNotSpace = {{0x21, 0x7E}};
    switch (e) {
      case 'd': r.insert(r.end(), kDigit.begin(), kDigit.end()); return true;
      case 'w': r.insert(r.end(), kWord.begin(), kWord.end()); return true;
      case 's': r.insert(r.end(), kSpace.begin(), kSpace.end()); return true;
      case 'D': r.insert(r.end(), kNotDigit.begin(), kNotDigit.end()); return true;
      case 'W': r.insert(r.end(), kNotWord.begin(), kNotWord.end()); return true;
      case 'S': r.insert(r.end(), kNotSpace.begin(), kNotSpace.end()); return true;
      case 'n': r.emplace_back('\n', '\n'); return true;
      case 't': r.emplace_back('\t', '\t'); return true;
      case 'r': r.emplace_back('\r', '\r'); return true;
      case 'f': r.emplace_back('\f', '\f'); return true;
      case 'v': r.emplace_back('\v', '\v'); return true;
      case '0': r.emplace_back(0, 0); return true;
      case 'x':
      case 'u': {
        const size_t n = e == 'x' ? 2 : 4;
        if (pos_ + n > re_.size()) return fail("a short \\" + std::string(1, e) + " escape").message.empty();
        uint32_t cp = 0;
        for (size_t i = 0; i < n; ++i) {
          const char h = re_[pos_ + i];
          if (!std::isxdigit(static_cast<unsigned char>(h))) return fail("a bad hex escape").message.empty();
          cp = cp * 16 + uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        pos_ += n;
        r.emplace_back(cp, cp);
        return true;
      }
      case 'b':
        if (in_class) {
          r.emplace_back('\b', '\b');
          return true;
        }
        [[fallthrough]];
      case 'B': case 'A': case 'Z': case 'z': case 'G':
        return fail("the assertion \\" + std::string(1, e) + " is not supported").message.empty();
      default:
        if (std::isdigit(static_cast<unsigned char>(e))) return fail("back-references are not supported").message.empty();
        if (std::isalpha(static_cast<unsigned char>(e))) return fail("the escape \\" + std::string(1, e) + " is not supported").message.empty();
        r.emplace_back(uint32_t(uint8_t(e)), uint32_t(uint8_t(e)));
        return true;
    }
  }

  std::string char_class() {
    ++pos_;  // '['
    bool negate = false;
    if (pos_ < re_.size() && re_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    Ranges r;
    bool first = true;
    while (error_.empty() && pos_ < re_.size() && (re_[pos_] != ']' || first)) {
      first = false;
      Ranges one;
      if (!escape_or_char(one, true)) return "";
      if (one.size() == 1 && one[0].first == one[0].second && pos_ + 1 < re_.size() && re_[pos_] == '-' &&
          re_[pos_ + 1] != ']') {
        ++pos_;
        Ranges hi;
        if (!escape_or_char(hi, true)) return "";
        if (hi.size() != 1 || hi[0].first < one[0].first) {
          fail("a bad range in a character class");
          return "";
        }
        r.emplace_back(one[0].first, hi[0].first);
      } else {
        r.insert(r.end(), one.begin(), one.end());
      }
    }
    if (pos_ >= re_.size()) {
      fail("'[' without ']'");
      return "";
    }
    ++pos_;
    std::string cls = json_char_class(r, negate);
    if (cls.empty()) fail("a character class that matches nothing");
    return cls;
  }

  std::string re_;
  size_t pos_ = 0;
  std::string error_;
};

class Converter {
 public:
  Converter(const Json& root, std::string prefix) : root_(root), prefix_(std::move(prefix)) {}

  Result<std::string> run() {
    ONEBIT_ASSIGN_OR_RETURN(std::string expr, visit(root_, ""));
    add(prefix_ + "root", expr);
    std::string out;
    // The root first, then the rest in the order made.
    out += prefix_ + "root ::= " + bodies_.at(prefix_ + "root") + "\n";
    for (const std::string& name : order_) {
      if (name != prefix_ + "root") out += name + " ::= " + bodies_.at(name) + "\n";
    }
    return out;
  }

 private:
  // A shared primitive rule (and those it uses), named with the prefix.
  std::string prim(const std::string& name) {
    const std::string full = prefix_ + name;
    if (bodies_.count(full)) return full;
    std::string body = primitives().at(name);
    // Rename the primitives it refers to (words outside literals and classes).
    std::string out;
    std::vector<std::string> used;
    size_t i = 0;
    while (i < body.size()) {
      if (body[i] == '"' || body[i] == '[') {
        const char close = body[i] == '"' ? '"' : ']';
        size_t j = i + 1;
        while (j < body.size() && body[j] != close) j += body[j] == '\\' ? 2 : 1;
        out += body.substr(i, j + 1 - i);
        i = j + 1;
      } else if (std::isalpha(static_cast<unsigned char>(body[i]))) {
        size_t j = i;
        while (j < body.size() && (std::isalnum(static_cast<unsigned char>(body[j])) || body[j] == '-')) ++j;
        const std::string word = body.substr(i, j - i);
        if (primitives().count(word)) used.push_back(word);
        out += primitives().count(word) ? prefix_ + word : word;
        i = j;
      } else {
        out += body[i++];
      }
    }
    add(full, out);
    for (const std::string& p : used) prim(p);
    return full;
  }

  void add(const std::string& name, const std::string& body) {
    if (!bodies_.count(name)) order_.push_back(name);
    bodies_[name] = body;
  }

  // A new rule named after `hint` holding `body`; identical bodies share one rule.
  std::string rule(const std::string& hint, const std::string& body) {
    if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
    std::string base;
    for (char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(c)) : '-';
    if (base.empty()) base = "v";
    std::string name = prefix_ + base;
    for (int i = 2; bodies_.count(name) || primitives().count(name.substr(prefix_.size())); ++i) {
      name = prefix_ + base + "-" + std::to_string(i);
    }
    add(name, body);
    by_body_[body] = name;
    return name;
  }

  Error fail(const std::string& path, const std::string& what) {
    return make_error("at " + (path.empty() ? std::string("the schema's root") : "'" + path + "'") + ": " + what);
  }

  Result<std::string> literal_of(const Json& v) { return gbnf_literal(v.dump(-1, ' ', false)); }

  Result<std::string> visit(const Json& s, const std::string& path) {
    if (++depth_ > 256) return fail(path, "the schema nests deeper than 256 levels");
    struct Depth {
      int& d;
      ~Depth() { --d; }
    } guard{depth_};
    if (s.is_boolean()) {
      if (s.get<bool>()) return prim("value");
      return fail(path, "the schema `false` accepts no value");
    }
    if (!s.is_object()) return fail(path, "a schema must be an object or a boolean, not " + json_type_of(s));
    for (const auto& [key, unused] : s.items()) {
      if (!supported().count(key) && !annotations().count(key)) {
        if (key == "oneOf") {
          return fail(path, "'oneOf' is not supported (a grammar cannot exclude values that match two of its schemas); "
                            "use 'anyOf'");
        }
        return fail(path, "the keyword '" + key + "' is not supported; supported: " + kSupportedList +
                              " (and the annotations title, description, default, examples)");
      }
    }
    std::string expr;
    if (s.contains("$ref")) {
      for (const auto& [key, unused] : s.items()) {
        if (key != "$ref" && supported().count(key)) {
          return fail(path, "'$ref' beside '" + key + "' is not supported; put the constraint in the referenced schema");
        }
      }
      ONEBIT_ASSIGN_OR_RETURN(expr, ref(s["$ref"], path));
    } else if (s.contains("const") || s.contains("enum")) {
      ONEBIT_ASSIGN_OR_RETURN(expr, enumeration(s, path));
    } else if (s.contains("anyOf")) {
      const Json& any = s["anyOf"];
      if (!any.is_array() || any.empty()) return fail(path + "/anyOf", "'anyOf' must be a non-empty array of schemas");
      for (const auto& [key, unused] : s.items()) {
        if (key != "anyOf" && key != "nullable" && supported().count(key)) {
          return fail(path, "'anyOf' beside '" + key + "' is not supported; move '" + key + "' into each branch");
        }
      }
      std::string alts;
      for (size_t i = 0; i < any.size(); ++i) {
        ONEBIT_ASSIGN_OR_RETURN(std::string a, visit(any[i], path + "/anyOf/" + std::to_string(i)));
        alts += (i ? " | " : "") + a;
      }
      expr = any.size() == 1 ? alts : rule(hint(path, "anyof"), alts);
    } else if (s.contains("allOf")) {
      const Json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        return fail(path + "/allOf", "'allOf' is supported with exactly one schema; merge the schemas into one");
      }
      for (const auto& [key, unused] : s.items()) {
        if (key != "allOf" && key != "nullable" && supported().count(key)) {
          return fail(path, "'allOf' beside '" + key + "' is not supported; move '" + key + "' into its schema");
        }
      }
      ONEBIT_ASSIGN_OR_RETURN(expr, visit(all[0], path + "/allOf/0"));
    } else {
      ONEBIT_ASSIGN_OR_RETURN(expr, typed(s, path));
    }
    // OpenAPI's `nullable: true` also allows null, but JSON Schema validators ignore the keyword:
    // only the non-null values satisfy both readings, so null is not generated.
    if (s.contains("nullable") && !s["nullable"].is_boolean()) return fail(path + "/nullable", "'nullable' must be true or false");
    return expr;
  }

  static std::string hint(const std::string& path, const std::string& fallback) {
    const size_t slash = path.rfind('/');
    const std::string last = slash == std::string::npos ? path : path.substr(slash + 1);
    if (last.empty() || std::isdigit(static_cast<unsigned char>(last[0]))) return fallback;
    return last;
  }

  Result<std::string> ref(const Json& r, const std::string& path) {
    if (!r.is_string()) return fail(path + "/$ref", "'$ref' must be a string");
    const std::string target = r.get<std::string>();
    if (target.empty() || target[0] != '#') {
      return fail(path + "/$ref", "'$ref' '" + target + "' is not a local reference; use '#/$defs/Name'");
    }
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const std::string pointer = target.substr(1);
    const Json* node = &root_;
    if (!pointer.empty()) {
      try {
        node = &root_.at(Json::json_pointer(pointer));
      } catch (const std::exception&) {
        return fail(path + "/$ref", "'$ref' '" + target + "' points at nothing in the schema");
      }
    }
    // A rule name before the visit, so that recursive schemas refer to themselves.
    std::string name = rule("ref-" + hint(pointer, "root"), "\x01" + target);  // placeholder body
    refs_[target] = name;
    ONEBIT_ASSIGN_OR_RETURN(std::string expr, visit(*node, pointer));
    by_body_.erase("\x01" + target);
    bodies_[name] = expr;
    return name;
  }

  Result<std::string> enumeration(const Json& s, const std::string& path) {
    std::vector<Json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) return fail(path + "/enum", "'enum' must be a non-empty array");
      if (s.contains("const")) return fail(path, "'const' beside 'enum': keep one");
      for (const Json& v : s["enum"]) values.push_back(v);
    }
    if (s.contains("type")) {
      std::vector<std::string> types;
      if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
      if (s["type"].is_array()) {
        for (const Json& t : s["type"]) {
          if (t.is_string()) types.push_back(t.get<std::string>());
        }
      }
      std::vector<Json> kept;
      for (const Json& v : values) {
        for (const std::string& t : types) {
          if (value_has_type(v, t)) {
            kept.push_back(v);
            break;
          }
        }
      }
      if (kept.empty()) return fail(path, "no value of 'enum'/'const' has the schema's 'type'");
      values = kept;
    }
    for (const auto& [key, unused] : s.items()) {
      if (key != "const" && key != "enum" && key != "type" && key != "nullable" && supported().count(key)) {
        return fail(path, "'" + key + "' beside 'enum'/'const' is not supported; list only the allowed values");
      }
    }
    std::string alts;
    for (size_t i = 0; i < values.size(); ++i) {
      ONEBIT_ASSIGN_OR_RETURN(std::string lit, literal_of(values[i]));
      alts += (i ? " | " : "") + lit;
    }
    return values.size() == 1 ? alts : rule(hint(path, "enum"), alts);
  }

  Result<std::string> typed(const Json& s, const std::string& path) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& x : t) {
          if (!x.is_string()) return fail(path + "/type", "'type' entries must be strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return fail(path + "/type", "'type' must be a string or a non-empty array of strings");
      }
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return prim("value");
    }
    std::string alts;
    for (size_t i = 0; i < types.size(); ++i) {
      std::string e;
      const std::string& t = types[i];
      if (t == "string") {
        ONEBIT_ASSIGN_OR_RETURN(e, string_schema(s, path));
      } else if (t == "integer" || t == "number" || t == "boolean" || t == "null") {
        e = prim(t);
      } else if (t == "object") {
        ONEBIT_ASSIGN_OR_RETURN(e, object_schema(s, path));
      } else if (t == "array") {
        ONEBIT_ASSIGN_OR_RETURN(e, array_schema(s, path));
      } else {
        return fail(path + "/type", "'" + t + "' is not a JSON Schema type (string, number, integer, boolean, null, object, array)");
      }
      alts += (i ? " | " : "") + e;
    }
    return types.size() == 1 ? alts : rule(hint(path, "value"), alts);
  }

  Result<int64_t> count(const Json& s, const char* key, const std::string& path, int64_t fallback) {
    if (!s.contains(key)) return fallback;
    const Json& v = s[key];
    if (!v.is_number_integer() && !v.is_number_unsigned()) return fail(path + "/" + key, std::string("'") + key + "' must be a non-negative integer");
    const int64_t n = v.get<int64_t>();
    if (n < 0 || n > kMaxRepetition) {
      return fail(path + "/" + key, std::string("'") + key + "' is " + std::to_string(n) + "; supported: 0 to " + std::to_string(kMaxRepetition));
    }
    return n;
  }

  static std::string repetition(int64_t lo, int64_t hi) {  // hi < 0: unbounded
    if (hi < 0) return lo == 0 ? "*" : lo == 1 ? "+" : "{" + std::to_string(lo) + ",}";
    if (lo == hi) return "{" + std::to_string(lo) + "}";
    return "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
  }

  Result<std::string> string_schema(const Json& s, const std::string& path) {
    ONEBIT_ASSIGN_OR_RETURN(int64_t lo, count(s, "minLength", path, 0));
    ONEBIT_ASSIGN_OR_RETURN(int64_t hi, count(s, "maxLength", path, -1));
    if (hi >= 0 && hi < lo) return fail(path, "'maxLength' is below 'minLength'");
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format")) {
      if (s.contains("pattern") || lengths) return fail(path, "'format' beside 'pattern' or a length is not supported; keep one");
      const Json& f = s["format"];
      const std::string name = f.is_string() ? f.get<std::string>() : "";
      if (name != "date" && name != "time" && name != "date-time" && name != "uuid") {
        return fail(path + "/format", "the format '" + name + "' is not supported; supported: date, time, date-time, uuid");
      }
      return rule(hint(path, name), "\"\\\"\" " + prim(name) + " \"\\\"\"");
    }
    if (s.contains("pattern")) {
      if (lengths) return fail(path, "'pattern' beside 'minLength'/'maxLength' is not supported; put the length in the pattern");
      if (!s["pattern"].is_string()) return fail(path + "/pattern", "'pattern' must be a string");
      auto body = RegexToGbnf(s["pattern"].get<std::string>()).run();
      if (!body.ok()) return fail(path + "/pattern", body.message());
      return rule(hint(path, "pattern"), "\"\\\"\" " + *body + " \"\\\"\"");
    }
    if (!lengths) return prim("string");
    return rule(hint(path, "string"), "\"\\\"\" " + prim("char") + repetition(lo, hi) + " \"\\\"\"");
  }

  Result<std::string> object_schema(const Json& s, const std::string& path) {
    const std::string ws = prim("ws");
    Json props = Json::object();
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return fail(path + "/properties", "'properties' must be an object");
      props = s["properties"];
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return fail(path + "/required", "'required' must be an array of names");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) return fail(path + "/required", "'required' must be an array of names");
        required.insert(r.get<std::string>());
      }
    }
    const Json additional = s.contains("additionalProperties") ? s["additionalProperties"] : Json(true);
    if (!additional.is_boolean() && !additional.is_object()) {
      return fail(path + "/additionalProperties", "'additionalProperties' must be a boolean or a schema");
    }
    // Required names without a property schema take the additionalProperties schema.
    for (const std::string& r : required) {
      if (props.contains(r)) continue;
      if (additional.is_boolean() && !additional.get<bool>()) {
        return fail(path + "/required", "'" + r + "' is required but not in 'properties' and additionalProperties is false");
      }
      props[r] = additional;
    }
    if (props.empty()) {
      if (additional.is_boolean()) return additional.get<bool>() ? prim("object") : rule("empty-object", "\"{\" " + ws + " \"}\"");
      ONEBIT_ASSIGN_OR_RETURN(std::string v, visit(additional, path + "/additionalProperties"));
      const std::string kv = prim("string") + " " + ws + " \":\" " + ws + " " + v + " " + ws;
      return rule(hint(path, "map"), "\"{\" " + ws + " (" + kv + " (\",\" " + ws + " " + kv + ")*)? \"}\"");
    }
    // Properties in schema order, optional ones skippable: rest(i, comma) is the text of
    // properties i.. given whether one came before (then a comma leads).
    std::vector<std::string> kvs;
    std::vector<bool> req;
    for (const auto& [name, schema] : props.items()) {
      ONEBIT_ASSIGN_OR_RETURN(std::string v, visit(schema, path + "/properties/" + name));
      kvs.push_back(gbnf_literal(Json(name).dump(-1, ' ', false)) + " " + ws + " \":\" " + ws + " " + v + " " + ws);
      req.push_back(required.count(name) > 0);
    }
    const std::string base = hint(path, "object");
    std::vector<std::string> rest_comma(kvs.size() + 1), rest_first(kvs.size() + 1);
    for (size_t i = kvs.size(); i-- > 0;) {
      auto next = [&](bool comma) { return comma ? rest_comma[i + 1] : rest_first[i + 1]; };
      for (bool comma : {true, false}) {
        std::string present = (comma ? "\",\" " + ws + " " : std::string()) + kvs[i];
        if (!next(true).empty()) present += " " + next(true);
        std::string body = present;
        if (!req[i]) body = "(" + present + ")" + (next(comma).empty() ? "?" : " | " + next(comma));
        std::string& slot = comma ? rest_comma[i] : rest_first[i];
        slot = rule(base + "-" + std::to_string(i) + (comma ? "-c" : ""), body);
      }
    }
    return rule(base, "\"{\" " + ws + " " + rest_first[0] + " \"}\"");
  }

  Result<std::string> array_schema(const Json& s, const std::string& path) {
    const std::string ws = prim("ws");
    ONEBIT_ASSIGN_OR_RETURN(int64_t lo, count(s, "minItems", path, 0));
    ONEBIT_ASSIGN_OR_RETURN(int64_t hi, count(s, "maxItems", path, -1));
    if (hi >= 0 && hi < lo) return fail(path, "'maxItems' is below 'minItems'");
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      const Json& p = s["prefixItems"];
      if (!p.is_array()) return fail(path + "/prefixItems", "'prefixItems' must be an array of schemas");
      for (size_t i = 0; i < p.size(); ++i) {
        ONEBIT_ASSIGN_OR_RETURN(std::string e, visit(p[i], path + "/prefixItems/" + std::to_string(i)));
        prefix.push_back(e);
      }
    }
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (hi >= 0 && hi < k) return fail(path, "'maxItems' is below the number of 'prefixItems'");
    std::string item;  // the schema of items after the prefix; empty: none may follow
    if (s.contains("items")) {
      const Json& it = s["items"];
      if (it.is_boolean() && !it.get<bool>()) {
        if (lo > k) return fail(path, "'minItems' asks for more items than 'prefixItems' with items false");
      } else {
        ONEBIT_ASSIGN_OR_RETURN(item, visit(it, path + "/items"));
      }
    } else if (lo > k || k == 0) {
      item = prim("value");
    }
    std::string body = "\"[\" " + ws;
    if (k > 0) {
      for (int64_t i = 0; i < k; ++i) body += (i ? " \",\" " + ws + " " : " ") + prefix[size_t(i)] + " " + ws;
      if (!item.empty() && (hi < 0 || hi > k)) {
        const int64_t more_lo = std::max<int64_t>(lo - k, 0);
        const int64_t more_hi = hi < 0 ? -1 : hi - k;
        body += " (\",\" " + ws + " " + item + " " + ws + ")" + repetition(more_lo, more_hi);
      }
    } else if (!item.empty() && hi != 0) {
      const std::string elems = item + " " + ws + " (\",\" " + ws + " " + item + " " + ws + ")" +
                                repetition(std::max<int64_t>(lo - 1, 0), hi < 0 ? -1 : hi - 1);
      body += lo > 0 ? " " + elems : " (" + elems + ")?";
    }
    body += " \"]\"";
    return rule(hint(path, "array"), body);
  }

  const Json& root_;
  std::string prefix_;
  std::map<std::string, std::string> bodies_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> by_body_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

}  // namespace

Result<std::string> json_schema_rules(const Json& schema, const std::string& prefix) {
  return Converter(schema, prefix).run();
}

Result<std::string> json_schema_to_gbnf(const Json& schema) {
  ONEBIT_ASSIGN_OR_RETURN(std::string rules, json_schema_rules(schema, ""));
  // The text is checked here so that a converter bug shows as an error, never as a bad mask.
  auto g = parse_gbnf(rules);
  if (!g.ok()) return make_error("internal error: the schema's grammar does not parse (" + g.message() + ")");
  return rules;
}

std::string json_object_gbnf() {
  auto r = json_schema_to_gbnf(Json{{"type", "object"}});
  return r.ok() ? *r : std::string();
}

}  // namespace onebit::grammar
