// Binary operators with Python 3 semantics: int/float promotion, floor division and modulo with
// the divisor's sign, str/list concatenation and repetition, ordering, membership. Integers are
// 64-bit; where Python would grow a big integer we stop with an overflow error instead.
#include <cmath>

#include "template/interpreter.h"

namespace onebit::tmpl {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& l, const Value& r) {
  throw RenderError("unsupported operand type(s) for " + op + ": '" + l.type_name() + "' and '" +
                    r.type_name() + "'");
}

void check_overflow(bool overflow, const std::string& op) {
  if (overflow) throw RenderError("integer overflow in '" + op + "' (results must fit in 64 bits)");
}

Value repeat(Interpreter& in, const Value& seq, int64_t times) {
  if (times <= 0) return seq.is_string() ? Value::string("") : Value::list();
  if (seq.is_string()) {
    in.check_size(static_cast<size_t>(times) > in.options().limits.max_output_bytes
                      ? static_cast<size_t>(times)
                      : seq.as_string().size() * static_cast<size_t>(times));
    in.charge(seq.as_string().size() * static_cast<size_t>(times));
    std::string out;
    out.reserve(seq.as_string().size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  size_t n = seq.items().size();
  if (n && static_cast<size_t>(times) > in.options().limits.max_output_bytes / n) {
    throw RenderError("list repetition of " + std::to_string(times) + " is too large");
  }
  List items;
  for (int64_t i = 0; i < times; ++i) items.insert(items.end(), seq.items().begin(), seq.items().end());
  return seq.kind() == Value::Kind::kTuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

Value arith(Interpreter& in, const std::string& op, const Value& l, const Value& r) {
  bool ints = !l.is_float() && !r.is_float();
  int64_t a = l.as_int(), b = r.as_int(), out = 0;
  double x = l.as_double(), y = r.as_double();
  if (op == "+") {
    if (ints) {
      check_overflow(__builtin_add_overflow(a, b, &out), op);
      return Value::integer(out);
    }
    return Value::number(x + y);
  }
  if (op == "-") {
    if (ints) {
      check_overflow(__builtin_sub_overflow(a, b, &out), op);
      return Value::integer(out);
    }
    return Value::number(x - y);
  }
  if (op == "*") {
    if (ints) {
      check_overflow(__builtin_mul_overflow(a, b, &out), op);
      return Value::integer(out);
    }
    return Value::number(x * y);
  }
  if (op == "/") {
    if (y == 0) throw RenderError("division by zero");
    return Value::number(x / y);
  }
  if (op == "//" || op == "%") {
    if (ints) {
      if (b == 0) throw RenderError(op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
      check_overflow(a == INT64_MIN && b == -1, op);
      int64_t q = a / b, m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) --q, m += b;
      return Value::integer(op == "//" ? q : m);
    }
    if (y == 0) throw RenderError("float floor division or modulo by zero");
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    if (op == "%") return Value::number(m);
    return Value::number(std::floor(x / y));
  }
  if (op == "**") {
    if (ints && b >= 0) {
      int64_t result = 1, base = a;
      for (int64_t e = b; e > 0; e >>= 1) {
        in.step();
        if (e & 1) check_overflow(__builtin_mul_overflow(result, base, &result), op);
        if (e > 1) check_overflow(__builtin_mul_overflow(base, base, &base), op);
      }
      return Value::integer(result);
    }
    if (x == 0 && y < 0) throw RenderError("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(x, y));
  }
  unsupported(op, l, r);
}

// Python ordering for <, <=, >, >=: numbers, strings (code point order = UTF-8 byte order),
// and lists/tuples lexicographically.
int compare(const Value& l, const Value& r, const std::string& op) {
  if (l.is_number() && r.is_number()) {
    double x = l.as_double(), y = r.as_double();
    if (!l.is_float() && !r.is_float()) return l.as_int() < r.as_int() ? -1 : l.as_int() > r.as_int();
    return x < y ? -1 : x > y;
  }
  if (l.is_string() && r.is_string()) {
    int c = l.as_string().compare(r.as_string());
    return c < 0 ? -1 : c > 0;
  }
  if (l.is_list() && r.is_list() && l.kind() == r.kind()) {
    const List& a = l.items();
    const List& b = r.items();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (!a[i].equals(b[i])) return compare(a[i], b[i], op);
    }
    return a.size() < b.size() ? -1 : a.size() > b.size();
  }
  if (l.is_undefined() || r.is_undefined()) throw RenderError(undefined_message(l.is_undefined() ? l : r));
  throw RenderError("'" + op + "' not supported between instances of '" + l.type_name() + "' and '" +
                    r.type_name() + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        throw RenderError("'in <string>' requires string as left operand, not " + item.type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      for (const auto& v : container.items()) {
        if (v.equals(item)) return true;
      }
      return false;
    case Value::Kind::kDict: return container.find(item) != nullptr;
    default: throw RenderError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

}  // namespace

Value binary_op(Interpreter& in, const std::string& op, const Value& l, const Value& r) {
  if (op == "==") return Value::boolean(l.equals(r));
  if (op == "!=") return Value::boolean(!l.equals(r));
  if (op == "in") return Value::boolean(contains(r, l));
  if (op == "notin") return Value::boolean(!contains(r, l));
  if (op == "<") return Value::boolean(compare(l, r, op) < 0);
  if (op == "<=") return Value::boolean(compare(l, r, op) <= 0);
  if (op == ">") return Value::boolean(compare(l, r, op) > 0);
  if (op == ">=") return Value::boolean(compare(l, r, op) >= 0);
  if (op == "~") {
    std::string a = l.str(), b = r.str();
    in.check_size(a.size() + b.size());
    in.charge(a.size() + b.size());
    return Value::string(a + b);
  }
  if (l.is_undefined() || r.is_undefined()) throw RenderError(undefined_message(l.is_undefined() ? l : r));
  if (l.is_number() && r.is_number()) return arith(in, op, l, r);
  if (op == "+") {
    if (l.is_string() && r.is_string()) {
      in.check_size(l.as_string().size() + r.as_string().size());
      in.charge(l.as_string().size() + r.as_string().size());
      return Value::string(l.as_string() + r.as_string());
    }
    if (l.is_list() && r.is_list() && l.kind() == r.kind()) {
      List items = l.items();
      items.insert(items.end(), r.items().begin(), r.items().end());
      return l.kind() == Value::Kind::kTuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    if (l.is_string()) throw RenderError("can only concatenate str (not \"" + r.type_name() + "\") to str");
    if (l.is_list()) {
      throw RenderError("can only concatenate " + l.type_name() + " (not \"" + r.type_name() + "\") to " + l.type_name());
    }
  }
  if (op == "*") {
    if ((l.is_string() || l.is_list()) && (r.is_int() || r.is_bool())) return repeat(in, l, r.as_int());
    if ((r.is_string() || r.is_list()) && (l.is_int() || l.is_bool())) return repeat(in, r, l.as_int());
  }
  if (op == "%" && l.is_string()) throw RenderError("printf-style '%' string formatting is not supported; use ~ or format()");
  unsupported(op, l, r);
}

}  // namespace onebit::tmpl
