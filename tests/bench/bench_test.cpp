// Black-box tests of `1bit bench` against the recording fake llama-server
// (tests/serve/fake_llama_server.py), whose reported speeds are a known function of its argv:
// the table's cells and changes, the JSON's samples, the requests bench sent, the PNG; and bad
// usage and failing servers giving clear errors without hanging.
#include <gtest/gtest.h>
#include <signal.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "gguf/gguf_reader.h"
#include "run_command.h"
#include "tokenizer/tokenizer.h"
#include "testdata.h"

namespace onebit {
namespace {

namespace fs = std::filesystem;
using ::onebit::testing::binary_path;
using ::onebit::testing::read_whole_file;
using ::onebit::testing::run_command;
using ::onebit::testing::source_path;
using json = nlohmann::json;

// What the fake is told to report (its environment), and so what the table must show.
constexpr double kPromptTps = 100.0;
constexpr double kDecodeTps = 20.0;
constexpr double kCacheSpeedup = 10.0;

// CRC-32 (ISO-HDLC, as PNG uses), bitwise.
uint32_t crc32_of(const std::string& bytes, size_t begin, size_t end) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = begin; i < end; ++i) {
    crc ^= static_cast<uint8_t>(bytes[i]);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint32_t be32(const std::string& b, size_t at) {
  return (uint32_t(uint8_t(b[at])) << 24) | (uint32_t(uint8_t(b[at + 1])) << 16) | (uint32_t(uint8_t(b[at + 2])) << 8) |
         uint32_t(uint8_t(b[at + 3]));
}

// Checks a PNG: signature, every chunk's length and CRC, IHDR first with sane dimensions, IEND last.
void expect_valid_png(const std::string& b) {
  ASSERT_GE(b.size(), 8u + 25u + 12u);
  ASSERT_EQ(b.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  size_t at = 8;
  std::vector<std::string> types;
  while (at < b.size()) {
    ASSERT_LE(at + 12, b.size()) << "truncated chunk header at " << at;
    const uint32_t len = be32(b, at);
    ASSERT_LE(at + 12 + len, b.size()) << "chunk runs past the end at " << at;
    const std::string type = b.substr(at + 4, 4);
    EXPECT_EQ(be32(b, at + 8 + len), crc32_of(b, at + 4, at + 8 + len)) << "bad CRC in chunk " << type;
    if (type == "IHDR") {
      ASSERT_EQ(len, 13u);
      const uint32_t w = be32(b, at + 8), h = be32(b, at + 12);
      EXPECT_GE(w, 200u);
      EXPECT_LE(w, 4000u);
      EXPECT_GE(h, 150u);
      EXPECT_LE(h, 4000u);
    }
    types.push_back(type);
    at += 12 + len;
  }
  ASSERT_FALSE(types.empty());
  EXPECT_EQ(types.front(), "IHDR");
  EXPECT_EQ(types.back(), "IEND");
  EXPECT_NE(std::find(types.begin(), types.end(), "IDAT"), types.end());
}

// The markdown table as label -> cells (one per config column).
std::map<std::string, std::vector<std::string>> table_of(const std::string& md) {
  std::map<std::string, std::vector<std::string>> rows;
  std::istringstream in(md);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| ", 0) != 0 || line.rfind("| metric", 0) == 0) continue;
    std::vector<std::string> cells;
    size_t start = 2;
    size_t bar;
    while ((bar = line.find(" |", start)) != std::string::npos) {
      cells.push_back(line.substr(start, bar - start));
      start = bar + 3;
    }
    if (cells.empty()) continue;
    const std::string label = cells.front();
    cells.erase(cells.begin());
    rows[label] = cells;
  }
  return rows;
}

std::vector<json> json_lines(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(read_whole_file(path));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

std::string fmt1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

class BenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("onebit_bench_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fake_ = source_path("tests/serve/fake_llama_server.py");
    model_ = source_path("models/onebit-20m-q8_0.gguf");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `1bit bench ARGS` with the fake's knobs in the environment, bounded by `timeout`.
  onebit::testing::CommandResult bench(const std::string& args, const std::string& env = "") {
    const std::string cmd = "cd " + dir_.string() + " && RECORD=" + (dir_ / "record.jsonl").string() +
                            " RECORD_REQUESTS=" + (dir_ / "requests.jsonl").string() + " FAKE_PROMPT_TPS=" + fmt1(kPromptTps) +
                            " FAKE_DECODE_TPS=" + fmt1(kDecodeTps) + " FAKE_CACHE_SPEEDUP=" + fmt1(kCacheSpeedup) + " " + env +
                            " timeout -s KILL 120 " + binary_path() + " bench " + args + " </dev/null";
    return run_command(cmd);
  }
  std::string config(const std::string& name, const std::string& extra) const {
    return "--config " + name + "=\"--device vulkan " + extra + "--llama-server " + fake_ + "\"";
  }

  fs::path dir_;
  std::string fake_;
  std::string model_;
};

TEST_F(BenchTest, TwoConfigsTwoRoundsAgainstTheFake) {
  const std::string out = (dir_ / "out").string();
  auto r = bench("-m " + model_ + " " + config("base", "") + " " + config("np2", "--parallel 2 ") +
                 " --rounds 2 --prompt-runs 2 --decode-runs 2 --decode-tokens 16 --prompt-chars 2000"
                 " --concurrency 1,2,4 --concurrency-tokens 8 --concurrency-runs 2 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  // The table: every metric, both configs; the fake's speeds are known, so are best, median and change.
  const std::string md = read_whole_file(out + "/bench.md");
  EXPECT_EQ(r.out, md);  // printed too
  EXPECT_NE(md.find("bench -m " + model_), std::string::npos) << "the exact command is above the table";
  EXPECT_NE(md.find("- machine: "), std::string::npos);
  auto table = table_of(md);
  // The nonce line in front of the 2000 characters shifts the prompt's length a little; the fake
  // counts len / 4 + 1 tokens, so the label names a count near 501.
  std::string prompt_label;
  for (const auto& [label, cells] : table) {
    if (label.rfind("prompt tok/s, ", 0) == 0 && label.find("no cache") != std::string::npos) prompt_label = label;
  }
  ASSERT_FALSE(prompt_label.empty()) << md;
  const int prompt_tokens = std::stoi(prompt_label.substr(std::string("prompt tok/s, ").size()));
  EXPECT_NEAR(prompt_tokens, 1 + 2040 / 4, 15) << prompt_label;
  auto expect_row = [&](const std::string& label, double base) {
    ASSERT_TRUE(table.count(label)) << "no row '" << label << "' in\n" << md;
    const auto& cells = table[label];
    ASSERT_EQ(cells.size(), 2u) << label;
    // np2 runs the fake with -np 2: exactly twice the baseline, in every sample.
    EXPECT_EQ(cells[0], fmt1(base) + " / " + fmt1(base)) << label;
    EXPECT_EQ(cells[1], fmt1(2 * base) + " / " + fmt1(2 * base) + " (+100.0%)") << label;
  };
  expect_row(prompt_label, kPromptTps);
  expect_row("prompt tok/s, " + std::to_string(prompt_tokens) + " tokens, cached", kPromptTps * kCacheSpeedup);
  for (const char* p : {"code", "prose", "short"}) expect_row(std::string("decode tok/s, 16 tokens, ") + p, kDecodeTps);
  for (int n : {1, 2, 4}) {
    for (const std::string& label : {"total tok/s at N=" + std::to_string(n), "TTFT ms at N=" + std::to_string(n) + " (median)"}) {
      ASSERT_TRUE(table.count(label)) << label << " missing in\n" << md;
      EXPECT_EQ(table[label].size(), 2u);
      EXPECT_NE(table[label][1].find("%)"), std::string::npos) << "the np2 column has a change: " << table[label][1];
    }
  }
  for (const auto& [label, cells] : table) EXPECT_EQ(label.find("draft"), std::string::npos) << "no drafter, no draft rows";
  EXPECT_EQ(table.size(), 2u + 3u + 2u * 3u);

  // The JSON: machine, configs, every raw sample (rounds x runs per metric and config).
  const json j = json::parse(read_whole_file(out + "/bench.json"));
  EXPECT_FALSE(j["machine"]["cpu_model"].get<std::string>().empty());
  EXPECT_GE(j["machine"]["cores"].get<int>(), 1);
  EXPECT_TRUE(j["model"]["chat"].get<bool>());
  ASSERT_EQ(j["configs"].size(), 2u);
  EXPECT_EQ(j["configs"][1]["name"], "np2");
  std::map<std::pair<std::string, std::string>, int> counts;
  for (const auto& s : j["samples"]) {
    counts[{s["metric"].get<std::string>(), s["config"].get<std::string>()}]++;
    if (s["metric"].get<std::string>().rfind("concurrency_tps_", 0) == 0) {
      const int n = s["raw"]["concurrency"].get<int>();
      EXPECT_EQ(s["raw"]["completion_tokens"].get<int>(), n * 8) << "every stream's tokens were counted";
      EXPECT_EQ(s["raw"]["requests"].size(), static_cast<size_t>(n));
      // The value is every stream's tokens over the release to the last end, from the raw times.
      double last_end = 0.0;
      int tokens = 0;
      for (const auto& rq : s["raw"]["requests"]) {
        last_end = std::max(last_end, rq["end_ms"].get<double>());
        tokens += rq["completion_tokens"].get<int>();
        EXPECT_LE(rq["total_ms"].get<double>(), rq["end_ms"].get<double>() + 1e-6) << "a stream ran inside the burst";
      }
      EXPECT_NEAR(s["value"].get<double>(), tokens / (last_end / 1000.0), 1e-6 * s["value"].get<double>());
    }
    if (s["metric"] == "decode_code") {
      EXPECT_EQ(s["raw"]["timings"]["predicted_n"], 16);
    }
  }
  for (const std::string& c : {std::string("base"), std::string("np2")}) {
    EXPECT_EQ((counts[{"prompt_nocache", c}]), 2 * 2);
    EXPECT_EQ((counts[{"prompt_cached", c}]), 2 * 2);
    EXPECT_EQ((counts[{"decode_prose", c}]), 2 * 2);
    EXPECT_EQ((counts[{"concurrency_tps_4", c}]), 2 * 2) << "rounds x runs: one burst is not a measurement";
    EXPECT_EQ((counts[{"concurrency_ttft_1", c}]), 2 * 2);
  }
  EXPECT_EQ(j["summary"].size(), 11u * 2u);

  // What bench sent: a fresh server per config per round; the requests as the protocol says.
  const auto launches = json_lines((dir_ / "record.jsonl").string());
  ASSERT_EQ(launches.size(), 4u);
  int with_np2 = 0;
  for (const auto& l : launches) {
    const auto argv = l["argv"].get<std::vector<std::string>>();
    auto it = std::find(argv.begin(), argv.end(), "-np");
    if (it != argv.end() && it + 1 != argv.end() && *(it + 1) == "2") ++with_np2;
  }
  EXPECT_EQ(with_np2, 2);
  std::set<std::string> uncached_prompts;
  int uncached = 0, decode = 0, streams = 0, warmups = 0;
  std::map<std::string, int> stream_prompts;
  for (const auto& rq : json_lines((dir_ / "requests.jsonl").string())) {
    const json& b = rq["body"];
    EXPECT_EQ(b["temperature"], 0) << b.dump();
    if (rq["path"] == "/v1/completions") {
      EXPECT_EQ(b["max_tokens"], 1);
      if (b["cache_prompt"] == false) {
        ++uncached;
        uncached_prompts.insert(b["prompt"].get<std::string>());
      }
      continue;
    }
    ASSERT_EQ(rq["path"], "/v1/chat/completions") << "the model has a chat template";
    EXPECT_EQ(b["chat_template_kwargs"]["enable_thinking"], false);
    EXPECT_EQ(b["ignore_eos"], true);
    if (b.value("stream", false)) {
      ++streams;
      EXPECT_EQ(b["max_tokens"], 8);
      EXPECT_EQ(b["stream_options"]["include_usage"], true);
      stream_prompts[b["messages"][0]["content"].get<std::string>()]++;
    } else if (b["max_tokens"] == 16) {
      ++decode;
    } else {
      ++warmups;
    }
  }
  EXPECT_EQ(uncached, 2 * 2 * 2);
  EXPECT_EQ(uncached_prompts.size(), 8u) << "each run without the cache has its own prompt";
  EXPECT_EQ(decode, 2 * 2 * 3 * 2);
  EXPECT_EQ(warmups, 4);
  EXPECT_EQ(streams, 2 * 2 * (1 + 2 + 4) * 2);
  for (const auto& [prompt, n] : stream_prompts) EXPECT_EQ(n, 2) << "one per config, per round and run: " << prompt;

  // Server logs are kept beside the outputs.
  EXPECT_TRUE(fs::exists(out + "/serve-np2-r2.log"));

  // The plot.
  if (run_command("command -v gnuplot").exit_code != 0) {
    GTEST_SKIP() << "gnuplot is not installed (Debian: apt-get install gnuplot-nox), so bench.png was not drawn; "
                    "the table and JSON were checked";
  }
  ASSERT_TRUE(fs::exists(out + "/bench.png")) << r.err;
  expect_valid_png(read_whole_file(out + "/bench.png"));
}

// --prompt-tokens caps the docs prompt by the model's own tokenizer: what bench sent (after its
// nonce line) is at most that many tokens, and a prefix of the uncapped text.
TEST_F(BenchTest, PromptIsCappedByTheModelsTokens) {
  auto r = bench("-m " + model_ + " " + config("base", "") + " --only prompt --prompt-runs 1 --prompt-tokens 40 -o " +
                 (dir_ / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto file = onebit::GgufFile::open(model_);
  ASSERT_TRUE(file.ok());
  auto tok = onebit::Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.message();
  int seen = 0;
  for (const auto& rq : json_lines((dir_ / "requests.jsonl").string())) {
    if (rq["path"] != "/v1/completions" || rq["body"]["cache_prompt"] != false) continue;
    const std::string sent = rq["body"]["prompt"].get<std::string>();
    const std::string text = sent.substr(sent.find('\n') + 1);  // after the nonce line
    const size_t n = tok->encode(text, onebit::EncodeOptions{.parse_special = false}).size();
    EXPECT_LE(n, 41u) << text;  // decode then encode may merge one boundary differently
    EXPECT_GE(n, 30u) << text;
    EXPECT_EQ(read_whole_file(source_path("docs/api.md")).rfind(text.substr(0, 20), 0), 0u)
        << "the capped text starts the first docs file: " << text;
    ++seen;
  }
  EXPECT_EQ(seen, 1);
}

// The protocol's defaults on the default model (context 1,024): the 1,800-token prompt is cut so
// that every prompt request fits, and the report, stderr and JSON say from what to what.
TEST_F(BenchTest, DefaultPromptIsCappedToTheModelsContext) {
  const std::string out = (dir_ / "out").string();
  auto r = bench("-m " + model_ + " " + config("base", "") + " --only prompt --prompt-runs 2 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto file = onebit::GgufFile::open(model_);
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(*file->get_int("qwen3.context_length"), 1024);
  auto tok = onebit::Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.message();
  size_t longest = 0;
  int seen = 0;
  for (const auto& rq : json_lines((dir_ / "requests.jsonl").string())) {
    if (rq["path"] != "/v1/completions") continue;
    const size_t n = tok->encode(rq["body"]["prompt"].get<std::string>(), onebit::EncodeOptions{.parse_special = false}).size();
    EXPECT_LE(n + (tok->adds_bos() ? 1 : 0) + rq["body"]["max_tokens"].get<size_t>(), 1024u);
    longest = std::max(longest, n);
    ++seen;
  }
  EXPECT_EQ(seen, 2 + 1 + 2);
  EXPECT_GE(longest, 1000u) << "the cut keeps what fits";
  const json j = json::parse(read_whole_file(out + "/bench.json"));
  const int64_t tokens = j["prompt"]["tokens"].get<int64_t>();
  EXPECT_EQ(j["prompt"]["uncapped_tokens"], 1800);
  EXPECT_EQ(j["prompt"]["served_context"], 1024);
  const std::string note = "prompt capped from 1800 to " + std::to_string(tokens) + " tokens: the model's context is 1024";
  ASSERT_TRUE(j["prompt"]["capped_note"].is_string());
  EXPECT_EQ(j["prompt"]["capped_note"].get<std::string>().rfind(note, 0), 0u) << j["prompt"];
  EXPECT_NE(read_whole_file(out + "/bench.md").find("- **" + note), std::string::npos);
  EXPECT_NE(r.err.find(note), std::string::npos) << r.err;
}

TEST_F(BenchTest, DrafterRowsAppearWhenTheServerReportsThem) {
  const std::string out = (dir_ / "out").string();
  auto r = bench("-m " + model_ + " " + config("draft", "--draft " + model_ + " ") +
                 " --only decode --decode-runs 1 --decode-tokens 16 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto table = table_of(read_whole_file(out + "/bench.md"));
  // The fake accepts 3/4 of the 16 drafted tokens in 16 / 4 steps.
  EXPECT_EQ(table["draft acceptance rate, code"], std::vector<std::string>{"0.75 / 0.75"});
  EXPECT_EQ(table["accepted tokens per step, prose"], std::vector<std::string>{"3.00 / 3.00"});
  EXPECT_EQ(table.count("total tok/s at N=1"), 0u) << "--only decode";
  EXPECT_FALSE(fs::exists(out + "/bench.png")) << "no concurrency, no plot";
}

TEST_F(BenchTest, MissingTimingsNameTheConfig) {
  auto r = bench("-m " + model_ + " " + config("quiet", "") + " --only prompt --prompt-runs 1 -o " + (dir_ / "out").string(),
                 "FAKE_NO_TIMINGS=1");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("timings.prompt_ms"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("config 'quiet'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("may not report"), std::string::npos) << r.err;
}

TEST_F(BenchTest, BadUsageIsExit2) {
  auto missing = bench("--rounds 1");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("-m MODEL.gguf is required"), std::string::npos) << missing.err;

  auto absent = bench("-m /nonexistent/model.gguf");
  EXPECT_EQ(absent.exit_code, 2);
  EXPECT_NE(absent.err.find("/nonexistent/model.gguf"), std::string::npos) << absent.err;

  auto list = bench("-m " + model_ + " --concurrency 1,x,4");
  EXPECT_EQ(list.exit_code, 2);
  EXPECT_NE(list.err.find("--concurrency: 'x'"), std::string::npos) << list.err;

  auto port = bench("-m " + model_ + " --config a=\"--threads 1 --port 9000\"");
  EXPECT_EQ(port.exit_code, 2);
  EXPECT_NE(port.err.find("'--port' is set by 1bit bench itself"), std::string::npos) << port.err;

  auto twice = bench("-m " + model_ + " --config a= --config a=\"--threads 1\"");
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.err.find("given twice"), std::string::npos) << twice.err;

  auto prompt = bench("-m " + model_ + " --prompt-file /nonexistent/prompt.txt");
  EXPECT_EQ(prompt.exit_code, 2);
  EXPECT_NE(prompt.err.find("/nonexistent/prompt.txt"), std::string::npos) << prompt.err;
}

TEST_F(BenchTest, ServerThatCannotStartIsAClearError) {
  // serve refuses the options (its dry run fails): nothing is measured.
  auto refused = bench("-m " + model_ + " --config bad=\"--parallel 0\" -o " + (dir_ / "out").string());
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_NE(refused.err.find("config 'bad'"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--parallel"), std::string::npos) << refused.err;

  // The plan is fine but the llama-server does not exist: the server exits before it is healthy.
  auto dead = bench("-m " + model_ + " --config gone=\"--device vulkan --llama-server /nonexistent/llama-server\" -o " +
                    (dir_ / "out2").string());
  EXPECT_EQ(dead.exit_code, 1) << dead.err;
  EXPECT_NE(dead.err.find("config 'gone'"), std::string::npos) << dead.err;
  EXPECT_NE(dead.err.find("/nonexistent/llama-server"), std::string::npos) << dead.err;

  // A server that never becomes healthy: --timeout ends the wait, and the server is stopped.
  auto slow = bench("-m " + model_ + " " + config("slow", "") + " --timeout 2 -o " + (dir_ / "out3").string(),
                    "FAKE_READY_DELAY_S=60");
  EXPECT_EQ(slow.exit_code, 1) << slow.err;
  EXPECT_NE(slow.err.find("not healthy within 2 s"), std::string::npos) << slow.err;
  const auto launches = json_lines((dir_ / "record.jsonl").string());
  ASSERT_FALSE(launches.empty());
  const int pid = launches.back()["pid"].get<int>();
  // Its parent, the stopped front, is gone; init reaps it within moments.
  for (int i = 0; i < 50 && ::kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_NE(::kill(pid, 0), 0) << "the fake llama-server " << pid << " was left running";
}

}  // namespace
}  // namespace onebit
