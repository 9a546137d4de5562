// The benchmark protocol (product.md, "Benchmark protocol"): for each round, for each
// configuration in order, a fresh `1bit serve`, /health, one warm-up request, then the prompt,
// decode and concurrency measurements; every sample kept with the server's raw usage and timings.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "bench/options.h"
#include "bench/progress.h"
#include "bench/server.h"
#include "bench/stats.h"

namespace onebit {

struct BenchInputs {
  std::string serve_binary;  // the 1bit binary whose `serve` runs
  std::string prompt_text;   // the prompt-speed text (already cut to --prompt-chars)
  bool chat = false;         // the model has a chat template: decode via /v1/chat/completions
};

// A decode prompt: its key and its text for chat and for completion.
struct DecodePrompt {
  const char* key;         // "code", "prose", "short"
  const char* chat;        // a user message
  const char* completion;  // a raw text start
};
const std::vector<DecodePrompt>& decode_prompts();

// Tokens a prompt-speed request generates (its max_tokens).
inline constexpr int kPromptMaxTokens = 1;

// The line in front of the prompt-speed text: one per run without the cache (run >= 1), one per
// round for the cached prompt (run 0), so that no two uncached runs share a prefix.
std::string prompt_first_line(int round, int run, const std::string& config);

// Checks every configuration with `serve --dry-run` (fast: no model load), so a bad option fails
// before anything is measured; the error names the configuration and quotes serve's message.
Status check_configs(const BenchOptions& options, const BenchInputs& inputs, RunControl& control);

// Runs every round; the samples in the order they were taken. Stops at the first error (which
// names the round, the configuration and the step); servers are always stopped.
Result<std::vector<Sample>> run_protocol(const BenchOptions& options, const BenchInputs& inputs, Progress& progress,
                                         RunControl& control);

// The table's rows for these options, in table order; the prompt row names the prompt's token
// count found in `samples`. Rows without samples are dropped later (summarize).
std::vector<Metric> bench_metrics(const BenchOptions& options, const std::vector<Sample>& samples);

}  // namespace onebit
