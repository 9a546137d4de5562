// NativeBackend: loading, and the HTTP side of the API service.
#include "serve/native_backend.h"

#include <httplib.h>

#include <algorithm>
#include <functional>
#include <thread>

#include "api/service.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace onebit {
namespace {

void set_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void set_api_error(httplib::Response& res, const ApiError& e) { set_json(res, http_status(e.kind), error_body(e)); }

template <typename T>
void set_result(httplib::Response& res, const ApiResult<T>& r) {
  if (r.ok()) return set_json(res, 200, *r.value);
  set_api_error(res, r.error);
}

// A reply that is not streamed: plain when it is done within wait_ms, else chunked with
// keep-alive blanks (JSON allows leading whitespace): a failed write tells us the client left.
// After the switch an engine error can only be sent as an error body under status 200.
void reply_whole(std::shared_ptr<Completion> c, httplib::Response& res, std::shared_ptr<void> hold,
                 const std::function<void(const Completion&)>& record, int wait_ms) {
  if (c->run_for(wait_ms)) {
    record(*c);
    return set_result(res, c->reply());
  }
  res.set_chunked_content_provider(
      "application/json",
      [c, record](size_t, httplib::DataSink& sink) {
        try {
          if (!c->run_for(kKeepAliveMs)) {
            if (!sink.write(" ", 1)) {
              c->cancel();  // the client left: free the engine now
              return false;
            }
            return true;
          }
          record(*c);
          auto r = c->reply();
          const nlohmann::json body = r.ok() ? *r.value : error_body(r.error);
          const std::string bytes = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
          if (!sink.write(bytes.data(), bytes.size())) return false;
          sink.done();
          return true;
        } catch (...) {
          c->cancel();
          return false;
        }
      },
      [c, hold](bool) { c->cancel(); });
}

}  // namespace

NativeBackend::NativeBackend(NativeOptions options) : options_(std::move(options)) {}

NativeBackend::~NativeBackend() {
  // The engine's worker uses the model: stop it first.
  service_.reset();
  engine_.reset();
  model_.reset();
}

Status NativeBackend::load() {
  auto file = GgufFile::open(options_.model_path);
  if (!file.ok()) return make_error("model file: " + file.message());
  file_ = std::make_unique<GgufFile>(std::move(*file));
  auto tokenizer = Tokenizer::from_gguf(*file_);
  if (!tokenizer.ok()) return make_error("vocabulary: " + tokenizer.message());
  tokenizer_ = std::make_unique<Tokenizer>(std::move(*tokenizer));
  std::string template_source;
  if (file_->find("tokenizer.chat_template")) {
    auto t = file_->get_string("tokenizer.chat_template");
    if (!t.ok()) return make_error("tokenizer.chat_template: " + t.message());
    template_source = *t;
  }
  const int n_threads = options_.n_threads > 0 ? options_.n_threads : std::max(1u, std::thread::hardware_concurrency());
  backend_ = make_cpu_backend(n_threads);
  auto model = Model::load(*file_, *backend_);
  if (!model.ok()) return make_error("model: " + model.message());
  model_ = std::move(*model);
  const int64_t train_ctx = model_->config().context_length > 0 ? model_->config().context_length : kDefaultMaxCtx;
  EngineOptions eo;
  eo.n_ctx = static_cast<int32_t>(options_.ctx_size > 0 ? options_.ctx_size : std::min(train_ctx, kDefaultMaxCtx));
  eo.n_slots = options_.n_slots;
  const Tokenizer* tok = tokenizer_.get();
  eo.is_end = [tok](TokenId t) { return tok->is_end_of_generation(t); };
  auto engine = Engine::start(*model_, std::move(eo));
  if (!engine.ok()) return make_error("engine (context " + std::to_string(eo.n_ctx) + "): " + engine.message());
  engine_ = std::move(*engine);
  auto service = ApiService::create(*tokenizer_, *engine_, {options_.alias, options_.model_path, template_source});
  if (!service.ok()) return service.error();
  service_ = std::move(*service);
  ready_.store(true);
  return ok_status();
}

void NativeBackend::post(const httplib::Request& req, httplib::Response& res, std::shared_ptr<void> hold,
                         const std::string& alias) {
  const bool chat = req.path.find("chat/completions") != std::string::npos;
  const bool completion = req.path == "/v1/completions" || req.path == "/completions" || req.path == "/completion";
  if (!chat && !completion) {
    return set_api_error(res, {ApiErrorKind::kNotSupported, req.path + " is not supported by the native engine yet"});
  }
  metrics_.add_request();
  auto started = service_->start_completion(req.body, chat ? Endpoint::kChat : Endpoint::kCompletion);
  if (!started.ok()) {
    metrics_.add_error();
    return set_api_error(res, started.error);
  }
  std::shared_ptr<Completion> c = std::move(*started.value);
  auto record = [this](const Completion& done) {
    const auto& s = done.stats();
    metrics_.add_generation(s.n_prompt_tokens, s.n_cached_tokens, s.n_completion_tokens, s.prompt_ms, s.decode_ms);
    if (done.failed()) metrics_.add_error();
  };
  if (!c->streaming()) return reply_whole(c, res, std::move(hold), record, options_.whole_reply_wait_ms);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [c, record](size_t, httplib::DataSink& sink) {
        try {
          bool done = false;
          const std::string bytes = c->next_sse(/*timeout_ms=*/100, done);
          if (!bytes.empty() && !sink.write(bytes.data(), bytes.size())) {
            c->cancel();  // the client left: free the engine now
            return false;
          }
          if (done) {
            record(*c);
            sink.done();
          }
          return true;
        } catch (...) {
          c->cancel();
          return false;
        }
      },
      [c, hold](bool) { c->cancel(); });
}

void NativeBackend::relay(const httplib::Request& req, httplib::Response& res) {
  const std::string& p = req.path;
  if (p == "/tokenize") return set_result(res, service_->tokenize(req.body));
  if (p == "/detokenize") return set_result(res, service_->detokenize(req.body));
  if (p == "/apply-template") return set_result(res, service_->apply_template(req.body));
  if (p == "/props") return set_json(res, 200, service_->props());
  if (p == "/slots") return set_json(res, 200, service_->slots());
  if (p == "/metrics") {
    EngineState s = engine_->state();
    const auto running = std::count_if(s.slot_task.begin(), s.slot_task.end(), [](int64_t t) { return t >= 0; });
    res.status = 200;
    res.set_content(metrics_.prometheus_text(static_cast<int64_t>(s.n_queued), running), "text/plain; version=0.0.4");
    return;
  }
  set_api_error(res, {ApiErrorKind::kNotFound, "no route " + req.method + " " + p});
}

}  // namespace onebit
