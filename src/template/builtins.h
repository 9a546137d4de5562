// Jinja2's built-in filters, tests, globals and the Python str/dict/list methods that chat
// templates call, each with the semantics of Jinja2 3.1 under Python 3.
// Internal to src/template.
#pragma once

#include <string>

#include "template/interpreter.h"
#include "template/value.h"

namespace onebit::tmpl {

using FilterFn = Value (*)(Interpreter&, const Value& subject, CallArgs& args);
using TestFn = bool (*)(Interpreter&, const Value& subject, CallArgs& args);

// The filter named `name` ("tojson", "d"...), or nullptr.
FilterFn find_filter(const std::string& name);
// The test named `name` ("defined", "==" ...), or nullptr.
TestFn find_test(const std::string& name);
// `obj.name` as a bound method (str.strip, dict.items...), or undefined when there is none.
Value bound_method(Interpreter& in, const Value& obj, const std::string& name);
// range, dict, namespace, raise_exception, strftime_now, cycler, joiner.
void add_globals(std::unordered_map<std::string, Value>& globals);

// Python str helpers shared by filters and methods.
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);
// str.upper()/str.lower() (unicode_case.cpp: ASCII, Latin, Greek, Cyrillic).
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
// True for a letter that has case (str.title() capitalizes after non-cased characters).
bool is_cased_letter(const std::string& ch);
// str.capitalize(): first character upper, the rest lower.
std::string py_capitalize(const std::string& s);
// Integer argument `idx`/`name` of a call, or `fallback` when absent.
int64_t int_arg(const CallArgs& args, size_t idx, const std::string& name, int64_t fallback);

}  // namespace onebit::tmpl
