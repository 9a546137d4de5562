// The HTTP/1.1 server of `1bit serve`: one event-loop thread owns every socket (epoll, level-
// triggered, non-blocking), so an open connection costs memory, not a thread; a request runs its
// handler on a worker thread only once it has fully arrived. Handlers and stream providers never
// touch a socket: they queue bytes for the loop, and a streaming provider waits while its client
// reads slowly. Limits and timeouts (ServerOptions) answer slow, oversized and malformed input at
// once with a 4xx; keep-alive and pipelined requests are answered in order. See docs/http.md.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "http/http.h"
#include "http/request_parser.h"

namespace onebit::http {

struct ServerOptions {
  ParserLimits limits;              // head size, header count, body size
  int head_timeout_ms = 10000;      // from a request's first byte to the end of its head: 408
  int body_timeout_ms = 30000;      // a body with no bytes for this long: 408
  int idle_timeout_ms = 120000;     // a keep-alive connection with no request for this long: closed
  int write_timeout_ms = 120000;    // a client that reads nothing of its reply for this long: closed
  size_t max_connections = 16384;   // open at once (more are answered 503 and closed)
  int max_requests_per_connection = 10000;  // then the reply says Connection: close (as nginx)
  size_t max_workers = 1024;        // handlers running at once (threads, made as needed)
  size_t max_pending = 4096;        // complete requests waiting for a worker (more get 503)
  size_t max_unsent_bytes = 1 << 20;  // a stream's writer waits while more than this is unsent
  size_t max_pipelined_bytes = 1 << 20;  // read ahead while a request is served, then stop reading
};

// Renders the body of an error the server answers by itself (malformed framing, limits, timeouts):
// (status, message) -> (content type, body).
using ErrorRenderer = std::function<std::pair<std::string, std::string>(int status, const std::string& message)>;
using Handler = std::function<void(const Request&, Response&)>;

class Server {
 public:
  Server(ServerOptions options, Handler handler, ErrorRenderer render_error = nullptr);
  ~Server();  // stop()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens on host:port (port 0: any free one, see port()); an error names the address.
  Status bind(const std::string& host, int port);
  int port() const { return port_; }
  // Runs the event loop until stop(); blocking. Call after bind().
  void run();
  // Thread-safe. Stops accepting and closes every connection; run() returns. Handlers still
  // running see their sink fail.
  void stop();
  // Thread-safe. Stops accepting new connections and new requests on open ones (idle keep-alive
  // connections are closed, replies in progress end with Connection: close); in-flight handlers
  // go on. Returns once none are in flight or `timeout_ms` passed: true when none are.
  bool drain(int timeout_ms);

  size_t open_connections() const { return n_open_.load(); }
  size_t in_flight() const { return n_in_flight_.load(); }

  struct Conn;  // server.cpp

 private:
  class Workers;
  void loop();
  void accept_all();
  void on_readable(const std::shared_ptr<Conn>& c);
  void advance(const std::shared_ptr<Conn>& c);  // parse and dispatch what is buffered
  void flush(const std::shared_ptr<Conn>& c);
  void close_conn(const std::shared_ptr<Conn>& c);
  void linger_close(const std::shared_ptr<Conn>& c);  // after the last reply
  void update_events(const std::shared_ptr<Conn>& c);
  void reply_error(const std::shared_ptr<Conn>& c, int status, const std::string& message);
  void dispatch(const std::shared_ptr<Conn>& c, Request req);
  void serve(const std::shared_ptr<Conn>& c, const Request& req, bool keep_alive);  // on a worker
  void sweep_timeouts();
  bool any_unsent();
  void wake(uint64_t id);
  void drain_wakes();

  ServerOptions options_;
  Handler handler_;
  ErrorRenderer render_error_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  bool listen_paused_ = false;  // out of descriptors: not accepting until one closes
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};
  std::atomic<size_t> n_open_{0};
  std::atomic<size_t> n_in_flight_{0};
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<Conn>> conns_;  // loop thread only
  std::mutex wake_mu_;
  std::vector<uint64_t> woken_;
  std::mutex drain_mu_;
  std::condition_variable drained_;
  std::unique_ptr<Workers> workers_;
};

}  // namespace onebit::http
