// The chat-template parser: tokens to a syntax tree, following Jinja2's grammar and operator
// precedence (jinja2/parser.py). Bounded nesting; errors name line and column.
#pragma once

#include <vector>

#include "base/status.h"
#include "template/ast.h"
#include "template/lexer.h"

namespace onebit::tmpl {

// Nesting deeper than this (expressions or blocks) is rejected as a syntax error.
inline constexpr int kMaxParseDepth = 128;

// Parses a token stream from tokenize(). Unknown tags, unclosed blocks and bad expressions are
// errors that name the line, the column and what was expected.
Result<Body> parse(const std::vector<Token>& tokens);

}  // namespace onebit::tmpl
