// Renders every golden case from tools/template/render_goldens.py (Python Jinja2, the way
// transformers' apply_chat_template renders) and compares byte for byte; errors must match too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "template/template.h"
#include "testdata.h"

namespace onebit {
namespace {

using nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<ordered_json> read_jsonl(const std::string& path) {
  std::vector<ordered_json> out;
  std::ifstream f(path, std::ios::binary);
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty()) out.push_back(ordered_json::parse(line));
  }
  return out;
}

// The fixed clock render_goldens.py gives strftime_now: 2024-07-26 13:05:09.
RenderOptions golden_options() {
  RenderOptions o;
  o.now = [] {
    std::tm tm{};
    tm.tm_year = 124, tm.tm_mon = 6, tm.tm_mday = 26, tm.tm_hour = 13, tm.tm_min = 5, tm.tm_sec = 9;
    std::time_t t = timegm(&tm);
    gmtime_r(&t, &tm);
    return tm;
  };
  return o;
}

// Where two strings first differ, with a little context, for failure messages.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i > 40 ? i - 40 : 0;
  return "at byte " + std::to_string(i) + "\n  want: " + ordered_json(want.substr(from, 100)).dump() +
         "\n  got:  " + ordered_json(got.substr(from, 100)).dump();
}

// Compares one rendered result with its golden record; returns "" when they agree.
std::string compare(const ordered_json& rec, const Result<std::string>& got) {
  if (rec.contains("output")) {
    if (!got.ok()) return "Jinja2 rendered, we failed: " + got.message();
    const std::string want = rec["output"].get<std::string>();
    if (*got != want) return "output differs " + first_difference(want, *got);
    return "";
  }
  if (got.ok()) return "Jinja2 failed (" + rec["error"].get<std::string>() + "), we rendered: " + *got;
  if (rec.value("raised", false) && got.message() != rec["error"].get<std::string>()) {
    return "raise_exception text differs: want '" + rec["error"].get<std::string>() + "', got '" + got.message() + "'";
  }
  return "";
}

class TemplateGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TemplateGolden, MatchesJinja2) {
  const std::string stem = GetParam();
  ONEBIT_REQUIRE_TESTDATA("templates/" + stem + ".jinja");
  auto tmpl = ChatTemplate::parse(read_file(testing::testdata_path("templates/" + stem + ".jinja")));
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  auto records = read_jsonl(testing::source_path("tests/golden/template/" + stem + ".jsonl"));
  ASSERT_GE(records.size(), 40u) << "golden file missing or short; run tools/template/render_goldens.py";
  int failures = 0;
  for (const auto& rec : records) {
    ChatInputs in;
    in.messages = rec["messages"];
    in.tools = rec["tools"];
    in.add_generation_prompt = rec["add_generation_prompt"].get<bool>();
    in.kwargs = rec["kwargs"];
    std::string diff = compare(rec, tmpl->render_chat(in, golden_options()));
    if (!diff.empty() && ++failures <= 5) ADD_FAILURE() << stem << " case " << rec["id"].get<std::string>() << ": " << diff;
  }
  EXPECT_EQ(failures, 0) << "of " << records.size() << " cases";
}

INSTANTIATE_TEST_SUITE_P(AllTemplates, TemplateGolden,
                         ::testing::Values("Qwen-Qwen3", "Qwen-Qwen2.5-7B-Instruct",
                                           "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "google-gemma-2-2b-it",
                                           "meta-llama-Llama-3.1-8B-Instruct",
                                           "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
                                           "microsoft-Phi-3.5-mini-instruct",
                                           "mistralai-Mistral-Nemo-Instruct-2407"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

TEST(TemplateGolden, EveryTemplateHasGoldens) {
  ONEBIT_REQUIRE_TESTDATA("templates");
  for (const auto& entry : std::filesystem::directory_iterator(testing::testdata_path("templates"))) {
    if (entry.path().extension() != ".jinja") continue;
    std::string golden = testing::source_path("tests/golden/template/" + entry.path().stem().string() + ".jsonl");
    EXPECT_TRUE(std::filesystem::exists(golden)) << "no goldens for " << entry.path()
                                                 << "; run tools/template/render_goldens.py and add it above";
  }
}

TEST(TemplateGolden, Features) {
  auto context = ordered_json::parse(read_file(testing::source_path("tests/golden/template/features_context.json")));
  auto records = read_jsonl(testing::source_path("tests/golden/template/features.jsonl"));
  ASSERT_GE(records.size(), 50u);
  int failures = 0;
  for (const auto& rec : records) {
    const std::string source = rec["template"].get<std::string>();
    auto tmpl = ChatTemplate::parse(source);
    Result<std::string> got = make_error("");
    if (!tmpl.ok()) {
      got = tmpl.error();
    } else {
      ChatInputs in;
      in.messages = context["messages"];
      in.tools = context["tools"];
      in.add_generation_prompt = true;
      in.kwargs = ordered_json::object();
      for (auto it = context.begin(); it != context.end(); ++it) {
        if (it.key() != "messages" && it.key() != "tools") in.kwargs[it.key()] = it.value();
      }
      got = tmpl->render_chat(in, golden_options());
    }
    std::string diff = compare(rec, got);
    if (!diff.empty()) {
      ++failures;
      ADD_FAILURE() << rec["id"].get<std::string>() << " " << ordered_json(source).dump() << ": " << diff;
    }
  }
  EXPECT_EQ(failures, 0) << "of " << records.size() << " feature cases";
}

}  // namespace
}  // namespace onebit
