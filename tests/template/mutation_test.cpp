// Mutated templates (seeded byte edits and Jinja token splices of the real templates and the
// feature cases) must parse and render or fail cleanly: no crash, no hang. Strongest under
// -DONEBIT_SANITIZE=ON; the same loop ran 1M cases under ASan/UBSan during development.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "template/template.h"
#include "testdata.h"

namespace onebit {
namespace {

using nlohmann::ordered_json;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(TemplateMutation, MutatedTemplatesFailCleanly) {
  ONEBIT_REQUIRE_TESTDATA("templates");
  std::vector<std::string> corpus;
  for (const auto& e : std::filesystem::directory_iterator(testing::testdata_path("templates"))) {
    corpus.push_back(slurp(e.path().string()));
  }
  std::ifstream features(testing::source_path("tests/golden/template/features.jsonl"));
  for (std::string line; std::getline(features, line);) corpus.push_back(ordered_json::parse(line)["template"]);
  auto ctx = ordered_json::parse(slurp(testing::source_path("tests/golden/template/features_context.json")));
  ctx["add_generation_prompt"] = true;

  static const char* kTokens[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "(", ")", "[", "]", "{", "}",
                                  "|", "'", "\"", "if ", "endif", "for ", " in ", "endfor", "set ", "macro ",
                                  "endmacro", "call ", "loop.", "ns.", ".", "*", "**", "//", "~", " is ", "not ",
                                  "namespace(", "range(", "raw", "endraw", ",", ":", "=", "\n", " ", "0", "-1",
                                  "99999", "messages", "tojson", "caller()", "items", "else", "break", "continue"};
  std::mt19937 rng(12345);
  RenderOptions options;
  options.limits.max_steps = 200000;
  int n_rendered = 0;
  const int n_cases = 20000;
  for (int i = 0; i < n_cases; ++i) {
    std::string s = corpus[rng() % corpus.size()];
    for (int m = 0, n = 1 + static_cast<int>(rng() % 6); m < n; ++m) {
      size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
      switch (rng() % 4) {
        case 0:
          if (pos < s.size()) s.erase(pos, 1 + rng() % 8);
          break;
        case 1: s.insert(pos, kTokens[rng() % (sizeof(kTokens) / sizeof(*kTokens))]); break;
        case 2:
          if (pos < s.size()) s[pos] = static_cast<char>(rng() % 256);
          break;
        default: {
          const std::string& other = corpus[rng() % corpus.size()];
          if (!other.empty()) s.insert(pos, other.substr(rng() % other.size(), 1 + rng() % 40));
        }
      }
    }
    auto t = ChatTemplate::parse(s);
    if (t.ok() && t->render(ctx, options).ok()) ++n_rendered;
  }
  // Most mutations break the syntax; some must still render, or the mutator is too blunt.
  EXPECT_GT(n_rendered, n_cases / 50);
}

}  // namespace
}  // namespace onebit
