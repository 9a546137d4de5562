// Value: the dynamic type of the chat-template interpreter, with Python's semantics for
// printing (str/repr), truthiness and equality, and conversion to and from JSON.
// Depends on nlohmann-json and the standard library only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace onebit::tmpl {

class Value;
class Interpreter;

// A render-time failure (type error, undefined access, limit hit). Thrown inside the
// interpreter only and turned into a Result at the render boundary (template.h), so that the
// many nested evaluation helpers need no error plumbing.
struct RenderError : std::runtime_error {
  explicit RenderError(const std::string& message, bool raised = false)
      : std::runtime_error(message), raised_by_template(raised) {}
  bool raised_by_template;  // true for raise_exception(msg): the message is the template's text
};

// Positional and keyword arguments of a call, as the callee sees them.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword argument `name`, or nullptr.
  const Value* find_keyword(const std::string& name) const;
  // Positional `idx`, else keyword `name`, else nullptr.
  const Value* get(size_t idx, const std::string& name) const;
};

// Containers nest at most this deep, so that printing, comparing and freeing them (all
// recursive) stay within the stack.
inline constexpr int kMaxValueDepth = 512;

using NativeFunction = std::function<Value(Interpreter&, CallArgs&)>;

struct Callable {
  std::string name;
  NativeFunction fn;
};

using List = std::vector<Value>;
// Insertion-ordered like a Python dict; linear lookup is fine for chat-sized objects.
using Dict = std::vector<std::pair<Value, Value>>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict,
                    kNamespace, kCallable };

  Value() = default;  // undefined
  static Value undefined(std::string name = "") { Value v; v.str_ = std::move(name); return v; }
  static Value none() { Value v; v.kind_ = Kind::kNone; return v; }
  static Value boolean(bool b) { Value v; v.kind_ = Kind::kBool; v.int_ = b; return v; }
  static Value integer(int64_t i) { Value v; v.kind_ = Kind::kInt; v.int_ = i; return v; }
  static Value number(double d) { Value v; v.kind_ = Kind::kFloat; v.float_ = d; return v; }
  static Value string(std::string s) { Value v; v.kind_ = Kind::kString; v.str_ = std::move(s); return v; }
  static Value list(List items = {});
  static Value tuple(List items);
  static Value dict(Dict items = {});
  static Value name_space(Dict items = {});
  static Value callable(std::string name, NativeFunction fn);
  // Converts JSON (objects keep their key order) into a Value tree. Throws RenderError when
  // nested deeper than kMaxValueDepth.
  static Value from_json(const nlohmann::ordered_json& j, int depth = 0);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_double() const { return is_float() ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_; }
  const std::string& undefined_name() const { return str_; }
  // Shared (reference semantics, like Python): copies of the Value see the same items.
  List& items() const { return *list_; }
  Dict& entries() const { return *dict_; }
  const Callable& fn() const { return *fn_; }

  // Python truthiness; undefined is false.
  bool truthy() const;
  // Python str(): what {{ value }} prints. Undefined prints as "".
  std::string str() const;
  // Python repr(), used inside containers.
  std::string repr() const;
  // json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys); indent < 0 means
  // none. Throws RenderError for values JSON cannot hold (undefined, callables).
  std::string to_json(int indent, bool sort_keys) const;
  // Python ==, across int/float/bool and deep for containers.
  bool equals(const Value& other) const;
  // Python's type name ("str", "int", "dict") for error messages.
  std::string type_name() const;

  // The value stored under `key` in a dict/namespace, or nullptr.
  Value* find(const Value& key) const;
  Value* find(const std::string& key) const { return find(Value::string(key)); }
  // Inserts or replaces `key` in a dict/namespace.
  void set(const Value& key, Value v) const;

 private:
  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
  mutable int depth_ = 0;  // containers: 1 + the deepest item
  // A namespace's depth is shared by every handle to it, since `set ns.x = ...` changes it in place.
  std::shared_ptr<int> ns_depth_;
  int depth() const { return ns_depth_ ? *ns_depth_ : depth_; }
};

// Python's repr() of a float ("1.0", "0.1", "1e+16").
std::string float_repr(double d);

}  // namespace onebit::tmpl
