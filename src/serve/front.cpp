// Implementation of the HTTP front: routes on the event-loop server (http/server.h).
#include "serve/front.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <sstream>

#include "api/openai_error.h"
#include "serve/http_util.h"

namespace onebit {
namespace {

bool is_loopback_host(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host == "[::1]";
}

// The Host header without its port: "localhost:8000" -> "localhost", "[::1]:80" -> "[::1]".
std::string host_name(const std::string& header) {
  if (!header.empty() && header[0] == '[') {
    auto close = header.find(']');
    return close == std::string::npos ? header : header.substr(0, close + 1);
  }
  return header.substr(0, header.find(':'));
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Errors the HTTP server answers by itself (framing, limits, timeouts), in the OpenAI shape.
std::pair<std::string, std::string> render_http_error(int status, const std::string& message) {
  const char* type = status == 503 ? "unavailable_error" : status >= 500 ? "server_error" : "invalid_request_error";
  nlohmann::json body = {{"error", {{"code", status}, {"message", message}, {"type", type}}}};
  return {"application/json", body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
}

}  // namespace

Front::Front(FrontOptions options, std::vector<std::unique_ptr<FrontBackend>> backends)
    : options_(std::move(options)),
      backends_(std::move(backends)),
      router_(backends_.size(), options_.primary_limit) {
  http::ServerOptions http = options_.http;
  http.limits.max_body_bytes = options_.max_body_bytes;
  server_ = std::make_unique<http::Server>(
      http, [this](const http::Request& req, http::Response& res) { handle(req, res); }, render_http_error);
  install_routes();
}

Front::~Front() = default;

Status Front::bind() {
  if (!is_loopback_host(options_.host) && options_.api_key.empty()) {
    std::fprintf(stderr, "1bit serve: warning: listening on %s without --api-key; anyone who can reach it can use the model\n",
                 options_.host.c_str());
  }
  return server_->bind(options_.host, options_.port);
}
void Front::serve() { server_->run(); }
void Front::stop() { server_->stop(); }
void Front::set_ready(bool ready) { ready_.store(ready); }
bool Front::ready() const { return ready_.load(); }

// Replies cut by a shutdown get this long to end and be sent after their backends ended them (the
// engine ends its sequences at its next step; a sanitized build's steps take seconds).
constexpr int kAbortGraceMs = 10000;

void Front::shutdown(int timeout_ms) {
  shutting_down_.store(true);
  if (!server_->drain(timeout_ms)) {
    for (auto& b : backends_) b->abort_all("the server is shutting down; retry the request");
    server_->drain(kAbortGraceMs);
  }
  server_->stop();
}

void shut_down_on_signal(Front& front, const sigset_t& signals, int timeout_ms) {
  std::fprintf(stderr, "1bit serve: stopping; replies in progress have %d s (a second signal exits now)\n",
               timeout_ms / 1000);
  std::atomic<bool> done{false};
  std::thread second([&] {
    while (!done.load()) {
      timespec ts{0, 100 * 1000000};
      if (sigtimedwait(&signals, nullptr, &ts) > 0) {
        std::fprintf(stderr, "1bit serve: second stop signal; exiting now\n");
        std::_Exit(1);
      }
    }
  });
  front.shutdown(timeout_ms);
  done.store(true);
  second.join();
}

std::string Front::counts_summary() const {
  auto counts = router_.counts();
  std::string out;
  for (size_t i = 0; i < backends_.size(); ++i) {
    if (i > 0) out += ", ";
    out += backends_[i]->label() + " " + std::to_string(counts[i].served);
  }
  return out;
}

std::string Front::metrics_text() const {
  auto counts = router_.counts();
  std::ostringstream out;
  out << "# HELP onebit_backend_requests_total Requests routed to each backend.\n"
      << "# TYPE onebit_backend_requests_total counter\n";
  for (size_t i = 0; i < backends_.size(); ++i) {
    out << "onebit_backend_requests_total{backend=\"" << backends_[i]->label() << "\"} " << counts[i].served << "\n";
  }
  out << "# HELP onebit_backend_requests_in_flight Requests holding a place in each backend.\n"
      << "# TYPE onebit_backend_requests_in_flight gauge\n";
  for (size_t i = 0; i < backends_.size(); ++i) {
    out << "onebit_backend_requests_in_flight{backend=\"" << backends_[i]->label() << "\"} " << counts[i].in_flight << "\n";
  }
  return out.str();
}

std::string Front::allowed_origin(const std::string& origin) const {
  if (options_.cors_origins.empty()) return "*";
  for (const std::string& o : options_.cors_origins) {
    if (o == origin) return origin;
  }
  return "";
}

void Front::handle(const http::Request& req, http::Response& res) {
  route(req, res);
  // CORS: a page of an allowed origin may read every reply, errors included.
  const std::string& origin = req.get_header_value("Origin");
  if (origin.empty()) return;
  if (const std::string allow = allowed_origin(origin); !allow.empty()) res.set_header("Access-Control-Allow-Origin", allow);
  if (!options_.cors_origins.empty()) res.set_header("Vary", "Origin");
}

void Front::route(const http::Request& req, http::Response& res) {
  // A loopback bind answers only loopback names: a web page cannot rebind DNS onto us.
  if (is_loopback_host(options_.host) && !is_loopback_host(host_name(req.get_header_value("Host")))) {
    return set_error(res, ApiErrorKind::kPermission,
                     "Host '" + req.get_header_value("Host") + "' is not a loopback name; this server listens on " + options_.host);
  }
  if (req.method == "OPTIONS") return preflight(req, res);
  const bool open_route = req.path == "/health" || req.path == "/v1/health";
  if (!options_.api_key.empty() && !open_route &&
      !constant_time_equal(req.get_header_value("Authorization"), "Bearer " + options_.api_key)) {
    return set_error(res, ApiErrorKind::kAuthentication, "missing or wrong API key: send 'Authorization: Bearer KEY'");
  }
  const std::string& method = req.method == "HEAD" ? std::string("GET") : req.method;
  std::string allowed;
  for (size_t i = 0; i < routes_.size(); ++i) {
    if (route_keys_[i].second != req.path) continue;
    if (route_keys_[i].first == method) return routes_[i](req, res);
    allowed += (allowed.empty() ? "" : ", ") + route_keys_[i].first;
  }
  if (allowed.empty()) return set_error(res, ApiErrorKind::kNotFound, "no route " + req.method + " " + req.path);
  set_error(res, ApiErrorKind::kInvalidRequest, req.method + " is not allowed on " + req.path + "; use " + allowed);
  res.status = 405;
  res.set_header("Allow", allowed);
}

// An OPTIONS request (a browser's CORS preflight): needs no key, as browsers send none; says what
// the route accepts.
void Front::preflight(const http::Request& req, http::Response& res) {
  std::string methods;
  for (size_t i = 0; i < routes_.size(); ++i) {
    if (route_keys_[i].second == req.path) methods += route_keys_[i].first + ", ";
  }
  if (methods.empty() && req.path != "*") return set_error(res, ApiErrorKind::kNotFound, "no route OPTIONS " + req.path);
  methods += "OPTIONS";
  const std::string& origin = req.get_header_value("Origin");
  if (!origin.empty() && allowed_origin(origin).empty()) {
    return set_error(res, ApiErrorKind::kPermission,
                     "origin '" + origin + "' is not allowed; start the server with --cors-origin " + origin);
  }
  res.status = 204;
  res.set_header("Allow", methods);
  if (origin.empty()) return;
  res.set_header("Access-Control-Allow-Methods", methods);
  const std::string& asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
  res.set_header("Access-Control-Max-Age", "600");
}

void Front::install_routes() {
  auto add = [this](const char* method, const char* path, Route route) {
    route_keys_.emplace_back(method, path);
    routes_.push_back(std::move(route));
  };
  auto health = [this](const http::Request&, http::Response& res) {
    const bool stopping = shutting_down_.load();
    const bool answering = router_.any_available();
    res.status = ready() && !stopping && answering ? 200 : 503;
    res.set_content(stopping      ? R"({"status":"shutting down"})"
                    : !ready()    ? R"({"status":"loading"})"
                    : !answering  ? R"({"status":"error","error":"no backend is answering"})"
                                  : R"({"status":"ok"})",
                    "application/json");
  };
  add("GET", "/health", health);
  add("GET", "/v1/health", health);

  auto models = [this](const http::Request&, http::Response& res) {
    nlohmann::json data = nlohmann::json::array();
    data.push_back({{"id", options_.alias}, {"object", "model"}, {"owned_by", "1bit"}, {"device", backends_[0]->route()}});
    res.set_content(nlohmann::json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  };
  add("GET", "/v1/models", models);
  add("GET", "/models", models);

  auto completion = [this](const http::Request& req, http::Response& res) {
    if (!ready()) return set_error(res, ApiErrorKind::kUnavailable, "the model is loading; retry when /health says ok");
    auto ticket = router_.reserve();
    if (!ticket) {
      return set_error(res, ApiErrorKind::kUnavailable, "no backend is answering (a llama-server child stopped answering or is restarting); retry shortly");
    }
    backends_[ticket->backend_idx()]->post(req, res, ticket, options_.alias);
  };
  for (const char* path : {"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions",
                           "/v1/embeddings", "/embeddings", "/infill", "/completion"}) {
    add("POST", path, completion);
  }

  auto to_primary = [this](const http::Request& req, http::Response& res) {
    if (!ready()) return set_error(res, ApiErrorKind::kUnavailable, "the model is loading; retry when /health says ok");
    backends_[0]->relay(req, res);
  };
  for (const char* path : {"/tokenize", "/detokenize", "/apply-template"}) add("POST", path, to_primary);
  for (const char* path : {"/slots", "/props"}) add("GET", path, to_primary);
  add("GET", "/metrics", [this](const http::Request& req, http::Response& res) {
    std::string text;
    if (ready()) {
      backends_[0]->relay(req, res);
      if (res.status == 200) text = res.body;
    }
    res.status = 200;
    res.set_content(text + metrics_text(), "text/plain; version=0.0.4");
  });
}

}  // namespace onebit
