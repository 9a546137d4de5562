// `1bit serve --embedding` on the tiny random-init Qwen3 checkpoint (tests/golden/model/tiny-qwen3)
// converted with `1bit convert --type f32`: /v1/embeddings equals Hugging Face transformers'
// final-normed hidden states, pooled (last token, mean, first token) and L2-normalised
// (tests/golden/model/tiny-qwen3/embeddings.json, from tools/model/make_embedding_goldens.py)
// within 1e-4 per element, with prompts of up to 200 tokens run in chunks of 32 beside each other;
// base64 is the float reply's bytes; a batch keeps its order; every error names what is wrong.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "e2e_util.h"
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "run_command.h"

namespace onebit::e2e {
namespace {

namespace fs = std::filesystem;

constexpr double kTolerance = 1e-4;

std::vector<float> decode_base64_floats(const std::string& s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<uint8_t> bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    const int v = value(c);
    if (v < 0) return {};
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<uint8_t>((acc >> bits) & 0xFF));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t u = uint32_t(bytes[4 * i]) | uint32_t(bytes[4 * i + 1]) << 8 | uint32_t(bytes[4 * i + 2]) << 16 |
                       uint32_t(bytes[4 * i + 3]) << 24;  // little-endian
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

double max_abs_diff(const json& got, const json& want) {
  if (!got.is_array() || got.size() != want.size()) return INFINITY;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i].get<double>() - want[i].get<double>()));
  return worst;
}

class EmbeddingsE2e : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("onebit_embeddings_e2e_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_ = (dir_ / "tiny-qwen3-f32.gguf").string();
    auto conv = testing::run_command(testing::binary_path() + " convert " +
                                     testing::source_path("tests/golden/model/tiny-qwen3") + " " + model_ + " --type f32");
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    std::ifstream in(testing::source_path("tests/golden/model/tiny-qwen3/embeddings.json"));
    goldens_ = json::parse(in);
    ASSERT_GE(goldens_["prompts"].size(), 5u);
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Every golden prompt in one request; each vector against the golden of `pooling`.
  static void expect_goldens(const Server& server, const std::string& pooling) {
    json inputs = json::array();
    int64_t n_tokens = 0;
    for (const json& p : goldens_["prompts"]) {
      inputs.push_back(p["ids"]);
      n_tokens += static_cast<int64_t>(p["ids"].size());
    }
    auto r = server.post("/v1/embeddings", json{{"input", inputs}, {"model", "anything"}});
    ASSERT_EQ(r.status, 200) << r.raw.substr(0, 400);
    EXPECT_EQ(r.body["object"], "list");
    EXPECT_EQ(r.body["model"], "tiny");
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], n_tokens);
    EXPECT_EQ(r.body["usage"]["total_tokens"], n_tokens);
    ASSERT_EQ(r.body["data"].size(), inputs.size());
    double worst = 0.0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const json& d = r.body["data"][i];
      EXPECT_EQ(d["object"], "embedding");
      EXPECT_EQ(d["index"], i);
      const double diff = max_abs_diff(d["embedding"], goldens_["prompts"][i][pooling]);
      EXPECT_LT(diff, kTolerance) << pooling << " prompt " << i << " of " << inputs[i].size() << " tokens";
      worst = std::max(worst, diff);
    }
    std::printf("[ embeddings ] %s pooling: max abs diff vs transformers %.3g over %zu prompts\n", pooling.c_str(), worst,
                inputs.size());
  }

  static inline fs::path dir_;
  static inline std::string model_;
  static inline json goldens_;
};

// Chunks of 32 tokens, 3 sequences per step, K/V blocks of 16: the long prompts run over many
// steps beside the short ones. F32 K/V: the f32 model end to end, as the goldens are.
const std::vector<std::string> kServeArgs = {"--embedding", "--alias", "tiny", "-c", "256", "--batch-tokens", "32",
                                             "--parallel", "3", "--threads", "2", "--cache-type", "f32"};

TEST_F(EmbeddingsE2e, LastPoolingMatchesTransformersAndEveryFormWorks) {
  ASSERT_FALSE(model_.empty());
  Server server;
  server.start(model_, kServeArgs);  // no pooling_type in the file: last, a decoder model's default
  expect_goldens(server, "last");

  // One prompt as a bare token list; again: the prefix cache serves its blocks, same vector.
  const json& longest = goldens_["prompts"].back();
  for (int rep = 0; rep < 2; ++rep) {
    auto one = server.post("/v1/embeddings", json{{"input", longest["ids"]}});
    ASSERT_EQ(one.status, 200) << one.raw.substr(0, 400);
    ASSERT_EQ(one.body["data"].size(), 1u);
    EXPECT_LT(max_abs_diff(one.body["data"][0]["embedding"], longest["last"]), kTolerance);
  }

  // base64: the little-endian float32 bytes of the float reply.
  const json body = {{"input", {goldens_["prompts"][4]["ids"], goldens_["prompts"][1]["ids"]}}};
  auto floats = server.post("/v1/embeddings", body);
  json b64_body = body;
  b64_body["encoding_format"] = "base64";
  auto b64 = server.post("/v1/embeddings", b64_body);
  ASSERT_EQ(floats.status, 200) << floats.raw.substr(0, 400);
  ASSERT_EQ(b64.status, 200) << b64.raw.substr(0, 400);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(b64.body["data"][i]["embedding"].is_string());
    const std::vector<float> decoded = decode_base64_floats(b64.body["data"][i]["embedding"]);
    const json& want = floats.body["data"][i]["embedding"];
    ASSERT_EQ(decoded.size(), want.size());
    ASSERT_EQ(decoded.size(), 64u);
    for (size_t k = 0; k < decoded.size(); ++k) EXPECT_EQ(decoded[k], want[k].get<float>()) << i << ", " << k;
  }

  // Text: tokenized as /tokenize with specials gives it; a list of texts keeps its order.
  auto tokens = server.post("/tokenize", json{{"content", "the robot sang"}, {"add_special", true}});
  ASSERT_EQ(tokens.status, 200) << tokens.raw;
  auto texts = server.post("/v1/embeddings", json{{"input", {"the robot sang", "once upon a time", "the robot sang"}},
                                                  {"encoding_format", "float"}, {"user", "u1"}});
  auto ids = server.post("/v1/embeddings", json{{"input", tokens.body["tokens"]}, {"dimensions", 64}});
  ASSERT_EQ(texts.status, 200) << texts.raw.substr(0, 400);
  ASSERT_EQ(ids.status, 200) << ids.raw.substr(0, 400);
  ASSERT_EQ(texts.body["data"].size(), 3u);
  EXPECT_LT(max_abs_diff(texts.body["data"][0]["embedding"], ids.body["data"][0]["embedding"]), 1e-5);
  EXPECT_LT(max_abs_diff(texts.body["data"][2]["embedding"], ids.body["data"][0]["embedding"]), 1e-5);
  EXPECT_GT(max_abs_diff(texts.body["data"][1]["embedding"], ids.body["data"][0]["embedding"]), 1e-3);
  double norm = 0.0;
  for (const json& x : texts.body["data"][1]["embedding"]) norm += x.get<double>() * x.get<double>();
  EXPECT_NEAR(norm, 1.0, 1e-5);
  auto unprefixed = server.post("/embeddings", json{{"input", "the robot sang"}});
  ASSERT_EQ(unprefixed.status, 200) << unprefixed.raw.substr(0, 400);
  EXPECT_LT(max_abs_diff(unprefixed.body["data"][0]["embedding"], ids.body["data"][0]["embedding"]), 1e-5);
}

TEST_F(EmbeddingsE2e, MeanAndClsPoolingMatchTransformers) {
  ASSERT_FALSE(model_.empty());
  for (const std::string pooling : {"mean", "cls"}) {
    Server server;
    std::vector<std::string> args = kServeArgs;
    args.insert(args.end(), {"--pooling", pooling});
    server.start(model_, args);
    expect_goldens(server, pooling);
    // A repeat runs every token again (no cached prefix for mean and cls): the same vectors.
    expect_goldens(server, pooling);
  }
}

TEST_F(EmbeddingsE2e, ErrorsNameTheFieldAndTheValue) {
  ASSERT_FALSE(model_.empty());
  Server server;
  server.start(model_, kServeArgs);
  auto expect_400 = [&](const json& body, const std::string& needle, const std::string& type = "invalid_request_error") {
    auto r = server.post("/v1/embeddings", body.dump());
    expect_error_body(r, 400, type);
    const std::string message = r.body.value("error", json::object()).value("message", "");
    EXPECT_NE(message.find(needle), std::string::npos) << body.dump().substr(0, 200) << " -> " << message;
  };
  expect_400({{"input", "hi"}, {"encoding_format", "hex"}}, "'encoding_format' is 'hex'; allowed: float, base64");
  expect_400({{"input", "hi"}, {"dimensions", 32}}, "'dimensions' is 32; this model's embeddings have 64");
  expect_400({{"input", "hi"}, {"temperature", 0}}, "'temperature' is not a field of /v1/embeddings");
  expect_400({{"input", ""}}, "'input' is an empty string");
  expect_400({{"input", {"a", ""}}}, "'input[1]' is an empty string");
  expect_400(json{{"input", json::array()}}, "'input' is an empty array");
  expect_400({{"model", "x"}}, "'input' is required");
  expect_400({{"input", {"a", 5}}}, "'input[1]' must be a string");
  expect_400({{"input", {{1, 2}, json::array()}}}, "'input[1]' is an empty array");
  expect_400({{"input", {1, -2}}}, "'input[1]' must be a token id");
  expect_400({{"input", {{1, 2}, {3, 384}}}}, "'input[1][1]' is 384; token ids go from 0 to 383");
  expect_400({{"input", json::array({json::object({{"a", 1}})})}}, "'input[0]' must be a string, a token id or an array of token ids");
  expect_400({{"input", 5}}, "'input' must be a string, an array of strings");
  expect_400({{"input", "hi"}, {"dimensions", "64"}}, "'dimensions' must be an integer");
  json too_long = json::array();
  for (int i = 0; i < 257; ++i) too_long.push_back(i % 300);
  expect_400({{"input", {json::array({1, 2, 3}), too_long}}}, "'input[1]' has 257 tokens; the context is 256",
             "exceed_context_size_error");
  auto bad_json = server.post("/v1/embeddings", std::string("{\"input\": "));
  expect_error_body(bad_json, 400, "invalid_request_error");

  // An embedding server serves embeddings only, as llama-server with --embedding.
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    auto r = server.post(path, json{{"prompt", "hi"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}});
    expect_error_body(r, 501, "not_supported_error");
    EXPECT_NE(r.raw.find("started with --embedding"), std::string::npos) << r.raw;
  }
  // The server still answers well after every error.
  auto ok = server.post("/v1/embeddings", json{{"input", {1, 2, 3}}});
  EXPECT_EQ(ok.status, 200) << ok.raw.substr(0, 300);
  // A browser's preflight knows the route.
  auto pre = server.client().Options("/v1/embeddings", httplib::Headers{{"Origin", "http://localhost:3000"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
}

TEST_F(EmbeddingsE2e, OfficialOpenAiClient) {
  ASSERT_FALSE(model_.empty());
  Server server;
  server.start(model_, kServeArgs);
  auto r = testing::run_command(testing::source_path("tests/e2e/run_openai_client.sh") + " " + server.base_url() +
                                " embedding");
  if (r.exit_code == 77) GTEST_SKIP() << "node/npm or the openai package is unavailable";
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ok"), std::string::npos);
}

TEST_F(EmbeddingsE2e, WithoutEmbeddingTheRouteSaysHowToTurnItOn) {
  ASSERT_FALSE(model_.empty());
  Server server;
  server.start(model_, {"-c", "256", "--threads", "1"});
  auto r = server.post("/v1/embeddings", json{{"input", "hi"}});
  expect_error_body(r, 501, "not_supported_error");
  EXPECT_NE(r.raw.find("--embedding"), std::string::npos) << r.raw;
  auto completion = server.post("/v1/completions", json{{"prompt", {1, 2, 3}}, {"max_tokens", 2}});
  EXPECT_EQ(completion.status, 200) << completion.raw;
}

// The model's qwen3.pooling_type is the default (llama.cpp's 1 = mean here); --pooling overrides
// it; a file whose type /v1/embeddings cannot serve (0, none) is refused at startup, naming it.
TEST_F(EmbeddingsE2e, TheFilesPoolingTypeIsTheDefault) {
  ASSERT_FALSE(model_.empty());
  auto with_pooling = [&](uint32_t type) {
    auto file = GgufFile::open(model_);
    EXPECT_TRUE(file.ok()) << file.message();
    GgufWriter w;
    w.copy_metadata(*file);
    w.set_uint32("qwen3.pooling_type", type);
    for (const auto& t : file->tensors()) EXPECT_TRUE(w.add_tensor(t).ok());
    const std::string path = (dir_ / ("pooling-" + std::to_string(type) + ".gguf")).string();
    EXPECT_TRUE(w.write_file(path).ok());
    return path;
  };
  const std::string mean_model = with_pooling(1);
  {
    Server server;
    server.start(mean_model, kServeArgs);
    expect_goldens(server, "mean");
  }
  {
    Server server;
    std::vector<std::string> args = kServeArgs;
    args.insert(args.end(), {"--pooling", "cls"});
    server.start(mean_model, args);
    expect_goldens(server, "cls");
  }
  const std::string none_model = with_pooling(0);
  auto refused = testing::run_command(testing::binary_path() + " serve -m " + none_model + " --embedding --port " +
                                      std::to_string(*find_free_loopback_port()));
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_NE(refused.err.find("qwen3.pooling_type is none"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--pooling last|mean|cls"), std::string::npos) << refused.err;
}

TEST_F(EmbeddingsE2e, PoolingOptionErrorsAreOneLineWithExitCode2) {
  const std::string bin = testing::binary_path() + " serve -m " + (model_.empty() ? std::string("x.gguf") : model_);
  auto bad = testing::run_command(bin + " --embedding --pooling max");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--pooling must be last, mean or cls; got 'max'"), std::string::npos) << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  auto alone = testing::run_command(bin + " --pooling mean");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("give --embedding too"), std::string::npos) << alone.err;
  auto dry = testing::run_command(bin + " --embeddings --pooling cls --dry-run");
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_EQ(json::parse(dry.out)["embedding"]["pooling"], "cls") << dry.out;
}

}  // namespace
}  // namespace onebit::e2e
