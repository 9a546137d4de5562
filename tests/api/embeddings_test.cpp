// /v1/embeddings bodies: every `input` shape, encoding_format, dimensions, fields refused by name;
// base64 of little-endian float32 as OpenAI encodes it.
#include <gtest/gtest.h>

#include "api/embeddings.h"

namespace onebit {
namespace {

std::string error_of(const std::string& body) {
  auto r = parse_embedding_request(body);
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? "" : r.error.message;
}

TEST(EmbeddingRequest, EveryInputShape) {
  auto text = parse_embedding_request(R"({"input": "hello", "model": "m", "user": "u", "encoding_format": "float"})");
  ASSERT_TRUE(text.ok()) << text.error.message;
  ASSERT_EQ(text.value->inputs.size(), 1u);
  EXPECT_TRUE(text.value->inputs[0].is_text);
  EXPECT_EQ(text.value->inputs[0].text, "hello");
  EXPECT_EQ(text.value->inputs[0].name, "input");
  EXPECT_FALSE(text.value->base64);

  auto texts = parse_embedding_request(R"({"input": ["a", "b", "c"], "encoding_format": "base64"})");
  ASSERT_TRUE(texts.ok()) << texts.error.message;
  ASSERT_EQ(texts.value->inputs.size(), 3u);
  EXPECT_EQ(texts.value->inputs[2].text, "c");
  EXPECT_EQ(texts.value->inputs[2].name, "input[2]");
  EXPECT_TRUE(texts.value->base64);

  auto ids = parse_embedding_request(R"({"input": [1, 2, 3], "dimensions": 64})");
  ASSERT_TRUE(ids.ok()) << ids.error.message;
  ASSERT_EQ(ids.value->inputs.size(), 1u);
  EXPECT_FALSE(ids.value->inputs[0].is_text);
  EXPECT_EQ(ids.value->inputs[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids.value->dimensions, 64);

  auto lists = parse_embedding_request(R"({"input": [[1, 2], [3]], "model": null, "dimensions": null})");
  ASSERT_TRUE(lists.ok()) << lists.error.message;
  ASSERT_EQ(lists.value->inputs.size(), 2u);
  EXPECT_EQ(lists.value->inputs[1].tokens, (std::vector<int32_t>{3}));
  EXPECT_EQ(lists.value->inputs[1].name, "input[1]");
  EXPECT_FALSE(lists.value->dimensions.has_value());
}

TEST(EmbeddingRequest, ErrorsNameTheFieldAndTheValue) {
  EXPECT_EQ(error_of(R"({"model": "m"})"),
            "'input' is required: a string, an array of strings, an array of token ids, or an array of token-id arrays");
  EXPECT_EQ(error_of(R"({"input": ""})"), "'input' is an empty string; give some text");
  EXPECT_EQ(error_of(R"({"input": []})"),
            "'input' is an empty array; give a string, an array of strings, an array of token ids, or an array of token-id arrays");
  EXPECT_EQ(error_of(R"({"input": ["a", ""]})"), "'input[1]' is an empty string; give some text");
  EXPECT_EQ(error_of(R"({"input": ["a", 3]})"), "'input[1]' must be a string (as input[0] is), got number");
  EXPECT_EQ(error_of(R"({"input": [[1], 3]})"), "'input[1]' must be an array of token ids (as input[0] is), got number");
  EXPECT_EQ(error_of(R"({"input": [[1], []]})"), "'input[1]' is an empty array; give token ids");
  EXPECT_EQ(error_of(R"({"input": [1, 2.5]})"), "'input[1]' must be a token id (an integer >= 0), got 2.5");
  EXPECT_EQ(error_of(R"({"input": [[1, -1]]})"), "'input[0][1]' must be a token id (an integer >= 0), got -1");
  EXPECT_EQ(error_of(R"({"input": [true]})"), "'input[0]' must be a string, a token id or an array of token ids, got boolean");
  EXPECT_EQ(error_of(R"({"input": {"a": 1}})"),
            "'input' must be a string, an array of strings, an array of token ids, or an array of token-id arrays, got object");
  EXPECT_EQ(error_of(R"({"input": "a", "encoding_format": "hex"})"), "'encoding_format' is 'hex'; allowed: float, base64");
  EXPECT_EQ(error_of(R"({"input": "a", "encoding_format": 1})"), "'encoding_format' must be a string, got number");
  EXPECT_EQ(error_of(R"({"input": "a", "dimensions": 0})"), "'dimensions' is 0; allowed 1 to 16777216");
  EXPECT_EQ(error_of(R"({"input": "a", "model": 5})"), "'model' must be a string, got number");
  EXPECT_EQ(error_of(R"({"input": "a", "user": []})"), "'user' must be a string, got array");
  EXPECT_EQ(error_of(R"({"input": "a", "stream": true})"),
            "'stream' is not a field of /v1/embeddings; the fields are input, model, encoding_format, dimensions, user");
  EXPECT_EQ(error_of("[1]"), "the body must be a JSON object, got array");
  std::string many = R"({"input": [)";
  for (size_t i = 0; i <= kMaxEmbeddingInputs; ++i) many += (i ? ",\"x\"" : "\"x\"");
  EXPECT_EQ(error_of(many + "]}"), "'input' has 2049 items; allowed at most 2048 (send several requests)");
}

TEST(EmbeddingRequest, Base64IsLittleEndianFloat32) {
  EXPECT_EQ(base64_floats(std::vector<float>{}), "");
  EXPECT_EQ(base64_floats(std::vector<float>{1.0f}), "AACAPw==");          // 00 00 80 3f
  EXPECT_EQ(base64_floats(std::vector<float>{1.0f, -2.0f}), "AACAPwAAAMA=");  // ... 00 00 00 c0
  EXPECT_EQ(base64_floats(std::vector<float>{0.0f, 0.5f, -0.25f}), "AAAAAAAAAD8AAIC+");
}

}  // namespace
}  // namespace onebit
