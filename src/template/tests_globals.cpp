// Jinja2's built-in tests (jinja2/tests.py) and the globals chat templates use: range (capped
// at the sandbox's MAX_RANGE), dict, namespace, raise_exception, strftime_now, cycler, joiner.
#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>

#include "template/builtins.h"

namespace onebit::tmpl {
namespace {

// Jinja2's SandboxedEnvironment refuses larger ranges with the same limit.
constexpr int64_t kMaxRange = 100000;

const Value& arg0(const CallArgs& args, const char* test) {
  if (args.positional.empty()) throw RenderError(std::string("test '") + test + "' needs an argument");
  return args.positional[0];
}

bool t_defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_number(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_integer(Interpreter&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Interpreter&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs&) { return v.is_dict(); }
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_sequence(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_boolean(Interpreter&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
// Jinja2's Undefined defines __call__ (to raise), so callable() says true for it.
bool t_callable(Interpreter&, const Value& v, CallArgs&) { return v.is_callable() || v.is_undefined(); }
bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return v.equals(arg0(a, "eq")); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return !v.equals(arg0(a, "ne")); }
bool t_lt(Interpreter& in, const Value& v, CallArgs& a) { return binary_op(in, "<", v, arg0(a, "lt")).truthy(); }
bool t_le(Interpreter& in, const Value& v, CallArgs& a) { return binary_op(in, "<=", v, arg0(a, "le")).truthy(); }
bool t_gt(Interpreter& in, const Value& v, CallArgs& a) { return binary_op(in, ">", v, arg0(a, "gt")).truthy(); }
bool t_ge(Interpreter& in, const Value& v, CallArgs& a) { return binary_op(in, ">=", v, arg0(a, "ge")).truthy(); }
bool t_in(Interpreter& in, const Value& v, CallArgs& a) { return binary_op(in, "in", v, arg0(a, "in")).truthy(); }

bool t_odd(Interpreter& in, const Value& v, CallArgs&) {
  return binary_op(in, "%", v, Value::integer(2)).as_double() == 1;
}
bool t_even(Interpreter& in, const Value& v, CallArgs&) {
  return binary_op(in, "%", v, Value::integer(2)).as_double() == 0;
}
bool t_divisibleby(Interpreter& in, const Value& v, CallArgs& a) {
  return binary_op(in, "%", v, arg0(a, "divisibleby")).as_double() == 0;
}
bool t_lower(Interpreter&, const Value& v, CallArgs&) {
  if (!v.is_string()) return false;
  const std::string& s = v.as_string();
  return py_lower(s) == s && std::any_of(s.begin(), s.end(), ::isalpha);
}
bool t_upper(Interpreter&, const Value& v, CallArgs&) {
  if (!v.is_string()) return false;
  const std::string& s = v.as_string();
  return py_upper(s) == s && std::any_of(s.begin(), s.end(), ::isalpha);
}
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kNone:
    case Value::Kind::kUndefined: return true;
    case Value::Kind::kBool: return v.as_bool() == o.as_bool();
    case Value::Kind::kList:
    case Value::Kind::kTuple: return &v.items() == &o.items();
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return &v.entries() == &o.entries();
    case Value::Kind::kCallable: return &v.fn() == &o.fn();
    default: return v.equals(o);  // small ints and interned strings are identical in CPython
  }
}
bool t_escaped(Interpreter&, const Value&, CallArgs&) { return false; }
bool t_filter(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && find_filter(v.as_string()); }
bool t_test(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && find_test(v.as_string()); }

Value g_range(Interpreter& in, CallArgs& args) {
  int64_t start = 0, stop = 0, step = 1;
  auto as_int = [](const Value& v) {
    if (!v.is_int() && !v.is_bool()) throw RenderError("range() arguments must be integers, not " + v.type_name());
    return v.as_int();
  };
  const auto& p = args.positional;
  if (p.size() == 1) stop = as_int(p[0]);
  else if (p.size() == 2) start = as_int(p[0]), stop = as_int(p[1]);
  else if (p.size() == 3) start = as_int(p[0]), stop = as_int(p[1]), step = as_int(p[2]);
  else throw RenderError("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  if (step == 0) throw RenderError("range() arg 3 must not be zero");
  long double count = step > 0 ? (static_cast<long double>(stop) - start) / step
                               : (static_cast<long double>(start) - stop) / -step;
  if (count > kMaxRange) {
    throw RenderError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) + ").");
  }
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    in.step();
    out.push_back(Value::integer(i));
  }
  return Value::list(std::move(out));
}

Value g_dict(Interpreter&, CallArgs& args) {
  Value d = Value::dict();
  if (!args.positional.empty() && args.positional[0].is_dict()) {
    for (const auto& [k, v] : args.positional[0].entries()) d.set(k, v);
  }
  for (const auto& [k, v] : args.keyword) d.set(Value::string(k), v);
  return d;
}

Value g_namespace(Interpreter& in, CallArgs& args) {
  Value d = g_dict(in, args);
  Value ns = Value::name_space(d.entries());
  in.track(ns);
  return ns;
}

Value g_raise_exception(Interpreter&, CallArgs& args) {
  std::string msg = args.positional.empty() ? "" : args.positional[0].str();
  throw RenderError(msg, /*raised=*/true);
}

Value g_strftime_now(Interpreter& in, CallArgs& args) {
  if (args.positional.empty() || !args.positional[0].is_string()) {
    throw RenderError("strftime_now() needs a format string");
  }
  std::tm tm{};
  if (in.options().now) {
    tm = in.options().now();
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), args.positional[0].as_string().c_str(), &tm);
  return Value::string(std::string(buf, n));
}

Value g_cycler(Interpreter& in, CallArgs& args) {
  List items = args.positional;
  auto pos = std::make_shared<size_t>(0);
  Value c = Value::name_space();
  in.track(c);
  c.set(Value::string("next"), Value::callable("next", [items, pos](Interpreter&, CallArgs&) {
          if (items.empty()) return Value::none();
          return items[(*pos)++ % items.size()];
        }));
  return c;
}

Value g_joiner(Interpreter&, CallArgs& args) {
  std::string sep = args.positional.empty() ? ", " : args.positional[0].str();
  auto used = std::make_shared<bool>(false);
  return Value::callable("joiner", [sep, used](Interpreter&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

}  // namespace

TestFn find_test(const std::string& name) {
  static const std::map<std::string, TestFn> kTests = {
      {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"string", t_string},
      {"number", t_number}, {"integer", t_integer}, {"float", t_float}, {"mapping", t_mapping},
      {"iterable", t_iterable}, {"sequence", t_sequence}, {"boolean", t_boolean}, {"true", t_true},
      {"false", t_false}, {"callable", t_callable}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq},
      {"ne", t_ne}, {"!=", t_ne}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le},
      {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge}, {">=", t_ge}, {"in", t_in},
      {"odd", t_odd}, {"even", t_even}, {"divisibleby", t_divisibleby}, {"lower", t_lower},
      {"upper", t_upper}, {"sameas", t_sameas}, {"escaped", t_escaped}, {"filter", t_filter},
      {"test", t_test},
  };
  auto it = kTests.find(name);
  return it == kTests.end() ? nullptr : it->second;
}

void add_globals(std::unordered_map<std::string, Value>& globals) {
  globals["range"] = Value::callable("range", g_range);
  globals["dict"] = Value::callable("dict", g_dict);
  globals["namespace"] = Value::callable("namespace", g_namespace);
  globals["raise_exception"] = Value::callable("raise_exception", g_raise_exception);
  globals["strftime_now"] = Value::callable("strftime_now", g_strftime_now);
  globals["cycler"] = Value::callable("cycler", g_cycler);
  globals["joiner"] = Value::callable("joiner", g_joiner);
}

}  // namespace onebit::tmpl
