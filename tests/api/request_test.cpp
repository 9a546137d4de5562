// Request parsing: every field's type and range, the error naming the field, null as absent,
// unknown fields refused (the field table), hostile bodies (deep nesting, invalid UTF-8, huge numbers) refused.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

#include "api/fields.h"
#include "api/request.h"
#include "run_command.h"
#include "testdata.h"

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
                R"("chat_template_kwargs":{"enable_thinking":false},"user":"u1","model":"m")");
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
  EXPECT_EQ(r.value->messages[0]["content"], "a\nb");  // llama.cpp and vLLM join parts with a newline
}

TEST(Request, Prompts) {
  auto text = parse_completion_request(R"({"prompt":"Once"})", Endpoint::kCompletion);
  ASSERT_TRUE(text.ok());
  ASSERT_EQ(text.value->prompts.size(), 1u);
  EXPECT_EQ(text.value->prompts[0].text, "Once");
  auto one = parse_completion_request(R"({"prompt":["Once"]})", Endpoint::kCompletion);
  EXPECT_EQ(one.value->prompts[0].text, "Once");
  auto ids = parse_completion_request(R"({"prompt":[1,2,3]})", Endpoint::kCompletion);
  ASSERT_EQ(ids.value->prompts.size(), 1u);
  EXPECT_TRUE(ids.value->prompts[0].is_tokens);
  EXPECT_EQ(ids.value->prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  // OpenAI's batch forms: a list of strings, a list of token lists.
  auto texts = parse_completion_request(R"({"prompt":["a","b","c"]})", Endpoint::kCompletion);
  ASSERT_EQ(texts.value->prompts.size(), 3u);
  EXPECT_EQ(texts.value->prompts[2].text, "c");
  auto lists = parse_completion_request(R"({"prompt":[[1,2],[3]]})", Endpoint::kCompletion);
  ASSERT_EQ(lists.value->prompts.size(), 2u);
  EXPECT_EQ(lists.value->prompts[1].tokens, (std::vector<int32_t>{3}));
  expect_error(parse_completion_request(R"({"prompt":[1,-2]})", Endpoint::kCompletion), "prompt[1]");
  expect_error(parse_completion_request(R"({"prompt":["a",[1]]})", Endpoint::kCompletion), "'prompt[1]' is array, unlike prompt[0]");
  expect_error(parse_completion_request(R"({"prompt":[[1],[]]})", Endpoint::kCompletion), "'prompt[1]' is an empty array");
  expect_error(parse_completion_request(R"({"prompt":5})", Endpoint::kCompletion), "'prompt' must be");
  expect_error(parse_completion_request(R"({})", Endpoint::kCompletion), "'prompt' is required");
}

TEST(Request, ChoicesPenaltiesBiasLogprobs) {
  auto r = chat(R"(,"n":3,"presence_penalty":0.5,"frequency_penalty":-1,"repeat_penalty":1.1,"repeat_last_n":-1,)"
                R"("logit_bias":{"7":-100,"12":2.5},"logprobs":true,"top_logprobs":4)");
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(r.value->n, 3);
  EXPECT_EQ(r.value->presence_penalty, 0.5);
  EXPECT_EQ(r.value->frequency_penalty, -1.0);
  EXPECT_EQ(r.value->repeat_penalty, 1.1);
  EXPECT_EQ(r.value->repeat_last_n, -1);
  EXPECT_EQ(r.value->logit_bias, (std::vector<std::pair<int64_t, double>>{{7, -100.0}, {12, 2.5}}));
  EXPECT_EQ(r.value->logprobs, 4);
  EXPECT_EQ(chat(R"(,"logprobs":true)").value->logprobs, 0);
  EXPECT_EQ(chat(R"(,"logprobs":false)").value->logprobs, -1);
  // llama-server's pair list, false = ban.
  auto pairs = chat(R"(,"logit_bias":[[5,false],[6,1.5]])");
  ASSERT_TRUE(pairs.ok()) << pairs.error.message;
  EXPECT_EQ(pairs.value->logit_bias, (std::vector<std::pair<int64_t, double>>{{5, -100.0}, {6, 1.5}}));
  // Completions: logprobs is a count.
  auto c = parse_completion_request(R"({"prompt":"x","logprobs":5,"n":2})", Endpoint::kCompletion);
  ASSERT_TRUE(c.ok()) << c.error.message;
  EXPECT_EQ(c.value->logprobs, 5);
  EXPECT_EQ(c.value->n, 2);
  expect_error(parse_completion_request(R"({"prompt":"x","logprobs":true})", Endpoint::kCompletion), "number of alternatives");
  expect_error(parse_completion_request(R"({"prompt":"x","logprobs":21})", Endpoint::kCompletion), "'logprobs' is 21; allowed 0 to 20");
  expect_error(chat(R"(,"top_logprobs":3)"), "'top_logprobs' needs 'logprobs': true");
  expect_error(chat(R"(,"logprobs":true,"top_logprobs":21)"), "'top_logprobs' is 21");
  expect_error(chat(R"(,"n":0)"), "'n' is 0; allowed 1 to 128");
  expect_error(chat(R"(,"n":129)"), "'n' is 129");
  expect_error(chat(R"(,"presence_penalty":3)"), "'presence_penalty' is 3; allowed -2 to 2");
  expect_error(chat(R"(,"frequency_penalty":"x")"), "'frequency_penalty' must be a number");
  expect_error(chat(R"(,"repeat_penalty":0)"), "'repeat_penalty' is 0");
  expect_error(chat(R"(,"repeat_last_n":-2)"), "'repeat_last_n' is -2");
  expect_error(chat(R"(,"logit_bias":{"abc":1})"), "key \"abc\" is not a token id");
  expect_error(chat(R"(,"logit_bias":{"-1":1})"), "is not a token id");
  expect_error(chat(R"(,"logit_bias":{"5":101})"), "'logit_bias[\"5\"]' is 101; allowed a number -100 to 100");
  expect_error(chat(R"(,"logit_bias":{"5":true})"), "'logit_bias[\"5\"]' is true");
  expect_error(chat(R"(,"logit_bias":[[5]])"), "'logit_bias[0]' must be a pair");
  expect_error(chat(R"(,"logit_bias":7)"), "'logit_bias' must be an object");
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

namespace onebit {
namespace {

// The field table (api/fields.h): every field is implemented, accepted only at a neutral value,
// or refused by name; unknown fields are refused.
TEST(RequestFields, NothingIsAcceptedAndIgnored) {
  auto one = [](Endpoint e, const std::string& field, const std::string& value) {
    const std::string base = e == Endpoint::kChat ? R"({"messages":[{"role":"user","content":"hi"}])" : R"({"prompt":"hi")";
    return parse_completion_request(base + ",\"" + field + "\":" + value + "}", e);
  };
  // Neutral values pass, others are refused with the field, the value and what is allowed.
  EXPECT_TRUE(one(Endpoint::kChat, "typical_p", "1").ok());
  EXPECT_TRUE(one(Endpoint::kChat, "typical_p", "1.0").ok());
  EXPECT_TRUE(one(Endpoint::kChat, "response_format", R"({"type":"text"})").ok());
  EXPECT_TRUE(one(Endpoint::kChat, "response_format", R"({"type":"json_object"})").ok());
  EXPECT_TRUE(one(Endpoint::kChat, "json_schema", "{}").ok());
  EXPECT_TRUE(one(Endpoint::kCompletion, "grammar", R"("root ::= \"a\"")").ok());
  EXPECT_TRUE(one(Endpoint::kCompletion, "best_of", "1").ok());
  EXPECT_TRUE(one(Endpoint::kChat, "n_probs", "0").ok());
  EXPECT_TRUE(one(Endpoint::kChat, "mirostat", "null").ok());
  auto typ = one(Endpoint::kChat, "typical_p", "0.5");
  ASSERT_FALSE(typ.ok());
  EXPECT_EQ(typ.error.message, "'typical_p' is 0.5: only 1 is supported (this sampler is not built (top_k, top_p, min_p and temperature are))");
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"response_format", R"({"type":"sound"})"},
           {"response_format", R"({"type":"json_schema","json_schema":{"schema":{"type":"integer","minimum":1}}})"},
           {"n_probs", "5"}, {"post_sampling_probs", "true"}, {"best_of", "2"}, {"penalize_nl", "true"},
           {"mirostat", "2"}, {"tool_choice", "\"required\""},
           {"grammar", "\"root ::= x\""}, {"json_schema", R"({"not":{}})"}, {"functions", "[]"}, {"samplers", "[]"},
           {"unknown_field", "1"}}) {
    auto r = one(Endpoint::kChat, field, value);
    ASSERT_FALSE(r.ok()) << field << "=" << value;
    EXPECT_EQ(r.error.kind, ApiErrorKind::kInvalidRequest);
    EXPECT_NE(r.error.message.find("'" + field), std::string::npos) << r.error.message;
  }
  // A field of the other endpoint is named as such.
  auto echo = one(Endpoint::kChat, "echo", "true");
  ASSERT_FALSE(echo.ok());
  EXPECT_NE(echo.error.message.find("belongs to /v1/completions"), std::string::npos) << echo.error.message;
  auto msgs = one(Endpoint::kCompletion, "messages", "[]");
  ASSERT_FALSE(msgs.ok());
  EXPECT_NE(msgs.error.message.find("belongs to /v1/chat/completions"), std::string::npos) << msgs.error.message;
}

// docs/api.md's field table lists exactly the fields of request_fields(), each with its status:
// the docs cannot drift from the code.
TEST(RequestFields, DocsTableMatchesTheCode) {
  const std::string doc = testing::read_whole_file(testing::source_path("docs/api.md"));
  const size_t start = doc.find("### Every field");
  ASSERT_NE(start, std::string::npos) << "docs/api.md has no '### Every field' section";
  const size_t end = doc.find("\n#", start + 4);
  std::map<std::string, std::string> documented;  // field -> its status: the second cell's first word
  std::istringstream lines(doc.substr(start, end == std::string::npos ? std::string::npos : end - start));
  for (std::string row; std::getline(lines, row);) {
    if (row.rfind("| `", 0) != 0) continue;
    const size_t close = row.find('`', 3);
    const size_t cell = row.find("| ", close);
    ASSERT_NE(cell, std::string::npos) << row;
    const std::string status = row.substr(cell + 2, row.find_first_of(" |", cell + 2) - cell - 2);
    EXPECT_TRUE(documented.emplace(row.substr(3, close - 3), status).second) << "listed twice: " << row;
  }
  std::map<std::string, std::string> code;
  for (const FieldInfo& f : request_fields()) {
    code[f.name] = f.status == FieldStatus::kImplemented ? "implemented"
                   : f.status == FieldStatus::kNeutralOnly ? "neutral"
                                                           : "refused";
  }
  EXPECT_EQ(documented, code);
}

}  // namespace
}  // namespace onebit
