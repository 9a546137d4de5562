// Templates come from untrusted GGUF files: deep nesting, endless loops, huge strings and
// runaway recursion must end in a clear error, quickly, without crashing.
#include <gtest/gtest.h>

#include <chrono>

#include "template/template.h"

namespace onebit {
namespace {

using nlohmann::ordered_json;

// Parses and renders `source`; returns the error message ("" when it rendered).
std::string render_error(const std::string& source, const RenderOptions& options = {}) {
  auto t = ChatTemplate::parse(source);
  if (!t.ok()) return t.message();
  auto out = t->render(ordered_json::object(), options);
  return out.ok() ? "" : out.message();
}

struct HostileCase {
  const char* name;
  std::string source;
  const char* expect;  // a substring of the error message
};

// A hang guard, not a speed claim: the evaluation-step limit is what ends these renders. Sanitizer
// builds (-O0, instrumented) evaluate about ten times slower.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kMaxSeconds = 300.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr double kMaxSeconds = 300.0;
#else
constexpr double kMaxSeconds = 20.0;
#endif
#else
constexpr double kMaxSeconds = 20.0;
#endif

class Hostile : public ::testing::TestWithParam<HostileCase> {};

TEST_P(Hostile, FailsQuicklyWithAClearError) {
  const auto& c = GetParam();
  auto start = std::chrono::steady_clock::now();
  std::string err = render_error(c.source);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(err, "") << c.name << " rendered instead of failing";
  EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
  EXPECT_LT(secs, kMaxSeconds) << c.name << " took too long";
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Hostile,
    ::testing::Values(
        HostileCase{"huge_range", "{% for i in range(10**9) %}x{% endfor %}", "MAX_RANGE"},
        HostileCase{"nested_loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                    "evaluation steps"},
        HostileCase{"string_multiplication", "{{ 'x' * 10**10 }}", "bytes"},
        HostileCase{"string_doubling",
                    "{% set ns = namespace(s='abcdefgh') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                    "limit"},
        HostileCase{"list_multiplication", "{{ ([1] * 100000) * 100000 }}", "too large"},
        HostileCase{"recursive_macro", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "deeper than"},
        HostileCase{"mutual_recursion",
                    "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}",
                    "deeper than"},
        HostileCase{"deep_parens_in_tag", "{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}",
                    "nesting deeper"},
        HostileCase{"deep_lists", "{{ " + repeat("[", 100000) + repeat("]", 100000) + " }}", "nesting deeper"},
        HostileCase{"deep_ifs", repeat("{% if true %}", 5000) + repeat("{% endif %}", 5000), "nesting deeper"},
        HostileCase{"deep_not", "{{ " + repeat("not ", 100000) + "x }}", "nesting deeper"},
        HostileCase{"deep_unary_minus", "{{ " + repeat("-", 100000) + "1 }}", "nesting deeper"},
        HostileCase{"power_overflow", "{{ 2 ** 100000 }}", "overflow"},
        HostileCase{"int_literal_overflow", "{{ 99999999999999999999999 }}", "64-bit"},
        HostileCase{"huge_join", "{{ range(100000) | map('string') | join('x' * 1000000) }}", "bytes"},
        HostileCase{"index_scan_loop",
                    "{% set s = 'x' * 10000000 %}{% for i in range(100000) %}{{ s[i] }}{% endfor %}",
                    "evaluation steps"},
        HostileCase{"unclosed_block", "{% for x in y %}" + repeat("a", 1000), "endfor"},
        HostileCase{"unterminated_comment", "{# never closed", "comment"},
        HostileCase{"unterminated_tag", "{{ 1 + ", "end of template"},
        HostileCase{"raise", "{{ raise_exception('nope') }}", "nope"},
        HostileCase{"deep_list_chain",
                    "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
                    "nested deeper"},
        HostileCase{"deep_namespace_chain",
                    "{% set h = namespace(cur=none) %}{% for i in range(100000) %}{% set n = namespace() %}"
                    "{% set n.prev = h.cur %}{% set h.cur = n %}{% endfor %}{{ h.cur == h.cur }}",
                    "nested deeper"},
        HostileCase{"self_containing_namespace", "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}",
                    "nested deeper"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Hostile, OutputLimitIsConfigurable) {
  RenderOptions small;
  small.limits.max_output_bytes = 1000;
  EXPECT_NE(render_error("{% for i in range(2000) %}x{% endfor %}", small), "");
  EXPECT_EQ(render_error("{% for i in range(999) %}x{% endfor %}", small), "");
}

TEST(Hostile, StepLimitIsConfigurable) {
  RenderOptions small;
  small.limits.max_steps = 1000;
  EXPECT_NE(render_error("{% for i in range(5000) %}{% endfor %}", small).find("evaluation steps"), std::string::npos);
}

TEST(Hostile, ModerateRecursionStillWorks) {
  auto t = ChatTemplate::parse(
      "{% macro count(n) %}{% if n > 0 %}{{ n }} {{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(20) }}");
  ASSERT_TRUE(t.ok()) << t.message();
  auto out = t->render(ordered_json::object());
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(out->substr(0, 6), "20 19 ");
}

TEST(Hostile, DeeplyNestedJsonInputIsRefused) {
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto ctx = ordered_json::parse(R"({"x": 1})");
  ctx["deep"] = ordered_json::parse(deep);
  auto t = ChatTemplate::parse("{{ x }}");
  ASSERT_TRUE(t.ok());
  auto out = t->render(ctx);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.message().find("nested deeper"), std::string::npos) << out.message();
}

TEST(Hostile, InvalidUtf8PassesThroughWithoutCrashing) {
  auto t = ChatTemplate::parse("{{ s | upper }}|{{ s[1:] }}|{{ s | length }}|{{ s | tojson }}");
  ASSERT_TRUE(t.ok());
  auto out = t->render(ordered_json{{"s", "a\xff\xc3"}});
  // nlohmann rejects invalid UTF-8 only on dump; the interpreter never does.
  EXPECT_TRUE(out.ok()) << out.message();
}

TEST(Hostile, IllFormedBytesAreOneCharacterEverywhere) {
  // base/utf8.h's rule (each ill-formed byte stands alone): length, iteration, indexing and
  // slicing agree. Here: a, 80, U+00E9, then a surrogate's three bytes.
  auto t = ChatTemplate::parse(
      "{{ s | length }}|{{ s | list | length }}|{{ s[2] == s[2:3] }}|{{ s[::-1] | length }}");
  ASSERT_TRUE(t.ok());
  auto out = t->render(ordered_json{{"s", "a\x80\xC3\xA9\xED\xA0\x80"}});
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(*out, "6|6|True|6");
}

}  // namespace
}  // namespace onebit
