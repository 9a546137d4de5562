// `1bit bench` units: option parsing and config splitting, statistics (best, median, change on
// the median), the report's formatting, the SSE splitter, the machine description parsers.
#include <gtest/gtest.h>

#include "base/cli_args.h"
#include "bench/client.h"
#include "bench/machine.h"
#include "bench/options.h"
#include "bench/protocol.h"
#include "bench/report.h"
#include "bench/stats.h"
#include "testdata.h"

namespace onebit {
namespace {

using Words = std::vector<std::string>;

TEST(BenchOptions, SplitShellWords) {
  EXPECT_EQ(*split_shell_words(""), Words{});
  EXPECT_EQ(*split_shell_words("  --threads 2\t--parallel   4 "), (Words{"--threads", "2", "--parallel", "4"}));
  EXPECT_EQ(*split_shell_words("--llama-server '/opt/my dir/llama-server'"), (Words{"--llama-server", "/opt/my dir/llama-server"}));
  EXPECT_EQ(*split_shell_words(R"(--alias "a \"b\" c" x\ y)"), (Words{"--alias", "a \"b\" c", "x y"}));
  EXPECT_EQ(*split_shell_words(R"(a'b'"c"d '')"), (Words{"abcd", ""}));
  EXPECT_EQ(*split_shell_words(R"("a\nb")"), (Words{"a\\nb"}));  // only \" \\ \$ \` are escapes in "..."
  EXPECT_NE(split_shell_words("--alias 'open").message().find("unclosed '"), std::string::npos);
  EXPECT_NE(split_shell_words("--alias \"open").message().find("unclosed \""), std::string::npos);
  EXPECT_NE(split_shell_words("x\\").message().find("trailing backslash"), std::string::npos);
}

TEST(BenchOptions, Config) {
  auto c = parse_bench_config("par4=--threads 2 --parallel 4");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->name, "par4");
  EXPECT_EQ(c->options_text, "--threads 2 --parallel 4");
  EXPECT_EQ(c->args, (Words{"--threads", "2", "--parallel", "4"}));
  EXPECT_TRUE(parse_bench_config("empty=").ok());
  EXPECT_NE(parse_bench_config("--threads 2").message().find("has no name"), std::string::npos);
  EXPECT_NE(parse_bench_config("=--threads 2").message().find("name before '=' is empty"), std::string::npos);
  EXPECT_NE(parse_bench_config("a b=--threads 2").message().find("letters, digits"), std::string::npos);
  for (const char* bad : {"x=--port 9000", "x=-p 9000", "x=--port=9000", "x=-m other.gguf", "x=--model=o.gguf", "x=--host 0.0.0.0"}) {
    auto r = parse_bench_config(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.message().find("set by 1bit bench itself"), std::string::npos) << r.message();
  }
  // A value that merely looks like a reserved option is fine when it is an option's value.
  EXPECT_TRUE(parse_bench_config("x=--alias --portable").ok());
}

TEST(BenchOptions, PositiveList) {
  EXPECT_EQ(*parse_positive_list("--concurrency", "1,2,4,8,16", 256), (std::vector<int>{1, 2, 4, 8, 16}));
  EXPECT_EQ(*parse_positive_list("--concurrency", "3", 256), (std::vector<int>{3}));
  for (const char* bad : {"", "1,,2", "0", "1,x", "-1", "257", "1,2,1", "1 ,2", "99999999999"}) {
    auto r = parse_positive_list("--concurrency", bad, 256);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.message().find("--concurrency"), std::string::npos) << r.message();
  }
}

ParsedArgs args_of(const std::vector<std::string>& argv) {
  auto p = parse_args(argv, bench_option_specs());
  EXPECT_TRUE(p.ok()) << p.message();
  return p.ok() ? *p : ParsedArgs{};
}

TEST(BenchOptions, DefaultsAreTheProtocol) {
  const std::string model = testing::source_path("models/onebit-20m-q8_0.gguf");
  auto o = parse_bench_options(args_of({"-m", model}));
  ASSERT_TRUE(o.ok()) << o.message();
  ASSERT_EQ(o->configs.size(), 1u);
  EXPECT_EQ(o->configs[0].name, "default");
  EXPECT_TRUE(o->configs[0].args.empty());
  EXPECT_EQ(o->rounds, 1);
  EXPECT_EQ(o->prompt_chars, 8000);
  EXPECT_EQ(o->prompt_tokens, 1800);
  EXPECT_EQ(o->prompt_runs, 5);
  EXPECT_EQ(o->decode_tokens, 256);
  EXPECT_EQ(o->decode_runs, 3);
  EXPECT_EQ(o->concurrency, (std::vector<int>{1, 2, 4, 8, 16}));
  EXPECT_EQ(o->concurrency_tokens, 64);
  EXPECT_EQ(o->concurrency_runs, 3);
  EXPECT_TRUE(o->run_prompt && o->run_decode && o->run_concurrency);
  EXPECT_EQ(o->out_dir, "bench-out");
  EXPECT_FALSE(o->measure_bandwidth);
  EXPECT_EQ(o->timeout_s, 300);

  auto p = parse_bench_options(args_of({"-m", model, "--config", "a=--threads 1", "--config", "b=--threads 2", "--rounds", "3",
                                        "--only", "decode,concurrency", "--concurrency", "2,4", "--concurrency-runs", "5", "-o", "/tmp/x"}));
  ASSERT_TRUE(p.ok()) << p.message();
  ASSERT_EQ(p->configs.size(), 2u);
  EXPECT_EQ(p->configs[1].args, (Words{"--threads", "2"}));
  EXPECT_EQ(p->rounds, 3);
  EXPECT_FALSE(p->run_prompt);
  EXPECT_TRUE(p->run_decode && p->run_concurrency);
  EXPECT_EQ(p->concurrency, (std::vector<int>{2, 4}));
  EXPECT_EQ(p->concurrency_runs, 5);
  EXPECT_EQ(p->out_dir, "/tmp/x");
}

TEST(BenchOptions, Errors) {
  const std::string model = testing::source_path("models/onebit-20m-q8_0.gguf");
  auto error_of = [](const std::vector<std::string>& argv) {
    auto o = parse_bench_options(args_of(argv));
    return o.ok() ? std::string("(no error)") : o.message();
  };
  EXPECT_NE(error_of({}).find("-m MODEL.gguf is required"), std::string::npos);
  EXPECT_NE(error_of({"-m", "/nonexistent.gguf"}).find("'/nonexistent.gguf': not a readable file"), std::string::npos);
  EXPECT_NE(error_of({"-m", model, "--config", "a=", "--config", "a=--threads 2"}).find("given twice"), std::string::npos);
  EXPECT_NE(error_of({"-m", model, "--rounds", "0"}).find("--rounds"), std::string::npos);
  EXPECT_NE(error_of({"-m", model, "--only", "prompt,speed"}).find("'speed' is not a measurement"), std::string::npos);
  EXPECT_NE(error_of({"-m", model, "--concurrency", "1,two"}).find("--concurrency"), std::string::npos);
  EXPECT_NE(error_of({"-m", model, "--concurrency-runs", "0"}).find("--concurrency-runs"), std::string::npos);
  EXPECT_NE(error_of({"-m", model, "stray"}).find("unexpected argument 'stray'"), std::string::npos);
}

TEST(BenchStats, BestMedianAndChangeOnTheMedian) {
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median_of({7}), 7.0);
  std::vector<Sample> s;
  for (double v : {10.0, 30.0, 20.0}) s.push_back({"base", 1, 1, "decode_code", v, {}});
  for (double v : {45.0, 15.0, 30.0}) s.push_back({"fast", 1, 1, "decode_code", v, {}});
  for (double v : {100.0, 300.0}) s.push_back({"base", 1, 1, "ttft", v, {}});
  for (double v : {50.0, 70.0}) s.push_back({"fast", 1, 1, "ttft", v, {}});
  const std::vector<Metric> metrics = {
      {"decode_code", "decode", true}, {"absent", "nothing", true}, {"ttft", "TTFT", false}};
  auto rows = summarize(s, metrics, {"base", "fast"});
  ASSERT_EQ(rows.size(), 2u);  // the metric without samples has no row
  EXPECT_EQ(rows[0].metric.key, "decode_code");
  EXPECT_DOUBLE_EQ(rows[0].cells[0]->best, 30.0);
  EXPECT_DOUBLE_EQ(rows[0].cells[0]->median, 20.0);
  EXPECT_FALSE(rows[0].cells[0]->change_pct);
  EXPECT_DOUBLE_EQ(rows[0].cells[1]->best, 45.0);
  EXPECT_DOUBLE_EQ(*rows[0].cells[1]->change_pct, 50.0);  // 30 against 20, on the medians
  EXPECT_DOUBLE_EQ(rows[1].cells[0]->best, 100.0);         // lower is better
  EXPECT_DOUBLE_EQ(*rows[1].cells[1]->change_pct, -70.0);  // 60 against 200
  EXPECT_EQ(rows[1].cells[1]->n, 2u);
}

// A burst's rate is all its tokens over the release-to-last-end time, whatever the order the
// streams end in and however long each one ran: 64 + 64 + 128 tokens, the last ending 1.25 s
// after the release, is 256 / 1.25 = 204.8 tok/s (not the sum of per-stream rates, 64/0.5 +
// 64/0.75 + 128/1.25 = 316.1, nor tokens over the summed times, 256/2.5 = 102.4).
TEST(BenchStats, BurstRateIsAllTokensOverReleaseToLastEnd) {
  EXPECT_DOUBLE_EQ(burst_tokens_per_second({{64, 500.0}, {128, 1250.0}, {64, 750.0}}), 256.0 / 1.25);
  EXPECT_DOUBLE_EQ(burst_tokens_per_second({{64, 400.0}}), 160.0);
  // 16 streams through 4 slots: four waves of four, 100 ms each; 1,024 tokens in 0.4 s.
  std::vector<StreamEnd> waves;
  for (int i = 0; i < 16; ++i) waves.push_back({64, 100.0 * (1 + i / 4)});
  EXPECT_DOUBLE_EQ(burst_tokens_per_second(waves), 1024 / 0.4);
  EXPECT_DOUBLE_EQ(burst_tokens_per_second({}), 0.0);
  EXPECT_DOUBLE_EQ(burst_tokens_per_second({{5, 0.0}}), 0.0);
}

TEST(BenchReport, FormatsAndTable) {
  EXPECT_EQ(format_value(1812.46), "1812.5");
  EXPECT_EQ(format_value(3.14159), "3.14");
  EXPECT_EQ(format_change(100.0), "+100.0%");
  EXPECT_EQ(format_change(-4.04), "-4.0%");
  BenchOptions o;
  o.model_path = "m.gguf";
  o.configs = {{"base", "--threads 2", {"--threads", "2"}}, {"par4", "--parallel 4", {"--parallel", "4"}}};
  o.concurrency = {1, 2};
  std::vector<Sample> s = {{"base", 1, 1, "concurrency_tps_1", 10, {}}, {"par4", 1, 1, "concurrency_tps_1", 12, {}},
                           {"base", 1, 1, "concurrency_tps_2", 11, {}}, {"par4", 1, 1, "concurrency_tps_2", 22, {}}};
  auto rows = summarize(s, bench_metrics(o, s), {"base", "par4"});
  RunInfo info;
  info.command = "1bit bench -m m.gguf";
  const std::string md = markdown_report(o, info, rows);
  EXPECT_NE(md.find("| metric | base | par4 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| total tok/s at N=2 | 11.0 / 11.0 | 22.0 / 22.0 (+100.0%) |"), std::string::npos) << md;
  EXPECT_NE(md.find("1bit bench -m m.gguf"), std::string::npos);
  const std::string gp = gnuplot_script(o, rows, "/tmp/it's.png");
  EXPECT_NE(gp.find("$d0 << EOD\n1 10 10\n2 11 11\nEOD"), std::string::npos) << gp;
  EXPECT_NE(gp.find("set output '/tmp/it''s.png'"), std::string::npos) << gp;
  EXPECT_NE(gp.find("title \"par4 (median)\""), std::string::npos) << gp;
  EXPECT_EQ(gnuplot_script(o, {}, "x.png"), "");
  auto j = json_report(o, info, s, rows);
  EXPECT_EQ(j["samples"].size(), 4u);
  EXPECT_EQ(j["summary"].size(), 4u);
  EXPECT_EQ(j["configs"][1]["args"][1], "4");
}

TEST(BenchClient, SseSplitterAndErrorMessages) {
  SseSplitter sse;
  EXPECT_TRUE(sse.feed("data: {\"a\"").empty());
  auto got = sse.feed(":1}\r\n\r\ndata: [DONE]\n\n: comment\n\n");
  EXPECT_EQ(got, (Words{"{\"a\":1}", "[DONE]"}));
  EXPECT_EQ(error_message_of(R"({"error":{"code":400,"message":"too long","type":"x"}})"), "too long");
  EXPECT_EQ(error_message_of("<html>oops</html>"), "<html>oops</html>");
}

TEST(BenchMachine, CpuModelAndDescription) {
  EXPECT_EQ(cpu_model_from_cpuinfo("processor\t: 0\nvendor_id\t: X\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.00GHz\n"),
            "Intel(R) Xeon(R) CPU @ 2.00GHz");
  EXPECT_EQ(cpu_model_from_cpuinfo("processor: 0\n"), "unknown");
  MachineInfo m = describe_machine(false);
  EXPECT_GE(m.cores, 1);
  EXPECT_GT(m.mem_total_bytes, 0u);
  EXPECT_FALSE(m.read_gb_s);
  auto j = machine_json(m);
  EXPECT_TRUE(j["read_gb_s"].is_null());
  EXPECT_NE(machine_summary(m).find("cores"), std::string::npos);
}

}  // namespace
}  // namespace onebit
