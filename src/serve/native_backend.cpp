// NativeBackend: loading, and the HTTP side of the API service.
#include "serve/native_backend.h"


#include <algorithm>
#include <cstdio>
#include <functional>
#include <thread>
#include <type_traits>

#include "api/embeddings.h"
#include "api/service.h"
#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "engine/engine.h"
#include "engine/head_drafters.h"
#include "engine/model_drafters.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"
#include "template/builtin_templates.h"
#include "tokenizer/tokenizer.h"

namespace onebit {
namespace {

void set_json(http::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void set_api_error(http::Response& res, const ApiError& e) { set_json(res, http_status(e.kind), error_body(e)); }

template <typename T>
void set_result(http::Response& res, const ApiResult<T>& r) {
  if (r.ok()) return set_json(res, 200, *r.value);
  set_api_error(res, r.error);
}

// A reply that is not streamed: plain when it is done within wait_ms, else chunked with
// keep-alive blanks (JSON allows leading whitespace): a failed write tells us the client left.
// After the switch an engine error can only be sent as an error body under status 200.
template <typename Job>  // Completion or EmbeddingJob
void reply_whole(std::shared_ptr<Job> c, http::Response& res, std::shared_ptr<void> hold,
                 const std::type_identity_t<std::function<void(const Job&)>>& record, int wait_ms) {
  if (c->run_for(wait_ms)) {
    record(*c);
    return set_result(res, c->reply());
  }
  res.set_chunked_content_provider(
      "application/json",
      [c, record](size_t, http::DataSink& sink) {
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

NativeEngine::NativeEngine(NativeOptions options) : options_(std::move(options)) {
  for (size_t i = 0; i < options_.roles.size(); ++i) metrics_.push_back(std::make_unique<Metrics>());
}

NativeEngine::~NativeEngine() {
  // The engine's worker uses the model: stop it first.
  services_.clear();
  engine_.reset();
  model_.reset();
}

Status NativeEngine::load() {
  auto file = GgufFile::open(options_.model_path);
  if (!file.ok()) return make_error("model file: " + file.message());
  file_ = std::make_unique<GgufFile>(std::move(*file));
  auto tokenizer = Tokenizer::from_gguf(*file_);
  if (!tokenizer.ok()) return make_error("vocabulary: " + tokenizer.message());
  tokenizer_ = std::make_unique<Tokenizer>(std::move(*tokenizer));
  std::string template_source = options_.chat_template;
  if (template_source.empty() && file_->find("tokenizer.chat_template")) {
    auto t = file_->get_string("tokenizer.chat_template");
    if (!t.ok()) return make_error("tokenizer.chat_template: " + t.message());
    template_source = *t;
  }
  if (template_source.empty()) {  // as llama-server does: ChatML, said at startup
    template_source = *builtin_chat_template("chatml");
    std::fprintf(stderr, "1bit serve: warning: %s has no chat template (tokenizer.chat_template); chats use ChatML "
                 "(choose another with --chat-template NAME|FILE)\n", options_.model_path.c_str());
  }
  const int n_threads = options_.n_threads > 0 ? options_.n_threads : std::max(1u, std::thread::hardware_concurrency());
  auto backend = make_backend(options_.route, n_threads);
  if (!backend.ok()) return make_error("backend: " + backend.message());
  backend_ = std::move(*backend);
  auto model = Model::load(*file_, *backend_);
  if (!model.ok()) return make_error("model: " + model.message());
  model_ = std::move(*model);
  const int64_t train_ctx = model_->config().context_length > 0 ? model_->config().context_length : kDefaultMaxCtx;
  EngineOptions eo;
  eo.n_ctx = static_cast<int32_t>(options_.ctx_size > 0 ? options_.ctx_size : std::min(train_ctx, kDefaultMaxCtx));
  eo.pool_slots = options_.pool_slots;
  eo.batch_tokens = options_.batch_tokens;
  eo.cache_type = options_.cache_type == "f32" ? GgmlType::kF32 : GgmlType::kF16;
  eo.kv_tokens = options_.kv_memory > 0 ? options_.kv_memory / model_->kv_bytes_per_token(eo.cache_type) : 0;
  const Tokenizer* tok = tokenizer_.get();
  eo.is_end = [tok](TokenId t) { return tok->is_end_of_generation(t); };
  ONEBIT_ASSIGN_OR_RETURN(eo.drafter, make_drafter());
  eo.draft_max = options_.draft_max;
  eo.draft_when_it_pays = !options_.draft_fixed;
  if (options_.embedding) {
    ONEBIT_ASSIGN_OR_RETURN(eo.pooling, embedding_pooling());
    pooling_ = eo.pooling;
  }
  const int32_t n_ctx = eo.n_ctx;
  auto engine = Engine::start(*model_, std::move(eo));
  if (!engine.ok()) return make_error("engine (context " + std::to_string(n_ctx) + "): " + engine.message());
  engine_ = std::move(*engine);
  for (size_t pool = 0; pool < options_.roles.size(); ++pool) {
    auto service = ApiService::create(*tokenizer_, *engine_,
                                      {options_.alias, options_.model_path, template_source, static_cast<int32_t>(pool)});
    if (!service.ok()) return service.error();
    services_.push_back(std::move(*service));
    if (options_.embedding) {
      embedders_.push_back(std::make_unique<EmbeddingService>(*tokenizer_, *engine_, options_.alias, static_cast<int32_t>(pool),
                                                              model_->config().hidden_size));
    }
  }
  ready_.store(true);
  return ok_status();
}

Result<std::shared_ptr<Drafter>> NativeEngine::make_drafter() {
  const std::string& kind = options_.drafter;
  if (kind.empty()) return std::shared_ptr<Drafter>();
  if (kind == "ngram") return std::shared_ptr<Drafter>(std::make_shared<NgramDrafter>());
  const std::string option = "--" + kind;
  auto file = GgufFile::open(options_.drafter_path);
  if (!file.ok()) return make_error(option + " '" + options_.drafter_path + "': " + file.message());
  drafter_file_ = std::make_unique<GgufFile>(std::move(*file));
  Result<std::shared_ptr<Drafter>> d = make_error("unknown drafter " + kind);
  if (kind == "draft") {
    auto draft = Model::load(*drafter_file_, *backend_);
    if (!draft.ok()) return make_error(option + " '" + options_.drafter_path + "': " + draft.message());
    d = make_draft_model_drafter(*file_, *model_, *drafter_file_, std::move(*draft), options_.draft_p_min);
  } else if (kind == "mtp") {
    // --mtp without a head file names the model itself: its own MTP layers (make_mtp_drafter
    // refuses a model without them)
    d = make_mtp_drafter(options_.drafter_path == options_.model_path ? *file_ : *drafter_file_, *model_,
                         options_.draft_p_min);
  } else if (kind == "dflash") {
    d = make_dflash_drafter(*drafter_file_, *model_, options_.draft_p_min);
  }
  if (!d.ok()) return make_error(option + " '" + options_.drafter_path + "': " + d.message());
  return d;
}

std::string NativeEngine::describe() const {
  const EngineLayout& l = engine_->layout();
  const int64_t positions = int64_t(l.n_blocks) * l.block_size;
  const double mib = double(positions) * double(model_->kv_bytes_per_token(l.cache_type)) / (1024.0 * 1024.0);
  std::string slots;
  for (size_t i = 0; i < l.pool_slots.size(); ++i) {
    slots += (i ? ", " : "") + options_.roles[i] + " " + std::to_string(l.pool_slots[i]);
  }
  char line[256];
  std::snprintf(line, sizeof line, "K/V pool %d blocks of %d positions (%lld positions, %s, %.0f MiB); context %d; "
                "step budget %d tokens; slots: %s", l.n_blocks, l.block_size, static_cast<long long>(positions),
                l.cache_type == GgmlType::kF32 ? "f32" : "f16", mib, l.n_ctx, l.batch_tokens, slots.c_str());
  std::string out = line;
  if (const int64_t state = model_->state_bytes_per_sequence(); state > 0) {
    // a row per slot, and with a drafter a checkpoint row per slot and draft position (rollback)
    const int32_t rows = l.total_slots() * (1 + (options_.drafter.empty() ? 0 : options_.draft_max));
    char more[160];
    std::snprintf(more, sizeof more, "; recurrent state %d rows of %.2f MiB (no prompt prefix caching)", rows,
                  double(state) / (1024.0 * 1024.0));
    out += more;
  }
  if (options_.embedding) return out + "; embeddings only, pooling " + std::string(pooling_name(pooling_));
  return out;
}

NativeBackend::NativeBackend(std::shared_ptr<NativeEngine> engine, size_t pool)
    : engine_(std::move(engine)), pool_(pool), role_(engine_->options().roles.at(pool)) {}

void NativeBackend::post(const http::Request& req, http::Response& res, std::shared_ptr<void> hold,
                         const std::string& alias) {
  const bool chat = req.path.find("chat/completions") != std::string::npos;
  const bool completion = req.path == "/v1/completions" || req.path == "/completions" || req.path == "/completion";
  const bool embeddings = req.path == "/v1/embeddings" || req.path == "/embeddings";
  const bool embedding_server = engine_->options().embedding;
  if (embeddings && !embedding_server) {
    return set_api_error(res, {ApiErrorKind::kNotSupported,
                               "this server does not serve embeddings; start it with --embedding (an embedding model)"});
  }
  if ((chat || completion) && embedding_server) {
    return set_api_error(res, {ApiErrorKind::kNotSupported,
                               "this server was started with --embedding: it serves /v1/embeddings only; start it without --embedding for " +
                                   req.path});
  }
  if (embeddings) return post_embeddings(req, res, std::move(hold));
  if (!chat && !completion) {
    return set_api_error(res, {ApiErrorKind::kNotSupported, req.path + " is not supported by the native engine yet"});
  }
  Metrics& metrics = engine_->metrics(pool_);
  metrics.add_request();
  auto started = engine_->service(pool_).start_completion(req.body, chat ? Endpoint::kChat : Endpoint::kCompletion);
  if (!started.ok()) {
    metrics.add_error();
    return set_api_error(res, started.error);
  }
  std::shared_ptr<Completion> c = std::move(*started.value);
  auto record = [m = &metrics](const Completion& done) {
    const auto& s = done.stats();
    m->add_generation(s.n_prompt_tokens, s.n_cached_tokens, s.n_completion_tokens, s.prompt_ms, s.decode_ms);
    m->add_drafts(s.n_draft_tokens, s.n_draft_accepted, s.n_draft_steps);
    if (done.failed()) m->add_error();
  };
  if (!c->streaming()) return reply_whole(c, res, std::move(hold), record, engine_->options().whole_reply_wait_ms);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [c, record](size_t, http::DataSink& sink) {
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

void NativeBackend::post_embeddings(const http::Request& req, http::Response& res, std::shared_ptr<void> hold) {
  Metrics& metrics = engine_->metrics(pool_);
  metrics.add_request();
  auto started = engine_->embedder(pool_).start(req.body);
  if (!started.ok()) {
    metrics.add_error();
    return set_api_error(res, started.error);
  }
  std::shared_ptr<EmbeddingJob> job = std::move(*started.value);
  std::function<void(const EmbeddingJob&)> record = [m = &metrics](const EmbeddingJob& done) {
    m->add_generation(done.prompt_tokens(), 0, 0, done.prompt_ms(), 0.0);
    if (done.failed()) m->add_error();
  };
  reply_whole(job, res, std::move(hold), record, engine_->options().whole_reply_wait_ms);
}

Result<Pooling> NativeEngine::embedding_pooling() const {
  if (options_.pooling == "last") return Pooling::kLast;
  if (options_.pooling == "mean") return Pooling::kMean;
  if (options_.pooling == "cls") return Pooling::kCls;
  const ModelConfig& c = model_->config();
  if (!c.pooling) return Pooling::kLast;  // a decoder model: its last token has seen the whole input
  if (*c.pooling == Pooling::kLast || *c.pooling == Pooling::kMean || *c.pooling == Pooling::kCls) return *c.pooling;
  return make_error("--embedding: the model's " + c.arch_name + ".pooling_type is " + std::string(pooling_name(*c.pooling)) +
                    ", which /v1/embeddings cannot serve (one vector per input); choose one with --pooling last|mean|cls");
}

void NativeEngine::abort_all(const std::string& message) {
  if (ready_.load()) engine_->abort_all(message);
}

void NativeBackend::abort_all(const std::string& message) { engine_->abort_all(message); }

void NativeBackend::relay(const http::Request& req, http::Response& res) {
  const std::string& p = req.path;
  ApiService& service = engine_->service(pool_);
  if (p == "/tokenize") return set_result(res, service.tokenize(req.body));
  if (p == "/detokenize") return set_result(res, service.detokenize(req.body));
  if (p == "/apply-template") return set_result(res, service.apply_template(req.body));
  if (p == "/props") return set_json(res, 200, service.props());
  if (p == "/slots") return set_json(res, 200, service.slots());
  if (p == "/metrics") {
    const EngineState s = engine_->engine().state();
    EngineGauges g;
    g.queued = static_cast<int64_t>(s.n_queued);
    g.running = static_cast<int64_t>(s.n_running);
    g.blocks_used = s.blocks_used;
    g.blocks_free = s.blocks_free;
    g.blocks_cached = s.blocks_cached;
    g.prefix_hit_tokens = s.prefix_hit_tokens;
    g.preemptions = s.preemptions;
    g.steps = s.steps;
    g.step_tokens = s.step_tokens;
    g.last_step_tokens = s.last_step_tokens;
    g.draft_verdicts_paid = s.draft_verdicts_paid;
    g.draft_verdicts_failed = s.draft_verdicts_failed;
    g.draft_retired = s.draft_retired;
    res.status = 200;
    res.set_content(engine_->metrics(pool_).prometheus_text(g), "text/plain; version=0.0.4");
    return;
  }
  set_api_error(res, {ApiErrorKind::kNotFound, "no route " + req.method + " " + p});
}

}  // namespace onebit
