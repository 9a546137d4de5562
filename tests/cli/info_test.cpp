// `1bit info` run as a user runs it: the built binary on the shared test files, text and --json,
// plus the error and usage exit codes. Expected facts come from the testdata README.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>

#include "gguf/gguf_writer.h"
#include "testdata.h"

namespace onebit {
namespace {

using ::onebit::testing::binary_path;
using ::onebit::testing::testdata_path;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs `1bit ARGS` (arguments already shell-quoted), capturing stdout, stderr and the exit code.
RunResult run_1bit(const std::string& args) {
  const std::string base = (fs::temp_directory_path() / ("onebit_info_test_" + std::to_string(::getpid()))).string();
  const std::string cmd = "'" + binary_path() + "' " + args + " >'" + base + ".out' 2>'" + base + ".err'";
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  fs::remove(base + ".out");
  fs::remove(base + ".err");
  return r;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

bool has_line(const std::string& text, const std::string& label, const std::string& value) {
  return std::regex_search(text, std::regex("(^|\n)" + label + ":\\s+" + value + "(\n| )"));
}

TEST(InfoCommand, Stories260KText) {
  ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
  auto r = run_1bit("info " + quoted(testdata_path("models/stories260K.gguf")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::cout << r.out;
  EXPECT_TRUE(has_line(r.out, "architecture", "llama")) << r.out;
  EXPECT_TRUE(has_line(r.out, "layers", "5")) << r.out;
  EXPECT_TRUE(has_line(r.out, "heads", "8 \\(KV heads 4\\)")) << r.out;
  EXPECT_TRUE(has_line(r.out, "embedding length", "64")) << r.out;
  EXPECT_TRUE(has_line(r.out, "vocabulary", "512")) << r.out;
  EXPECT_TRUE(has_line(r.out, "tensors", "48,")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("f32            48 tensors"));
  EXPECT_TRUE(has_line(r.out, "chat template", "none")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("1,185,376 bytes"));
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(InfoCommand, Stories260KJson) {
  ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
  auto r = run_1bit("info --json " + quoted(testdata_path("models/stories260K.gguf")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["n_layers"], 5);
  EXPECT_EQ(j["n_heads"], 8);
  EXPECT_EQ(j["n_kv_heads"], 4);
  EXPECT_EQ(j["vocab_size"], 512);
  EXPECT_EQ(j["n_tensors"], 48);
  EXPECT_EQ(j["file_bytes"], 1185376);
  EXPECT_EQ(j["tensor_types"]["f32"]["count"], 48);
  EXPECT_EQ(j["chat_template"]["present"], false);
  EXPECT_EQ(j["metadata"].size(), 19u);
  EXPECT_EQ(j["metadata"]["llama.block_count"], 5);
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["length"], 512);
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["element_type"], "string");
  ASSERT_EQ(j["tensors"].size(), 48u);
  // Parameters are the sum of tensor elements; weights are all F32 (4 bytes each).
  EXPECT_EQ(j["n_params"].get<uint64_t>() * 4, j["tensor_bytes"].get<uint64_t>());
  // KV cache: 2 (K, V) x layers x context x KV heads x head_dim (64 / 8) x 2 bytes.
  const uint64_t ctx = j["context_length"];
  EXPECT_EQ(j["memory_estimate"]["kv_cache_bytes"], 2 * 5 * ctx * 4 * 8 * 2);
  EXPECT_EQ(j["memory_estimate"]["kv_bytes_per_token"], 2 * 5 * 4 * 8 * 2);
}

TEST(InfoCommand, EveryVocabFilePrintsTextAndJson) {
  ONEBIT_REQUIRE_TESTDATA("vocab");
  int n = 0;
  for (const auto& e : fs::directory_iterator(testdata_path("vocab"))) {
    if (e.path().extension() != ".gguf") continue;
    SCOPED_TRACE(e.path().string());
    auto text = run_1bit("info " + quoted(e.path().string()));
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_TRUE(text.err.empty()) << text.err;
    EXPECT_TRUE(has_line(text.out, "tensors", "0,")) << text.out;
    auto js = run_1bit("info --json " + quoted(e.path().string()));
    ASSERT_EQ(js.exit_code, 0) << js.err;
    auto j = nlohmann::json::parse(js.out);
    EXPECT_TRUE(j["architecture"].is_string());
    EXPECT_GT(j["vocab_size"].get<uint64_t>(), 30000u);
    EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["length"], j["vocab_size"]);
    EXPECT_EQ(j["n_tensors"], 0);
    if (e.path().filename() == "ggml-vocab-phi-3.gguf") {
      EXPECT_EQ(j["chat_template"]["present"], true);
      // Long strings are kept whole.
      EXPECT_EQ(j["metadata"]["tokenizer.chat_template"].get<std::string>().size(),
                j["chat_template"]["bytes"].get<uint64_t>());
    }
    ++n;
  }
  EXPECT_GE(n, 5);
}

// An embedding model's <arch>.pooling_type is shown by name (text and JSON); absent, nothing is.
TEST(InfoCommand, PoolingType) {
  const std::string path = (fs::temp_directory_path() / ("onebit_info_pooling_" + std::to_string(::getpid()) + ".gguf")).string();
  for (const uint32_t type : {3u, 1u, 9u}) {
    GgufWriter w;
    w.set_string("general.architecture", "qwen3");
    w.set_uint32("qwen3.pooling_type", type);
    ASSERT_TRUE(w.write_file(path).ok());
    const std::string name = type == 3 ? "last" : type == 1 ? "mean" : "unknown \\(9\\)";
    const RunResult text = run_1bit("info " + quoted(path));
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_TRUE(has_line(text.out, "pooling", name)) << text.out;
    const RunResult js = run_1bit("info --json " + quoted(path));
    ASSERT_EQ(js.exit_code, 0) << js.err;
    EXPECT_EQ(nlohmann::json::parse(js.out)["pooling"], type == 3 ? "last" : type == 1 ? "mean" : "unknown (9)");
  }
  GgufWriter w;
  w.set_string("general.architecture", "qwen3");
  ASSERT_TRUE(w.write_file(path).ok());
  const RunResult none = run_1bit("info " + quoted(path));
  EXPECT_EQ(none.out.find("\npooling:"), std::string::npos) << none.out;
  EXPECT_TRUE(nlohmann::json::parse(run_1bit("info --json " + quoted(path)).out)["pooling"].is_null());
  fs::remove(path);
}

TEST(InfoCommand, ErrorsAndUsage) {
  auto missing = run_1bit("info /nonexistent/model.gguf");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("1bit info: gguf: cannot open '/nonexistent/model.gguf'"));
  EXPECT_EQ(std::count(missing.err.begin(), missing.err.end(), '\n'), 1);
  std::cout << "  " << missing.err;

  const std::string bad = (fs::temp_directory_path() / ("onebit_info_bad_" + std::to_string(::getpid()) + ".gguf")).string();
  {
    std::ofstream out(bad, std::ios::binary);
    out << "GGUF\x01";  // truncated after the first version byte
  }
  auto malformed = run_1bit("info " + quoted(bad));
  fs::remove(bad);
  EXPECT_EQ(malformed.exit_code, 1);
  EXPECT_THAT(malformed.err, HasSubstr("1bit info: gguf: " + bad + ": header version needs 4 bytes"));
  std::cout << "  " << malformed.err;

  auto none = run_1bit("info");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("1bit info: expected one FILE.gguf, got 0"));
  auto two = run_1bit("info a.gguf b.gguf");
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_THAT(two.err, HasSubstr("got 2"));
  auto unknown = run_1bit("info --bogus a.gguf");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("1bit info: "));
  auto help = run_1bit("info --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--json"));
}

}  // namespace
}  // namespace onebit
