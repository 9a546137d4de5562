// /v1/embeddings over an embedding engine (EngineOptions::pooling, `1bit serve --embedding`): the
// body parsed and checked (every field named in an error; unknown fields refused), each input
// tokenized and submitted as its own sequence, and the reply in OpenAI's shape: one L2-normalised
// vector per input, as floats or base64, with usage. No HTTP, no tensors. docs/api.md, "Embeddings".
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/request.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace onebit {

// One item of `input`: a text (tokenized by the service) or token ids used as given.
struct EmbeddingInput {
  std::string name;              // "input" or "input[i]", for errors
  bool is_text = false;
  std::string text;              // is_text
  std::vector<int32_t> tokens;   // !is_text
};

struct EmbeddingRequest {
  std::vector<EmbeddingInput> inputs;   // [n_inputs] in `input` order (the reply's indices)
  bool base64 = false;                  // encoding_format "base64"
  std::optional<int64_t> dimensions;    // must equal the model's embedding size when given
};

// Inputs one request may hold (OpenAI's limit).
inline constexpr size_t kMaxEmbeddingInputs = 2048;

// Parses an /v1/embeddings body: `input` (a string, an array of strings, an array of token ids, or
// an array of token-id arrays), `model`, `encoding_format` ("float" or "base64"), `dimensions`,
// `user`. Any other field, an empty input, a wrong type or value is a 400 naming it.
ApiResult<EmbeddingRequest> parse_embedding_request(const std::string& body);

// OpenAI's encoding_format "base64": the vector's little-endian float32 bytes in base64.
std::string base64_floats(std::span<const float> v);

// One /v1/embeddings request in flight. Not thread-safe: one HTTP thread drives it. Its sequences
// are submitted a window at a time (so a batch never fills the engine's queue alone); destroying
// it cancels those still running.
class EmbeddingJob {
 public:
  EmbeddingJob(Engine& engine, int32_t pool, std::string alias, bool base64,
               std::vector<std::vector<TokenId>> prompts);
  ~EmbeddingJob();

  // Submits what the window allows and collects vectors for up to timeout_ms; true once every
  // input has its vector or one failed.
  bool run_for(int timeout_ms);
  // The reply body (after run_for returned true), or the error: 500 for an engine error, 503 when
  // the server is shutting down or the queue stays full.
  ApiResult<nlohmann::json> reply() const;
  // The client left: the engine drops the sequences at its next step.
  void cancel();

  bool failed() const { return error_.has_value(); }
  int64_t prompt_tokens() const { return n_prompt_tokens_; }
  double prompt_ms() const { return prompt_ms_; }

 private:
  // Submits while fewer than the window run; an error only when none of ours runs.
  void top_up();
  void on_finish(size_t idx, const SequenceEvents& ev);
  void fail(ApiError error);

  Engine& engine_;
  int32_t pool_;
  std::string alias_;
  bool base64_;
  std::vector<std::vector<TokenId>> prompts_;              // [n_inputs]
  std::vector<std::shared_ptr<SequenceHandle>> handles_;   // [n_inputs]; null until submitted
  std::vector<std::vector<float>> vectors_;                // [n_inputs]; empty until finished
  size_t next_ = 0;                                        // the next input to submit
  size_t n_running_ = 0;
  size_t n_done_ = 0;
  int64_t n_prompt_tokens_ = 0;
  double prompt_ms_ = 0.0;                                 // over every input
  std::optional<ApiError> error_;
};

class EmbeddingService {
 public:
  // `tokenizer` and `engine` (an embedding engine) must outlive the service; `n_embd` is the
  // model's embedding size (`dimensions` must equal it).
  EmbeddingService(const Tokenizer& tokenizer, Engine& engine, std::string alias, int32_t pool, int32_t n_embd);

  // Parses and checks the body, tokenizes the texts and submits the first window. Errors: 400
  // (field, value; exceed_context_size_error for an input longer than the context), 503.
  ApiResult<std::unique_ptr<EmbeddingJob>> start(const std::string& body);

 private:
  ApiResult<std::vector<TokenId>> input_tokens(const EmbeddingInput& in) const;

  const Tokenizer& tokenizer_;
  Engine& engine_;
  std::string alias_;
  int32_t pool_;
  int32_t n_embd_;
  size_t max_piece_bytes_ = 0;  // the vocabulary's longest token, in bytes
};

}  // namespace onebit
