// Implementation of the HTTP front (cpp-httplib).
#include "serve/front.h"

#include <httplib.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
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

}  // namespace

// HTTP worker threads (a stream holds one while it is open).
constexpr size_t kHttpWorkers = 320;

Front::Front(FrontOptions options, std::vector<std::unique_ptr<FrontBackend>> backends)
    : options_(std::move(options)),
      backends_(std::move(backends)),
      router_(backends_.size(), options_.primary_limit),
      server_(std::make_unique<httplib::Server>()) {
  // Enough workers that slow streams never starve /health or a new request (default is ~8): each
  // open connection holds one, and the engine serves up to 256 sequences at once.
  server_->new_task_queue = [] { return new httplib::ThreadPool(kHttpWorkers); };
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_read_timeout(60, 0);
  server_->set_write_timeout(3600, 0);
  install_routes();
}

Front::~Front() = default;

namespace {

// cpp-httplib (the Debian library) listens with a backlog of 5: a burst of clients connecting at
// once overflows it and some connections fail. Listening again on the same socket raises the
// backlog (Linux updates it in place); the socket is found among our descriptors by its port.
void raise_listen_backlog(int port) {
  for (int fd = 0; fd < 4096; ++fd) {
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    const int bound = addr.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                      : addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                                   : -1;
    if (bound == port) listen(fd, SOMAXCONN);
  }
}

}  // namespace

Status Front::bind() {
  if (!server_->bind_to_port(options_.host, options_.port)) {
    return make_error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                      " (in use, or not an address of this machine); pick another with --port/--host");
  }
  raise_listen_backlog(static_cast<int>(options_.port));
  return ok_status();
}

void Front::serve() { server_->listen_after_bind(); }
void Front::stop() { server_->stop(); }
void Front::set_ready(bool ready) { ready_.store(ready); }
bool Front::ready() const { return ready_.load(); }

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

void Front::install_routes() {
  httplib::Server& s = *server_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // A loopback bind answers only loopback names: a web page cannot rebind DNS onto us.
    if (is_loopback_host(options_.host) && !is_loopback_host(host_name(req.get_header_value("Host")))) {
      set_error(res, ApiErrorKind::kPermission, "Host '" + req.get_header_value("Host") + "' is not a loopback name; this server listens on " + options_.host);
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool open_route = req.path == "/health" || req.path == "/v1/health";
    if (!options_.api_key.empty() && !open_route &&
        !constant_time_equal(req.get_header_value("Authorization"), "Bearer " + options_.api_key)) {
      set_error(res, ApiErrorKind::kAuthentication, "missing or wrong API key: send 'Authorization: Bearer KEY'");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  auto health = [this](const httplib::Request&, httplib::Response& res) {
    res.status = ready() ? 200 : 503;
    res.set_content(ready() ? R"({"status":"ok"})" : R"({"status":"loading"})", "application/json");
  };
  s.Get("/health", health);
  s.Get("/v1/health", health);

  auto models = [this](const httplib::Request&, httplib::Response& res) {
    nlohmann::json data = nlohmann::json::array();
    data.push_back({{"id", options_.alias}, {"object", "model"}, {"owned_by", "1bit"}, {"device", backends_[0]->route()}});
    res.set_content(nlohmann::json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  };
  s.Get("/v1/models", models);
  s.Get("/models", models);

  auto completion = [this](const httplib::Request& req, httplib::Response& res) {
    if (!ready()) return set_error(res, ApiErrorKind::kUnavailable, "the model is loading; retry when /health says ok");
    auto ticket = router_.reserve();
    backends_[ticket->backend_idx()]->post(req, res, ticket, options_.alias);
  };
  for (const char* path : {"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions",
                           "/v1/embeddings", "/embeddings", "/infill", "/completion"}) {
    s.Post(path, completion);
  }

  auto to_primary = [this](const httplib::Request& req, httplib::Response& res) {
    if (!ready()) return set_error(res, ApiErrorKind::kUnavailable, "the model is loading; retry when /health says ok");
    backends_[0]->relay(req, res);
  };
  for (const char* path : {"/tokenize", "/detokenize", "/apply-template"}) s.Post(path, to_primary);
  for (const char* path : {"/slots", "/props"}) s.Get(path, to_primary);
  s.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    std::string text;
    if (ready()) {
      backends_[0]->relay(req, res);
      if (res.status == 200) text = res.body;
    }
    res.status = 200;
    res.set_content(text + metrics_text(), "text/plain; version=0.0.4");
  });

  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) return set_error(res, ApiErrorKind::kNotFound, "no route " + req.method + " " + req.path);
    if (res.status == 413) return set_error(res, ApiErrorKind::kPayloadTooLarge, "request body too large");
    if (res.status == 400) return set_error(res, ApiErrorKind::kInvalidRequest, "malformed HTTP request");
    if (res.status >= 400) {
      res.set_content(error_body({ApiErrorKind::kServer, "HTTP " + std::to_string(res.status)}).dump(), "application/json");
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    set_error(res, ApiErrorKind::kServer, "internal error: " + what);
  });
}

}  // namespace onebit
