// Completion without a model or HTTP: a SequenceHandle driven by hand plays the engine; the
// replies (whole and SSE) must have the shape product.md gives: role chunk, deltas, exactly one
// final chunk with finish_reason and timings, the usage chunk when asked, [DONE]. Uses
// stories260K's vocabulary for token pieces.
#include <gtest/gtest.h>

#include "api/completion.h"
#include "gguf/gguf_reader.h"
#include "testdata.h"

namespace onebit {
namespace {

using nlohmann::json;

class CompletionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
    auto file = GgufFile::open(testing::testdata_path("models/stories260K.gguf"));
    ASSERT_TRUE(file.ok());
    auto tok = Tokenizer::from_gguf(*file);
    ASSERT_TRUE(tok.ok());
    tokenizer_ = std::make_unique<Tokenizer>(std::move(*tok));
  }
  std::unique_ptr<Completion> make(Endpoint endpoint, bool stream, std::vector<std::string> stop = {}) {
    handle_ = std::make_shared<SequenceHandle>();
    CompletionSetup setup;
    setup.endpoint = endpoint;
    setup.id = "x";
    setup.model = "m";
    setup.stream = stream;
    setup.include_usage = true;
    setup.text.stop = std::move(stop);
    setup.text.split_reasoning = endpoint == Endpoint::kChat;
    return std::make_unique<Completion>(setup, handle_, *tokenizer_);
  }
  void feed(const std::string& text, FinishReason reason, int n_prompt = 5) {
    SequenceStats stats;
    stats.n_prompt_tokens = n_prompt;
    stats.n_cached_tokens = 2;
    for (TokenId t : tokenizer_->encode(text)) handle_->push_token(t);
    handle_->finish(reason, stats);
  }
  // The SSE events of a finished stream, [DONE] as the string "[DONE]".
  static std::vector<json> events(Completion& c) {
    std::string all;
    bool done = false;
    for (int i = 0; i < 100 && !done; ++i) all += c.next_sse(10, done);
    EXPECT_TRUE(done);
    std::vector<json> out;
    size_t at = 0;
    while ((at = all.find("data: ", at)) != std::string::npos) {
      size_t end = all.find("\n\n", at);
      std::string data = all.substr(at + 6, end - at - 6);
      out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
      at = end + 2;
    }
    return out;
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  std::shared_ptr<SequenceHandle> handle_;
};

TEST_F(CompletionTest, WholeChatReply) {
  auto c = make(Endpoint::kChat, false);
  feed("there was a dog", FinishReason::kLength);
  auto r = c->run_to_end();
  ASSERT_TRUE(r.ok());
  const json& j = *r.value;
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], " there was a dog");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(j["timings"]["prompt_n"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], j["timings"]["predicted_n"]);
}

TEST_F(CompletionTest, StreamShape) {
  auto c = make(Endpoint::kChat, true);
  feed("there was a dog", FinishReason::kEnd);
  auto ev = events(*c);
  ASSERT_GE(ev.size(), 4u);
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(ev.back(), "[DONE]");
  const json& usage = ev[ev.size() - 2];
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 5);
  const json& final_chunk = ev[ev.size() - 3];
  EXPECT_EQ(final_chunk["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(final_chunk.contains("timings"));
  std::string text;
  int finals = 0;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    for (const auto& ch : ev[i]["choices"]) {
      text += ch["delta"].value("content", "");
      if (!ch["finish_reason"].is_null()) ++finals;
    }
  }
  EXPECT_EQ(text, " there was a dog");
  EXPECT_EQ(finals, 1);
}

TEST_F(CompletionTest, StopStringEndsTheTextAndCancels) {
  auto c = make(Endpoint::kCompletion, false, {"was"});
  feed("there was a dog", FinishReason::kLength);
  auto r = c->run_to_end();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r.value)["choices"][0]["text"], " there ");
  EXPECT_EQ((*r.value)["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(handle_->cancelled());
}

TEST_F(CompletionTest, EndTokenIsNeverShown) {
  auto c = make(Endpoint::kCompletion, false);
  const auto ids = tokenizer_->encode("dog");
  for (TokenId t : ids) handle_->push_token(t);
  handle_->push_token(tokenizer_->eos_id());
  handle_->finish(FinishReason::kEnd, {});
  auto r = c->run_to_end();
  EXPECT_EQ((*r.value)["choices"][0]["text"], " dog");
  EXPECT_EQ((*r.value)["usage"]["completion_tokens"], ids.size() + 1);
}

TEST_F(CompletionTest, EngineErrorIsA500OrAnErrorEvent) {
  auto whole = make(Endpoint::kChat, false);
  handle_->finish(FinishReason::kError, {}, "boom");
  auto r = whole->run_to_end();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(http_status(r.error.kind), 500);
  auto stream = make(Endpoint::kChat, true);
  handle_->finish(FinishReason::kError, {}, "boom");
  auto ev = events(*stream);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[ev.size() - 2]["error"]["message"], "boom");
  EXPECT_EQ(ev.back(), "[DONE]");
}

TEST_F(CompletionTest, DestroyingARunningCompletionCancels) {
  auto c = make(Endpoint::kChat, true);
  auto h = handle_;
  c.reset();
  EXPECT_TRUE(h->cancelled());
}

}  // namespace
}  // namespace onebit
