// The chat-template interpreter: walks the syntax tree with Jinja2's scoping (a new scope per
// loop iteration, macro and call block; `if` and `set` at top level share the outer one) and
// enforces the step, depth and output limits that keep untrusted templates bounded.
// Internal to src/template; callers use template.h.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "template/ast.h"
#include "template/value.h"

namespace onebit::tmpl {

// Bounds on one render. Exceeding any is a render error, never a crash or a hang.
struct RenderLimits {
  int64_t max_steps = 5'000'000;            // expression evaluations plus loop iterations
  size_t max_output_bytes = 64u << 20;     // the rendered text and any single string value
  int max_depth = 400;                     // nested evaluation, blocks and macro calls together
};

struct RenderOptions {
  RenderLimits limits;
  // The clock behind strftime_now(); null means the local time now. Tests inject a fixed time.
  std::function<std::tm()> now;
  // transformers renders in Jinja2's ImmutableSandboxedEnvironment, where list.append,
  // dict.update and the like are refused. True lifts that (not byte-compatible with HF).
  bool allow_mutation = false;
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};

class Interpreter {
 public:
  Interpreter(const RenderOptions& options, std::shared_ptr<Scope> root);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders `body` into the output buffer. Throws RenderError.
  void render(const Body& body);
  const std::string& output() const { return out_; }

  // Helpers the builtins use. All throw RenderError on misuse.
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& callee, CallArgs& args);
  // Applies a named filter or test, as `|name(args)` and `is name(args)` do.
  Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);
  bool apply_test(const std::string& name, const Value& subject, CallArgs& args);
  // Python iteration: lists/tuples by item, dicts by key, strings by character, undefined empty.
  List iterate(const Value& v);
  // Fails when a string of `n_bytes` would exceed the output limit.
  void check_size(size_t n_bytes) const;
  // Counts one unit of work against max_steps.
  void step();
  // Counts work proportional to `n_bytes` of string handled (one step per 16 bytes), so that
  // repeated operations on huge strings stay bounded too.
  void charge(size_t n_bytes);
  const RenderOptions& options() const { return options_; }
  // Remembers a namespace made during the render; the destructor empties them all, breaking
  // the reference cycles a template can build (`set ns.me = ns`) so nothing leaks.
  void track(const Value& ns) { namespaces_.push_back(ns); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  friend struct DepthGuard;

  Flow exec_body(const Body& body, const std::shared_ptr<Scope>& scope);
  Flow exec(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void exec_if(const Stmt& s, const std::shared_ptr<Scope>& scope, Flow* flow);
  Flow exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void exec_macro(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void exec_call_block(const Stmt& s, const std::shared_ptr<Scope>& scope);
  std::string capture(const Body& body, const std::shared_ptr<Scope>& scope);
  Value make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope, const std::string& name);
  void bind_targets(const Stmt& s, const Value& item, Scope& scope);

  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_binary(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_compare(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_slice(const Expr& e, const std::shared_ptr<Scope>& scope);
  CallArgs eval_args(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope);
  Value lookup(const std::string& name, const std::shared_ptr<Scope>& scope);
  void emit(const std::string& text);

  const RenderOptions& options_;
  std::shared_ptr<Scope> root_;
  std::unordered_map<std::string, Value> globals_;
  std::vector<Value> namespaces_;
  std::string out_;
  std::string* sink_;
  int64_t steps_ = 0;
  int depth_ = 0;
};

// Binary operators with Python semantics ("+", "-", "*", "/", "//", "%", "**", "~", "==",
// "!=", "<", "<=", ">", ">=", "in", "notin"). Throws RenderError on type errors and overflow.
Value binary_op(Interpreter& in, const std::string& op, const Value& l, const Value& r);

// Error text for using an undefined value: "'x' is undefined" or "'dict object' has no attribute 'x'".
std::string undefined_message(const Value& v);

}  // namespace onebit::tmpl
