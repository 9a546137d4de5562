// The outputs of `1bit bench`; see report.h.
#include <algorithm>
#include "bench/report.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "bench/server.h"

extern char** environ;

namespace onebit {
namespace {

using nlohmann::json;

std::string cell_text(const std::optional<CellStats>& c) {
  if (!c) return "n/a";
  std::string s = format_value(c->best) + " / " + format_value(c->median);
  if (c->change_pct) s += " (" + format_change(*c->change_pct) + ")";
  return s;
}

json cell_json(const std::optional<CellStats>& c) {
  if (!c) return nullptr;
  json j = {{"n", c->n}, {"best", c->best}, {"median", c->median}};
  j["change_pct"] = c->change_pct ? json(*c->change_pct) : json(nullptr);
  return j;
}

std::string options_line(const BenchOptions& o) {
  std::string levels;
  for (int n : o.concurrency) {
    if (!levels.empty()) levels += ",";
    levels += std::to_string(n);
  }
  std::string s = std::to_string(o.rounds) + (o.rounds == 1 ? " round" : " rounds");
  if (o.run_prompt) {
    s += "; prompt " + std::to_string(o.prompt_runs) + (o.prompt_runs == 1 ? " run" : " runs") + " with and without the cache";
  }
  if (o.run_decode) {
    s += "; decode " + std::to_string(o.decode_tokens) + " tokens, " + std::to_string(o.decode_runs) +
         (o.decode_runs == 1 ? " run" : " runs") + " per prompt (code, prose, short)";
  }
  if (o.run_concurrency) {
    s += "; concurrency " + levels + " at " + std::to_string(o.concurrency_tokens) + " tokens per request, " +
         std::to_string(o.concurrency_runs) + (o.concurrency_runs == 1 ? " run" : " runs") + " per level";
  }
  return s;
}

// A gnuplot single-quoted string: no escapes inside, a quote is written twice.
std::string gp_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// The first directory on $PATH holding an executable `name`, or "".
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

std::string format_value(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), std::fabs(v) < 10.0 ? "%.2f" : "%.1f", v);
  return buf;
}

std::string format_change(double pct) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%+.1f%%", pct);
  return buf;
}

std::string markdown_report(const BenchOptions& o, const RunInfo& info, const std::vector<SummaryRow>& rows) {
  std::string md = "# 1bit bench\n\n";
  md += "```\n" + info.command + "\n```\n\n";
  char size[64];
  std::snprintf(size, sizeof(size), "%.1f MiB", static_cast<double>(info.model_size_bytes) / (1024.0 * 1024.0));
  md += "- model: `" + o.model_path + "` (" + size + ", decode via " + (info.chat ? "chat (the model has a template)" : "completion") + ")\n";
  md += "- date: " + info.date + ", wall time " + format_value(info.wall_s) + " s\n";
  md += "- machine: " + machine_summary(info.machine) + "\n";
  md += "- configs (the first is the baseline): ";
  for (size_t i = 0; i < o.configs.size(); ++i) {
    md += std::string(i ? ", " : "") + "`" + o.configs[i].name + "` = `" + o.configs[i].options_text + "`";
  }
  md += "\n- protocol: " + options_line(o);
  if (o.run_prompt) {
    md += "; prompt text " + std::to_string(info.prompt_chars) + " characters of " + info.prompt_source;
    if (info.prompt_tokens > 0) md += ", " + std::to_string(info.prompt_tokens) + " tokens";
  }
  md += "\n";
  if (!info.prompt_note.empty()) md += "- **" + info.prompt_note + "**\n";
  md += "- cells: best / median over every sample of every round; (change of the median against `" + o.configs[0].name +
        "`); TTFT: lower is better\n\n";
  md += "| metric |";
  for (const auto& c : o.configs) md += " " + c.name + " |";
  md += "\n|---|";
  for (size_t i = 0; i < o.configs.size(); ++i) md += "---|";
  md += "\n";
  for (const auto& row : rows) {
    md += "| ";
    md += row.metric.label;
    md += " |";
    for (const auto& cell : row.cells) {
      md += " ";
      md += cell_text(cell);
      md += " |";
    }
    md += "\n";
  }
  return md;
}

json json_report(const BenchOptions& o, const RunInfo& info, const std::vector<Sample>& samples,
                 const std::vector<SummaryRow>& rows) {
  json configs = json::array();
  for (const auto& c : o.configs) configs.push_back({{"name", c.name}, {"options", c.options_text}, {"args", c.args}});
  json options = {{"rounds", o.rounds},
                  {"prompt_file", o.prompt_file.empty() ? json(nullptr) : json(o.prompt_file)},
                  {"prompt_chars", o.prompt_chars},
                  {"prompt_runs", o.prompt_runs},
                  {"decode_tokens", o.decode_tokens},
                  {"decode_runs", o.decode_runs},
                  {"concurrency", o.concurrency},
                  {"concurrency_tokens", o.concurrency_tokens},
                  {"concurrency_runs", o.concurrency_runs},
                  {"only", {{"prompt", o.run_prompt}, {"decode", o.run_decode}, {"concurrency", o.run_concurrency}}},
                  {"out", o.out_dir},
                  {"measure_bandwidth", o.measure_bandwidth},
                  {"timeout_s", o.timeout_s}};
  json sample_list = json::array();
  for (const auto& s : samples) {
    sample_list.push_back({{"config", s.config}, {"round", s.round}, {"run", s.run}, {"metric", s.metric}, {"value", s.value}, {"raw", s.raw}});
  }
  json summary = json::array();
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.cells.size() && i < o.configs.size(); ++i) {
      json cell = cell_json(row.cells[i]);
      if (cell.is_null()) continue;
      cell["metric"] = row.metric.key;
      cell["label"] = row.metric.label;
      cell["higher_is_better"] = row.metric.higher_is_better;
      cell["config"] = o.configs[i].name;
      summary.push_back(cell);
    }
  }
  return {{"command", info.command},
          {"date", info.date},
          {"wall_s", info.wall_s},
          {"machine", machine_json(info.machine)},
          {"model", {{"path", o.model_path}, {"size_bytes", info.model_size_bytes}, {"chat", info.chat}}},
          {"prompt",
           {{"chars", info.prompt_chars},
            {"source", info.prompt_source},
            {"tokens", info.prompt_tokens},
            {"uncapped_tokens", info.prompt_uncapped_tokens},
            {"served_context", info.served_context},
            {"capped_note", info.prompt_note.empty() ? json(nullptr) : json(info.prompt_note)}}},
          {"options", options},
          {"configs", configs},
          {"samples", sample_list},
          {"summary", summary}};
}

std::string gnuplot_script(const BenchOptions& o, const std::vector<SummaryRow>& rows, const std::string& png_path) {
  std::string data;
  std::string plots;
  bool any = false;
  for (size_t c = 0; c < o.configs.size(); ++c) {
    std::string block;
    for (int n : o.concurrency) {
      for (const auto& row : rows) {
        if (row.metric.key != "concurrency_tps_" + std::to_string(n) || c >= row.cells.size() || !row.cells[c]) continue;
        char line[96];
        std::snprintf(line, sizeof(line), "%d %.6g %.6g\n", n, row.cells[c]->median, row.cells[c]->best);
        block += line;
      }
    }
    if (block.empty()) continue;
    any = true;
    const std::string name = "$d" + std::to_string(c);
    data += name + " << EOD\n" + block + "EOD\n";
    // Config names are letters, digits, '-', '_' and '.' (options.cpp): safe inside quotes.
    plots += std::string(plots.empty() ? "plot " : ", \\\n     ") + name + " using 1:2 with linespoints lw 2 pt 7 title \"" +
             o.configs[c].name + " (median)\"";
  }
  if (!any) return "";
  std::string s = "# Drawn by 1bit bench: total tokens/s against concurrency, per configuration.\n";
  s += data;
  s += "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
       "  set terminal pngcairo noenhanced size 960,600 font \"sans,11\"\n"
       "} else {\n"
       "  set terminal png noenhanced size 960,600\n"
       "}\n";
  s += "set output " + gp_quote(png_path) + "\n";
  s += "set title \"1bit bench: total throughput against concurrency\"\n"
       "set xlabel \"simultaneous requests\"\n"
       "set ylabel \"total tokens/s\"\n"
       "set logscale x 2\n"
       "set xtics (";
  for (size_t i = 0; i < o.concurrency.size(); ++i) s += (i ? ", " : "") + std::to_string(o.concurrency[i]);
  // A margin on the log axis so that the first and last levels keep their tic labels.
  const auto [lo, hi] = std::minmax_element(o.concurrency.begin(), o.concurrency.end());
  s += ")\nset xrange [" + std::to_string(*lo / 1.25) + ":" + std::to_string(*hi * 1.25) + "]\n";
  s += "set yrange [0:*]\nset grid\nset key top left\n";
  s += plots + "\n";
  return s;
}

Status run_gnuplot(const std::string& script_path) {
  const std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty()) {
    return make_error("gnuplot is not on PATH, so no PNG was drawn; install it (Debian: apt-get install gnuplot-nox) and rerun, "
                      "or run 'gnuplot " + script_path + "'");
  }
  const std::string log = script_path + ".log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> args = {gnuplot, script_path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, gnuplot.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return make_error("cannot run " + gnuplot + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return make_error("gnuplot failed on " + script_path + ":\n" + log_tail(log, 10));
  }
  std::remove(log.c_str());
  return ok_status();
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return make_error("cannot write '" + path + "': " + std::strerror(errno));
  f << text;
  f.close();
  if (!f) return make_error("cannot write '" + path + "': " + std::strerror(errno));
  return ok_status();
}

}  // namespace onebit
