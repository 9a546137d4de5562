// Python methods templates call on values: str (strip, split, startswith, format...), dict
// (items, keys, values, get) and list (count, index). Mutating methods are refused as Jinja2's
// ImmutableSandboxedEnvironment refuses them, unless RenderOptions::allow_mutation.
#include <algorithm>
#include <cctype>

#include "base/utf8.h"
#include "template/builtins.h"

namespace onebit::tmpl {
namespace {

bool is_py_space(const std::string& ch) {
  if (ch.size() == 1) {
    unsigned char c = static_cast<unsigned char>(ch[0]);
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
  }
  static const char* kUnicodeSpaces[] = {"\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002",
                                         "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008",
                                         "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f",
                                         "\u3000"};
  for (const char* s : kUnicodeSpaces) {
    if (ch == s) return true;
  }
  return false;
}

const std::string& self_str(const Value& self) { return self.as_string(); }

std::string opt_chars(const CallArgs& args, bool* given) {
  const Value* c = args.get(0, "chars");
  *given = c && !c->is_none();
  return *given ? c->str() : "";
}

Value str_split(const std::string& s, const CallArgs& args, bool from_right) {
  const Value* sep_v = args.get(0, "sep");
  int64_t maxsplit = int_arg(args, 1, "maxsplit", -1);
  List out;
  if (!sep_v || sep_v->is_none()) {
    auto chars = utf8_split(s);
    std::vector<std::string> words;
    std::string cur;
    bool in_word = false;
    // Whitespace split: runs of whitespace separate, ends drop. maxsplit counts from the side.
    if (!from_right) {
      int64_t n = 0;
      size_t i = 0;
      for (; i < chars.size(); ++i) {
        if (is_py_space(chars[i])) {
          if (in_word) {
            words.push_back(cur), cur.clear(), in_word = false, ++n;
          }
          continue;
        }
        if (!in_word && maxsplit >= 0 && n >= maxsplit) break;
        in_word = true;
        cur += chars[i];
      }
      if (i < chars.size()) {
        std::string rest;
        for (; i < chars.size(); ++i) rest += chars[i];
        words.push_back(rest);
      } else if (in_word) {
        words.push_back(cur);
      }
    } else {
      std::string joined;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) joined += *it;
      Value rev = str_split(joined, args, false);
      for (auto it = rev.items().rbegin(); it != rev.items().rend(); ++it) {
        auto wc = utf8_split(it->as_string());
        std::string w;
        for (auto jt = wc.rbegin(); jt != wc.rend(); ++jt) w += *jt;
        words.push_back(w);
      }
    }
    for (auto& w : words) out.push_back(Value::string(w));
    return Value::list(std::move(out));
  }
  std::string sep = sep_v->str();
  if (sep.empty()) throw RenderError("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      size_t hit = s.find(sep, pos);
      if (hit == std::string::npos) break;
      parts.push_back(s.substr(pos, hit - pos));
      pos = hit + sep.size();
    }
    parts.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    std::vector<std::string> rev;
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      if (end < sep.size()) break;
      size_t hit = s.rfind(sep, end - sep.size());
      if (hit == std::string::npos) break;
      rev.push_back(s.substr(hit + sep.size(), end - hit - sep.size()));
      end = hit;
    }
    rev.push_back(s.substr(0, end));
    parts.assign(rev.rbegin(), rev.rend());
  }
  for (auto& p : parts) out.push_back(Value::string(p));
  return Value::list(std::move(out));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) throw RenderError("startswith/endswith first arg must be str or a tuple of str, not " + a.type_name());
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) {
    return std::any_of(affix.items().begin(), affix.items().end(), one);
  }
  return one(affix);
}

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (const auto& ch : utf8_split(s)) {
    bool cased = is_cased_letter(ch);
    out += cased ? (prev_cased ? py_lower(ch) : py_upper(ch)) : ch;
    prev_cased = cased;
  }
  return out;
}

std::string str_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw RenderError("str.format: single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) throw RenderError("str.format: format specs are not supported");
    const Value* v = nullptr;
    if (field.empty()) v = args.get(auto_idx++, "");
    else if (std::all_of(field.begin(), field.end(), ::isdigit)) v = args.get(std::stoul(field), "");
    else v = args.find_keyword(field);
    if (!v) throw RenderError("str.format: no argument for field '{" + field + "}'");
    out += v->str();
    i = close;
  }
  return out;
}

Value str_join(Interpreter& in, const std::string& sep, const CallArgs& args) {
  const Value* items = args.get(0, "iterable");
  if (!items) throw RenderError("join() takes exactly one argument");
  std::string out;
  bool first = true;
  for (const auto& v : in.iterate(*items)) {
    if (!v.is_string()) throw RenderError("sequence item: expected str instance, " + v.type_name() + " found");
    if (!first) out += sep;
    first = false;
    out += v.as_string();
    in.check_size(out.size());
  }
  return Value::string(out);
}

// find, rfind, index, rindex, count: positions in code points, as Python reports them.
Value str_search(const std::string& s, const std::string& name, const CallArgs& args) {
  const Value* sub = args.get(0, "sub");
  if (!sub || !sub->is_string()) throw RenderError(name + "() needs a string argument");
  const std::string& x = sub->as_string();
  if (name == "count") {
    if (x.empty()) return Value::integer(static_cast<int64_t>(utf8_count(s)) + 1);
    int64_t n = 0;
    for (size_t p = s.find(x); p != std::string::npos; p = s.find(x, p + x.size())) ++n;
    return Value::integer(n);
  }
  size_t p = (name == "find" || name == "index") ? s.find(x) : s.rfind(x);
  if (p == std::string::npos) {
    if (name == "index" || name == "rindex") throw RenderError("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(static_cast<int64_t>(utf8_count(s.substr(0, p))));
}

// isdigit, isalpha, isalnum, isspace (ASCII classes), islower, isupper.
Value str_predicate(const std::string& s, const std::string& name) {
  auto all_chars = [&](int (*pred)(int)) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)) != 0; });
  };
  if (name == "isdigit") return Value::boolean(all_chars(::isdigit));
  if (name == "isalpha") return Value::boolean(all_chars(::isalpha));
  if (name == "isalnum") return Value::boolean(all_chars(::isalnum));
  if (name == "isspace") return Value::boolean(all_chars(::isspace));
  bool cased = std::any_of(s.begin(), s.end(), ::isalpha);
  bool ok = name == "islower" ? py_lower(s) == s : py_upper(s) == s;
  return Value::boolean(cased && ok);
}

Value str_splitlines(const std::string& s) {
  List out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      out.push_back(Value::string(s.substr(start, i - start)));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) out.push_back(Value::string(s.substr(start)));
  return Value::list(std::move(out));
}

Value string_method(Interpreter& in, const Value& self, const std::string& name, CallArgs& args) {
  const std::string& s = self_str(self);
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool given = false;
    std::string chars = opt_chars(args, &given);
    return Value::string(py_strip(s, given ? &chars : nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") return str_split(s, args, name == "rsplit");
  if (name == "startswith" || name == "endswith") {
    const Value* a = args.get(0, "prefix");
    if (!a) throw RenderError(name + "() takes at least 1 argument (0 given)");
    return Value::boolean(affix_match(s, *a, name == "startswith"));
  }
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower") return Value::string(py_lower(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "replace" || name == "center") return in.apply_filter(name, self, args);
  if (name == "format") return Value::string(str_format(s, args));
  if (name == "join") return str_join(in, s, args);
  if (name == "splitlines") return str_splitlines(s);
  if (name.rfind("is", 0) == 0) return str_predicate(s, name);
  return str_search(s, name, args);
}

Value unsafe(const Value& self, const std::string& name) {
  throw RenderError("access to attribute '" + name + "' of '" + self.type_name() + "' object is unsafe.");
}

Value dict_method(Interpreter& in, const Value& self, const std::string& name, CallArgs& args) {
  bool mutate = in.options().allow_mutation;
  if (name == "items" || name == "keys" || name == "values") {
    List out;
    for (const auto& [k, v] : self.entries()) {
      out.push_back(name == "items" ? Value::tuple({k, v}) : name == "keys" ? k : v);
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    const Value* key = args.get(0, "key");
    if (!key) throw RenderError("get expected at least 1 argument, got 0");
    if (Value* v = self.find(*key)) return *v;
    const Value* d = args.get(1, "default");
    return d ? *d : Value::none();
  }
  if (name == "copy") return Value::dict(self.entries());
  if (!mutate) return unsafe(self, name);
  if (name == "update") {
    if (!args.positional.empty()) {
      for (const auto& [k, v] : args.positional[0].entries()) self.set(k, v);
    }
    for (const auto& [k, v] : args.keyword) self.set(Value::string(k), v);
    return Value::none();
  }
  if (name == "pop" || name == "setdefault") {
    const Value* key = args.get(0, "key");
    if (!key) throw RenderError(name + " expected at least 1 argument");
    const Value* d = args.get(1, "default");
    if (Value* v = self.find(*key)) {
      Value r = *v;
      if (name == "pop") {
        auto& e = self.entries();
        e.erase(std::remove_if(e.begin(), e.end(), [&](const auto& kv) { return kv.first.equals(*key); }), e.end());
      }
      return r;
    }
    if (name == "setdefault") {
      self.set(*key, d ? *d : Value::none());
      return d ? *d : Value::none();
    }
    if (!d) throw RenderError("KeyError: " + key->repr());
    return *d;
  }
  if (name == "clear") {
    self.entries().clear();
    return Value::none();
  }
  throw RenderError("dict has no method '" + name + "'");
}

Value list_method(Interpreter& in, const Value& self, const std::string& name, CallArgs& args) {
  List& items = self.items();
  if (name == "count" || name == "index") {
    const Value* x = args.get(0, "value");
    if (!x) throw RenderError(name + "() takes exactly one argument (0 given)");
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].equals(*x)) continue;
      if (name == "index") return Value::integer(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") throw RenderError(x->repr() + " is not in list");
    return Value::integer(n);
  }
  if (name == "copy") return Value::list(items);
  if (!in.options().allow_mutation || self.kind() == Value::Kind::kTuple) return unsafe(self, name);
  if (name == "append") {
    if (args.positional.size() != 1) throw RenderError("append() takes exactly one argument");
    items.push_back(args.positional[0]);
    return Value::none();
  }
  if (name == "extend") {
    if (args.positional.size() != 1) throw RenderError("extend() takes exactly one argument");
    for (const auto& v : in.iterate(args.positional[0])) items.push_back(v);
    return Value::none();
  }
  if (name == "pop") {
    if (items.empty()) throw RenderError("pop from empty list");
    int64_t i = int_arg(args, 0, "index", -1);
    if (i < 0) i += static_cast<int64_t>(items.size());
    if (i < 0 || i >= static_cast<int64_t>(items.size())) throw RenderError("pop index out of range");
    Value r = items[static_cast<size_t>(i)];
    items.erase(items.begin() + i);
    return r;
  }
  if (name == "clear") {
    items.clear();
    return Value::none();
  }
  if (name == "reverse") {
    std::reverse(items.begin(), items.end());
    return Value::none();
  }
  if (name == "insert") {
    int64_t i = std::clamp<int64_t>(int_arg(args, 0, "index", 0), 0, static_cast<int64_t>(items.size()));
    const Value* x = args.get(1, "object");
    if (!x) throw RenderError("insert expected 2 arguments");
    items.insert(items.begin() + i, *x);
    return Value::none();
  }
  throw RenderError("list has no method '" + name + "'");
}

bool is_one_of(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace

std::string py_capitalize(const std::string& s) {
  auto chars = utf8_split(s);
  std::string out;
  for (size_t i = 0; i < chars.size(); ++i) out += i == 0 ? py_upper(chars[i]) : py_lower(chars[i]);
  return out;
}

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  auto cs = utf8_split(s);
  std::vector<std::string> strip_set;
  if (chars) strip_set = utf8_split(*chars);
  auto strip = [&](const std::string& ch) {
    if (!chars) return is_py_space(ch);
    return std::find(strip_set.begin(), strip_set.end(), ch) != strip_set.end();
  };
  size_t b = 0, e = cs.size();
  if (left) {
    while (b < e && strip(cs[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cs[e - 1])) --e;
  }
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

Value bound_method(Interpreter& in, const Value& obj, const std::string& name) {
  using Fn = Value (*)(Interpreter&, const Value&, const std::string&, CallArgs&);
  Fn fn = nullptr;
  if (obj.is_string() &&
      is_one_of(name, {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower",
                       "title", "capitalize", "replace", "center", "format", "join", "find", "rfind", "count",
                       "index", "rindex", "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper",
                       "splitlines"})) {
    fn = string_method;
  } else if (obj.is_dict() &&
             is_one_of(name, {"items", "keys", "values", "get", "copy", "update", "pop", "popitem", "setdefault",
                              "clear"})) {
    fn = dict_method;
  } else if (obj.is_list() && is_one_of(name, {"count", "index", "copy", "append", "extend", "insert", "pop",
                                               "remove", "reverse", "sort", "clear"})) {
    fn = list_method;
  }
  if (!fn) return Value::undefined();
  return Value::callable(name, [obj, name, fn](Interpreter& interp, CallArgs& args) { return fn(interp, obj, name, args); });
}

}  // namespace onebit::tmpl
