// ChildBackend: forwarding to a llama-server over loopback; SSE relay with `model` rewriting.
#include "serve/proxy.h"

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "api/openai_error.h"
#include "serve/http_util.h"

namespace onebit {
namespace {

constexpr time_t kReadTimeoutSeconds = 3600;  // a long prompt may take minutes before its first token

std::unique_ptr<httplib::Client> make_client(int port) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", port);
  client->set_connection_timeout(5, 0);
  client->set_read_timeout(kReadTimeoutSeconds, 0);
  client->set_write_timeout(60, 0);
  return client;
}


std::string upstream_target(const http::Request& req) { return req.target.empty() ? req.path : req.target; }

bool wants_stream(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("stream") && j["stream"].is_boolean() && j["stream"].get<bool>();
}

// State shared by the server thread relaying a stream and the thread reading it from the child.
struct StreamState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> chunks;
  bool headers_seen = false;
  int status = 0;
  std::string content_type;
  bool finished = false;
  bool failed = false;
  std::string error;
  std::atomic<bool> cancelled{false};
  std::string aborted;  // cut (shutdown, hung child): the message the stream ends with
  ApiErrorKind aborted_kind = ApiErrorKind::kUnavailable;
  std::unique_ptr<httplib::Client> client;
  std::thread reader;

  void stop_and_join() {
    cancelled = true;
    if (client) client->stop();
    if (reader.joinable()) reader.join();
  }
};

void read_upstream(std::shared_ptr<StreamState> st, httplib::Request up) {
  up.response_handler = [st](const httplib::Response& r) {
    std::lock_guard<std::mutex> lock(st->mu);
    st->headers_seen = true;
    st->status = r.status;
    st->content_type = r.get_header_value("Content-Type");
    st->cv.notify_all();
    return true;
  };
  up.content_receiver = [st](const char* data, size_t len, uint64_t, uint64_t) {
    std::lock_guard<std::mutex> lock(st->mu);
    st->chunks.emplace_back(data, len);
    st->cv.notify_all();
    return !st->cancelled.load();
  };
  auto result = st->client->send(up);
  std::lock_guard<std::mutex> lock(st->mu);
  st->finished = true;
  if (!result && !st->cancelled) {
    st->failed = true;
    st->error = httplib::to_string(result.error());
  }
  st->cv.notify_all();
}

}  // namespace

// A whole reply waiting for the child, and why it was cut (empty: it was not).
struct WholeCall {
  httplib::Client* client;
  std::string cut;
  ApiErrorKind kind = ApiErrorKind::kUnavailable;
};

// Replies in progress, so that a shutdown (abort_all) or a hung child (cut_in_flight) can end them.
struct ChildBackend::Aborter {
  std::mutex mu;
  std::string shutdown;  // non-empty once shut down: later requests are refused with it
  std::vector<std::weak_ptr<StreamState>> streams;
  std::vector<WholeCall*> calls;

  // Registers a whole reply; when shut down, returns the shutdown message instead.
  std::optional<std::string> add(WholeCall* c) {
    std::lock_guard<std::mutex> lock(mu);
    if (!shutdown.empty()) return shutdown;
    calls.push_back(c);
    return std::nullopt;
  }
  void remove(WholeCall* c) {
    std::lock_guard<std::mutex> lock(mu);
    std::erase(calls, c);
  }
  // Ends every reply in progress with `message` (under `mu`).
  void cut_locked(const std::string& message, ApiErrorKind kind) {
    for (WholeCall* c : calls) {
      c->cut = message;
      c->kind = kind;
      c->client->stop();
    }
    for (auto& weak : streams) {
      if (auto st = weak.lock()) {
        {
          std::lock_guard<std::mutex> sl(st->mu);
          st->aborted = message;
          st->aborted_kind = kind;
        }
        st->cv.notify_all();
        st->client->stop();
      }
    }
    streams.clear();
  }
};

ChildBackend::ChildBackend(std::string label, std::string route, int port)
    : label_(std::move(label)), route_(std::move(route)), port_(port), aborter_(std::make_shared<Aborter>()) {}

void ChildBackend::abort_all(const std::string& message) {
  std::lock_guard<std::mutex> lock(aborter_->mu);
  aborter_->shutdown = message.empty() ? "the server is shutting down" : message;
  aborter_->cut_locked(aborter_->shutdown, ApiErrorKind::kUnavailable);
}

void ChildBackend::cut_in_flight(const std::string& message, ApiErrorKind kind) {
  std::lock_guard<std::mutex> lock(aborter_->mu);
  aborter_->cut_locked(message, kind);
}

std::string SseModelRewriter::feed(const std::string& bytes) {
  pending_ += bytes;
  std::string out;
  size_t pos;
  while ((pos = pending_.find("\n\n")) != std::string::npos) {
    out += rewrite_event(pending_.substr(0, pos)) + "\n\n";
    pending_.erase(0, pos + 2);
  }
  return out;
}

std::string SseModelRewriter::finish() {
  std::string rest = pending_.empty() ? "" : rewrite_event(pending_);
  pending_.clear();
  return rest;
}

std::string SseModelRewriter::rewrite_event(const std::string& event) const {
  std::string out;
  size_t start = 0;
  while (start <= event.size()) {
    size_t end = event.find('\n', start);
    if (end == std::string::npos) end = event.size();
    std::string line = event.substr(start, end - start);
    if (line.rfind("data: ", 0) == 0) line = "data: " + rewrite_model_in_json(line.substr(6), alias_);
    out += line;
    if (end < event.size()) out += "\n";
    start = end + 1;
  }
  return out;
}

std::string rewrite_model_in_json(const std::string& body, const std::string& alias) {
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("model")) return body;
  j["model"] = alias;
  return j.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

bool child_health_ok(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1, 0);
  client.set_read_timeout(2, 0);
  auto r = client.Get("/health");
  return r && r->status == 200;
}

void ChildBackend::post(const http::Request& req, http::Response& res, std::shared_ptr<void> hold,
                        const std::string& alias) {
  if (wants_stream(req.body)) {
    post_streamed(req, res, std::move(hold), alias);
    return;
  }
  auto client = make_client(port());
  WholeCall call{client.get()};
  if (auto refused = aborter_->add(&call)) return set_error(res, ApiErrorKind::kUnavailable, *refused);
  auto r = client->Post(upstream_target(req), req.body, req.get_header_value("Content-Type").empty()
                                                          ? "application/json"
                                                          : req.get_header_value("Content-Type"));
  aborter_->remove(&call);
  if (!call.cut.empty()) return set_error(res, call.kind, call.cut);
  if (!r) {
    set_error(res, ApiErrorKind::kBadGateway, "backend " + label_ + " failed: " + httplib::to_string(r.error()));
    return;
  }
  res.status = r->status;
  std::string ct = r->get_header_value("Content-Type");
  res.set_content(rewrite_model_in_json(r->body, alias), ct.empty() ? "application/json" : ct);
}

void ChildBackend::post_streamed(const http::Request& req, http::Response& res, std::shared_ptr<void> hold,
                                 const std::string& alias) {
  auto st = std::make_shared<StreamState>();
  st->client = make_client(port());
  {
    std::lock_guard<std::mutex> lock(aborter_->mu);
    if (!aborter_->shutdown.empty()) return set_error(res, ApiErrorKind::kUnavailable, aborter_->shutdown);
    std::erase_if(aborter_->streams, [](const auto& w) { return w.expired(); });
    aborter_->streams.push_back(st);
  }
  httplib::Request up;
  up.method = "POST";
  up.path = upstream_target(req);
  up.body = req.body;
  up.set_header("Content-Type", "application/json");
  up.set_header("Accept", "text/event-stream");
  st->reader = std::thread(read_upstream, st, std::move(up));

  std::unique_lock<std::mutex> lock(st->mu);
  st->cv.wait(lock, [&] { return st->headers_seen || st->finished || !st->aborted.empty(); });
  if (!st->aborted.empty() && !st->headers_seen) {  // cut before the child answered
    const std::string message = st->aborted;
    const ApiErrorKind kind = st->aborted_kind;
    lock.unlock();
    st->stop_and_join();
    return set_error(res, kind, message);
  }
  if (!st->headers_seen || st->status != 200) {
    // Failed before answering, or answered with an error: relay that whole, not as a stream.
    st->cv.wait(lock, [&] { return st->finished; });
    bool failed = !st->headers_seen;
    std::string body, error = st->error;
    for (auto& c : st->chunks) body += c;
    int status = st->status;
    std::string ct = st->content_type;
    lock.unlock();
    st->stop_and_join();
    if (failed) {
      set_error(res, ApiErrorKind::kBadGateway, "backend " + label_ + " failed: " + error);
    } else {
      res.status = status;
      res.set_content(rewrite_model_in_json(body, alias), ct.empty() ? "application/json" : ct);
    }
    return;
  }
  lock.unlock();
  auto rewriter = std::make_shared<SseModelRewriter>(alias);
  std::string label = label_;
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, rewriter, label](size_t, http::DataSink& sink) {
        std::unique_lock<std::mutex> lk(st->mu);
        st->cv.wait(lk, [&] { return !st->chunks.empty() || st->finished || !st->aborted.empty(); });
        std::string bytes;
        while (!st->chunks.empty()) {
          bytes += st->chunks.front();
          st->chunks.pop_front();
        }
        const bool finished = st->finished, failed = st->failed;
        const std::string error = st->error, aborted = st->aborted;
        const ApiErrorKind aborted_kind = st->aborted_kind;
        lk.unlock();
        std::string out = rewriter->feed(bytes);
        if (!aborted.empty()) {  // cut: an error event and the end
          st->cancelled = true;
          out += "data: " + error_body({aborted_kind, aborted}).dump() + "\n\ndata: [DONE]\n\n";
          if (!sink.write(out.data(), out.size())) return false;
          sink.done();
          return true;
        }
        if (finished) {
          out += rewriter->finish();
          if (failed) {
            out += "data: " + error_body({ApiErrorKind::kBadGateway, "backend " + label + " failed mid-stream: " + error}).dump() +
                   "\n\ndata: [DONE]\n\n";
          }
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          st->cancelled = true;
          return false;
        }
        if (finished) sink.done();
        return true;
      },
      [st, hold](bool) { st->stop_and_join(); });
}

void ChildBackend::relay(const http::Request& req, http::Response& res) {
  auto client = make_client(port());
  httplib::Request up;
  up.method = req.method;
  up.path = upstream_target(req);
  up.body = req.body;
  if (req.has_header("Content-Type")) up.set_header("Content-Type", req.get_header_value("Content-Type"));
  auto r = client->send(up);
  if (!r) {
    set_error(res, ApiErrorKind::kBadGateway, "backend " + label_ + " failed: " + httplib::to_string(r.error()));
    return;
  }
  res.status = r->status;
  std::string ct = r->get_header_value("Content-Type");
  res.set_content(r->body, ct.empty() ? "text/plain" : ct);
}

}  // namespace onebit
