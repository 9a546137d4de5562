// The `1bit` subcommand table: each command declares its options and a run function.
#pragma once

#include <string>
#include <vector>

#include "base/cli_args.h"

namespace onebit::cli {

// Exit codes: 0 success, 1 the work failed (bad file, runtime error), 2 bad usage.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

struct Command {
  std::string name;                  // "info"
  std::string summary;               // one line for `1bit --help`
  std::string usage;                 // "1bit info [--json] FILE.gguf"
  std::vector<OptionSpec> options;
  int (*run)(const ParsedArgs& args);  // returns an exit code; prints its own errors
};

// Every command, in the order `1bit --help` lists them. Defined in main.cpp.
const std::vector<Command>& commands();

// Prints "1bit CMD: MESSAGE" to stderr and returns kExitUsage (for bad options/values).
int usage_error(const std::string& cmd, const std::string& message);
// Prints "1bit CMD: MESSAGE" to stderr and returns kExitFailure.
int failure(const std::string& cmd, const std::string& message);

// Defined in their cmd_*.cpp files.
Command version_command();
Command info_command();
Command tokenize_command();
Command convert_command();
Command serve_command();
Command run_command();
Command template_command();
Command quantize_command();
Command bench_command();
// `1bit convert --random`: defined in cmd_convert_random.cpp.
int convert_random(const ParsedArgs& args);

}  // namespace onebit::cli
