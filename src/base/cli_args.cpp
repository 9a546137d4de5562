// Implementation of the command-line parser declared in cli_args.h.
#include "base/cli_args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace onebit {
namespace {

const OptionSpec* find_long(const std::vector<OptionSpec>& specs, const std::string& name) {
  for (const auto& s : specs)
    if (s.long_name == name) return &s;
  return nullptr;
}

const OptionSpec* find_short(const std::vector<OptionSpec>& specs, char c) {
  for (const auto& s : specs)
    if (s.short_name != 0 && s.short_name == c) return &s;
  return nullptr;
}

std::string display_name(const OptionSpec& s) { return "--" + s.long_name; }

}  // namespace

std::string ParsedArgs::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty()) return fallback;
  return it->second.back();
}

std::vector<std::string> ParsedArgs::get_all(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return {};
  return it->second;
}

Result<int64_t> ParsedArgs::get_int(const std::string& name, int64_t fallback, int64_t min,
                                    int64_t max) const {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  const std::string range = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || end == nullptr || *end != '\0' || errno == ERANGE || x < min || x > max) {
    return make_error("--" + name + " must be " + range + ", got '" + v + "'");
  }
  return static_cast<int64_t>(x);
}

Result<double> ParsedArgs::get_float(const std::string& name, double fallback, double min,
                                     double max) const {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end == nullptr || *end != '\0' || errno == ERANGE || !std::isfinite(x) || x < min ||
      x > max) {
    return make_error("--" + name + " must be a number from " + std::to_string(min) + " to " +
                      std::to_string(max) + ", got '" + v + "'");
  }
  return x;
}

Result<ParsedArgs> parse_args(const std::vector<std::string>& args, const std::vector<OptionSpec>& specs) {
  ParsedArgs out;
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (options_done || a.size() < 2 || a[0] != '-' || (a[1] != '-' && !std::isalpha((unsigned char)a[1]))) {
      out.add_positional(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      out.add("help", "");
      continue;
    }
    const OptionSpec* spec = nullptr;
    std::optional<std::string> inline_value;
    std::string shown = a;
    if (a[1] == '-') {
      std::string name = a.substr(2);
      auto eq = name.find('=');
      if (eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name = name.substr(0, eq);
        shown = "--" + name;
      }
      spec = find_long(specs, name);
    } else if (a.size() == 2) {
      spec = find_short(specs, a[1]);
    } else {
      spec = find_long(specs, a.substr(1));  // llama.cpp-style single-dash names: -np, -ngl
    }
    if (spec == nullptr) return make_error("unknown option '" + shown + "'");
    if (spec->value_name.empty()) {
      if (inline_value) return make_error("option " + display_name(*spec) + " takes no value");
      out.add(spec->long_name, "");
    } else {
      std::string value;
      if (inline_value) {
        value = *inline_value;
      } else if (spec->value_optional && (i + 1 >= args.size() || args[i + 1].rfind('-', 0) == 0)) {
        value = "";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return make_error("option " + display_name(*spec) + " needs a value (" + spec->value_name + ")");
      }
      if (!spec->repeatable && out.has(spec->long_name)) {
        return make_error("option " + display_name(*spec) + " given more than once");
      }
      out.add(spec->long_name, std::move(value));
    }
  }
  return out;
}

std::string format_options(const std::vector<OptionSpec>& specs) {
  std::vector<std::string> lefts;
  size_t width = 0;
  for (const auto& s : specs) {
    std::string left = "  ";
    left += s.short_name ? std::string("-") + s.short_name + ", " : "    ";
    left += "--" + s.long_name;
    if (!s.value_name.empty()) left += s.value_optional ? " [" + s.value_name + "]" : " " + s.value_name;
    width = std::max(width, left.size());
    lefts.push_back(std::move(left));
  }
  std::string out;
  for (size_t i = 0; i < specs.size(); ++i) {
    out += lefts[i] + std::string(width - lefts[i].size() + 2, ' ') + specs[i].help + "\n";
  }
  return out;
}

}  // namespace onebit
