// The outputs of `1bit bench`: the markdown table (best / median per cell, change against the
// baseline on the median), the JSON with every raw number, and the PNG plot of total tokens/s
// against concurrency drawn by gnuplot.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "bench/machine.h"
#include "bench/options.h"
#include "bench/stats.h"

namespace onebit {

// What the report says about the run besides the samples.
struct RunInfo {
  std::string command;        // the command line as typed (shell-quoted)
  std::string date;           // UTC, "2026-12-01 00:10:35 UTC"
  double wall_s = 0.0;        // the whole run
  uint64_t model_size_bytes = 0;
  bool chat = false;
  size_t prompt_chars = 0;    // characters of the prompt-speed text
  std::string prompt_source;  // the file(s) it came from
  int64_t prompt_tokens = 0;           // its tokens by the model's tokenizer (0: not counted)
  int64_t prompt_uncapped_tokens = 0;  // before the cut to the served context
  int64_t served_context = 0;          // the smallest context of the configs (0: unknown)
  std::string prompt_note;             // "prompt capped from ... to ... tokens: ..."; empty when not cut
  MachineInfo machine;
};

// "1.23", "41.2", "1812.5": two decimals below 10, one above.
std::string format_value(double v);
// "+12.3%", "-4.0%".
std::string format_change(double pct);

// The markdown: a title, the command, model, date, machine, then one row per summary row and
// one column per configuration, cells "best / median" with " (+x%)" after non-baseline medians.
std::string markdown_report(const BenchOptions& options, const RunInfo& info, const std::vector<SummaryRow>& rows);

// The JSON document: command, date, machine, model, options, configs, samples, summary.
nlohmann::json json_report(const BenchOptions& options, const RunInfo& info, const std::vector<Sample>& samples,
                           const std::vector<SummaryRow>& rows);

// A gnuplot script drawing total tok/s (y) against concurrency (x, log2) per configuration into
// `png_path` (pngcairo when gnuplot has it, else png). Empty when there is no concurrency data.
std::string gnuplot_script(const BenchOptions& options, const std::vector<SummaryRow>& rows, const std::string& png_path);

// Runs `gnuplot SCRIPT_PATH`; an error when gnuplot is not on PATH (naming the package to install)
// or when it fails (with its message).
Status run_gnuplot(const std::string& script_path);

// Writes `text` to `path` (replacing it); the error names the path.
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace onebit
