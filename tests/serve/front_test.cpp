// Black-box tests of `1bit serve` on child routes, against the recording fake llama-server
// (tests/serve/fake_llama_server.py): argv/env as planned, proxying, streams, adaptive overflow,
// child death, and no orphans after the front is SIGKILLed.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <map>

#include <nlohmann/json.hpp>

#include "gguf/gguf_writer.h"
#include "run_command.h"
#include "serve/child_process.h"
#include "testdata.h"

namespace onebit {
namespace {

namespace fs = std::filesystem;
using ::onebit::testing::binary_path;
using ::onebit::testing::source_path;
using json = nlohmann::json;

class FrontTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("onebit_front_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    record_ = (dir_ / "record.jsonl").string();
    fake_ = source_path("tests/serve/fake_llama_server.py");
  }
  void TearDown() override {
    if (front_) front_->stop(std::chrono::seconds(10));
    fs::remove_all(dir_);
  }

  // A GGUF with only header metadata: planning never reads tensors.
  std::string write_model(const std::string& arch, uint64_t experts = 0, uint32_t hadamard = 0) {
    GgufWriter w;
    w.set_string("general.architecture", arch);
    if (experts > 0) w.set_uint32(arch + ".expert_count", static_cast<uint32_t>(experts));
    if (hadamard > 0) w.set_uint32("onebit.hadamard_q4_0", hadamard);
    std::string path = (dir_ / (arch + ".gguf")).string();
    EXPECT_TRUE(w.write_file(path).ok());
    return path;
  }

  // Starts the front with `args` and waits until /health says 200.
  void start_front(std::vector<std::string> args, std::vector<std::pair<std::string, std::string>> env = {},
                   bool wait_ready = true) {
    port_ = *find_free_loopback_port();
    args.insert(args.end(), {"--port", std::to_string(port_)});
    env.emplace_back("RECORD", record_);
    std::vector<std::string> argv = {"serve"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto real = ChildProcess::start({binary_path(), argv, env, "[front] "});
    ASSERT_TRUE(real.ok()) << real.message();
    front_ = std::move(*real);
    if (wait_ready) ASSERT_TRUE(wait_health(200, std::chrono::seconds(20)));
  }

  bool wait_health(int want, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = client().Get("/health");
      if (r && r->status == want) return true;
      if (front_->poll_exit()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  httplib::Client client() {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    return c;
  }

  // The pid of the child last started with `--device DEVICE` (children record themselves in any
  // order), or -1.
  int pid_of(const std::string& device) {
    int pid = -1;
    for (const json& r : records()) {
      const auto& argv = r["argv"];
      for (size_t i = 0; i + 1 < argv.size(); ++i) {
        if (argv[i] == "--device" && argv[i + 1] == device) pid = r["pid"];
      }
    }
    return pid;
  }

  // The --port a recorded child was started with, or -1.
  static int port_in(const json& record) {
    const auto& argv = record["argv"];
    int p = -1;
    for (size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == "--port") p = std::stoi(argv[i + 1].get<std::string>());
    return p;
  }

  // The --port of the child last started with `--device DEVICE`, or -1.
  int port_of(const std::string& device) {
    int port = -1;
    for (const json& r : records()) {
      const auto& argv = r["argv"];
      bool is_it = false;
      for (size_t i = 0; i + 1 < argv.size(); ++i) is_it = is_it || (argv[i] == "--device" && argv[i + 1] == device);
      if (is_it) port = port_in(r);
    }
    return port;
  }

  std::vector<json> records() {
    std::vector<json> out;
    std::ifstream f(record_);
    for (std::string line; std::getline(f, line);) out.push_back(json::parse(line));
    return out;
  }

  // Waits for the front to exit; its status, or -1 after `timeout`.
  int wait_exit(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto s = front_->poll_exit()) return *s;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

  fs::path dir_;
  std::string record_, fake_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> front_;
};

bool process_alive(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return false;
  auto close = stat.rfind(')');
  return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
}

TEST_F(FrontTest, ChildGetsThePlannedArgvAndEnvironment) {
  const std::string model = write_model("qwen3moe", 128, 32);
  const std::vector<std::string> opts = {"-m", model, "--device", "vulkan", "--llama-server", fake_, "-c", "4096",
                                         "-np", "2", "--mtp", "head.gguf", "--alias", "q"};
  start_front(opts, {{"ONEBIT_TEST_MARKER", "kept"}});
  auto rec = records();
  ASSERT_EQ(rec.size(), 1u);
  std::vector<std::string> argv = rec[0]["argv"];
  // The dry run prints the same argv, with the port left as a placeholder.
  std::string cmd = binary_path() + " serve --dry-run";
  for (const auto& o : opts) cmd += " '" + o + "'";
  auto dry = onebit::testing::run_command(cmd);
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  std::vector<std::string> planned = json::parse(dry.out)["backends"][0]["argv"];
  ASSERT_EQ(argv.size(), planned.size());
  for (size_t i = 0; i < argv.size(); ++i) {
    if (planned[i] == "{port}") EXPECT_EQ(argv[i - 1], "--port");
    else EXPECT_EQ(argv[i], planned[i]) << i;
  }
  EXPECT_EQ(argv.back(), "1024");  // rotated MoE: -ub 1024
  EXPECT_EQ(rec[0]["env"]["GGML_W4A4_TENSORS"], "all");
  EXPECT_EQ(rec[0]["env"]["ONEBIT_TEST_MARKER"], "kept");
}

// The value after `flag` in argv, or "<absent>".
std::string after(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  return it == argv.end() ? "<absent>" : (it + 1 == argv.end() ? "<last>" : *(it + 1));
}

// Every route and modifier of product.md through the fake: what it received equals the dry run,
// and the value after each flag is the documented one.
TEST_F(FrontTest, EveryRouteAndModifierAsRecorded) {
  struct Case {
    std::vector<std::string> opts;
    std::map<std::string, std::string> want;  // flag -> value after it ("<absent>" for none)
    std::map<std::string, std::string> env;   // variable -> value ("<unset>" for none)
  };
  const std::string moe = write_model("qwen3moe", 64, 32), dense = write_model("llama");
  const std::string rotated_dense = (dir_ / "rot.gguf").string();
  {
    GgufWriter w;
    w.set_string("general.architecture", "qwen3");
    w.set_uint32("onebit.hadamard_q4_0", 32);
    ASSERT_TRUE(w.write_file(rotated_dense).ok());
  }
  const std::string dflash = (dir_ / "dflash.gguf").string();
  {
    GgufWriter w;
    w.set_string("general.architecture", "qwen3-dflash");
    w.set_uint32("qwen3-dflash.block_size", 8);
    ASSERT_TRUE(w.write_file(dflash).ok());
  }
  const std::vector<Case> cases = {
      {{"-m", dense, "--device", "cpu"}, {{"-ngl", "0"}, {"--device", "<absent>"}, {"-c", "<absent>"}}, {}},
      {{"-m", dense, "--device", "cuda"}, {{"--device", "CUDA0"}, {"-ngl", "99"}}, {}},
      {{"-m", dense, "--device", "vulkan", "-c", "8192"}, {{"--device", "Vulkan0"}, {"-c", "8192"}, {"-np", "<absent>"}}, {}},
      {{"-m", dense, "--device", "rocm", "--parallel", "4"}, {{"--device", "ROCm0"}, {"-np", "4"}}, {}},
      {{"-m", dense, "--device", "hrx", "--mtp"},
       {{"--device", "HRX0"}, {"--spec-type", "draft-mtp"}, {"-md", dense}, {"--spec-draft-n-max", "3"},
        {"--spec-draft-p-min", "<absent>"}}, {}},
      {{"-m", dense, "--device", "vulkan", "--dflash", dflash},
       {{"--spec-type", "draft-dflash"}, {"-md", dflash}, {"-ngld", "99"}, {"--spec-draft-n-max", "7"},
        {"--spec-draft-p-min", "0"}}, {}},
      {{"-m", dense, "--device", "vulkan", "--dflash", dflash, "--mtp-max", "4", "--mtp-p-min", "0.75"},
       {{"--spec-draft-n-max", "4"}, {"--spec-draft-p-min", "0.75"}}, {}},
      {{"-m", rotated_dense, "--device", "vulkan"}, {{"-ub", "<absent>"}}, {{"GGML_W4A4_TENSORS", "all"}}},
      {{"-m", moe, "--device", "vulkan"}, {{"-ub", "1024"}}, {{"GGML_W4A4_TENSORS", "all"}}},
      {{"-m", dense, "--device", "vulkan"}, {{"-ub", "<absent>"}}, {{"GGML_W4A4_TENSORS", "<unset>"}}},
  };
  for (const auto& c : cases) {
    std::string cmd = binary_path() + " serve --dry-run --llama-server " + fake_;
    for (const auto& o : c.opts) cmd += " '" + o + "'";
    auto dry = onebit::testing::run_command(cmd);
    ASSERT_EQ(dry.exit_code, 0) << cmd << "\n" << dry.err;
    std::vector<std::string> planned = json::parse(dry.out)["backends"][0]["argv"];

    auto opts = c.opts;
    opts.insert(opts.end(), {"--llama-server", fake_});
    start_front(opts);
    auto rec = records();
    ASSERT_EQ(rec.size(), 1u) << cmd;
    std::vector<std::string> argv = rec[0]["argv"];
    ASSERT_EQ(argv.size(), planned.size()) << cmd;
    for (size_t i = 0; i < argv.size(); ++i)
      if (planned[i] != "{port}") EXPECT_EQ(argv[i], planned[i]) << cmd << " at " << i;
    EXPECT_EQ(after(argv, "-m"), c.opts[1]);
    EXPECT_EQ(after(argv, "--host"), "127.0.0.1");
    for (const auto& [flag, value] : c.want) EXPECT_EQ(after(argv, flag), value) << cmd << " " << flag;
    for (const auto& [var, value] : c.env) {
      auto& env = rec[0]["env"];
      EXPECT_EQ(env.contains(var) ? env[var].get<std::string>() : "<unset>", value) << cmd << " " << var;
    }
    front_->stop();
    front_.reset();
    fs::remove(record_);
  }
}

TEST_F(FrontTest, UserEnvironmentIsNeverOverridden) {
  start_front({"-m", write_model("llama", 0, 32), "--device", "rocm", "--llama-server", fake_},
              {{"GGML_W4A4_TENSORS", "attn"}});
  EXPECT_EQ(records()[0]["env"]["GGML_W4A4_TENSORS"], "attn");
}

TEST_F(FrontTest, HealthIs503UntilTheChildIsReady) {
  start_front({"-m", write_model("llama"), "--device", "vulkan", "--llama-server", fake_},
              {{"FAKE_READY_DELAY_S", "1.5"}}, /*wait_ready=*/false);
  ASSERT_TRUE(wait_health(503, std::chrono::seconds(10)));
  auto post = client().Post("/v1/chat/completions", R"({"messages":[]})", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 503);
  EXPECT_TRUE(wait_health(200, std::chrono::seconds(20)));
}

TEST_F(FrontTest, NonStreamedReplyHasTheAlias) {
  start_front({"-m", write_model("llama"), "--device", "vulkan", "--llama-server", fake_, "--alias", "mine"});
  auto r = client().Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  auto j = json::parse(r->body);
  EXPECT_EQ(j["model"], "mine");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hello from Vulkan0");
  auto models = json::parse(client().Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["id"], "mine");
  EXPECT_EQ(models["data"][0]["device"], "vulkan");
  // An upstream error is relayed with its status and body.
  auto bad = client().Post("/v1/completions", R"({"max_tokens":-7})", "application/json");
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["message"], "max_tokens");
  // Auxiliary routes go to the primary.
  EXPECT_EQ(json::parse(client().Get("/props")->body)["backend"], "Vulkan0");
  EXPECT_EQ(json::parse(client().Post("/tokenize", "{}", "application/json")->body)["tokens"].size(), 3u);
}

TEST_F(FrontTest, StreamIsRelayedInOrderWithTheAlias) {
  start_front({"-m", write_model("llama"), "--device", "vulkan", "--llama-server", fake_, "--alias", "mine"},
              {{"FAKE_DELAY_MS", "500"}});
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::string>> pieces;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = R"({"stream":true,"messages":[{"role":"user","content":"hi"}]})";
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    pieces.emplace_back(std::chrono::steady_clock::now(), std::string(d, n));
    return true;
  };
  auto r = client().send(req);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  std::string all;
  for (auto& p : pieces) all += p.second;
  // Chunks arrived as the child produced them, not all at once at the end.
  ASSERT_GE(pieces.size(), 3u);
  EXPECT_GT(pieces.back().first - pieces.front().first, std::chrono::milliseconds(250));
  std::vector<json> events;
  size_t pos = 0, next;
  while ((next = all.find("\n\n", pos)) != std::string::npos) {
    std::string ev = all.substr(pos, next - pos);
    pos = next + 2;
    ASSERT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    if (ev == "data: [DONE]") continue;
    events.push_back(json::parse(ev.substr(6)));
  }
  EXPECT_EQ(all.substr(all.size() - 14), "data: [DONE]\n\n");
  ASSERT_EQ(events.size(), 6u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(events[i]["choices"][0]["delta"]["content"], "tok" + std::to_string(i) + " ");
    EXPECT_EQ(events[i]["model"], "mine");
  }
  EXPECT_EQ(events[5]["choices"][0]["finish_reason"], "stop");
}

TEST_F(FrontTest, AdaptiveSendsEightToPrimaryAndFourToOverflow) {
  start_front({"-m", write_model("llama"), "--device", "vulkan", "--adaptive", "--adaptive-at", "8"},
              {{"ONEBIT_LLAMA_SERVER", fake_}, {"ONEBIT_LEAN_SERVER", fake_}, {"FAKE_DELAY_MS", "2000"}});
  ASSERT_EQ(records().size(), 2u);
  std::vector<std::future<std::string>> replies;
  for (int i = 0; i < 12; ++i) {
    replies.push_back(std::async(std::launch::async, [&, i] {
      auto c = client();
      bool stream = i % 2 == 0;
      auto r = c.Post("/v1/chat/completions", stream ? R"({"stream":true})" : R"({})", "application/json");
      if (!r || r->status != 200) return std::string("error");
      if (!stream) return json::parse(r->body)["backend"].get<std::string>();
      if (r->body.find("data: [DONE]") == std::string::npos) return std::string("unfinished");
      return json::parse(r->body.substr(6, r->body.find("\n\n") - 6))["backend"].get<std::string>();
    }));
  }
  std::map<std::string, int> by_backend;
  for (auto& f : replies) by_backend[f.get()]++;
  EXPECT_EQ(by_backend["Vulkan0"], 8);
  EXPECT_EQ(by_backend["ROCm0"], 4);
  auto metrics = client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("onebit_backend_requests_total{backend=\"primary/vulkan\"} 8"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("onebit_backend_requests_total{backend=\"overflow/rocm\"} 4"), std::string::npos);
}

TEST_F(FrontTest, FrontExitsNonZeroWhenAChildDies) {
  start_front({"-m", write_model("llama"), "--device", "vulkan", "--llama-server", fake_});
  int child_pid = records()[0]["pid"];
  ::kill(child_pid, SIGKILL);
  EXPECT_EQ(wait_exit(std::chrono::seconds(10)), 1);
}

// A primary child that exits before it serves (its port taken between the front's probe and its
// bind: the fake's FAKE_EXIT_ONCE) is started again on a fresh port instead of ending the front.
TEST_F(FrontTest, PrimaryThatExitsBeforeReadyIsStartedAgainOnAFreshPort) {
  start_front({"-m", write_model("llama"), "--device", "vulkan", "--llama-server", fake_},
              {{"FAKE_EXIT_ONCE", (dir_ / "exited").string()}});
  const auto rec = records();
  ASSERT_EQ(rec.size(), 2u);
  EXPECT_NE(port_in(rec[0]), port_in(rec[1]));
  auto r = client().Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(front_->poll_exit());
}

TEST_F(FrontTest, StoppedChildGets504AndHealthFollowsIt) {
  start_front({"-m", write_model("llama"), "--device", "vulkan", "--llama-server", fake_, "--child-timeout", "2"},
              {{"FAKE_DELAY_MS", "30000"}});
  const int child_pid = records()[0]["pid"];
  auto reply = std::async(std::launch::async, [&] {
    auto c = client();
    c.set_read_timeout(60, 0);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = c.Post("/v1/chat/completions", R"({})", "application/json");
    return std::make_pair(r ? r->status : 0, std::chrono::steady_clock::now() - t0);
  });
  auto stream = std::async(std::launch::async, [&] {
    auto c = client();
    c.set_read_timeout(60, 0);
    auto r = c.Post("/v1/chat/completions", R"({"stream":true})", "application/json");
    return r ? std::to_string(r->status) + " " + r->body : std::string("none");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(child_pid, SIGSTOP), 0);
  // Detected within the timeout plus a probe's wait: the reply in progress is a 504, /health a 503.
  const auto [status, took] = reply.get();
  EXPECT_EQ(status, 504);
  EXPECT_LT(took, std::chrono::seconds(8));
  const std::string streamed = stream.get();
  EXPECT_NE(streamed.find("504"), std::string::npos) << streamed;
  EXPECT_NE(streamed.find("has not answered"), std::string::npos) << streamed;
  EXPECT_TRUE(wait_health(503, std::chrono::seconds(2)));
  auto refused = client().Post("/v1/chat/completions", R"({})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  // Resumed: it answers /health again and gets requests again.
  ::kill(child_pid, SIGCONT);
  EXPECT_TRUE(wait_health(200, std::chrono::seconds(10)));
  EXPECT_FALSE(front_->poll_exit());
}

TEST_F(FrontTest, KilledOverflowChildIsRestartedWhileThePrimaryServes) {
  start_front({"-m", write_model("llama"), "--device", "vulkan", "--adaptive", "--adaptive-at", "1"},
              {{"ONEBIT_LLAMA_SERVER", fake_}, {"ONEBIT_LEAN_SERVER", fake_}, {"FAKE_DELAY_MS", "1000"}});
  auto rec = records();
  ASSERT_EQ(rec.size(), 2u);
  const int overflow_pid = pid_of("ROCm0"), old_port = port_of("ROCm0");
  ASSERT_GT(overflow_pid, 0);
  ASSERT_GT(old_port, 0);
  ASSERT_EQ(::kill(overflow_pid, SIGKILL), 0);
  // Another program takes the dead child's port (as one did in CI): the restart must use another.
  const int squatter = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(squatter, 0);
  const int one = 1;
  ::setsockopt(squatter, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(uint16_t(old_port));
  bool bound = false;
  for (int i = 0; i < 50 && !bound; ++i) {  // the killed child's socket closes as it exits
    bound = ::bind(squatter, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(squatter, 4) == 0;
    if (!bound) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(bound) << "could not take the killed child's port " << old_port;
  // The primary keeps serving while the overflow restarts.
  for (int i = 0; i < 5; ++i) {
    auto r = client().Post("/v1/chat/completions", R"({})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(json::parse(r->body)["backend"], "Vulkan0");
    auto h = client().Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (records().size() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(records().size(), 3u);
  EXPECT_NE(pid_of("ROCm0"), overflow_pid);
  EXPECT_NE(port_of("ROCm0"), old_port) << "restarted on its old port, which another program holds";
  // Serving again: with the primary busy, a second request reaches the restarted overflow.
  bool reached = false;
  for (int attempt = 0; attempt < 20 && !reached; ++attempt) {
    auto a = std::async(std::launch::async, [&] { return client().Post("/v1/chat/completions", R"({})", "application/json"); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto b = client().Post("/v1/chat/completions", R"({})", "application/json");
    auto ra = a.get();
    reached = b && b->status == 200 && json::parse(b->body)["backend"] == "ROCm0";
    if (!reached) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  EXPECT_TRUE(reached);
  EXPECT_FALSE(front_->poll_exit());
  ::close(squatter);
}

TEST_F(FrontTest, KilledPrimaryEndsTheFrontWithoutOrphans) {
  start_front({"-m", write_model("llama"), "--device", "vulkan", "--adaptive"},
              {{"ONEBIT_LLAMA_SERVER", fake_}, {"ONEBIT_LEAN_SERVER", fake_}});
  auto rec = records();
  ASSERT_EQ(rec.size(), 2u);
  const int primary = pid_of("Vulkan0"), overflow = pid_of("ROCm0");
  ASSERT_GT(primary, 0);
  ASSERT_GT(overflow, 0);
  ::kill(primary, SIGKILL);
  EXPECT_EQ(wait_exit(std::chrono::seconds(15)), 1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (process_alive(overflow) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(process_alive(overflow));
}

TEST_F(FrontTest, SigtermUnderAChildRouteEndsRepliesWithinTheTimeoutOrWithAnError) {
  for (const bool in_time : {true, false}) {
    SCOPED_TRACE(in_time ? "replies finish in time" : "replies outlast the timeout");
    start_front({"-m", write_model("llama"), "--device", "vulkan", "--llama-server", fake_, "--shutdown-timeout",
                 in_time ? "20" : "1"},
                {{"FAKE_DELAY_MS", in_time ? "1500" : "60000"}});
    const int child_pid = records().back()["pid"];
    std::vector<std::future<std::pair<int, std::string>>> replies;
    // 8 streams and 4 whole replies.
    for (int i = 0; i < 12; ++i) {
      replies.push_back(std::async(std::launch::async, [&, i] {
        auto c = client();
        c.set_read_timeout(90, 0);
        auto r = c.Post("/v1/chat/completions", i < 8 ? R"({"stream":true})" : R"({})", "application/json");
        return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
      }));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::kill(front_->pid(), SIGTERM);
    for (int i = 0; i < 12; ++i) {
      auto [status, body] = replies[i].get();
      const bool stream = i < 8;
      if (in_time) {
        EXPECT_EQ(status, 200) << body;
        if (stream) {
          EXPECT_NE(body.find("data: [DONE]"), std::string::npos) << body;
          EXPECT_EQ(body.find("\"error\""), std::string::npos) << body;
        }
      } else if (stream) {
        EXPECT_EQ(status, 200);
        EXPECT_NE(body.find("\"code\":503"), std::string::npos) << body;
        EXPECT_NE(body.find("shutting down"), std::string::npos) << body;
        EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n") << body;
      } else {
        EXPECT_EQ(status, 503) << body;
        EXPECT_NE(body.find("shutting down"), std::string::npos) << body;
      }
    }
    EXPECT_EQ(wait_exit(std::chrono::seconds(30)), 0);
    EXPECT_FALSE(process_alive(child_pid));
    front_.reset();
  }
}

TEST_F(FrontTest, SigkillOfTheFrontLeavesNoChild) {
  start_front({"-m", write_model("llama"), "--device", "vulkan", "--adaptive"},
              {{"ONEBIT_LLAMA_SERVER", fake_}, {"ONEBIT_LEAN_SERVER", fake_}});
  auto rec = records();
  ASSERT_EQ(rec.size(), 2u);
  ::kill(front_->pid(), SIGKILL);
  wait_exit(std::chrono::seconds(5));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool any_alive = true;
  while (any_alive && std::chrono::steady_clock::now() < deadline) {
    any_alive = process_alive(rec[0]["pid"]) || process_alive(rec[1]["pid"]);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(any_alive);
}

TEST_F(FrontTest, SigtermStopsChildrenAndExitsZero) {
  start_front({"-m", write_model("llama"), "--device", "vulkan", "--llama-server", fake_});
  int child_pid = records()[0]["pid"];
  ::kill(front_->pid(), SIGTERM);
  EXPECT_EQ(wait_exit(std::chrono::seconds(10)), 0);
  EXPECT_FALSE(process_alive(child_pid));
}

TEST_F(FrontTest, KeyHostRouteAndSizeErrors) {
  start_front({"-m", write_model("llama"), "--device", "vulkan", "--llama-server", fake_, "--api-key", "sekret"});
  auto c = client();
  auto no_key = c.Post("/v1/chat/completions", "{}", "application/json");
  EXPECT_EQ(no_key->status, 401);
  EXPECT_EQ(json::parse(no_key->body)["error"]["type"], "authentication_error");
  EXPECT_EQ(c.Get("/health")->status, 200);  // health needs no key
  httplib::Headers key = {{"Authorization", "Bearer sekret"}};
  EXPECT_EQ(c.Post("/v1/chat/completions", key, "{}", "application/json")->status, 200);
  EXPECT_EQ(c.Post("/v1/chat/completions", {{"Authorization", "Bearer wrong!"}}, "{}", "application/json")->status, 401);
  auto missing = c.Get("/v2/nothing", key);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["error"]["type"], "not_found_error");
  auto rebind = c.Get("/v1/models", {{"Authorization", "Bearer sekret"}, {"Host", "evil.example:8000"}});
  EXPECT_EQ(rebind->status, 403);
  auto huge = c.Post("/v1/chat/completions", key, std::string(17 * 1024 * 1024, 'x'), "application/json");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413);
  EXPECT_EQ(c.Get("/health")->status, 200);  // still serving
}

TEST_F(FrontTest, MissingLlamaServerIsAClearError) {
  auto r = onebit::testing::run_command("env -u ONEBIT_LLAMA_SERVER PATH=/nonexistent " + binary_path() +
                                        " serve -m " + write_model("llama") + " --device vulkan");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--llama-server PATH"), std::string::npos) << r.err;
}

// With a real llama-server on PATH (not in CI), stories260K is served end to end through it.
TEST_F(FrontTest, RealLlamaServerServesStories260K) {
  ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
  auto which = onebit::testing::run_command("command -v llama-server");
  if (which.exit_code != 0) GTEST_SKIP() << "no llama-server on PATH; this check needs a llama.cpp build";
  start_front({"-m", onebit::testing::testdata_path("models/stories260K.gguf"), "--device", "cpu", "--llama-server",
               which.out.substr(0, which.out.find('\n'))});
  auto r = client().Post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":16,"temperature":0})",
                         "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto j = json::parse(r->body);
  EXPECT_EQ(j["model"], "stories260K");
  EXPECT_EQ(j["choices"][0]["text"].get<std::string>().rfind(", there was a little girl named Lily.", 0), 0u) << r->body;
}

TEST_F(FrontTest, MissingModelIsExit2) {
  auto r = onebit::testing::run_command(binary_path() + " serve -m /nonexistent/model.gguf --dry-run");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace onebit
