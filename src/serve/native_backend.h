// The native engine as a FrontBackend: loads the GGUF (vocabulary, chat template, weights) on the
// CPU backend, starts the Engine and serves the API (api/service.h) over cpp-httplib, streams as
// Server-Sent Events. A client that disconnects mid-stream cancels its sequence.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "base/status.h"
#include "serve/backend.h"
#include "serve/metrics.h"

namespace onebit {

class GgufFile;
class Tokenizer;
class Backend;
class Model;
class Engine;
class ApiService;

struct NativeOptions {
  std::string model_path;
  std::string alias;
  std::string role = "primary";  // "primary" or "overflow" (--adaptive): for logs and /metrics
  std::string route = "cpu";
  int64_t ctx_size = 0;    // 0: the model's training context, capped at kDefaultMaxCtx
  int32_t n_slots = 1;
  int n_threads = 0;       // 0: the machine's cores
  // A reply that is not streamed and not done by then is sent chunked, with a blank every
  // kKeepAliveMs, so that a client that left is noticed ($ONEBIT_WHOLE_REPLY_WAIT_MS).
  int whole_reply_wait_ms = 2000;
};

// Period of the keep-alive blanks of a long reply that is not streamed.
inline constexpr int kKeepAliveMs = 200;

// The context used when --ctx-size is 0 and the model's own is larger (memory: one slot's K/V).
inline constexpr int64_t kDefaultMaxCtx = 8192;

class NativeBackend : public FrontBackend {
 public:
  explicit NativeBackend(NativeOptions options);
  ~NativeBackend() override;

  // Loads everything; blocking. Errors start with the stage ("vocabulary: ", "model: ").
  Status load();

  std::string label() const override { return options_.role + "/" + options_.route; }
  std::string route() const override { return options_.route; }
  bool ready() const override { return ready_.load(); }
  void post(const httplib::Request& req, httplib::Response& res, std::shared_ptr<void> hold,
            const std::string& alias) override;
  void relay(const httplib::Request& req, httplib::Response& res) override;

 private:
  NativeOptions options_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ApiService> service_;
  Metrics metrics_;
  std::atomic<bool> ready_{false};
};

}  // namespace onebit
