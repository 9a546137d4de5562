// The chat-template lexer. Whitespace control follows jinja2/lexer.py (3.1): "-" strips all
// whitespace on that side, trim_blocks drops one newline after a block or comment tag,
// lstrip_blocks drops spaces before a block or comment tag that starts its line, "+" disables both.
#include "template/lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "base/utf8.h"

namespace onebit::tmpl {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's "unicode-escape" decoding of a string literal body, as Jinja2 applies it.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    char c = s[++i];
    auto hex = [&](size_t n) -> bool {
      uint32_t cp = 0;
      for (size_t k = 1; k <= n; ++k) {
        if (i + k >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + k]))) return false;
        char h = s[i + k];
        cp = cp * 16 + static_cast<uint32_t>(is_digit(h) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      if (cp > kMaxCodePoint) return false;
      utf8_append(cp, out);
      i += n;
      return true;
    };
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;
      case 'x': if (!hex(2)) out += "\\x"; break;
      case 'u': if (!hex(4)) out += "\\u"; break;
      case 'U': if (!hex(8)) out += "\\U"; break;
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = 0;
          size_t n = 0;
          while (n < 3 && i < s.size() && s[i] >= '0' && s[i] <= '7') cp = cp * 8 + static_cast<uint32_t>(s[i++] - '0'), ++n;
          --i;
          utf8_append(cp, out);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t start = find_tag(pos);
      if (start == std::string::npos) {
        emit(TokenKind::kText, src_.substr(pos), pos);
        break;
      }
      char kind = src_[start + 1];
      char sign = start + 2 < src_.size() ? src_[start + 2] : 0;
      if (sign != '-' && sign != '+') sign = 0;
      std::string text = src_.substr(pos, start - pos);
      size_t raw_body = 0;
      bool raw = kind == '%' && match_raw_begin(start, &raw_body);
      strip_text(text, sign, kind != '{', line_starting);
      if (!text.empty()) emit(TokenKind::kText, text, pos);
      size_t end;
      if (raw) {
        auto r = lex_raw(start, raw_body);
        if (!r.ok()) return r.error();
        end = *r;
      } else if (kind == '#') {
        auto r = lex_comment(start);
        if (!r.ok()) return r.error();
        end = *r;
      } else {
        auto r = lex_tag(start, kind == '%');
        if (!r.ok()) return r.error();
        end = *r;
      }
      line_starting = end > 0 && src_[end - 1] == '\n';
      pos = end;
    }
    emit(TokenKind::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t pos) const {
    for (size_t i = pos; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void strip_text(std::string& text, char sign, bool lstrip_applies, bool line_starting) const {
    if (sign == '-') {
      size_t e = text.size();
      while (e > 0 && is_space(text[e - 1])) --e;
      text.resize(e);
    } else if (sign != '+' && lstrip_applies) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
          std::all_of(text.begin() + static_cast<long>(l_pos), text.end(), is_space)) {
        text.resize(l_pos);
      }
    }
  }

  // After a block tag's end at `p` (just past "%}" or "#}"): "-" eats all whitespace, "+" nothing,
  // otherwise trim_blocks eats one newline.
  size_t after_end(size_t p, char end_sign) const {
    if (end_sign == '-') {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (end_sign != '+' && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  bool match_raw_begin(size_t start, size_t* body) const {
    size_t p = start + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    *body = p;
    return true;
  }

  Result<size_t> lex_raw(size_t start, size_t body) {
    for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t p = i + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      while (p < src_.size() && is_space(src_[p])) ++p;
      char end_sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) end_sign = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) continue;
      std::string text = src_.substr(body, i - body);
      strip_text(text, sign, true, false);
      if (!text.empty()) emit(TokenKind::kText, text, body);
      return after_end(p + 2, end_sign);
    }
    return error_at(start, "missing end of raw directive ({% endraw %})");
  }

  Result<size_t> lex_comment(size_t start) {
    size_t e = src_.find("#}", start + 2);
    if (e == std::string::npos) return error_at(start, "missing end of comment tag (#})");
    char end_sign = (e > start + 2 && (src_[e - 1] == '-' || src_[e - 1] == '+')) ? src_[e - 1] : 0;
    return after_end(e + 2, end_sign);
  }

  Result<size_t> lex_tag(size_t start, bool block) {
    emit(block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", start);
    size_t p = start + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    std::vector<char> brackets;
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) {
        return error_at(start, block ? "unexpected end of template, the tag opened here needs '%}'"
                                     : "unexpected end of template, the tag opened here needs '}}'");
      }
      if (brackets.empty()) {
        const char* end = block ? "%}" : "}}";
        if (src_.compare(p, 2, end) == 0) {
          emit(block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", p);
          return block ? after_end(p + 2, 0) : p + 2;
        }
        if ((src_[p] == '-' || (block && src_[p] == '+')) && src_.compare(p + 1, 2, end) == 0) {
          emit(block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", p);
          return after_end(p + 3, src_[p]);
        }
      }
      auto r = lex_expr_token(p, brackets);
      if (!r.ok()) return r.error();
      p = *r;
    }
  }

  Result<size_t> lex_expr_token(size_t p, std::vector<char>& brackets) {
    char c = src_[p];
    if (is_digit(c)) return lex_number(p);
    if (is_name_start(c)) {
      size_t e = p;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      emit(TokenKind::kName, src_.substr(p, e - p), p);
      return e;
    }
    if (c == '\'' || c == '"') {
      size_t e = p + 1;
      while (e < src_.size() && src_[e] != c) e += src_[e] == '\\' ? 2 : 1;
      if (e >= src_.size()) return error_at(p, "unterminated string literal");
      emit(TokenKind::kString, unescape(src_.substr(p + 1, e - p - 1)), p);
      return e + 1;
    }
    static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (src_.compare(p, 2, op) == 0) {
        emit(TokenKind::kOp, op, p);
        return p + 2;
      }
    }
    if (std::strchr("+-/*%~[](){}><=.:|,;", c) == nullptr) {
      return error_at(p, std::string("unexpected character '") + c + "'");
    }
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) return error_at(p, std::string("unexpected '") + c + "'");
      if (brackets.back() != c) {
        return error_at(p, std::string("unexpected '") + c + "', expected '" + brackets.back() + "'");
      }
      brackets.pop_back();
    }
    emit(TokenKind::kOp, std::string(1, c), p);
    return p + 1;
  }

  Result<size_t> lex_number(size_t p) {
    size_t e = p;
    auto digits = [&] {
      while (e < src_.size() && (is_digit(src_[e]) || (src_[e] == '_' && e + 1 < src_.size() && is_digit(src_[e + 1])))) ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      ++e;
      digits();
      is_float = true;
    }
    if (e < src_.size() && src_[e] == 'e') {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        e = q;
        digits();
        is_float = true;
      }
    }
    std::string text = src_.substr(p, e - p);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    emit(is_float ? TokenKind::kFloat : TokenKind::kInt, text, p);
    return e;
  }

  void emit(TokenKind kind, std::string value, size_t pos) {
    auto [line, col] = line_col(pos);
    tokens_.push_back(Token{kind, std::move(value), line, col});
  }

  std::pair<int, int> line_col(size_t pos) {
    while (scan_pos_ < pos && scan_pos_ < src_.size()) {
      if (src_[scan_pos_] == '\n') ++scan_line_, scan_line_start_ = scan_pos_ + 1;
      ++scan_pos_;
    }
    if (pos < scan_pos_) {  // rare backwards query: rescan from the start
      scan_pos_ = 0, scan_line_ = 1, scan_line_start_ = 0;
      return line_col(pos);
    }
    return {scan_line_, static_cast<int>(pos - scan_line_start_) + 1};
  }

  Error error_at(size_t pos, const std::string& what) {
    auto [line, col] = line_col(pos);
    return make_error("template syntax error at line " + std::to_string(line) + ", column " +
                      std::to_string(col) + ": " + what);
  }

  std::string src_;
  std::vector<Token> tokens_;
  size_t scan_pos_ = 0;
  int scan_line_ = 1;
  size_t scan_line_start_ = 0;
};

}  // namespace

Result<std::vector<Token>> tokenize(const std::string& source) {
  // Jinja2 normalizes every line ending to "\n" and drops one trailing newline
  // (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src)).run();
}

}  // namespace onebit::tmpl
