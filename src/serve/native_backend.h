// The native engine behind the front: NativeEngine loads the GGUF (vocabulary, chat template,
// weights) once on the CPU backend and starts one Engine with a slot pool per planned backend
// (--adaptive: the primary's and the overflow's, over one model and one thread pool). Each
// NativeBackend is the FrontBackend of one pool: it serves the API (api/service.h) over
// the HTTP front and streams Server-Sent Events. A client that disconnects cancels its sequence.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "serve/backend.h"
#include "serve/metrics.h"

namespace onebit {

class GgufFile;
class Tokenizer;
class Backend;
class Model;
class Engine;
class ApiService;
class Drafter;
class EmbeddingService;

struct NativeOptions {
  std::string model_path;
  std::string alias;
  std::string route = "cpu";
  std::vector<std::string> roles = {"primary"};  // one slot pool each ("primary", "overflow")
  std::vector<int32_t> pool_slots = {1};         // sequences running together, per pool
  int64_t ctx_size = 0;       // 0: the model's training context, capped at kDefaultMaxCtx
  int n_threads = 0;          // 0: the machine's cores
  int32_t batch_tokens = 0;   // tokens per engine step; 0: the engine's default
  int64_t kv_memory = 0;      // K/V pool bytes; 0: ctx_size x slots
  std::string cache_type = "f16";
  std::string drafter;        // speculative decoding: "" none, "ngram", "mtp", "dflash", "draft"
  std::string drafter_path;   // the MTP head, DFlash drafter or draft model file
  int32_t draft_max = 3;      // --mtp-max
  float draft_p_min = 0.0f;   // --mtp-p-min
  bool draft_fixed = false;   // --mtp-fixed: draft_max every step, no cost model
  // The chat template's Jinja text when given (--chat-template / --chat-template-file); empty: the
  // model's own, or ChatML with a warning when it has none.
  std::string chat_template;
  bool embedding = false;     // serve /v1/embeddings only (an embedding engine)
  std::string pooling;        // last | mean | cls; empty: the model's <arch>.pooling_type, else last
  // A reply that is not streamed and not done by then is sent chunked, with a blank every
  // kKeepAliveMs, so that a client that left is noticed ($ONEBIT_WHOLE_REPLY_WAIT_MS).
  int whole_reply_wait_ms = 2000;
};

// Period of the keep-alive blanks of a long reply that is not streamed.
inline constexpr int kKeepAliveMs = 200;

// The context used when --ctx-size is 0 and the model's own is larger (memory: one slot's K/V).
inline constexpr int64_t kDefaultMaxCtx = 8192;

// The loaded model and its engine, shared by the pools' backends.
class NativeEngine {
 public:
  explicit NativeEngine(NativeOptions options);
  ~NativeEngine();

  // Loads everything; blocking. Errors start with the stage ("vocabulary: ", "model: ").
  Status load();
  bool ready() const { return ready_.load(); }
  // One line on the K/V pool, step budget and slots (for the startup log).
  std::string describe() const;

  const NativeOptions& options() const { return options_; }
  Engine& engine() { return *engine_; }
  ApiService& service(size_t pool) { return *services_.at(pool); }
  // With --embedding: the /v1/embeddings service of a pool.
  EmbeddingService& embedder(size_t pool) { return *embedders_.at(pool); }
  // Ends every sequence (Engine::abort_all); before the load is done, nothing is running.
  void abort_all(const std::string& message);
  Metrics& metrics(size_t pool) { return *metrics_.at(pool); }

 private:
  NativeOptions options_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<GgufFile> drafter_file_;  // --mtp / --dflash / --draft file (outlives the engine)
  std::unique_ptr<Engine> engine_;
  std::vector<std::unique_ptr<ApiService>> services_;  // [pools]
  std::vector<std::unique_ptr<EmbeddingService>> embedders_;  // [pools] with --embedding, else empty
  std::vector<std::unique_ptr<Metrics>> metrics_;       // [pools]
  std::atomic<bool> ready_{false};
  Pooling pooling_ = Pooling::kNone;  // with --embedding: the pooling served

  // The drafter of options_.drafter (null for none); errors name the option and the mismatch.
  Result<std::shared_ptr<Drafter>> make_drafter();
  // --pooling, else the model's <arch>.pooling_type, else kLast; an error for none or rank.
  Result<Pooling> embedding_pooling() const;
};

// The FrontBackend of one slot pool of a NativeEngine.
class NativeBackend : public FrontBackend {
 public:
  NativeBackend(std::shared_ptr<NativeEngine> engine, size_t pool);

  std::string label() const override { return role_ + "/" + engine_->options().route; }
  std::string route() const override { return engine_->options().route; }
  bool ready() const override { return engine_->ready(); }
  void post(const http::Request& req, http::Response& res, std::shared_ptr<void> hold,
            const std::string& alias) override;
  void relay(const http::Request& req, http::Response& res) override;
  void abort_all(const std::string& message) override;

 private:
  // /v1/embeddings on an embedding server (a whole reply, never streamed).
  void post_embeddings(const http::Request& req, http::Response& res, std::shared_ptr<void> hold);

  std::shared_ptr<NativeEngine> engine_;
  size_t pool_;
  std::string role_;
};

}  // namespace onebit
