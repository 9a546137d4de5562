// The chat-template interpreter: statements, expressions, scoping and limits. Semantics follow
// Jinja2 3.1 as transformers configures it (default Undefined, loopcontrols, immutable sandbox).
#include "template/interpreter.h"

#include "base/utf8.h"
#include "template/builtins.h"

namespace onebit::tmpl {

struct DepthGuard {
  Interpreter* in;
  explicit DepthGuard(Interpreter* interp) : in(interp) {
    if (++in->depth_ > in->options_.limits.max_depth) {
      throw RenderError("template nesting or recursion deeper than " +
                        std::to_string(in->options_.limits.max_depth) + " levels");
    }
  }
  ~DepthGuard() { --in->depth_; }
};

namespace {

std::string at(const Expr& e) {
  return "line " + std::to_string(e.line) + ", column " + std::to_string(e.column);
}

}  // namespace

std::string undefined_message(const Value& v) {
  return v.undefined_name().empty() ? "value is undefined" : v.undefined_name();
}

Interpreter::Interpreter(const RenderOptions& options, std::shared_ptr<Scope> root)
    : options_(options), root_(std::move(root)), sink_(&out_) {
  add_globals(globals_);
}

Interpreter::~Interpreter() {
  for (auto& ns : namespaces_) ns.entries().clear();
}

void Interpreter::render(const Body& body) { exec_body(body, root_); }

void Interpreter::step() {
  if (++steps_ > options_.limits.max_steps) {
    throw RenderError("template exceeded the limit of " + std::to_string(options_.limits.max_steps) +
                      " evaluation steps (an endless or huge loop?)");
  }
}

void Interpreter::charge(size_t n_bytes) {
  steps_ += static_cast<int64_t>(n_bytes / 16);
  step();
}

void Interpreter::check_size(size_t n_bytes) const {
  if (n_bytes > options_.limits.max_output_bytes) {
    throw RenderError("template produced a string of " + std::to_string(n_bytes) + " bytes; the limit is " +
                      std::to_string(options_.limits.max_output_bytes));
  }
}

void Interpreter::emit(const std::string& text) {
  charge(text.size());
  check_size((sink_ == &out_ ? 0 : out_.size()) + sink_->size() + text.size());
  *sink_ += text;
}

std::string Interpreter::capture(const Body& body, const std::shared_ptr<Scope>& scope) {
  std::string buf;
  std::string* saved = sink_;
  sink_ = &buf;
  try {
    exec_body(body, scope);
  } catch (...) {
    sink_ = saved;
    throw;
  }
  sink_ = saved;
  return buf;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const std::shared_ptr<Scope>& scope) {
  DepthGuard guard(this);
  for (const auto& s : body) {
    Flow f = exec(*s, scope);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  step();
  switch (s.kind) {
    case Stmt::Kind::kText: emit(s.text); break;
    case Stmt::Kind::kOutput: emit(eval(*s.expr, scope).str()); break;
    case Stmt::Kind::kIf: {
      Flow f = Flow::kNormal;
      exec_if(s, scope, &f);
      return f;
    }
    case Stmt::Kind::kFor: return exec_for(s, scope);
    case Stmt::Kind::kSet: exec_set(s, scope); break;
    case Stmt::Kind::kSetBlock: {
      Value v = Value::string(capture(s.body, scope));
      if (s.expr) {
        // The filter chain's innermost subject is null: feed it the captured text.
        std::vector<const Expr*> chain;
        for (const Expr* f = s.expr.get(); f; f = f->args[0].get()) chain.push_back(f);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          CallArgs args = eval_args(**it, 1, scope);
          v = apply_filter((*it)->name, v, args);
        }
      }
      scope->vars[s.targets[0]] = v;
      break;
    }
    case Stmt::Kind::kMacro: exec_macro(s, scope); break;
    case Stmt::Kind::kCallBlock: exec_call_block(s, scope); break;
    case Stmt::Kind::kFilterBlock: {
      Value v = Value::string(capture(s.body, scope));
      std::vector<const Expr*> chain;
      for (const Expr* f = s.expr.get(); f; f = f->args[0].get()) chain.push_back(f);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        CallArgs args = eval_args(**it, 1, scope);
        v = apply_filter((*it)->name, v, args);
      }
      emit(v.str());
      break;
    }
    case Stmt::Kind::kWith: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      for (size_t i = 0; i < s.targets.size(); ++i) inner->vars[s.targets[i]] = eval(*s.values[i], scope);
      return exec_body(s.body, inner);
    }
    case Stmt::Kind::kBreak: return Flow::kBreak;
    case Stmt::Kind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

void Interpreter::exec_if(const Stmt& s, const std::shared_ptr<Scope>& scope, Flow* flow) {
  for (size_t i = 0; i < s.conditions.size(); ++i) {
    if (eval(*s.conditions[i], scope).truthy()) {
      *flow = exec_body(s.bodies[i], scope);
      return;
    }
  }
  if (s.has_else) *flow = exec_body(s.else_body, scope);
}

void Interpreter::bind_targets(const Stmt& s, const Value& item, Scope& scope) {
  if (!s.target_is_tuple) {
    scope.vars[s.targets[0]] = item;
    return;
  }
  List parts = iterate(item);
  if (parts.size() != s.targets.size()) {
    throw RenderError("line " + std::to_string(s.line) + ": cannot unpack " + std::to_string(parts.size()) +
                      " values into " + std::to_string(s.targets.size()) + " names");
  }
  for (size_t i = 0; i < parts.size(); ++i) scope.vars[s.targets[i]] = parts[i];
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  Value seq = eval(*s.expr, scope);
  List items = iterate(seq);
  if (s.cond) {
    List kept;
    for (const auto& item : items) {
      step();
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      bind_targets(s, item, *probe);
      if (eval(*s.cond, probe).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (s.has_else) return exec_body(s.else_body, scope);
    return Flow::kNormal;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  // One scope and one `loop` object per loop, refreshed each iteration: a fresh scope per
  // iteration (Jinja2's semantics) without an allocation per iteration.
  auto iter_scope = std::make_shared<Scope>();
  iter_scope->parent = scope;
  auto index = std::make_shared<int64_t>(0);
  Value loop = Value::name_space();
  track(loop);
  for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth",
                          "depth0", "previtem", "nextitem"}) {
    loop.entries().emplace_back(Value::string(key), Value());
  }
  loop.entries().emplace_back(Value::string("cycle"), Value::callable("cycle", [index](Interpreter&, CallArgs& args) {
    if (args.positional.empty()) throw RenderError("loop.cycle() needs at least one argument");
    return args.positional[static_cast<size_t>(*index) % args.positional.size()];
  }));
  for (int64_t i = 0; i < n; ++i) {
    step();
    *index = i;
    iter_scope->vars.clear();
    bind_targets(s, items[static_cast<size_t>(i)], *iter_scope);
    Dict& e = loop.entries();
    e[0].second = Value::integer(i + 1);
    e[1].second = Value::integer(i);
    e[2].second = Value::integer(n - i);
    e[3].second = Value::integer(n - i - 1);
    e[4].second = Value::boolean(i == 0);
    e[5].second = Value::boolean(i == n - 1);
    e[6].second = Value::integer(n);
    e[7].second = Value::integer(1);
    e[8].second = Value::integer(0);
    e[9].second = i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item");
    e[10].second = i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item");
    iter_scope->vars["loop"] = loop;
    Flow f = exec_body(s.body, iter_scope);
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interpreter::exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  Value v = eval(*s.expr, scope);
  if (!s.attr.empty()) {
    Value ns = lookup(s.targets[0], scope);
    if (!ns.is_namespace()) {
      throw RenderError("line " + std::to_string(s.line) + ": cannot assign attribute '" + s.attr + "' on '" +
                        s.targets[0] + "', which is a " + ns.type_name() + ", not a namespace()");
    }
    ns.set(Value::string(s.attr), v);
    return;
  }
  bind_targets(s, v, *scope);
}

Value Interpreter::make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope, const std::string& name) {
  const Stmt* def = &s;
  std::weak_ptr<Scope> weak = scope;  // the defining scope outlives its macros during a render
  return Value::callable(name, [def, weak, name](Interpreter& in, CallArgs& args) {
    auto parent = weak.lock();
    auto ms = std::make_shared<Scope>();
    ms->parent = parent;
    if (args.positional.size() > def->params.size()) {
      throw RenderError("macro '" + name + "' takes not more than " + std::to_string(def->params.size()) +
                        " argument(s), got " + std::to_string(args.positional.size()));
    }
    for (const auto& [k, v] : args.keyword) {
      bool known = k == "caller";
      for (const auto& p : def->params) known = known || p.name == k;
      if (!known) throw RenderError("macro '" + name + "' takes no keyword argument '" + k + "'");
      ms->vars[k] = v;
    }
    for (size_t i = 0; i < def->params.size(); ++i) {
      const auto& p = def->params[i];
      if (i < args.positional.size()) {
        ms->vars[p.name] = args.positional[i];
      } else if (!args.find_keyword(p.name)) {
        ms->vars[p.name] = p.default_value ? in.eval(*p.default_value, ms)
                                           : Value::undefined("parameter '" + p.name + "' was not provided");
      }
    }
    return Value::string(in.capture(def->body, ms));
  });
}

void Interpreter::exec_macro(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  scope->vars[s.text] = make_macro(s, scope, s.text);
}

void Interpreter::exec_call_block(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  Value caller = make_macro(s, scope, "caller");
  const Expr& call = *s.expr;
  Value callee = eval(*call.args[0], scope);
  CallArgs args = eval_args(call, 1, scope);
  args.keyword.emplace_back("caller", caller);
  emit(this->call(callee, args).str());
}

Value Interpreter::lookup(const std::string& name, const std::shared_ptr<Scope>& scope) {
  for (Scope* s = scope.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  auto g = globals_.find(name);
  if (g != globals_.end()) return g->second;
  return Value::undefined("'" + name + "' is undefined");
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  DepthGuard guard(this);
  step();
  try {
    return eval_inner(e, scope);
  } catch (RenderError& err) {
    // Name the innermost expression's position once; raise_exception keeps its own text.
    std::string msg = err.what();
    if (err.raised_by_template || msg.rfind("line ", 0) == 0) throw;
    throw RenderError(at(e) + ": " + msg);
  }
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i], scope));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v, scope));
  return args;
}

Value Interpreter::eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.value;
    case Expr::Kind::kName: return lookup(e.name, scope);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List items;
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return e.kind == Expr::Kind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case Expr::Kind::kDict: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) d.set(eval(*e.args[i], scope), eval(*e.args[i + 1], scope));
      return d;
    }
    case Expr::Kind::kUnary: {
      Value v = eval(*e.args[0], scope);
      if (e.op == "not") return Value::boolean(!v.truthy());
      if (v.is_undefined()) throw RenderError(undefined_message(v));
      if (e.op == "+" && v.is_number()) return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_float()) return Value::number(-v.as_double());
      if (v.is_int() || v.is_bool()) {
        if (v.as_int() == INT64_MIN) throw RenderError("integer overflow in unary minus");
        return Value::integer(-v.as_int());
      }
      throw RenderError("bad operand type for unary " + e.op + ": '" + v.type_name() + "'");
    }
    case Expr::Kind::kBinary: return eval_binary(e, scope);
    case Expr::Kind::kCompare: return eval_compare(e, scope);
    case Expr::Kind::kCond: {
      if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined("the inline if-expression evaluated to false and has no else");
    }
    case Expr::Kind::kGetAttr: return getattr(eval(*e.args[0], scope), e.name);
    case Expr::Kind::kGetItem: return getitem(eval(*e.args[0], scope), eval(*e.args[1], scope));
    case Expr::Kind::kSlice: return eval_slice(e, scope);
    case Expr::Kind::kCall: {
      Value callee = eval(*e.args[0], scope);
      CallArgs args = eval_args(e, 1, scope);
      return call(callee, args);
    }
    case Expr::Kind::kFilter: {
      Value subject = eval(*e.args[0], scope);
      CallArgs args = eval_args(e, 1, scope);
      return apply_filter(e.name, subject, args);
    }
    case Expr::Kind::kTest: {
      Value subject = eval(*e.args[0], scope);
      CallArgs args = eval_args(e, 1, scope);
      bool r = apply_test(e.name, subject, args);
      return Value::boolean(e.negated ? !r : r);
    }
  }
  return Value();
}

Value Interpreter::eval_binary(const Expr& e, const std::shared_ptr<Scope>& scope) {
  if (e.op == "and" || e.op == "or") {
    Value l = eval(*e.args[0], scope);
    if ((e.op == "and") != l.truthy()) return l;
    return eval(*e.args[1], scope);
  }
  Value l = eval(*e.args[0], scope);
  Value r = eval(*e.args[1], scope);
  return binary_op(*this, e.op, l, r);
}

Value Interpreter::eval_compare(const Expr& e, const std::shared_ptr<Scope>& scope) {
  Value l = eval(*e.args[0], scope);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value r = eval(*e.args[i + 1], scope);
    if (!binary_op(*this, e.ops[i], l, r).truthy()) return Value::boolean(false);
    l = std::move(r);
  }
  return Value::boolean(true);
}

Value Interpreter::eval_slice(const Expr& e, const std::shared_ptr<Scope>& scope) {
  Value obj = eval(*e.args[0], scope);
  auto part = [&](int idx, bool* given) -> int64_t {
    *given = false;
    if (!e.args[static_cast<size_t>(idx)]) return 0;
    Value v = eval(*e.args[static_cast<size_t>(idx)], scope);
    if (v.is_none()) return 0;
    if (!v.is_int() && !v.is_bool()) throw RenderError("slice indices must be integers or None, not " + v.type_name());
    *given = true;
    return v.as_int();
  };
  bool has_start, has_stop, has_step;
  int64_t start = part(1, &has_start), stop = part(2, &has_stop), stride = part(3, &has_step);
  if (!has_step) stride = 1;
  if (stride == 0) throw RenderError("slice step cannot be zero");
  if (obj.is_undefined()) throw RenderError(undefined_message(obj));
  bool is_str = obj.is_string();
  if (is_str) charge(obj.as_string().size());
  if (!is_str && !obj.is_list()) throw RenderError("'" + obj.type_name() + "' object is not subscriptable");
  // Byte offsets of each code point (plus the end) so slices copy whole UTF-8 sequences.
  std::vector<size_t> offsets;
  if (is_str) {
    const std::string& str = obj.as_string();
    for (size_t i = 0; i < str.size(); i += utf8_char_length(str, i)) offsets.push_back(i);
    offsets.push_back(str.size());
  }
  const int64_t n = is_str ? static_cast<int64_t>(offsets.size()) - 1 : static_cast<int64_t>(obj.items().size());
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](int64_t v, bool given, int64_t dflt) {
    if (!given) return dflt;
    if (v < 0) v += n;
    if (stride > 0) return std::clamp<int64_t>(v, 0, n);
    return std::clamp<int64_t>(v, -1, n - 1);
  };
  start = adjust(start, has_start, stride > 0 ? 0 : n - 1);
  stop = adjust(stop, has_stop, stride > 0 ? n : -1);
  std::string s;
  List items;
  for (int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride) {
    if (is_str) {
      s.append(obj.as_string(), offsets[static_cast<size_t>(i)], offsets[static_cast<size_t>(i) + 1] - offsets[static_cast<size_t>(i)]);
    }
    else items.push_back(obj.items()[static_cast<size_t>(i)]);
  }
  if (is_str) return Value::string(std::move(s));
  return obj.kind() == Value::Kind::kTuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) throw RenderError(undefined_message(obj));
  if (obj.is_namespace()) {
    if (Value* v = obj.find(name)) return *v;
    return Value::undefined("'Namespace' object has no attribute '" + name + "'");
  }
  Value m = bound_method(*this, obj, name);
  if (!m.is_undefined()) return m;
  if (obj.is_dict()) {
    if (Value* v = obj.find(name)) return *v;
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  std::string what = obj.is_none() ? "None" : obj.type_name() + " object";
  return Value::undefined("'" + what + "' has no attribute '" + name + "'");
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) throw RenderError(undefined_message(obj));
  if (obj.is_dict() || obj.is_namespace()) {
    if (Value* v = obj.find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
    } else {
      const std::string& s = obj.as_string();
      charge(s.size());
      if (i < 0) i += static_cast<int64_t>(utf8_count(s));
      if (i >= 0) {
        // Walk to the i-th code point without splitting the whole string.
        for (size_t pos = 0, k = 0; pos < s.size(); ++k) {
          const size_t end = pos + utf8_char_length(s, pos);
          if (static_cast<int64_t>(k) == i) return Value::string(s.substr(pos, end - pos));
          pos = end;
        }
      }
    }
    return Value::undefined("index " + std::to_string(key.as_int()) + " is out of range");
  }
  if (key.is_string()) {
    Value m = getattr(obj, key.as_string());
    if (!m.is_undefined()) return m;
  }
  std::string k = key.is_string() || key.is_number() ? key.repr() : key.type_name();
  return Value::undefined("'" + obj.type_name() + " object' has no element " + k.substr(0, 80));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) throw RenderError(undefined_message(callee));
  if (!callee.is_callable()) throw RenderError("'" + callee.type_name() + "' object is not callable");
  DepthGuard guard(this);
  return callee.fn().fn(*this, args);
}

Value Interpreter::apply_filter(const std::string& name, const Value& subject, CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) throw RenderError("no filter named '" + name + "'");
  return f(*this, subject, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) throw RenderError("no test named '" + name + "'");
  return t(*this, subject, args);
}

List Interpreter::iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList:
    case Value::Kind::kTuple: return v.items();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& kv : v.entries()) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      charge(v.as_string().size());
      List chars;
      for (auto& c : utf8_split(v.as_string())) chars.push_back(Value::string(std::move(c)));
      return chars;
    }
    default: throw RenderError("'" + v.type_name() + "' object is not iterable");
  }
}

}  // namespace onebit::tmpl
