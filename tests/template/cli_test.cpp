// `1bit template` end to end (the real binary), and the golden script's reproducibility: running
// tools/template/render_goldens.py again must give the committed files byte for byte.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "testdata.h"

namespace onebit {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

struct RunResult {
  int exit_code;
  std::string out;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class TemplateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("onebit_template_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  RunResult run(const std::string& args) {
    std::string out = (dir_ / "stdout").string(), err = (dir_ / "stderr").string();
    std::string cmd = "'";  // appended piecewise: GCC 12 warns (-Wrestrict) on "'" + std::string&&
    cmd += testing::binary_path();
    cmd += "' template " + args + " >'" + out + "' 2>'" + err + "'";
    int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  }

  fs::path dir_;
};

// Finds a golden record by id in a template's golden file.
ordered_json golden(const std::string& stem, const std::string& id) {
  std::ifstream f(testing::source_path("tests/golden/template/" + stem + ".jsonl"));
  std::string line;
  while (std::getline(f, line)) {
    auto rec = ordered_json::parse(line);
    if (rec["id"] == id) return rec;
  }
  return nullptr;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

TEST_F(TemplateCli, RendersLikeTheGolden) {
  ONEBIT_REQUIRE_TESTDATA("templates/Qwen-Qwen3.jinja");
  for (const char* id : {"tool-call-with-text/agp=1/enable_thinking=False", "parallel-tool-calls/agp=0", "unicode/agp=0"}) {
    ordered_json rec = golden("Qwen-Qwen3", id);
    ASSERT_FALSE(rec.is_null()) << id;
    std::string args = "--template '" + testing::testdata_path("templates/Qwen-Qwen3.jinja") + "' --messages '" +
                       write("m.json", rec["messages"].dump()) + "'";
    if (!rec["tools"].is_null()) args += " --tools '" + write("t.json", rec["tools"].dump()) + "'";
    args += " --kwargs " + quote(rec["kwargs"].dump());
    if (!rec["add_generation_prompt"].get<bool>()) args += " --no-generation-prompt";
    RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, rec["output"].get<std::string>()) << id;
  }
}

TEST_F(TemplateCli, TemplateErrorsExitOneWithTheMessage) {
  std::string t = write("t.jinja", "{{ raise_exception('no system role here') }}");
  RunResult r = run("--template '" + t + "' --messages '" + write("m.json", "[]") + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "1bit template: no system role here\n");
  r = run("--template '" + write("bad.jinja", "{% if %}") + "' --messages '" + write("m.json", "[]") + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("line 1"), std::string::npos) << r.err;
}

TEST_F(TemplateCli, BadUsageExitsTwo) {
  EXPECT_EQ(run("--template x.jinja").exit_code, 2);
  std::string m = write("m.json", "[]");
  EXPECT_EQ(run("--template '" + write("t.jinja", "x") + "' --messages '" + m + "' --kwargs '[1]'").exit_code, 2);
  EXPECT_EQ(run("--template '" + write("t.jinja", "x") + "' --messages '" + write("bad.json", "{nope") + "'").exit_code, 1);
}

TEST_F(TemplateCli, SpecialTokensFromOptionsAndModel) {
  std::string t = write("t.jinja", "[{{ bos_token }}|{{ eos_token }}]{% if add_generation_prompt %}+{% endif %}");
  std::string m = write("m.json", R"([{"role": "user", "content": "x"}])");
  RunResult r = run("--template '" + t + "' --messages '" + m + "' --bos '<B>' --no-generation-prompt");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[<B>|]");
  ONEBIT_REQUIRE_TESTDATA("vocab/ggml-vocab-llama-spm.gguf");
  r = run("--template '" + t + "' --messages '" + m + "' --model '" + testing::testdata_path("vocab/ggml-vocab-llama-spm.gguf") + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[<s>|</s>]+");
}

TEST(TemplateGoldenScript, IsDeterministicAndUpToDate) {
  ONEBIT_REQUIRE_TESTDATA("templates");
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  if (std::system((python + " -c 'import jinja2' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "python3-jinja2 not installed (scripts/setup.sh installs it)";
  }
  fs::path out = fs::temp_directory_path() / ("onebit_goldens_" + std::to_string(::getpid()));
  fs::create_directories(out);
  std::string cmd = python + " '" + testing::source_path("tools/template/render_goldens.py") + "' --templates '" +
                    testing::testdata_path("templates") + "' --out '" + out.string() + "' >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  int n_files = 0;
  for (const auto& entry : fs::directory_iterator(out)) {
    ++n_files;
    std::string committed = testing::source_path("tests/golden/template/" + entry.path().filename().string());
    EXPECT_TRUE(slurp(entry.path().string()) == slurp(committed))
        << entry.path().filename() << " differs from the committed golden; rerun tools/template/render_goldens.py";
  }
  EXPECT_GE(n_files, 9);
  fs::remove_all(out);
}

}  // namespace
}  // namespace onebit
