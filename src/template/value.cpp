// Value: construction, Python str/repr/equality, JSON in and out (json.dumps byte format).
#include "template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace onebit::tmpl {

const Value* CallArgs::find_keyword(const std::string& name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

const Value* CallArgs::get(size_t idx, const std::string& name) const {
  if (idx < positional.size()) return &positional[idx];
  return find_keyword(name);
}

namespace {

int checked_depth(int child_depth) {
  if (child_depth + 1 > kMaxValueDepth) {
    throw RenderError("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  return child_depth + 1;
}

}  // namespace

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::kList;
  int deepest = 0;
  for (const auto& item : items) deepest = std::max(deepest, item.depth());
  v.depth_ = checked_depth(deepest);
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::dict(Dict items) {
  Value v;
  v.kind_ = Kind::kDict;
  int deepest = 0;
  for (const auto& [k, item] : items) deepest = std::max({deepest, k.depth(), item.depth()});
  v.depth_ = checked_depth(deepest);
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}

Value Value::name_space(Dict items) {
  Value v = dict(std::move(items));
  v.kind_ = Kind::kNamespace;
  v.ns_depth_ = std::make_shared<int>(v.depth_);
  return v;
}

Value Value::callable(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) throw RenderError("JSON input nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return number(static_cast<double>(u));
      return integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(string(it.key()), from_json(it.value(), depth + 1));
      return dict(std::move(items));
    }
    default: return none();
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0.0;
    case Kind::kString: return !str_.empty();
    case Kind::kList:
    case Kind::kTuple: return !list_->empty();
    case Kind::kDict: return !dict_->empty();
    default: return true;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // shortest round-trip digits: "-1.2345e+02"
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp = std::stoi(sci.substr(e + 1));
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    if (digits.size() <= static_cast<size_t>(exp) + 1) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
  }
  return neg ? "-" + out : out;
}

namespace {

std::string string_repr(const std::string& s) {
  char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

std::string json_key(const Value& k) {
  if (k.is_string()) return k.as_string();
  if (k.is_none()) return "null";
  if (k.is_bool()) return k.as_bool() ? "true" : "false";
  if (k.is_int()) return std::to_string(k.as_int());
  if (k.is_float()) return float_repr(k.as_double());
  throw RenderError("tojson: keys must be str, int, float, bool or None, not " + k.type_name());
}

void to_json_impl(const Value& v, int indent, bool sort_keys, int depth, std::string& out) {
  if (depth > 512) throw RenderError("tojson: value nested deeper than 512 levels");
  std::string nl;
  if (indent >= 0) nl = "\n" + std::string(static_cast<size_t>(indent) * (depth + 1), ' ');
  std::string nl_close;
  if (indent >= 0) nl_close = "\n" + std::string(static_cast<size_t>(indent) * depth, ' ');
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
      else out += float_repr(d);
      return;
    }
    case Value::Kind::kString: json_string(v.as_string(), out); return;
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      if (v.items().empty()) { out += "[]"; return; }
      out += "[";
      bool first = true;
      for (const auto& e : v.items()) {
        if (!first) out += item_sep;
        first = false;
        out += nl;
        to_json_impl(e, indent, sort_keys, depth + 1, out);
      }
      out += nl_close + "]";
      return;
    }
    case Value::Kind::kDict: {
      if (v.entries().empty()) { out += "{}"; return; }
      std::vector<std::pair<std::string, const Value*>> kv;
      for (const auto& [k, val] : v.entries()) kv.emplace_back(json_key(k), &val);
      if (sort_keys) {
        std::stable_sort(kv.begin(), kv.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += "{";
      bool first = true;
      for (const auto& [k, val] : kv) {
        if (!first) out += item_sep;
        first = false;
        out += nl;
        json_string(k, out);
        out += ": ";
        to_json_impl(*val, indent, sort_keys, depth + 1, out);
      }
      out += nl_close + "}";
      return;
    }
    default: throw RenderError("tojson: Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string Value::to_json(int indent, bool sort_keys) const {
  std::string out;
  to_json_impl(*this, indent, sort_keys, 0, out);
  return out;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return str_;
    default: return repr();
  }
}

namespace {

// Python's repr; namespaces can hold themselves, so nesting is bounded like tojson's.
std::string repr_at(const Value& v, int depth) {
  if (depth > 512) throw RenderError("value nested deeper than 512 levels (does a namespace contain itself?)");
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return float_repr(v.as_double());
    case Value::Kind::kString: return string_repr(v.as_string());
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      bool tup = v.kind() == Value::Kind::kTuple;
      std::string out = tup ? "(" : "[";
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += ", ";
        out += repr_at(v.items()[i], depth + 1);
      }
      if (tup && v.items().size() == 1) out += ",";
      return out + (tup ? ")" : "]");
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      bool ns = v.kind() == Value::Kind::kNamespace;
      std::string out = ns ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, val] : v.entries()) {
        if (!first) out += ", ";
        first = false;
        out += repr_at(k, depth + 1) + ": " + repr_at(val, depth + 1);
      }
      return out + (ns ? "}>" : "}");
    }
    case Value::Kind::kCallable: return "<function " + v.fn().name + ">";
  }
  return "";
}

}  // namespace

std::string Value::repr() const { return repr_at(*this, 0); }

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
  }
  return "object";
}

bool Value::equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (is_float() || o.is_float()) return as_double() == o.as_double();
    return int_ == o.int_;
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return str_ == o.str_;
    case Kind::kList:
    case Kind::kTuple: {
      if (list_->size() != o.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].equals((*o.list_)[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict_->size() != o.dict_->size()) return false;
      for (const auto& [k, v] : *dict_) {
        const Value* ov = o.find(k);
        if (!ov || !v.equals(*ov)) return false;
      }
      return true;
    }
    case Kind::kNamespace: return dict_ == o.dict_;
    case Kind::kCallable: return fn_ == o.fn_;
    default: return false;
  }
}

Value* Value::find(const Value& key) const {
  if (!dict_) return nullptr;
  for (auto& [k, v] : *dict_) {
    if (k.equals(key)) return &v;
  }
  return nullptr;
}

void Value::set(const Value& key, Value v) const {
  int d = std::max(depth(), checked_depth(std::max(key.depth(), v.depth())));
  if (ns_depth_) *ns_depth_ = d;
  else depth_ = d;
  if (Value* slot = find(key)) {
    *slot = std::move(v);
    return;
  }
  dict_->emplace_back(key, std::move(v));
}

}  // namespace onebit::tmpl
