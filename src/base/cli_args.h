// Command-line option parsing for the `1bit` subcommands: declared options, typed values,
// one-line errors that name the option, the value and the allowed range.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace onebit {

// One option a command accepts. `value_name` empty means a flag that takes no value.
struct OptionSpec {
  std::string long_name;      // without the dashes: "model"
  char short_name = 0;        // 'm', or 0 for none
  std::string value_name;     // "FILE"; empty for a flag
  std::string help;           // one line
  bool repeatable = false;    // may be given more than once (values accumulate)
  bool value_optional = false;  // the value may be left out (then the next argument is not taken
                                // when it starts with '-'); an absent value is stored as ""
};

// What a command line said: options by long name, in order, and the positional arguments.
class ParsedArgs {
 public:
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  // The last value of an option, or `fallback` when it was not given.
  std::string get(const std::string& name, const std::string& fallback = "") const;
  // Every value of a repeatable option, in order.
  std::vector<std::string> get_all(const std::string& name) const;
  // An integer option in [min, max]; absent gives `fallback`. Errors name option, value, range.
  Result<int64_t> get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  // A float option in [min, max]; absent gives `fallback`.
  Result<double> get_float(const std::string& name, double fallback, double min, double max) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

  void add(const std::string& name, std::string value) { values_[name].push_back(std::move(value)); }
  void add_positional(std::string value) { positionals_.push_back(std::move(value)); }

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positionals_;
};

// Parses `args` (without the program and command names) against `specs`.
// `--name=value`, `--name value`, `-m value` and `--` (end of options) are accepted;
// `-h`/`--help` sets the flag "help". An unknown option or a missing value is an error.
Result<ParsedArgs> parse_args(const std::vector<std::string>& args, const std::vector<OptionSpec>& specs);

// The option table as `--help` prints it, one option a line, aligned.
std::string format_options(const std::vector<OptionSpec>& specs);

}  // namespace onebit
