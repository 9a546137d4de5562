// `1bit bench` option parsing; see options.h.
#include "bench/options.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

namespace onebit {
namespace {

// The serve options that the benchmark itself sets for every server.
bool chooses_model_port_or_host(const std::string& arg) {
  static const char* kReserved[] = {"-m", "--model", "-p", "--port", "--host"};
  for (const char* r : kReserved) {
    const std::string name = r;
    if (arg == name || (name.size() > 2 && arg.rfind(name + "=", 0) == 0)) return true;
  }
  return false;
}

// A config name goes into file names and table headers: letters, digits, '-', '_', '.'.
bool valid_config_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
}

Result<int> int_option(const ParsedArgs& args, const std::string& name, int fallback, int min, int max) {
  auto v = args.get_int(name, fallback, min, max);
  if (!v.ok()) return v.error();
  return static_cast<int>(*v);
}

// Applies --only LIST (prompt, decode, concurrency).
Status apply_only(const std::string& text, BenchOptions& o) {
  o.run_prompt = o.run_decode = o.run_concurrency = false;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    if (item == "prompt") o.run_prompt = true;
    else if (item == "decode") o.run_decode = true;
    else if (item == "concurrency") o.run_concurrency = true;
    else return make_error("--only: '" + item + "' is not a measurement; allowed: prompt, decode, concurrency (comma-separated)");
    start = end + 1;
  }
  return ok_status();
}

}  // namespace

std::vector<OptionSpec> bench_option_specs() {
  return {
      {"model", 'm', "FILE", "the model (GGUF) every configuration serves (required)"},
      {"config", 0, "NAME=\"OPTIONS\"", "a configuration: a name and the '1bit serve' options it adds; repeatable, the first is the baseline (none: one config 'default')", true},
      {"rounds", 0, "N", "rounds; each runs every measurement of every configuration in turn (default 1)"},
      {"prompt-file", 0, "FILE", "the prompt-speed text (default: the project's docs/*.md by name)"},
      {"prompt-chars", 0, "N", "characters of that text to send, 0 = all (default 8000)"},
      {"prompt-tokens", 0, "N", "then at most N tokens of the model's vocabulary, 0 = no cap (default 1800)"},
      {"prompt-runs", 0, "N", "prompt-speed runs, with and without the prefix cache (default 5)"},
      {"decode-tokens", 0, "N", "tokens per decode run (default 256)"},
      {"decode-runs", 0, "N", "runs per decode prompt: code, prose, short (default 3)"},
      {"concurrency", 0, "LIST", "simultaneous requests to measure (default 1,2,4,8,16)"},
      {"concurrency-tokens", 0, "N", "tokens per request in the concurrency test (default 64)"},
      {"concurrency-runs", 0, "N", "runs per concurrency level (default 3)"},
      {"only", 0, "LIST", "measure only these: prompt, decode, concurrency (default all)"},
      {"out", 'o', "DIR", "where bench.md, bench.json, bench.png and the server logs go (default bench-out)"},
      {"measure-bandwidth", 0, "", "add a memory read bandwidth measurement to the machine description"},
      {"timeout", 0, "S", "seconds a server may take to become healthy, and a reply to send its next bytes (default 300)"},
      {"serve-binary", 0, "PATH", "the 1bit binary whose 'serve' is measured (default: this one; for development)"},
  };
}

Result<std::vector<std::string>> split_shell_words(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      const size_t close = text.find('\'', i + 1);
      if (close == std::string_view::npos) return make_error("unclosed ' in \"" + std::string(text) + "\"");
      word.append(text.substr(i + 1, close - i - 1));
      i = close;
      in_word = true;
    } else if (c == '"') {
      size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j) {
        if (text[j] == '\\' && j + 1 < text.size() && std::string_view("\"\\$`").find(text[j + 1]) != std::string_view::npos) ++j;
        word.push_back(text[j]);
      }
      if (j >= text.size()) return make_error("unclosed \" in \"" + std::string(text) + "\"");
      i = j;
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 >= text.size()) return make_error("a trailing backslash in \"" + std::string(text) + "\"");
      word.push_back(text[++i]);
      in_word = true;
    } else {
      word.push_back(c);
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

Result<BenchConfig> parse_bench_config(std::string_view spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos) {
    return make_error("--config '" + std::string(spec) + "' has no name; write NAME=\"OPTIONS\", e.g. --config base=\"--threads 2\"");
  }
  BenchConfig c;
  c.name = std::string(spec.substr(0, eq));
  c.options_text = std::string(spec.substr(eq + 1));
  if (c.name.empty()) return make_error("--config '" + std::string(spec) + "': the name before '=' is empty");
  if (!valid_config_name(c.name)) {
    return make_error("--config name '" + c.name + "': use up to 64 letters, digits, '-', '_' or '.'");
  }
  auto words = split_shell_words(c.options_text);
  if (!words.ok()) return make_error("--config " + c.name + ": " + words.message());
  for (const auto& w : *words) {
    if (chooses_model_port_or_host(w)) {
      return make_error("--config " + c.name + ": '" + w + "' is set by 1bit bench itself (every server gets -m MODEL, " +
                        "--port on a free loopback port, the default host); leave it out");
    }
  }
  c.args = std::move(*words);
  return c;
}

Result<std::vector<int>> parse_positive_list(std::string_view option, std::string_view text, int max) {
  std::vector<int> out;
  const std::string opt(option);
  if (text.empty()) return make_error(opt + " is empty; give comma-separated numbers from 1 to " + std::to_string(max));
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string item(text.substr(start, end - start));
    const bool digits = !item.empty() && item.size() <= 9 &&
                        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    const long v = digits ? std::stol(item) : 0;
    if (!digits || v < 1 || v > max) {
      return make_error(opt + ": '" + item + "' in '" + std::string(text) + "' is not a number from 1 to " + std::to_string(max) +
                        "; give a comma-separated list such as 1,2,4");
    }
    if (std::find(out.begin(), out.end(), static_cast<int>(v)) != out.end()) {
      return make_error(opt + ": " + item + " appears twice in '" + std::string(text) + "'");
    }
    out.push_back(static_cast<int>(v));
    start = end + 1;
  }
  return out;
}

Result<BenchOptions> parse_bench_options(const ParsedArgs& args) {
  BenchOptions o;
  if (!args.positionals().empty()) {
    return make_error("unexpected argument '" + args.positionals()[0] + "'; configurations are given as --config NAME=\"OPTIONS\"");
  }
  if (!args.has("model")) return make_error("-m MODEL.gguf is required: the model every configuration serves");
  o.model_path = args.get("model");
  if (::access(o.model_path.c_str(), R_OK) != 0 || std::filesystem::is_directory(o.model_path)) {
    return make_error("-m '" + o.model_path + "': not a readable file");
  }
  std::set<std::string> names;
  for (const auto& spec : args.get_all("config")) {
    ONEBIT_ASSIGN_OR_RETURN(BenchConfig c, parse_bench_config(spec));
    if (!names.insert(c.name).second) return make_error("--config name '" + c.name + "' is given twice; names must differ");
    o.configs.push_back(std::move(c));
  }
  if (o.configs.empty()) o.configs.push_back(BenchConfig{"default", "", {}});
  ONEBIT_ASSIGN_OR_RETURN(o.rounds, int_option(args, "rounds", 1, 1, 1000));
  o.prompt_file = args.get("prompt-file");
  auto chars = args.get_int("prompt-chars", 8000, 0, int64_t{1} << 30);
  if (!chars.ok()) return chars.error();
  o.prompt_chars = *chars;
  auto tokens = args.get_int("prompt-tokens", 1800, 0, int64_t{1} << 30);
  if (!tokens.ok()) return tokens.error();
  o.prompt_tokens = *tokens;
  ONEBIT_ASSIGN_OR_RETURN(o.prompt_runs, int_option(args, "prompt-runs", 5, 1, 1000));
  ONEBIT_ASSIGN_OR_RETURN(o.decode_tokens, int_option(args, "decode-tokens", 256, 1, 1 << 20));
  ONEBIT_ASSIGN_OR_RETURN(o.decode_runs, int_option(args, "decode-runs", 3, 1, 1000));
  if (args.has("concurrency")) {
    ONEBIT_ASSIGN_OR_RETURN(o.concurrency, parse_positive_list("--concurrency", args.get("concurrency"), 256));
  }
  ONEBIT_ASSIGN_OR_RETURN(o.concurrency_tokens, int_option(args, "concurrency-tokens", 64, 1, 1 << 20));
  ONEBIT_ASSIGN_OR_RETURN(o.concurrency_runs, int_option(args, "concurrency-runs", 3, 1, 1000));
  if (args.has("only")) ONEBIT_TRY(apply_only(args.get("only"), o));
  o.out_dir = args.get("out", "bench-out");
  if (o.out_dir.empty()) return make_error("--out is empty; give a directory");
  o.measure_bandwidth = args.has("measure-bandwidth");
  ONEBIT_ASSIGN_OR_RETURN(o.timeout_s, int_option(args, "timeout", 300, 1, 86400));
  o.serve_binary = args.get("serve-binary");
  return o;
}

}  // namespace onebit
