// The chat-template syntax tree: expressions and statements as the parser builds them and the
// interpreter walks them. Plain data; owns its children through unique_ptr.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace onebit::tmpl {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // args
    kTuple,     // args
    kDict,      // args: key0, value0, key1, value1...
    kUnary,     // op ("not", "-", "+"), args[0]
    kBinary,    // op, args[0], args[1] (and/or short-circuit)
    kCompare,   // args[0] then (ops[i], args[i + 1]) chained like Python
    kCond,      // args: test, then, else (else may be null)
    kGetAttr,   // args[0].name
    kGetItem,   // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]], any of 1..3 may be null
    kCall,      // args[0](args[1..], kwargs)
    kFilter,    // args[0] | name(args[1..], kwargs); args[0] null inside {% filter %}
    kTest,      // args[0] is [not] name(args[1..], kwargs)
  };
  Kind kind;
  int line = 0;
  int column = 0;
  Value value;
  std::string name;  // variable, attribute, filter or test name
  std::string op;
  std::vector<std::string> ops;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // `is not`
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // expr
    kIf,           // conditions[i] -> bodies[i]; else_body
    kFor,          // targets in expr [if cond]: body; else_body
    kSet,          // targets (or ns.attr) = expr
    kSetBlock,     // targets[0] = rendered body | filters (expr chain with null subject)
    kMacro,        // name(params): body
    kCallBlock,    // expr is the call; params are caller's; body is caller's
    kFilterBlock,  // expr is the filter chain with a null subject; body
    kWith,         // targets[i] = values[i]; body
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  bool target_is_tuple = false;
  std::string attr;  // `set ns.attr = ...`: targets[0] is ns
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  std::vector<ExprPtr> values;
  Body body;
  Body else_body;
  bool has_else = false;
  std::vector<MacroParam> params;
};

}  // namespace onebit::tmpl
