// The chat-template parser. Precedence, lowest first, as jinja2/parser.py: conditional, or, and,
// not, comparisons (chained), + -, ~, * / // %, **, unary - +, then postfix (. [] ()) and
// filters/tests, which bind tighter than any binary operator.
#include "template/parser.h"

#include <cstdlib>
#include <set>

namespace onebit::tmpl {
namespace {

struct ParseError {
  std::string message;
};

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template() {
    std::string end;
    Body body = subparse({}, &end);
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(pos_ + n, t_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < t_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().kind == TokenKind::kOp && cur().value == op; }
  bool is_name(const char* n) const { return cur().kind == TokenKind::kName && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  [[noreturn]] void fail(const Token& at, const std::string& what) const {
    throw ParseError{"template syntax error at line " + std::to_string(at.line) + ", column " +
                     std::to_string(at.column) + ": " + what};
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEof: return "end of template";
      case TokenKind::kBlockEnd: return "end of statement block";
      case TokenKind::kVarEnd: return "end of print statement";
      case TokenKind::kString: return "string";
      default: return "'" + t.value + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(cur(), std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::kName) fail(cur(), "expected a name, got " + describe(cur()));
    std::string n = cur().value;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd) fail(cur(), "expected end of statement block, got " + describe(cur()));
    advance();
  }
  ExprPtr node(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  StmtPtr stmt(Stmt::Kind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }
  struct DepthGuard {
    Parser* p;
    DepthGuard(Parser* parser, const Token& at) : p(parser) {
      if (++p->depth_ > kMaxParseDepth) {
        p->fail(at, "nesting deeper than " + std::to_string(kMaxParseDepth) + " levels");
      }
    }
    ~DepthGuard() { --p->depth_; }
  };

  // ---- statements ----
  // Parses until a block tag named in `ends` (left unconsumed after {%, name in *end) or EOF.
  Body subparse(const std::set<std::string>& ends, std::string* end) {
    Body body;
    DepthGuard guard(this, cur());
    while (cur().kind != TokenKind::kEof) {
      const Token& tok = cur();
      if (tok.kind == TokenKind::kText) {
        auto s = stmt(Stmt::Kind::kText, tok);
        s->text = tok.value;
        body.push_back(std::move(s));
        advance();
      } else if (tok.kind == TokenKind::kVarBegin) {
        advance();
        auto s = stmt(Stmt::Kind::kOutput, tok);
        s->expr = parse_tuple(true);
        if (cur().kind != TokenKind::kVarEnd) fail(cur(), "expected end of print statement '}}', got " + describe(cur()));
        advance();
        body.push_back(std::move(s));
      } else if (tok.kind == TokenKind::kBlockBegin) {
        advance();
        if (cur().kind != TokenKind::kName) fail(cur(), "expected a statement name after '{%'");
        if (ends.count(cur().value)) {
          *end = cur().value;
          advance();
          return body;
        }
        body.push_back(parse_statement());
      } else {
        fail(tok, "unexpected " + describe(tok));
      }
    }
    if (!ends.empty()) {
      std::string names;
      for (const auto& e : ends) names += (names.empty() ? "'" : " or '") + e + "'";
      fail(cur(), "unexpected end of template; expected " + names + " to close a block");
    }
    return body;
  }

  StmtPtr parse_statement() {
    const Token& tok = cur();
    std::string name = tok.value;
    advance();
    if (name == "if") return parse_if(tok);
    if (name == "for") return parse_for(tok);
    if (name == "set") return parse_set(tok);
    if (name == "macro") return parse_macro(tok);
    if (name == "call") return parse_call_block(tok);
    if (name == "filter") return parse_filter_block(tok);
    if (name == "with") return parse_with(tok);
    if (name == "generation") return parse_generation(tok);
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail(tok, "'" + name + "' outside of a for loop");
      expect_block_end();
      return stmt(name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, tok);
    }
    fail(tok, "unknown or unsupported tag '" + name + "'");
  }

  StmtPtr parse_if(const Token& tok) {
    auto s = stmt(Stmt::Kind::kIf, tok);
    while (true) {
      s->conditions.push_back(parse_tuple(false));
      expect_block_end();
      std::string end;
      s->bodies.push_back(subparse({"elif", "else", "endif"}, &end));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        s->has_else = true;
        s->else_body = subparse({"endif"}, &end);
      }
      expect_block_end();
      return s;
    }
  }

  void parse_targets(Stmt& s) {
    bool paren = skip_op("(");
    s.targets.push_back(expect_name());
    while (skip_op(",")) {
      s.target_is_tuple = true;
      if (cur().kind != TokenKind::kName) break;
      s.targets.push_back(expect_name());
    }
    if (paren) {
      s.target_is_tuple = true;
      expect_op(")");
    }
  }

  StmtPtr parse_for(const Token& tok) {
    auto s = stmt(Stmt::Kind::kFor, tok);
    parse_targets(*s);
    if (!skip_name("in")) fail(cur(), "expected 'in' in for loop, got " + describe(cur()));
    s->expr = parse_tuple(false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail(cur(), "recursive for loops are not supported");
    expect_block_end();
    std::string end;
    ++loop_depth_;
    s->body = subparse({"else", "endfor"}, &end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      s->has_else = true;
      s->else_body = subparse({"endfor"}, &end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(const Token& tok) {
    auto s = stmt(Stmt::Kind::kSet, tok);
    if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOp && peek().value == "." &&
        peek(2).kind == TokenKind::kName) {
      s->targets.push_back(expect_name());
      advance();
      s->attr = expect_name();
    } else {
      parse_targets(*s);
    }
    if (skip_op("=")) {
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    if (!s->attr.empty() || s->target_is_tuple) fail(cur(), "a block set takes a single name");
    s->kind = Stmt::Kind::kSetBlock;
    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
    expect_block_end();
    std::string end;
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = subparse({"endset"}, &end);
    loop_depth_ = saved;
    expect_block_end();
    return s;
  }

  void parse_params(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
    }
    advance();
  }

  StmtPtr parse_macro(const Token& tok) {
    auto s = stmt(Stmt::Kind::kMacro, tok);
    s->text = expect_name();
    parse_params(s->params);
    expect_block_end();
    std::string end;
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = subparse({"endmacro"}, &end);
    loop_depth_ = saved;
    if (cur().kind == TokenKind::kName) advance();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(const Token& tok) {
    auto s = stmt(Stmt::Kind::kCallBlock, tok);
    if (is_op("(")) parse_params(s->params);
    s->expr = parse_expression(true);
    if (s->expr->kind != Expr::Kind::kCall) fail(tok, "expected a call after 'call'");
    expect_block_end();
    std::string end;
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = subparse({"endcall"}, &end);
    loop_depth_ = saved;
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(const Token& tok) {
    auto s = stmt(Stmt::Kind::kFilterBlock, tok);
    s->expr = parse_filter_chain(nullptr, /*first_has_pipe=*/false);
    expect_block_end();
    std::string end;
    s->body = subparse({"endfilter"}, &end);
    expect_block_end();
    return s;
  }

  StmtPtr parse_with(const Token& tok) {
    auto s = stmt(Stmt::Kind::kWith, tok);
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect_name());
      expect_op("=");
      s->values.push_back(parse_expression(true));
    }
    expect_block_end();
    std::string end;
    s->body = subparse({"endwith"}, &end);
    expect_block_end();
    return s;
  }

  // transformers' AssistantTracker tag: renders its body like a call block (own scope); the
  // assistant-token mask it can also compute is a training feature we do not need.
  StmtPtr parse_generation(const Token& tok) {
    auto s = stmt(Stmt::Kind::kWith, tok);
    expect_block_end();
    std::string end;
    s->body = subparse({"endgeneration"}, &end);
    expect_block_end();
    return s;
  }

  // ---- expressions ----
  ExprPtr parse_tuple(bool with_condexpr) {
    const Token& at = cur();
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto t = node(Expr::Kind::kTuple, at);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind == TokenKind::kVarEnd || cur().kind == TokenKind::kBlockEnd || is_op(")")) break;
      t->args.push_back(parse_expression(with_condexpr));
    }
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this, cur());
    if (!with_condexpr) return parse_or();
    const Token& at = cur();
    ExprPtr e = parse_or();
    while (skip_name("if")) {
      auto c = node(Expr::Kind::kCond, at);
      ExprPtr test = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_expression(true) : nullptr;
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const Token& at, const std::string& op, ExprPtr l, ExprPtr r) {
    auto b = node(Expr::Kind::kBinary, at);
    b->op = op;
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const Token& at = cur();
      advance();
      l = binary(at, "or", std::move(l), parse_and());
    }
    return l;
  }

  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const Token& at = cur();
      advance();
      l = binary(at, "and", std::move(l), parse_not());
    }
    return l;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this, cur());
      auto u = node(Expr::Kind::kUnary, cur());
      advance();
      u->op = "not";
      u->args.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    static const std::set<std::string> kOps = {"==", "!=", "<", "<=", ">", ">="};
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::kOp && kOps.count(cur().value)) {
        op = cur().value;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().value == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(Expr::Kind::kCompare, at);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  template <typename Next>
  ExprPtr parse_binary_level(std::initializer_list<const char*> ops, Next next) {
    ExprPtr l = (this->*next)();
    while (true) {
      const char* hit = nullptr;
      for (const char* op : ops) {
        if (is_op(op)) hit = op;
      }
      if (!hit) return l;
      const Token& at = cur();
      advance();
      l = binary(at, hit, std::move(l), (this->*next)());
    }
  }

  ExprPtr parse_math1() { return parse_binary_level({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return parse_binary_level({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return parse_binary_level({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return parse_binary_level({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this, cur());
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(Expr::Kind::kUnary, cur());
      e->op = cur().value;
      advance();
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    switch (tok.kind) {
      case TokenKind::kName: {
        advance();
        auto lit = node(Expr::Kind::kLiteral, tok);
        if (tok.value == "true" || tok.value == "True") lit->value = Value::boolean(true);
        else if (tok.value == "false" || tok.value == "False") lit->value = Value::boolean(false);
        else if (tok.value == "none" || tok.value == "None") lit->value = Value::none();
        else {
          auto n = node(Expr::Kind::kName, tok);
          n->name = tok.value;
          return n;
        }
        return lit;
      }
      case TokenKind::kString: {
        std::string s;
        while (cur().kind == TokenKind::kString) {
          s += cur().value;
          advance();
        }
        auto lit = node(Expr::Kind::kLiteral, tok);
        lit->value = Value::string(std::move(s));
        return lit;
      }
      case TokenKind::kInt: {
        advance();
        auto lit = node(Expr::Kind::kLiteral, tok);
        errno = 0;
        char* endp = nullptr;
        long long v = std::strtoll(tok.value.c_str(), &endp, 10);
        if (errno == ERANGE) fail(tok, "integer literal " + tok.value + " is out of the 64-bit range");
        lit->value = Value::integer(v);
        return lit;
      }
      case TokenKind::kFloat: {
        advance();
        auto lit = node(Expr::Kind::kLiteral, tok);
        lit->value = Value::number(std::strtod(tok.value.c_str(), nullptr));
        return lit;
      }
      case TokenKind::kOp:
        if (tok.value == "(") return parse_paren();
        if (tok.value == "[") return parse_list();
        if (tok.value == "{") return parse_dict();
        break;
      default: break;
    }
    fail(tok, "unexpected " + describe(tok) + " in expression");
  }

  ExprPtr parse_paren() {
    const Token& at = cur();
    advance();
    if (skip_op(")")) return node(Expr::Kind::kTuple, at);
    ExprPtr first = parse_expression(true);
    if (skip_op(")")) return first;
    auto t = node(Expr::Kind::kTuple, at);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (is_op(")")) break;
      t->args.push_back(parse_expression(true));
    }
    expect_op(")");
    return t;
  }

  ExprPtr parse_list() {
    auto l = node(Expr::Kind::kList, cur());
    advance();
    while (!is_op("]")) {
      if (!l->args.empty()) expect_op(",");
      if (is_op("]")) break;
      l->args.push_back(parse_expression(true));
    }
    advance();
    return l;
  }

  ExprPtr parse_dict() {
    auto d = node(Expr::Kind::kDict, cur());
    advance();
    while (!is_op("}")) {
      if (!d->args.empty()) expect_op(",");
      if (is_op("}")) break;
      d->args.push_back(parse_expression(true));
      expect_op(":");
      d->args.push_back(parse_expression(true));
    }
    advance();
    return d;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token& at = cur();
      if (is_op(".")) {
        advance();
        if (cur().kind == TokenKind::kInt) {
          auto g = node(Expr::Kind::kGetItem, at);
          auto idx = node(Expr::Kind::kLiteral, cur());
          idx->value = Value::integer(std::strtoll(cur().value.c_str(), nullptr, 10));
          advance();
          g->args.push_back(std::move(e));
          g->args.push_back(std::move(idx));
          e = std::move(g);
          continue;
        }
        auto g = node(Expr::Kind::kGetAttr, at);
        g->name = expect_name();
        g->args.push_back(std::move(e));
        e = std::move(g);
      } else if (is_op("[")) {
        advance();
        e = parse_subscript(at, std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(const Token& at, ExprPtr target) {
    ExprPtr parts[3];
    bool slice = false;
    for (int i = 0; i < 3; ++i) {
      if (!is_op(":") && !is_op("]")) parts[i] = parse_expression(true);
      if (i < 2 && skip_op(":")) {
        slice = true;
        continue;
      }
      break;
    }
    expect_op("]");
    auto g = node(slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, at);
    g->args.push_back(std::move(target));
    if (!slice && !parts[0]) fail(at, "expected an index inside '[]'");
    for (int i = 0; i < (slice ? 3 : 1); ++i) g->args.push_back(std::move(parts[i]));
    return g;
  }

  // Parses "(args)" into e->args (after args[0] when `has_subject`) and e->kwargs.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail(cur(), "*args and **kwargs in calls are not supported");
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOp && peek().value == "=") {
        std::string key = cur().value;
        advance();
        advance();
        e.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail(cur(), "positional argument after keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = node(Expr::Kind::kCall, cur());
    c->args.push_back(std::move(callee));
    parse_call_args(*c);
    return c;
  }

  std::string parse_dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().kind == TokenKind::kName) {
      advance();
      n += "." + expect_name();
    }
    return n;
  }

  ExprPtr parse_filter_chain(ExprPtr subject, bool first_has_pipe = true) {
    bool need_pipe = first_has_pipe;
    do {
      if (need_pipe) expect_op("|");
      need_pipe = true;
      auto f = node(Expr::Kind::kFilter, cur());
      f->name = parse_dotted_name();
      f->args.push_back(std::move(subject));
      if (is_op("(")) parse_call_args(*f);
      subject = std::move(f);
    } while (is_op("|"));
    return subject;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        advance();
        auto f = node(Expr::Kind::kFilter, cur());
        f->name = parse_dotted_name();
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        auto t = node(Expr::Kind::kTest, cur());
        advance();
        t->negated = skip_name("not");
        t->name = parse_dotted_name();
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(*t);
        } else if (test_arg_follows()) {
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  bool test_arg_follows() const {
    const Token& t = cur();
    if (t.kind == TokenKind::kName) return t.value != "else" && t.value != "or" && t.value != "and";
    if (t.kind == TokenKind::kString || t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat) return true;
    return t.kind == TokenKind::kOp && (t.value == "(" || t.value == "[" || t.value == "{");
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<Body> parse(const std::vector<Token>& tokens) {
  if (tokens.empty()) return Body{};
  try {
    return Parser(tokens).parse_template();
  } catch (const ParseError& e) {
    return make_error(e.message);
  }
}

}  // namespace onebit::tmpl
