// The benchmark protocol; see protocol.h.
#include "bench/protocol.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include "bench/client.h"

namespace onebit {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* const kDot = " \xC2\xB7 ";  // " · "

std::string fmt(double v, const char* spec = "%.1f") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), spec, v);
  return buf;
}

// Everything one configuration's measurements in one round need.
struct RunContext {
  const BenchOptions& options;
  const BenchInputs& inputs;
  const BenchConfig& config;
  int round;
  BenchClient client;
  Progress& progress;
  RunControl& control;
  std::vector<Sample>& samples;

  // "round 1/2 · base · "
  std::string where() const {
    return "round " + std::to_string(round) + "/" + std::to_string(options.rounds) + kDot + config.name + kDot;
  }
  // Prefixes an error with the round and configuration, and points at the server log.
  Error fail(const std::string& step, const Error& e, const std::string& log) const {
    if (control.interrupted.load()) return make_error("interrupted");
    return make_error("round " + std::to_string(round) + ", config '" + config.name + "', " + step + ": " + e.message +
                      " (server log: " + log + ")");
  }
};

// A number the reply must carry at `object.field`; the error names it and the configuration.
Result<double> required_number(const json& reply, const char* object, const char* field, const std::string& config) {
  if (!reply.contains(object) || !reply[object].is_object() || !reply[object].contains(field) ||
      !reply[object][field].is_number()) {
    return make_error(std::string("the reply has no ") + object + "." + field + " (config '" + config +
                      "': its route may not report " + (std::string(object) == "timings" ? "llama-server timings" : "usage") + ")");
  }
  return reply[object][field].get<double>();
}

json raw_of(const json& reply, double wall_ms) {
  json raw = {{"wall_ms", wall_ms}};
  raw["usage"] = reply.contains("usage") ? reply["usage"] : json(nullptr);
  raw["timings"] = reply.contains("timings") ? reply["timings"] : json(nullptr);
  return raw;
}

// The body of a greedy decode request for `text` (chat or completion, as the model allows).
json decode_body(const BenchInputs& in, const std::string& text, int max_tokens) {
  json body = {{"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
  if (in.chat) {
    body["messages"] = json::array({{{"role", "user"}, {"content", text}}});
    body["chat_template_kwargs"] = {{"enable_thinking", false}};
  } else {
    body["prompt"] = text;
  }
  return body;
}

const char* decode_path(const BenchInputs& in) { return in.chat ? "/v1/chat/completions" : "/v1/completions"; }

const char* decode_text(const BenchInputs& in, const DecodePrompt& p) { return in.chat ? p.chat : p.completion; }

// One timed whole completion.
Result<std::pair<json, double>> timed_complete(const RunContext& ctx, const std::string& path, const json& body) {
  const auto start = Clock::now();
  ONEBIT_ASSIGN_OR_RETURN(json reply, ctx.client.complete(path, body));
  return std::make_pair(std::move(reply), std::chrono::duration<double, std::milli>(Clock::now() - start).count());
}

// Prompt speed: the effective rate over the whole prompt, usage.prompt_tokens / prompt seconds.
Result<double> prompt_rate(const json& reply, const std::string& config) {
  ONEBIT_ASSIGN_OR_RETURN(double tokens, required_number(reply, "usage", "prompt_tokens", config));
  ONEBIT_ASSIGN_OR_RETURN(double ms, required_number(reply, "timings", "prompt_ms", config));
  if (ms <= 0.0) return make_error("timings.prompt_ms is " + fmt(ms, "%g") + " (config '" + config + "'); it must be > 0");
  return tokens / (ms / 1000.0);
}

Status run_prompt_phase(RunContext& ctx, const std::string& log) {
  const BenchOptions& o = ctx.options;
  auto prompt_request = [&](const std::string& text, bool cache) {
    return json{{"prompt", text}, {"max_tokens", kPromptMaxTokens}, {"temperature", 0}, {"cache_prompt", cache}};
  };
  // Without the prefix cache: a distinct first line per run, and cache_prompt false.
  for (int run = 1; run <= o.prompt_runs; ++run) {
    const std::string step = "prompt, no cache " + std::to_string(run) + "/" + std::to_string(o.prompt_runs);
    ctx.progress.status(ctx.where() + step + " ...");
    const std::string text = prompt_first_line(ctx.round, run, ctx.config.name) + ctx.inputs.prompt_text;
    auto r = timed_complete(ctx, "/v1/completions", prompt_request(text, false));
    if (!r.ok()) return ctx.fail(step, r.error(), log);
    auto rate = prompt_rate(r->first, ctx.config.name);
    if (!rate.ok()) return ctx.fail(step, rate.error(), log);
    json raw = raw_of(r->first, r->second);
    raw["cache_prompt"] = false;
    ctx.samples.push_back({ctx.config.name, ctx.round, run, "prompt_nocache", *rate, raw});
    ctx.progress.step(ctx.where() + step + kDot + fmt(*rate) + " tok/s");
  }
  // With the cache: one priming request, then the same prompt again.
  const std::string cached = prompt_first_line(ctx.round, 0, ctx.config.name) + ctx.inputs.prompt_text;
  ctx.progress.status(ctx.where() + "prompt, priming the cache ...");
  if (auto r = ctx.client.complete("/v1/completions", prompt_request(cached, true)); !r.ok()) {
    return ctx.fail("prompt, priming the cache", r.error(), log);
  }
  for (int run = 1; run <= o.prompt_runs; ++run) {
    const std::string step = "prompt, cached " + std::to_string(run) + "/" + std::to_string(o.prompt_runs);
    ctx.progress.status(ctx.where() + step + " ...");
    auto r = timed_complete(ctx, "/v1/completions", prompt_request(cached, true));
    if (!r.ok()) return ctx.fail(step, r.error(), log);
    auto rate = prompt_rate(r->first, ctx.config.name);
    if (!rate.ok()) return ctx.fail(step, rate.error(), log);
    json raw = raw_of(r->first, r->second);
    raw["cache_prompt"] = true;
    ctx.samples.push_back({ctx.config.name, ctx.round, run, "prompt_cached", *rate, raw});
    ctx.progress.step(ctx.where() + step + kDot + fmt(*rate) + " tok/s");
  }
  return ok_status();
}

// With a drafter (timings.draft_n and draft_n_accepted), the acceptance rate and, when the
// server counts its steps (timings.draft_steps), accepted tokens per step.
void add_drafter_samples(RunContext& ctx, const std::string& key, int run, const json& reply, const json& raw) {
  if (!reply.contains("timings") || !reply["timings"].is_object()) return;
  const json& t = reply["timings"];
  if (!t.contains("draft_n") || !t.contains("draft_n_accepted") || !t["draft_n"].is_number() ||
      !t["draft_n_accepted"].is_number()) {
    return;
  }
  const double drafted = t["draft_n"].get<double>();
  const double accepted = t["draft_n_accepted"].get<double>();
  if (drafted > 0.0) ctx.samples.push_back({ctx.config.name, ctx.round, run, "draft_acceptance_" + key, accepted / drafted, raw});
  if (t.contains("draft_steps") && t["draft_steps"].is_number() && t["draft_steps"].get<double>() > 0.0) {
    ctx.samples.push_back(
        {ctx.config.name, ctx.round, run, "draft_per_step_" + key, accepted / t["draft_steps"].get<double>(), raw});
  }
}

Status run_decode_phase(RunContext& ctx, const std::string& log) {
  const BenchOptions& o = ctx.options;
  for (const DecodePrompt& p : decode_prompts()) {
    for (int run = 1; run <= o.decode_runs; ++run) {
      const std::string step = std::string("decode ") + p.key + " " + std::to_string(run) + "/" + std::to_string(o.decode_runs);
      ctx.progress.status(ctx.where() + step + " ...");
      auto r = timed_complete(ctx, decode_path(ctx.inputs), decode_body(ctx.inputs, decode_text(ctx.inputs, p), o.decode_tokens));
      if (!r.ok()) return ctx.fail(step, r.error(), log);
      auto rate = required_number(r->first, "timings", "predicted_per_second", ctx.config.name);
      if (!rate.ok()) return ctx.fail(step, rate.error(), log);
      const json raw = raw_of(r->first, r->second);
      ctx.samples.push_back({ctx.config.name, ctx.round, run, std::string("decode_") + p.key, *rate, raw});
      add_drafter_samples(ctx, p.key, run, r->first, raw);
      ctx.progress.step(ctx.where() + step + kDot + fmt(*rate) + " tok/s");
    }
  }
  return ok_status();
}

// One burst: N streamed requests released together; total tokens/s from the release to the last
// end (burst_tokens_per_second), and the median time to first content.
Status run_concurrency_burst(RunContext& ctx, int n, int run, const std::string& log) {
  const std::string step = "concurrency " + std::to_string(n) + " " + std::to_string(run) + "/" + std::to_string(ctx.options.concurrency_runs);
  ctx.progress.status(ctx.where() + step + " ...");
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::vector<Result<StreamOutcome>> outcomes(static_cast<size_t>(n), Result<StreamOutcome>(make_error("not run")));
  std::vector<Clock::time_point> ends(static_cast<size_t>(n));
  const std::string short_text = decode_text(ctx.inputs, decode_prompts().back());
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      json body = decode_body(ctx.inputs,
                              "(request " + std::to_string(i + 1) + " of " + std::to_string(n) + ", round " + std::to_string(ctx.round) +
                                  ", run " + std::to_string(run) + ") " + short_text,
                              ctx.options.concurrency_tokens);
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
      }
      outcomes[static_cast<size_t>(i)] = ctx.client.stream(decode_path(ctx.inputs), body);
      ends[static_cast<size_t>(i)] = Clock::now();
    });
  }
  const auto start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  std::vector<StreamEnd> burst;
  int64_t tokens = 0;
  double wall_ms = 0.0;
  std::vector<double> ttfts;
  json requests = json::array();
  for (int i = 0; i < n; ++i) {
    const auto& r = outcomes[static_cast<size_t>(i)];
    if (!r.ok()) return ctx.fail(step + ", request " + std::to_string(i + 1), r.error(), log);
    if (r->ttft_ms < 0.0) return ctx.fail(step + ", request " + std::to_string(i + 1), make_error("the stream carried no content"), log);
    const double end_ms = std::chrono::duration<double, std::milli>(ends[static_cast<size_t>(i)] - start).count();
    burst.push_back({r->completion_tokens, end_ms});
    tokens += r->completion_tokens;
    wall_ms = std::max(wall_ms, end_ms);
    ttfts.push_back(r->ttft_ms);
    requests.push_back({{"ttft_ms", r->ttft_ms},
                        {"total_ms", r->total_ms},
                        {"end_ms", end_ms},
                        {"completion_tokens", r->completion_tokens},
                        {"content_chunks", r->content_chunks},
                        {"usage_seen", r->usage_seen},
                        {"usage", r->usage},
                        {"timings", r->timings}});
  }
  const double tps = burst_tokens_per_second(burst);
  const double ttft = median_of(ttfts);
  const json raw = {{"concurrency", n}, {"wall_ms", wall_ms}, {"completion_tokens", tokens}, {"requests", requests}};
  ctx.samples.push_back({ctx.config.name, ctx.round, run, "concurrency_tps_" + std::to_string(n), tps, raw});
  ctx.samples.push_back({ctx.config.name, ctx.round, run, "concurrency_ttft_" + std::to_string(n), ttft, raw});
  ctx.progress.step(ctx.where() + step + kDot + fmt(tps) + " tok/s, TTFT " + fmt(ttft, "%.0f") + " ms");
  return ok_status();
}

std::string log_path_for(const BenchOptions& o, const BenchConfig& c, const std::string& suffix) {
  return (std::filesystem::path(o.out_dir) / ("serve-" + c.name + "-" + suffix + ".log")).string();
}

// One configuration in one round: a fresh server, health, warm-up, the selected measurements.
Status run_config(const BenchOptions& o, const BenchInputs& in, const BenchConfig& c, int round, Progress& progress,
                  RunControl& control, std::vector<Sample>& samples) {
  const std::string log = log_path_for(o, c, "r" + std::to_string(round));
  const std::string what = "round " + std::to_string(round) + ", config '" + c.name + "'";
  auto server = BenchServer::start(in.serve_binary, o.model_path, c.args, log, control);
  if (!server.ok()) return make_error(what + ": " + server.message());
  RunContext ctx{o, in, c, round, BenchClient((*server)->port(), o.timeout_s), progress, control, samples};
  progress.status(ctx.where() + "starting the server ...");
  ONEBIT_TRY((*server)->wait_healthy(what, o.timeout_s));
  progress.status(ctx.where() + "warm-up ...");
  const DecodePrompt& warm = decode_prompts().back();
  if (auto r = ctx.client.complete(decode_path(in), decode_body(in, decode_text(in, warm), std::min(8, o.decode_tokens))); !r.ok()) {
    return ctx.fail("warm-up", r.error(), log);
  }
  if (o.run_prompt) ONEBIT_TRY(run_prompt_phase(ctx, log));
  if (o.run_decode) ONEBIT_TRY(run_decode_phase(ctx, log));
  if (o.run_concurrency) {
    for (int n : o.concurrency) {
      for (int run = 1; run <= o.concurrency_runs; ++run) ONEBIT_TRY(run_concurrency_burst(ctx, n, run, log));
    }
  }
  (*server)->stop();
  if (control.interrupted.load()) return make_error("interrupted");
  return ok_status();
}

}  // namespace

const std::vector<DecodePrompt>& decode_prompts() {
  static const std::vector<DecodePrompt> kPrompts = {
      {"code", "Write a Python function that checks whether a number is prime, with a docstring and three tests.",
       "def is_prime(n):\n"},
      {"prose", "Write a short story about a lighthouse keeper who finds a message in a bottle.",
       "Once upon a time, in a small village by the sea,"},
      {"short", "What is the capital of France?", "The capital of France is"},
  };
  return kPrompts;
}

std::string prompt_first_line(int round, int run, const std::string& config) {
  if (run == 0) return "Benchmark cached prompt, round " + std::to_string(round) + ".\n";
  return "Benchmark run " + std::to_string(round) + "." + std::to_string(run) + " of " + config + ".\n";
}

Status check_configs(const BenchOptions& options, const BenchInputs& inputs, RunControl& control) {
  for (const BenchConfig& c : options.configs) {
    std::vector<std::string> args = c.args;
    args.push_back("--dry-run");
    const std::string log = log_path_for(options, c, "plan");
    auto server = BenchServer::start(inputs.serve_binary, options.model_path, args, log, control);
    if (!server.ok()) return make_error("config '" + c.name + "': " + server.message());
    auto status = (*server)->wait_exit(60);
    if (!status.ok()) return make_error("config '" + c.name + "': 'serve --dry-run' " + status.message());
    if (*status == 127) {
      return make_error("config '" + c.name + "': could not run '" + inputs.serve_binary + " serve':\n" + log_tail(log, 10));
    }
    if (*status != 0) {
      return make_error("config '" + c.name + "' (\"" + c.options_text + "\"): '1bit serve' refuses these options:\n" + log_tail(log, 10));
    }
  }
  return ok_status();
}

Result<std::vector<Sample>> run_protocol(const BenchOptions& options, const BenchInputs& inputs, Progress& progress,
                                         RunControl& control) {
  std::vector<Sample> samples;
  for (int round = 1; round <= options.rounds; ++round) {
    for (const BenchConfig& c : options.configs) {
      ONEBIT_TRY(run_config(options, inputs, c, round, progress, control, samples));
      progress.note("round " + std::to_string(round) + "/" + std::to_string(options.rounds) + kDot + c.name + kDot + "done");
    }
  }
  return samples;
}

std::vector<Metric> bench_metrics(const BenchOptions& options, const std::vector<Sample>& samples) {
  std::string prompt_tokens;
  for (const auto& s : samples) {
    if (s.metric == "prompt_nocache" && s.raw.contains("usage") && s.raw["usage"].is_object() &&
        s.raw["usage"].contains("prompt_tokens") && s.raw["usage"]["prompt_tokens"].is_number_integer()) {
      prompt_tokens = std::to_string(s.raw["usage"]["prompt_tokens"].get<int64_t>()) + " tokens, ";
      break;
    }
  }
  std::vector<Metric> m;
  m.push_back({"prompt_nocache", "prompt tok/s, " + prompt_tokens + "no cache", true});
  m.push_back({"prompt_cached", "prompt tok/s, " + prompt_tokens + "cached", true});
  for (const auto& p : decode_prompts()) {
    m.push_back({std::string("decode_") + p.key, "decode tok/s, " + std::to_string(options.decode_tokens) + " tokens, " + p.key, true});
  }
  for (const auto& p : decode_prompts()) {
    m.push_back({std::string("draft_acceptance_") + p.key, std::string("draft acceptance rate, ") + p.key, true});
    m.push_back({std::string("draft_per_step_") + p.key, std::string("accepted tokens per step, ") + p.key, true});
  }
  for (int n : options.concurrency) {
    m.push_back({"concurrency_tps_" + std::to_string(n), "total tok/s at N=" + std::to_string(n), true});
    m.push_back({"concurrency_ttft_" + std::to_string(n), "TTFT ms at N=" + std::to_string(n) + " (median)", false});
  }
  return m;
}

}  // namespace onebit
