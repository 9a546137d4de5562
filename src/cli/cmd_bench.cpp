// `1bit bench`: the benchmark protocol (product.md, "Benchmark protocol") over one or more serve
// configurations; writes bench.md, bench.json and bench.png to --out and prints the table.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/utf8.h"
#include "bench/machine.h"
#include "bench/options.h"
#include "bench/progress.h"
#include "bench/prompt.h"
#include "bench/protocol.h"
#include "bench/report.h"
#include "cli/command.h"
#include "gguf/gguf_reader.h"
#include "tokenizer/tokenizer.h"
#include "serve/http_util.h"

namespace onebit::cli {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The first `n` characters (code points) of UTF-8 `text`; all of it when n is 0.
std::string first_chars(const std::string& text, int64_t n) {
  if (n <= 0) return text;
  size_t pos = 0;
  for (int64_t k = 0; k < n && pos < text.size(); ++k) pos += utf8_char_length(text, pos);
  return text.substr(0, pos);
}

// The project's docs/ directory: beside the build (build/bin/1bit -> docs), or in the current one.
Result<fs::path> find_docs_dir() {
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / ".." / ".." / "docs");
    candidates.push_back(exe.parent_path() / ".." / "share" / "1bit" / "docs");
  }
  candidates.push_back(fs::current_path(ec) / "docs");
  std::string looked;
  for (const auto& c : candidates) {
    if (fs::is_directory(c, ec)) return fs::weakly_canonical(c, ec);
    looked += (looked.empty() ? "" : ", ") + c.lexically_normal().string();
  }
  return make_error("the default prompt is the project's docs/*.md, and no docs/ was found (looked in " + looked +
                    "); pass --prompt-file FILE");
}

// The prompt-speed text and where it came from.
Result<std::pair<std::string, std::string>> load_prompt(const BenchOptions& o) {
  std::string text;
  std::string source;
  if (!o.prompt_file.empty()) {
    std::ifstream f(o.prompt_file, std::ios::binary);
    if (!f || fs::is_directory(o.prompt_file)) return make_error("--prompt-file '" + o.prompt_file + "': not a readable file");
    text = read_file(o.prompt_file);
    source = o.prompt_file;
  } else {
    ONEBIT_ASSIGN_OR_RETURN(fs::path docs, find_docs_dir());
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(docs)) {
      if (e.is_regular_file() && e.path().extension() == ".md") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) text += read_file(f);
    source = "docs/*.md (" + std::to_string(files.size()) + " files, by name)";
  }
  text = first_chars(text, o.prompt_chars);
  if (text.empty()) return make_error("the prompt text is empty (" + source + "); pass --prompt-file with some text");
  return std::make_pair(text, source);
}

// Whether the model has a chat template (tokenizer.chat_template, a non-empty string).
bool has_chat_template(const GgufFile& file) {
  const GgufValue* v = file.find("tokenizer.chat_template");
  return v != nullptr && v->type == GgufValueType::kString && !v->str.empty();
}

// The GGUF's <arch>.context_length, or 0.
int64_t model_context(const GgufFile& file) {
  auto arch = file.get_string("general.architecture");
  if (!arch.ok()) return 0;
  auto n = file.get_int(*arch + ".context_length");
  return n.ok() ? *n : 0;
}

// The prompt text fitted to --prompt-tokens and to the served context by the model's tokenizer.
// Without a tokenizer the text goes as it is when --prompt-tokens is 0, else that is an error.
Result<PromptFit> fit_to_model(const GgufFile& file, const BenchOptions& o, const std::string& text) {
  auto tok = Tokenizer::from_gguf(file);
  if (!tok.ok()) {
    if (o.prompt_tokens > 0) return make_error("--prompt-tokens needs the model's tokenizer: " + tok.message() + " (pass --prompt-tokens 0)");
    PromptFit fit;
    fit.text = text;
    return fit;
  }
  return fit_prompt(*tok, text, o.prompt_tokens, served_context(model_context(file), o.configs), prompt_reserved_tokens(*tok, o));
}

// This process's command line, shell-quoted where needed (from /proc/self/cmdline).
std::string command_line() {
  const std::string raw = read_file("/proc/self/cmdline");
  std::string out;
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    const std::string arg = raw.substr(start, end - start);
    const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("-_./=:,+@%").find(c) != std::string_view::npos;
    });
    std::string quoted = "'";
    for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    out += (out.empty() ? "" : " ") + (plain ? arg : quoted);
    start = end + 1;
  }
  return out;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// Takes SIGINT/SIGTERM (blocked in every thread) while the benchmark runs: marks the run
// interrupted and stops the server under test, so a request in flight ends at once.
class SignalWatcher {
 public:
  explicit SignalWatcher(RunControl& control) : control_(control), signals_(block_stop_signals()) {
    thread_ = std::thread([this] {
      while (!done_.load()) {
        timespec ts{0, 100 * 1000000};
        if (sigtimedwait(&signals_, nullptr, &ts) > 0) {
          control_.interrupted.store(true);
          const pid_t pid = control_.server_pid.load();
          if (pid > 0) ::kill(pid, SIGTERM);
        }
      }
    });
  }
  ~SignalWatcher() {
    done_.store(true);
    thread_.join();
  }

 private:
  RunControl& control_;
  sigset_t signals_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// Summaries and the three files; prints the table. A missing gnuplot is a warning.
int write_outputs(const BenchOptions& o, RunInfo& info, const std::vector<Sample>& samples, Progress& progress) {
  std::vector<std::string> names;
  for (const auto& c : o.configs) names.push_back(c.name);
  const auto rows = summarize(samples, bench_metrics(o, samples), names);
  const fs::path out(o.out_dir);
  const std::string md = markdown_report(o, info, rows);
  if (auto st = write_text_file((out / "bench.md").string(), md); !st.ok()) return failure("bench", st.message());
  if (auto st = write_text_file((out / "bench.json").string(), json_report(o, info, samples, rows).dump(2) + "\n"); !st.ok()) {
    return failure("bench", st.message());
  }
  const std::string png = (out / "bench.png").string();
  const std::string script = gnuplot_script(o, rows, png);
  progress.finish();
  if (script.empty()) {
    progress.note("1bit bench: no concurrency measurements, so no plot");
  } else {
    const std::string script_path = (out / "bench.gp").string();
    if (auto st = write_text_file(script_path, script); !st.ok()) return failure("bench", st.message());
    std::error_code ec;
    fs::remove(png, ec);
    if (auto st = run_gnuplot(script_path); !st.ok()) progress.note("1bit bench: warning: " + st.message());
  }
  std::fputs(md.c_str(), stdout);
  std::fflush(stdout);
  progress.note("1bit bench: wrote " + (out / "bench.md").string() + ", bench.json" +
                (fs::exists(png) ? ", bench.png" : "") + " (server logs beside them)");
  return kExitOk;
}

int run_bench(const ParsedArgs& args) {
  auto parsed = parse_bench_options(args);
  if (!parsed.ok()) return usage_error("bench", parsed.message());
  BenchOptions o = std::move(*parsed);
  auto file = GgufFile::open(o.model_path);
  if (!file.ok()) return usage_error("bench", "-m: " + file.message());
  Result<std::pair<std::string, std::string>> prompt = std::make_pair(std::string(), std::string());
  PromptFit fit;
  if (o.run_prompt) {
    prompt = load_prompt(o);
    if (!prompt.ok()) return usage_error("bench", prompt.message());
    auto fitted = fit_to_model(*file, o, prompt->first);
    if (!fitted.ok()) return usage_error("bench", fitted.message());
    fit = std::move(*fitted);
  }
  BenchInputs in;
  in.chat = has_chat_template(*file);
  in.prompt_text = fit.text;
  std::error_code ec;
  in.serve_binary = o.serve_binary.empty() ? fs::read_symlink("/proc/self/exe", ec).string() : o.serve_binary;
  if (ec || in.serve_binary.empty()) return failure("bench", "cannot find this binary (/proc/self/exe); pass --serve-binary PATH");
  fs::create_directories(o.out_dir, ec);
  if (ec || !fs::is_directory(o.out_dir)) return failure("bench", "--out '" + o.out_dir + "': cannot create the directory: " + ec.message());

  RunInfo info;
  info.command = command_line();
  info.date = utc_now();
  info.model_size_bytes = fs::file_size(o.model_path, ec);
  info.chat = in.chat;
  info.prompt_chars = utf8_count(in.prompt_text);
  info.prompt_source = prompt->second;
  info.prompt_tokens = fit.tokens;
  info.prompt_uncapped_tokens = fit.uncapped_tokens;
  info.served_context = fit.context.n_ctx;
  info.prompt_note = prompt_cap_note(fit);
  if (!info.prompt_note.empty()) std::fprintf(stderr, "1bit bench: %s\n", info.prompt_note.c_str());

  Progress progress(Progress::stderr_is_tty());
  RunControl control;
  SignalWatcher watcher(control);
  if (o.measure_bandwidth) progress.status("measuring memory read bandwidth ...");
  info.machine = describe_machine(o.measure_bandwidth);
  const auto start = std::chrono::steady_clock::now();
  progress.status("checking the configurations (serve --dry-run) ...");
  if (auto st = check_configs(o, in, control); !st.ok()) {
    progress.finish();
    return control.interrupted.load() ? (failure("bench", "interrupted"), 130) : failure("bench", st.message());
  }
  auto samples = run_protocol(o, in, progress, control);
  progress.finish();
  if (!samples.ok()) {
    if (control.interrupted.load()) {
      failure("bench", "interrupted; every server was stopped (logs in " + o.out_dir + ")");
      return 130;
    }
    return failure("bench", samples.message());
  }
  info.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return write_outputs(o, info, *samples, progress);
}

}  // namespace

Command bench_command() {
  return {"bench",
          "measure prompt, decode and concurrent speed of serve configurations (table, JSON, PNG)",
          "1bit bench -m MODEL.gguf [--config NAME=\"SERVE OPTIONS\"]... [options]",
          bench_option_specs(), run_bench};
}

}  // namespace onebit::cli
