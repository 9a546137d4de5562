// `1bit bench` options: the command line parsed and checked into BenchOptions (defaults = the
// benchmark protocol of product.md), and the shell-like splitting of a configuration's options.
// Pure: no files are opened here except the check that the model is readable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/cli_args.h"
#include "base/status.h"

namespace onebit {

// One configuration under test: a name and the `1bit serve` options it adds.
struct BenchConfig {
  std::string name;                // "base"
  std::string options_text;        // as given: "--threads 2 --parallel 4"
  std::vector<std::string> args;   // split: {"--threads", "2", "--parallel", "4"}
};

struct BenchOptions {
  std::string model_path;
  std::vector<BenchConfig> configs;    // the first is the baseline
  int rounds = 1;
  std::string prompt_file;             // empty: the project's docs/*.md
  int64_t prompt_chars = 8000;         // characters (code points) of the prompt source; 0 = all
  int64_t prompt_tokens = 1800;        // then at most this many tokens of the model's vocabulary; 0 = no cap
  int prompt_runs = 5;
  int decode_tokens = 256;
  int decode_runs = 3;
  std::vector<int> concurrency = {1, 2, 4, 8, 16};
  int concurrency_tokens = 64;
  int concurrency_runs = 3;            // samples per level and round: one burst is too short to trust alone
  bool run_prompt = true;
  bool run_decode = true;
  bool run_concurrency = true;
  std::string out_dir = "bench-out";
  bool measure_bandwidth = false;
  int timeout_s = 300;                 // server start, and the longest wait for a reply's bytes
  std::string serve_binary;            // empty: this binary (/proc/self/exe)
};

// The options `1bit bench` declares (for --help and parsing).
std::vector<OptionSpec> bench_option_specs();

// Checks and converts parsed arguments; errors name the option, the value and what is allowed.
Result<BenchOptions> parse_bench_options(const ParsedArgs& args);

// Splits an option string as a POSIX shell would split words: blanks separate, '...' keeps
// everything literally, "..." keeps all but \" \\ \$ \`, a backslash outside quotes escapes the
// next character. No expansion. An unclosed quote or a trailing backslash is an error.
Result<std::vector<std::string>> split_shell_words(std::string_view text);

// Parses one `--config NAME="OPTIONS"` value; the options must not choose the model, port or host.
Result<BenchConfig> parse_bench_config(std::string_view spec);

// Parses "1,2,4": positive integers up to `max`, comma-separated, no duplicates.
Result<std::vector<int>> parse_positive_list(std::string_view option, std::string_view text, int max);

}  // namespace onebit
