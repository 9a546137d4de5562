// Jinja2's built-in filters (jinja2/filters.py, 3.1) plus transformers' tojson (ensure_ascii off,
// indent, sort_keys off). Case-insensitive sorting and case mapping cover ASCII only.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>

#include "base/utf8.h"
#include "template/builtins.h"

namespace onebit::tmpl {

int64_t int_arg(const CallArgs& args, size_t idx, const std::string& name, int64_t fallback) {
  const Value* v = args.get(idx, name);
  if (!v || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool()) throw RenderError("argument '" + name + "' must be an integer, not " + v->type_name());
  return v->as_int();
}

namespace {

bool bool_arg(const CallArgs& args, size_t idx, const std::string& name, bool fallback) {
  const Value* v = args.get(idx, name);
  return v ? v->truthy() : fallback;
}

std::string str_arg(const CallArgs& args, size_t idx, const std::string& name, const std::string& fallback) {
  const Value* v = args.get(idx, name);
  return v ? v->str() : fallback;
}

// jinja2.filters.make_attrgetter: "a.b.0" walks items/attributes, digits index.
Value get_attribute(Interpreter& in, const Value& item, const std::string& attribute, const Value* dflt = nullptr) {
  Value v = item;
  size_t start = 0;
  while (start <= attribute.size()) {
    size_t dot = attribute.find('.', start);
    std::string part = attribute.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = in.getitem(v, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dflt && v.is_undefined()) v = *dflt;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return v;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.as_string()));
  return v;
}

bool less(Interpreter& in, const Value& a, const Value& b) { return binary_op(in, "<", a, b).truthy(); }

Value f_tojson(Interpreter& in, const Value& v, CallArgs& args) {
  // transformers' signature is tojson(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False): templates pass indent by keyword.
  const Value* indent = args.find_keyword("indent");
  int n = -1;
  if (indent && !indent->is_none()) {
    if (!indent->is_int()) throw RenderError("tojson: indent must be an integer");
    n = static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64));
  }
  std::string out = v.to_json(n, bool_arg(args, 99, "sort_keys", false));
  in.charge(out.size());
  in.check_size(out.size());
  return Value::string(std::move(out));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& args) {
  const Value* chars = args.get(0, "chars");
  std::string c = chars && !chars->is_none() ? chars->str() : "";
  return Value::string(py_strip(v.str(), chars && !chars->is_none() ? &c : nullptr, true, true));
}

Value f_upper(Interpreter&, const Value& v, CallArgs&) { return Value::string(py_upper(v.str())); }
Value f_lower(Interpreter&, const Value& v, CallArgs&) { return Value::string(py_lower(v.str())); }

Value f_capitalize(Interpreter&, const Value& v, CallArgs&) { return Value::string(py_capitalize(v.str())); }

Value f_title(Interpreter&, const Value& v, CallArgs&) {
  // Words begin after whitespace or one of -({[< (jinja2 _word_beginning_split_re).
  std::string out;
  bool begin = true;
  for (const auto& ch : utf8_split(v.str())) {
    bool sep = ch.size() == 1 && (std::isspace(static_cast<unsigned char>(ch[0])) || std::strchr("-({[<", ch[0]));
    if (sep) {
      out += ch;
      begin = true;
    } else {
      out += begin ? py_upper(ch) : py_lower(ch);
      begin = false;
    }
  }
  return Value::string(out);
}

Value f_length(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_string()) in.charge(v.as_string().size());
  if (v.is_string()) return Value::integer(static_cast<int64_t>(utf8_count(v.as_string())));
  if (v.is_list()) return Value::integer(static_cast<int64_t>(v.items().size()));
  if (v.is_dict() || v.is_namespace()) return Value::integer(static_cast<int64_t>(v.entries().size()));
  if (v.is_undefined()) return Value::integer(0);
  throw RenderError("object of type '" + v.type_name() + "' has no len()");
}

Value f_first(Interpreter& in, const Value& v, CallArgs&) {
  List items = in.iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter& in, const Value& v, CallArgs&) {
  List items = in.iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_join(Interpreter& in, const Value& v, CallArgs& args) {
  std::string sep = str_arg(args, 0, "d", "");
  const Value* attr = args.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const auto& item : in.iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (attr && !attr->is_none() ? get_attribute(in, item, attr->str()) : item).str();
    in.check_size(out.size());
  }
  return Value::string(out);
}

Value f_default(Interpreter&, const Value& v, CallArgs& args) {
  const Value* d = args.get(0, "default_value");
  bool boolean = bool_arg(args, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.truthy())) return d ? *d : Value::string("");
  return v;
}

Value f_list(Interpreter& in, const Value& v, CallArgs&) { return Value::list(in.iterate(v)); }
Value f_string(Interpreter&, const Value& v, CallArgs&) { return Value::string(v.str()); }

Value f_int(Interpreter&, const Value& v, CallArgs& args) {
  const Value* d = args.get(0, "default");
  Value fallback = d ? *d : Value::integer(0);
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double x = v.as_double();
    if (!std::isfinite(x) || std::fabs(x) >= 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(x));
  }
  if (v.is_string()) {
    std::string s = py_strip(v.as_string(), nullptr, true, true);
    char* end = nullptr;
    errno = 0;
    long long i = std::strtoll(s.c_str(), &end, static_cast<int>(int_arg(args, 1, "base", 10)));
    if (!s.empty() && *end == 0 && errno == 0) return Value::integer(i);
    double x = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == 0 && std::isfinite(x) && std::fabs(x) < 9.2e18) return Value::integer(static_cast<int64_t>(x));
  }
  return fallback;
}

Value f_float(Interpreter&, const Value& v, CallArgs& args) {
  const Value* d = args.get(0, "default");
  Value fallback = d ? *d : Value::number(0.0);
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    std::string s = py_strip(v.as_string(), nullptr, true, true);
    char* end = nullptr;
    double x = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == 0) return Value::number(x);
  }
  return fallback;
}

Value f_abs(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) throw RenderError("integer overflow in abs");
    return Value::integer(std::llabs(v.as_int()));
  }
  throw RenderError("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_round(Interpreter&, const Value& v, CallArgs& args) {
  if (!v.is_number()) throw RenderError("round: expected a number, got " + v.type_name());
  int64_t precision = std::clamp<int64_t>(int_arg(args, 0, "precision", 0), -300, 300);
  std::string method = str_arg(args, 1, "method", "common");
  if (method == "common" && !v.is_float()) return Value::integer(v.as_int());  // round(int) is an int
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  if (method == "common") x = std::nearbyint(x);  // Python round(): ties to even
  else if (method == "ceil") x = std::ceil(x);
  else if (method == "floor") x = std::floor(x);
  else throw RenderError("round: method must be 'common', 'ceil' or 'floor'");
  return Value::number(x / scale);
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& args) {
  std::string s = v.str(), from = str_arg(args, 0, "old", ""), to = str_arg(args, 1, "new", "");
  int64_t count = int_arg(args, 2, "count", -1);
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every character and at both ends.
    auto chars = utf8_split(s);
    for (size_t i = 0; i <= chars.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += to;
      if (i < chars.size()) out += chars[i];
      in.check_size(out.size());
    }
    return Value::string(out);
  }
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out += s.substr(pos, hit - pos) + to;
    in.check_size(out.size());
    pos = hit + from.size();
  }
  return Value::string(out + s.substr(pos));
}

Value f_reverse(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_string()) {
    auto chars = utf8_split(v.as_string());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value::string(out);
  }
  List items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& args) {
  bool reverse = bool_arg(args, 0, "reverse", false);
  bool cs = bool_arg(args, 1, "case_sensitive", false);
  const Value* attr = args.get(2, "attribute");
  List items = in.iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) {
    Value k = attr && !attr->is_none() ? get_attribute(in, item, attr->str()) : item;
    keyed.emplace_back(sort_key(k, cs), item);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less(in, b.first, a.first) : less(in, a.first, b.first);
  });
  List out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return Value::list(std::move(out));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& args) {
  bool cs = bool_arg(args, 0, "case_sensitive", false);
  const Value* attr = args.get(1, "attribute");
  List out, seen;
  for (auto& item : in.iterate(v)) {
    Value k = sort_key(attr && !attr->is_none() ? get_attribute(in, item, attr->str()) : item, cs);
    bool dup = false;
    for (const auto& s : seen) dup = dup || s.equals(k);
    if (!dup) seen.push_back(k), out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, CallArgs& args, bool want_max) {
  bool cs = bool_arg(args, 0, "case_sensitive", false);
  const Value* attr = args.get(1, "attribute");
  List items = in.iterate(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value k = sort_key(attr && !attr->is_none() ? get_attribute(in, items[i], attr->str()) : items[i], cs);
    if (i == 0 || (want_max ? less(in, best_key, k) : less(in, k, best_key))) best = i, best_key = k;
  }
  return items[best];
}
Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }

Value f_sum(Interpreter& in, const Value& v, CallArgs& args) {
  const Value* attr = args.get(0, "attribute");
  const Value* start = args.get(1, "start");
  Value total = start ? *start : Value::integer(0);
  for (auto& item : in.iterate(v)) {
    total = binary_op(in, "+", total, attr && !attr->is_none() ? get_attribute(in, item, attr->str()) : item);
  }
  return total;
}

// Arguments after the filter/test name, shifted so the test sees (item, rest...).
CallArgs shift_args(const CallArgs& args, size_t skip) {
  CallArgs rest;
  for (size_t i = skip; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  rest.keyword = args.keyword;
  return rest;
}

Value f_map(Interpreter& in, const Value& v, CallArgs& args) {
  List out;
  if (v.is_none() || v.is_undefined()) return Value::list(std::move(out));  // Jinja2: `if value:` first
  const Value* attr = args.find_keyword("attribute");
  if (attr) {
    const Value* dflt = args.find_keyword("default");
    for (auto& item : in.iterate(v)) {
      out.push_back(get_attribute(in, item, attr->str(), dflt));
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty()) throw RenderError("map: needs a filter name or attribute=");
  std::string filter = args.positional[0].str();
  CallArgs rest = shift_args(args, 1);
  for (auto& item : in.iterate(v)) out.push_back(in.apply_filter(filter, item, rest));
  return Value::list(std::move(out));
}

Value select_impl(Interpreter& in, const Value& v, CallArgs& args, bool by_attr, bool keep) {
  if (v.is_none() || v.is_undefined()) return Value::list({});  // Jinja2: `if value:` first, so none gives nothing
  size_t name_idx = by_attr ? 1 : 0;
  std::string attribute = by_attr ? (args.positional.empty() ? "" : args.positional[0].str()) : "";
  if (by_attr && args.positional.empty()) throw RenderError("selectattr/rejectattr need an attribute name");
  bool has_test = args.positional.size() > name_idx;
  std::string test = has_test ? args.positional[name_idx].str() : "";
  CallArgs rest = shift_args(args, name_idx + 1);
  List out;
  for (auto& item : in.iterate(v)) {
    Value subject = by_attr ? get_attribute(in, item, attribute) : item;
    bool r = has_test ? in.apply_test(test, subject, rest) : subject.truthy();
    if (r == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, false); }

Value f_items(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict()) throw RenderError("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, val] : v.entries()) out.push_back(Value::tuple({k, val}));
  return Value::list(std::move(out));
}

Value f_dictsort(Interpreter& in, const Value& v, CallArgs& args) {
  if (!v.is_dict()) throw RenderError("dictsort: expected a mapping, got " + v.type_name());
  bool cs = bool_arg(args, 0, "case_sensitive", false);
  std::string by = str_arg(args, 1, "by", "key");
  bool reverse = bool_arg(args, 2, "reverse", false);
  if (by != "key" && by != "value") throw RenderError("You can only sort by either 'key' or 'value'");
  std::vector<std::pair<Value, Value>> pairs(v.entries().begin(), v.entries().end());
  size_t pick = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const auto& a, const auto& b) {
    Value ka = sort_key(pick ? a.second : a.first, cs), kb = sort_key(pick ? b.second : b.first, cs);
    return reverse ? less(in, kb, ka) : less(in, ka, kb);
  });
  List out;
  for (auto& [k, val] : pairs) out.push_back(Value::tuple({k, val}));
  return Value::list(std::move(out));
}

Value f_indent(Interpreter& in, const Value& v, CallArgs& args) {
  const Value* w = args.get(0, "width");
  std::string pad = w && w->is_string() ? w->as_string() : std::string(static_cast<size_t>(std::clamp<int64_t>(int_arg(args, 0, "width", 4), 0, 1024)), ' ');
  bool first = bool_arg(args, 1, "first", false);
  bool blank = bool_arg(args, 2, "blank", false);
  std::string s = v.str() + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    out += "\n" + ((blank || !lines[i].empty()) ? pad + lines[i] : lines[i]);
    in.check_size(out.size());
  }
  return Value::string(first ? pad + out : out);
}

Value f_safe(Interpreter&, const Value& v, CallArgs&) { return v.is_string() ? v : Value::string(v.str()); }

Value f_escape(Interpreter&, const Value& v, CallArgs&) {
  std::string out;
  for (char c : v.str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::string(out);
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (unsigned char c : v.str()) {
    bool w = std::isalnum(c) || c == '_' || c >= 0x80;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_batch(Interpreter& in, const Value& v, CallArgs& args) {
  int64_t size = int_arg(args, 0, "linecount", 1);
  if (size <= 0) throw RenderError("batch: linecount must be positive");
  const Value* fill = args.get(1, "fill_with");
  List out, cur;
  for (auto& item : in.iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == size) out.push_back(Value::list(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none()) {
      while (static_cast<int64_t>(cur.size()) < size) cur.push_back(*fill);
    }
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_center(Interpreter& in, const Value& v, CallArgs& args) {
  std::string s = v.str();
  int64_t width = int_arg(args, 0, "width", 80);
  int64_t len = static_cast<int64_t>(utf8_count(s));
  if (width <= len) return Value::string(s);
  in.check_size(static_cast<size_t>(width));
  int64_t marg = width - len, left = marg / 2 + (marg & width & 1);  // CPython's str.center
  return Value::string(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(marg - left), ' '));
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& args) {
  std::string s = v.str();
  int64_t length = int_arg(args, 0, "length", 255);
  bool killwords = bool_arg(args, 1, "killwords", false);
  std::string end = str_arg(args, 2, "end", "...");
  int64_t leeway = int_arg(args, 3, "leeway", 5);
  auto chars = utf8_split(s);
  int64_t end_len = static_cast<int64_t>(utf8_count(end));
  if (length < end_len) throw RenderError("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (static_cast<int64_t>(chars.size()) <= length + leeway) return Value::string(s);
  std::string head;
  for (int64_t i = 0; i < length - end_len; ++i) head += chars[static_cast<size_t>(i)];
  if (killwords) return Value::string(head + end);
  size_t space = head.rfind(' ');
  if (space != std::string::npos) head = head.substr(0, space);
  return Value::string(head + end);
}

Value f_attr(Interpreter& in, const Value& v, CallArgs& args) { return in.getattr(v, str_arg(args, 0, "name", "")); }

Value f_format(Interpreter&, const Value& v, CallArgs& args) {
  std::string fmt = v.str(), out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%' || i + 1 >= fmt.size()) {
      out += fmt[i];
      continue;
    }
    char c = fmt[++i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= args.positional.size()) throw RenderError("not enough arguments for format string");
    const Value& a = args.positional[next++];
    if (c == 's') out += a.str();
    else if (c == 'r') out += a.repr();
    else if ((c == 'd' || c == 'i') && a.is_number()) out += std::to_string(static_cast<int64_t>(a.as_double()));
    else throw RenderError(std::string("format: unsupported conversion '%") + c + "'");
  }
  return Value::string(out);
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  static const std::map<std::string, FilterFn> kFilters = {
      {"tojson", f_tojson}, {"trim", f_trim}, {"upper", f_upper}, {"lower", f_lower},
      {"capitalize", f_capitalize}, {"title", f_title}, {"length", f_length}, {"count", f_length},
      {"first", f_first}, {"last", f_last}, {"join", f_join}, {"default", f_default}, {"d", f_default},
      {"list", f_list}, {"string", f_string}, {"int", f_int}, {"float", f_float}, {"abs", f_abs},
      {"round", f_round}, {"replace", f_replace}, {"reverse", f_reverse}, {"sort", f_sort},
      {"unique", f_unique}, {"map", f_map}, {"select", f_select}, {"reject", f_reject},
      {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"items", f_items},
      {"dictsort", f_dictsort}, {"indent", f_indent}, {"safe", f_safe}, {"escape", f_escape},
      {"e", f_escape}, {"forceescape", f_escape}, {"wordcount", f_wordcount}, {"batch", f_batch},
      {"sum", f_sum}, {"min", f_min}, {"max", f_max}, {"center", f_center}, {"truncate", f_truncate},
      {"attr", f_attr}, {"format", f_format},
  };
  auto it = kFilters.find(name);
  return it == kFilters.end() ? nullptr : it->second;
}

}  // namespace onebit::tmpl
