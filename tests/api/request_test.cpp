// Request parsing: every field's type and range, the error naming the field, null as absent,
// unknown fields ignored, hostile bodies (deep nesting, invalid UTF-8, huge numbers) refused.
#include <gtest/gtest.h>

#include <string>

#include "api/request.h"

namespace onebit {
namespace {

ApiResult<CompletionRequest> chat(const std::string& extra) {
  return parse_completion_request(R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}", Endpoint::kChat);
}

void expect_error(const ApiResult<CompletionRequest>& r, const std::string& needle) {
  ASSERT_FALSE(r.ok()) << "expected an error mentioning " << needle;
  EXPECT_EQ(r.error.kind, ApiErrorKind::kInvalidRequest);
  EXPECT_NE(r.error.message.find(needle), std::string::npos) << r.error.message;
}

TEST(Request, DefaultsAndFields) {
  auto r = chat(R"(,"max_tokens":5,"temperature":0,"top_p":0.5,"top_k":3,"min_p":0.1,"seed":7,"stop":["a","b"],)"
                R"("stream":true,"stream_options":{"include_usage":true},"reasoning_format":"none","cache_prompt":false,)"
                R"("chat_template_kwargs":{"enable_thinking":false},"unknown_field":{"x":1},"model":"m")");
  ASSERT_TRUE(r.ok()) << r.error.message;
  const auto& c = *r.value;
  EXPECT_EQ(c.max_tokens, 5);
  EXPECT_EQ(c.temperature, 0.0);
  EXPECT_EQ(c.top_k, 3);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(c.stream);
  EXPECT_TRUE(c.include_usage);
  EXPECT_FALSE(c.split_reasoning);
  EXPECT_FALSE(c.cache_prompt);
  EXPECT_EQ(c.template_kwargs["enable_thinking"], false);

  auto d = chat(R"(,"max_tokens":null,"temperature":null)");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d.value->max_tokens);
  EXPECT_DOUBLE_EQ(d.value->temperature, 0.8);
  EXPECT_TRUE(d.value->cache_prompt);
  EXPECT_FALSE(d.value->ignore_eos);
}

TEST(Request, IgnoreEos) {
  EXPECT_TRUE(chat(R"(,"ignore_eos":true)").value->ignore_eos);
  EXPECT_FALSE(chat(R"(,"ignore_eos":false)").value->ignore_eos);
  EXPECT_FALSE(chat(R"(,"ignore_eos":null)").value->ignore_eos);
  auto completion = parse_completion_request(R"({"prompt":"x","ignore_eos":true})", Endpoint::kCompletion);
  ASSERT_TRUE(completion.ok()) << completion.error.message;
  EXPECT_TRUE(completion.value->ignore_eos);
  expect_error(chat(R"(,"ignore_eos":1)"), "'ignore_eos' must be a boolean");
}

TEST(Request, TokenLimitSpellings) {
  EXPECT_EQ(chat(R"(,"max_completion_tokens":9)").value->max_tokens, 9);
  EXPECT_EQ(chat(R"(,"n_predict":4)").value->max_tokens, 4);
  EXPECT_FALSE(chat(R"(,"n_predict":-1)").value->max_tokens);
  EXPECT_EQ(chat(R"(,"max_tokens":3.0)").value->max_tokens, 3);
}

TEST(Request, ContentParts) {
  auto r = parse_completion_request(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})", Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(r.value->messages[0]["content"], "ab");
}

TEST(Request, Prompts) {
  auto text = parse_completion_request(R"({"prompt":"Once"})", Endpoint::kCompletion);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text.value->prompt_text, "Once");
  auto one = parse_completion_request(R"({"prompt":["Once"]})", Endpoint::kCompletion);
  EXPECT_EQ(one.value->prompt_text, "Once");
  auto ids = parse_completion_request(R"({"prompt":[1,2,3]})", Endpoint::kCompletion);
  EXPECT_EQ(ids.value->prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  expect_error(parse_completion_request(R"({"prompt":[1,-2]})", Endpoint::kCompletion), "prompt[1]");
  expect_error(parse_completion_request(R"({"prompt":5})", Endpoint::kCompletion), "'prompt' must be");
  expect_error(parse_completion_request(R"({})", Endpoint::kCompletion), "'prompt' is required");
}

TEST(Request, ErrorsNameTheFieldAndRange) {
  expect_error(chat(R"(,"max_tokens":0)"), "'max_tokens' is 0; allowed 1 to");
  expect_error(chat(R"(,"max_tokens":-5)"), "'max_tokens' is -5");
  expect_error(chat(R"(,"max_tokens":1e300)"), "'max_tokens'");
  expect_error(chat(R"(,"max_tokens":18446744073709551615)"), "'max_tokens'");
  expect_error(chat(R"(,"max_tokens":"10")"), "'max_tokens' must be an integer");
  expect_error(chat(R"(,"max_tokens":2.5)"), "must be an integer");
  expect_error(chat(R"(,"temperature":-1)"), "'temperature' is -1; allowed 0 to 100");
  expect_error(chat(R"(,"temperature":"hot")"), "'temperature' must be a number");
  expect_error(chat(R"(,"top_p":0)"), "'top_p'");
  expect_error(chat(R"(,"top_p":1.5)"), "'top_p'");
  expect_error(chat(R"(,"min_p":2)"), "'min_p'");
  expect_error(chat(R"(,"top_k":-1)"), "'top_k'");
  expect_error(chat(R"(,"seed":-3)"), "'seed'");
  expect_error(chat(R"(,"seed":1.5)"), "'seed'");
  expect_error(chat(R"(,"stop":7)"), "'stop'");
  expect_error(chat(R"(,"stop":["a",1])"), "stop[1]");
  expect_error(chat(R"(,"stream":"yes")"), "'stream' must be a boolean");
  expect_error(chat(R"(,"stream_options":{"include_usage":1})"), "'stream_options.include_usage'");
  expect_error(chat(R"(,"stream_options":3)"), "'stream_options'");
  expect_error(chat(R"(,"reasoning_format":"loud")"), "'reasoning_format'");
  expect_error(chat(R"(,"chat_template_kwargs":[])"), "'chat_template_kwargs'");
  expect_error(chat(R"(,"n":2)"), "'n' must be 1");
  expect_error(chat(R"(,"model":5)"), "'model'");
  expect_error(parse_completion_request(R"({"messages":[]})", Endpoint::kChat), "'messages' is empty");
  expect_error(parse_completion_request(R"({"messages":"hi"})", Endpoint::kChat), "'messages' must be");
  expect_error(parse_completion_request(R"({"messages":[{"content":"x"}]})", Endpoint::kChat), "messages[0].role");
  expect_error(parse_completion_request(R"({"messages":[{"role":"user","content":5}]})", Endpoint::kChat), "messages[0].content");
}

TEST(Request, HostileBodies) {
  expect_error(parse_completion_request("{", Endpoint::kChat), "not valid JSON");
  expect_error(parse_completion_request("[1]", Endpoint::kChat), "must be a JSON object");
  expect_error(parse_completion_request("", Endpoint::kChat), "not valid JSON");
  expect_error(parse_completion_request(std::string(100000, '[') + std::string(100000, ']'), Endpoint::kChat), "nests deeper");
  expect_error(parse_completion_request("{\"prompt\":\"\xff\xfe\"}", Endpoint::kCompletion), "UTF-8");
  // Brackets inside strings do not count as nesting.
  auto r = parse_completion_request(R"({"prompt":")" + std::string(1000, '[') + R"("})", Endpoint::kCompletion);
  EXPECT_TRUE(r.ok());
}

}  // namespace
}  // namespace onebit
