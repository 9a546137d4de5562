// ChatTemplate's contract: error messages name line and column, raise_exception text is kept
// exactly, the clock is injectable, key order survives, the sandbox refuses mutation by default.
// Expected strings here were checked against Python Jinja2 3.1 (see features.jsonl for more).
#include <gtest/gtest.h>

#include "template/template.h"

namespace onebit {
namespace {

using nlohmann::ordered_json;

Result<std::string> render(const std::string& source, const ordered_json& ctx = ordered_json::object(),
                           const RenderOptions& options = {}) {
  auto t = ChatTemplate::parse(source);
  if (!t.ok()) return t.error();
  return t->render(ctx, options);
}

TEST(TemplateApi, SyntaxErrorsNameLineAndColumn) {
  auto r = render("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("line 3, column"), std::string::npos) << r.message();
  r = render("{% for x in y %}\n\nno end");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("'endfor'"), std::string::npos) << r.message();
  r = render("a\n{% frobnicate %}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("line 2"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("frobnicate"), std::string::npos) << r.message();
}

TEST(TemplateApi, RenderErrorsNameLineAndColumn) {
  auto r = render("ok\n\n   {{ 'a' + 1 }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("line 3, column"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("can only concatenate str"), std::string::npos) << r.message();
  r = render("{{ missing.attr }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("'missing' is undefined"), std::string::npos) << r.message();
}

TEST(TemplateApi, RaiseExceptionKeepsTheTemplatesText) {
  auto r = render("x{{ raise_exception('Conversation roles must alternate user/assistant') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "Conversation roles must alternate user/assistant");
}

TEST(TemplateApi, UndefinedPrintsNothing) {
  auto r = render("[{{ nothing }}][{{ d.missing }}][{{ nothing is defined }}]", ordered_json{{"d", ordered_json::object()}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, "[][][False]");
}

TEST(TemplateApi, KeyOrderSurvivesIntoToJson) {
  auto ctx = ordered_json::parse(R"({"tool": {"z": 1, "a": {"y": [1, 2.5, "é"], "b": null}}})");
  auto r = render("{{ tool | tojson }}", ctx);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, R"({"z": 1, "a": {"y": [1, 2.5, "é"], "b": null}})");
}

TEST(TemplateApi, StrftimeNowUsesTheInjectedClock) {
  RenderOptions o;
  o.now = [] {
    std::tm tm{};
    tm.tm_year = 99, tm.tm_mon = 11, tm.tm_mday = 31, tm.tm_hour = 23, tm.tm_min = 59;
    return tm;
  };
  auto r = render("{{ strftime_now('%Y-%m-%d %H:%M') }}", ordered_json::object(), o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, "1999-12-31 23:59");
}

TEST(TemplateApi, SandboxRefusesMutationUnlessAllowed) {
  const std::string src = "{% set l = [1] %}{{ l.append(2) }}{{ l }}";
  auto r = render(src);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("unsafe"), std::string::npos) << r.message();
  RenderOptions o;
  o.allow_mutation = true;
  r = render(src, ordered_json::object(), o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, "None[1, 2]");
}

TEST(TemplateApi, RenderChatPassesTheTransformersContext) {
  auto t = ChatTemplate::parse(
      "{{ messages | length }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ bos_token }}|{{ enable_thinking }}");
  ASSERT_TRUE(t.ok());
  ChatInputs in;
  in.messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  in.add_generation_prompt = false;
  in.kwargs = ordered_json{{"bos_token", "<s>"}, {"enable_thinking", false}};
  auto r = t->render_chat(in);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, "1|None|None|False|<s>|False");
  in.kwargs = ordered_json::array();
  EXPECT_FALSE(t->render_chat(in).ok());
}

TEST(TemplateApi, TemplatesAreReusableAcrossRenders) {
  auto t = ChatTemplate::parse("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  ChatInputs in;
  in.messages = ordered_json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  EXPECT_EQ(*t->render_chat(in), "2");
  EXPECT_EQ(*t->render_chat(in), "2");
}

TEST(TemplateApi, WhitespaceControlMatchesTransformersSettings) {
  // trim_blocks and lstrip_blocks on: block lines vanish, expression lines keep their newline.
  auto r = render("<\n  {% if true %}\n    {{ 'x' }}\n  {% endif %}\n>\n");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, "<\n    x\n>");
}

}  // namespace
}  // namespace onebit
