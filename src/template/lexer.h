// The chat-template lexer: splits Jinja source into text and tag tokens, applying Jinja2's
// whitespace control (-, +, trim_blocks and lstrip_blocks on, as transformers renders).
// Depends on base/status.h only.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace onebit::tmpl {

enum class TokenKind {
  kText,        // literal output
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // value holds the unescaped string
  kInt,
  kFloat,
  kOp,          // + - * / // % ** ~ ( ) [ ] { } . , : | = == != < <= > >=
  kEof,
};

struct Token {
  TokenKind kind;
  std::string value;
  int line = 1;    // 1-based, in the source as given
  int column = 1;  // 1-based, in bytes
};

// Tokenizes a template. Errors (unterminated tag, comment, string) name line and column.
Result<std::vector<Token>> tokenize(const std::string& source);

}  // namespace onebit::tmpl
