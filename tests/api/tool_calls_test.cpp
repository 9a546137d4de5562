// Tool calls: each family's format from the real templates of ../shared/testdata (whether a
// template renders tools is the service's probe; here it is given), replies parsed
// into calls (and text that is not a call left as text), the stream's held-back prefix, request
// checks, and the forcing grammar: random walks through it over Qwen3's vocabulary parse back
// into calls of the allowed functions whose arguments Python's jsonschema validates.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "api/tool_calls.h"
#include "grammar/matcher.h"
#include "run_command.h"
#include "testdata.h"
#include "tokenizer/hf_vocab.h"

namespace onebit {
namespace {

using Json = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(ToolCalls, FormatsOfTheRealTemplates) {
  ONEBIT_REQUIRE_TESTDATA("templates/Qwen-Qwen3.jinja");
  struct Case {
    const char* file;
    bool ok;
    ToolFormat format;
    bool renders;
  };
  const Case cases[] = {
      {"Qwen-Qwen3.jinja", true, ToolFormat::kHermes, true},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", true, ToolFormat::kHermes, true},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", true, ToolFormat::kHermes, true},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", true, ToolFormat::kLlama3, true},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", true, ToolFormat::kMistral, true},
      {"google-gemma-2-2b-it.jinja", true, ToolFormat::kHermes, false},
      {"microsoft-Phi-3.5-mini-instruct.jinja", true, ToolFormat::kHermes, false},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", true, ToolFormat::kHermes, false},
      {"google-gemma-2-2b-it.jinja", false, ToolFormat::kHermes, true},  // as if it rendered tools
  };
  for (const Case& c : cases) {
    auto t = template_tools(read_file(testing::testdata_path(std::string("templates/") + c.file)), c.renders);
    ASSERT_EQ(t.ok(), c.ok) << c.file << (t.ok() ? "" : ": " + t.message());
    if (!t.ok()) {
      EXPECT_NE(t.message().find("does not parse"), std::string::npos) << t.message();
      continue;
    }
    EXPECT_EQ(t->format, c.format) << c.file;
    EXPECT_EQ(t->renders_tools, c.renders) << c.file;
  }
}

TEST(ToolCalls, RepliesParseIntoCallsAndText) {
  auto h = parse_tool_reply(ToolFormat::kHermes,
                            "Let me look.\n<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                            "<tool_call>{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>");
  ASSERT_EQ(h.calls.size(), 2u);
  EXPECT_EQ(h.content, "Let me look.");
  EXPECT_EQ(h.calls[0].name, "get");
  EXPECT_EQ(Json::parse(h.calls[0].arguments), Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(h.calls[1].arguments, "{\"a\": 1}");
  auto broken = parse_tool_reply(ToolFormat::kHermes, "x <tool_call>{\"name\": 3}</tool_call>");
  EXPECT_TRUE(broken.calls.empty());
  EXPECT_EQ(broken.content, "x <tool_call>{\"name\": 3}</tool_call>");  // not a call: kept as text
  auto unclosed = parse_tool_reply(ToolFormat::kHermes, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}");
  ASSERT_EQ(unclosed.calls.size(), 1u);
  auto l = parse_tool_reply(ToolFormat::kLlama3, "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}");
  ASSERT_EQ(l.calls.size(), 1u);
  EXPECT_EQ(l.calls[0].name, "add");
  EXPECT_EQ(Json::parse(l.calls[0].arguments), Json::parse(R"({"a": 1, "b": 2})"));
  EXPECT_TRUE(parse_tool_reply(ToolFormat::kLlama3, "The answer is {\"name\": 1}").calls.empty());
  auto m = parse_tool_reply(ToolFormat::kMistral,
                            "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}, \"id\": \"abcdefghi\"}, {\"name\": \"b\", \"arguments\": {\"x\": [1]}}]");
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(m.calls[1].name, "b");
  EXPECT_EQ(m.content, "");
  EXPECT_TRUE(parse_tool_reply(ToolFormat::kMistral, "[TOOL_CALLS][{\"arguments\": {}}]").calls.empty());
}

TEST(ToolCalls, StreamsHoldBackFromTheMarker) {
  EXPECT_EQ(tool_content_prefix(ToolFormat::kHermes, "Hello <tool"), 6u);
  EXPECT_EQ(tool_content_prefix(ToolFormat::kHermes, "Hello <tool_call>{"), 6u);
  EXPECT_EQ(tool_content_prefix(ToolFormat::kHermes, "Hello <b>"), 9u);
  EXPECT_EQ(tool_content_prefix(ToolFormat::kMistral, "ok [TOOL_"), 3u);
  EXPECT_EQ(tool_content_prefix(ToolFormat::kLlama3, "  {\"na"), 0u);
  EXPECT_EQ(tool_content_prefix(ToolFormat::kLlama3, "<|pyth"), 0u);
  EXPECT_EQ(tool_content_prefix(ToolFormat::kLlama3, "Sure"), 4u);
}

TEST(ToolCalls, RequestChecksNameTheField) {
  auto err = [](const std::string& body) {
    auto r = parse_tool_request(Json::parse(body));
    return r.ok() ? std::string() : r.message();
  };
  const std::string tool = R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}})";
  EXPECT_EQ(err(R"({"tools": [)" + tool + R"(], "tool_choice": "required"})"), "");
  EXPECT_NE(err(R"({"tools": [{"type": "retrieval"}]})").find("'tools[0].type' must be \"function\""), std::string::npos);
  EXPECT_NE(err(R"({"tools": [{"type": "function", "function": {"name": "a b"}}]})").find("'tools[0].function.name'"),
            std::string::npos);
  EXPECT_NE(err(R"({"tools": [)" + tool + "," + tool + "]}").find("given twice"), std::string::npos);
  EXPECT_NE(err(R"({"tools": [)" + tool + R"(], "tool_choice": "any"})").find("'tool_choice' is 'any'"), std::string::npos);
  EXPECT_NE(err(R"({"tools": [)" + tool + R"(], "tool_choice": {"type": "function", "function": {"name": "g"}}})")
                .find("'g', which is not in 'tools'"),
            std::string::npos);
  EXPECT_NE(err(R"({"tool_choice": "required"})").find("'tools' is empty"), std::string::npos);
  EXPECT_NE(err(R"({"tools": [{"type": "function", "function": {"name": "f", "strict": 1}}]})").find("strict"), std::string::npos);
  EXPECT_NE(err(R"({"tools": [{"type": "function", "function": {"name": "f", "returns": {}}}]})").find("'tools[0].function.returns'"),
            std::string::npos);
  auto bad_schema = parse_tool_request(Json::parse(
      R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}}}], "tool_choice": "required"})"));
  ASSERT_TRUE(bad_schema.ok());
  auto g = tool_call_grammar(ToolFormat::kHermes, *bad_schema);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("'tools[0].function.parameters'"), std::string::npos) << g.message();
  EXPECT_NE(g.message().find("minimum"), std::string::npos) << g.message();
}

TEST(ToolCalls, TemplatesGetArgumentsAsObjectsAndContentAsText) {
  const Json in = Json::parse(R"([{"role": "assistant", "content": null, "tool_calls": [{"id": "x", "type": "function",
      "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}, {"role": "tool", "tool_call_id": "x", "content": "2"}])");
  const Json out = messages_for_template(in);
  EXPECT_EQ(out[0]["content"], "");
  EXPECT_EQ(out[0]["tool_calls"][0]["function"]["arguments"], Json::parse(R"({"a": 1})"));
  EXPECT_EQ(out[1], in[1]);
}

// Random walks through the forcing grammar of each format, parsed back and validated.
TEST(ToolCalls, ForcedCallsParseAndValidate) {
  ONEBIT_REQUIRE_TESTDATA("tokenizers/qwen3/tokenizer.json");
  if (testing::run_command("python3 -c 'import jsonschema'").exit_code != 0) {
    GTEST_SKIP() << "python3-jsonschema is not installed (scripts/setup.sh installs it)";
  }
  auto hf = read_hf_tokenizer(testing::testdata_path("tokenizers/qwen3/tokenizer.json"));
  ASSERT_TRUE(hf.ok()) << hf.message();
  auto tok = Tokenizer::from_vocab(hf->vocab);
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto table = grammar::TokenTable::from_tokenizer(*tok);
  const Json body = Json::parse(R"({"tools": [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}}, "required": ["city"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "number"}}, "required": ["a", "b"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "now"}}]})");
  Json schemas = Json::array();
  for (const Json& t : body["tools"]) {
    schemas.push_back(Json{{"name", t["function"]["name"]},
                           {"schema", t["function"].value("parameters", Json{{"type", "object"}, {"additionalProperties", false}})}});
  }
  Json samples = Json::array();
  std::mt19937_64 rng(5);
#ifdef ONEBIT_SANITIZED
  const int per = 2;
#else
  const int per = 6;
#endif
  for (ToolFormat format : {ToolFormat::kHermes, ToolFormat::kLlama3, ToolFormat::kMistral}) {
    for (int k = 0; k < per; ++k) {
      auto req = parse_tool_request(body);
      ASSERT_TRUE(req.ok());
      req->parallel = k % 2 == 0;
      req->choice = k % 3 == 0 ? ToolChoice::kNamed : ToolChoice::kRequired;
      req->named = "add";
      auto gbnf = tool_call_grammar(format, *req);
      ASSERT_TRUE(gbnf.ok()) << gbnf.message();
      auto g = grammar::parse_gbnf(*gbnf);
      ASSERT_TRUE(g.ok()) << g.message();
      auto compiled = std::make_shared<grammar::CompiledGrammar>(std::move(*g), table);
      grammar::GrammarConstraint con(compiled);
      std::string text;
      std::vector<float> logits(size_t(table->size()));
      const int32_t budget = 120;
      for (int32_t step = 0; step < budget && !con.finished(); ++step) {
        std::fill(logits.begin(), logits.end(), 0.0f);
        ASSERT_GT(con.mask(logits, budget - step), 0);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < table->size(); ++id) {
          if (logits[size_t(id)] == 0.0f) allowed.push_back(id);
        }
        const int32_t pick = allowed[rng() % allowed.size()];
        ASSERT_TRUE(con.accept(pick));
        if (table->flags(pick) & grammar::TokenTable::kEnd) break;
        text += table->piece(pick);
      }
      ASSERT_TRUE(con.finished()) << tool_format_name(format) << ": " << text;
      const ToolReply reply = parse_tool_reply(format, text);
      ASSERT_FALSE(reply.calls.empty()) << tool_format_name(format) << ": " << text;
      EXPECT_TRUE(reply.content.empty()) << text;
      if (!req->parallel || format == ToolFormat::kLlama3) EXPECT_EQ(reply.calls.size(), 1u) << text;
      for (const ToolCall& c : reply.calls) {
        if (req->choice == ToolChoice::kNamed) EXPECT_EQ(c.name, "add") << text;
        size_t index = 0;
        while (index < schemas.size() && schemas[index]["name"] != c.name) ++index;
        ASSERT_LT(index, schemas.size()) << c.name;
        samples.push_back(Json{{"schema", index}, {"text", c.arguments}});
      }
    }
  }
  const auto dir = std::filesystem::temp_directory_path();
  const std::string schemas_path = (dir / "onebit_tool_schemas.json").string();
  const std::string samples_path = (dir / "onebit_tool_samples.json").string();
  std::ofstream(schemas_path) << schemas.dump();
  std::ofstream(samples_path) << samples.dump();
  const auto r = testing::run_command("python3 " + testing::source_path("tests/grammar/validate_json.py") + " " +
                                      schemas_path + " " + samples_path);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(" 0 failed"), std::string::npos) << r.out;
  std::filesystem::remove(schemas_path);
  std::filesystem::remove(samples_path);
}

}  // namespace
}  // namespace onebit
