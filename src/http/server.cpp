// The event-loop HTTP server (server.h).
//
// Threads: the loop (run()) owns every socket, the parser of each connection and the connection
// table; workers run handlers and stream providers. They meet in a connection's `out` buffer
// (under its mutex): a worker appends bytes and wakes the loop through an eventfd; the loop sends
// them and wakes writers waiting for room. One request per connection is served at a time, so
// pipelined replies go out in order.
#include "http/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace onebit::http {
namespace {

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr uint64_t kDrainWake = 0;  // a wake for the server itself, not a connection
constexpr int kTickMs = 100;        // timeouts are checked this often
constexpr size_t kTrimAfterBytes = 1 << 20;  // bodies at least this big trim the heap when served
constexpr int kLingerMs = 2000;              // a closing connection drains the client's bytes this long
constexpr int kStopFlushMs = 1000;           // stop() still sends what replies queued this long

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::pair<std::string, std::string> plain_error(int status, const std::string& message) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return {"application/json", R"({"error":{"code":)" + std::to_string(status) + R"(,"message":")" + escaped + R"("}})"};
}

std::string peer_name(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "";
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(addr).sin_addr, host, sizeof host);
  } else if (addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr, host, sizeof host);
  }
  return host;
}

// Keep-alive as the request asks: HTTP/1.1 unless "Connection: close", HTTP/1.0 only with
// "Connection: keep-alive".
bool wants_keep_alive(const Request& req) {
  const std::string& conn = req.get_header_value("Connection");
  if (req.minor_version == 0) return iequals(conn, "keep-alive");
  return !iequals(conn, "close");
}

// Lets a server hold thousands of connections: the soft descriptor limit up to the hard one.
void raise_fd_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

}  // namespace

struct Server::Conn {
  uint64_t id = 0;
  int fd = -1;
  std::string peer;
  // Loop thread only.
  RequestParser parser;
  // kClosing: the last reply is being sent; kLingering: sent and our side shut, reading and
  // dropping what the client still sends so that closing does not reset the reply away.
  enum class State { kReading, kServing, kClosing, kLingering } state = State::kReading;
  int64_t linger_until_ms = 0;
  int n_requests = 0;
  int64_t request_start_ms = -1;  // the current request's first byte
  int64_t last_read_ms = 0;
  bool read_eof = false;
  uint32_t events = 0;  // registered with epoll
  bool registered = false;
  // Shared with the worker serving it.
  std::mutex mu;
  std::condition_variable room;  // `out` drained, or the connection closed
  std::string out;
  size_t out_off = 0;
  int64_t last_write_ms = 0;     // the last progress sending `out` (or when it became non-empty)
  bool closed = false;           // no more bytes can be sent
  bool peer_gone = false;        // the client closed its side while served: a stream stops
  bool reply_done = false;       // the current reply is all in `out`
  bool close_after = false;      // close once `out` is sent

  explicit Conn(const ParserLimits& limits) : parser(limits) {}
  size_t unsent() const { return out.size() - out_off; }
};

// Worker threads, made as requests need them (up to a limit) and kept.
class Server::Workers {
 public:
  Workers(size_t max_threads, size_t max_pending) : max_threads_(max_threads), max_pending_(max_pending) {}
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // False when too many tasks wait already.
  bool submit(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || queue_.size() >= max_pending_) return false;
    queue_.push_back(std::move(task));
    if (idle_ < queue_.size() && threads_.size() < max_threads_) {
      threads_.emplace_back([this] { run(); });
    }
    cv_.notify_one();
    return true;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      --idle_;
      if (stop_) return;
      auto task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }
  const size_t max_threads_, max_pending_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stop_ = false;
};

namespace {

// What a streaming provider writes to: chunk framing, and a wait while the client is behind.
class ConnSink final : public DataSink {
 public:
  using Wake = std::function<void()>;
  ConnSink(Server::Conn& c, bool chunked, size_t max_unsent, Wake wake)
      : c_(c), chunked_(chunked), max_unsent_(max_unsent), wake_(std::move(wake)) {}
  bool write(const char* data, size_t size) override {
    if (size == 0) return is_writable();
    {
      std::unique_lock<std::mutex> lock(c_.mu);
      c_.room.wait(lock, [&] { return c_.closed || c_.unsent() <= max_unsent_; });
      if (c_.closed) return false;
      if (c_.unsent() == 0) c_.last_write_ms = now_ms();
      if (chunked_) {
        char size_line[24];
        const int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", size);
        c_.out.append(size_line, size_t(n));
      }
      c_.out.append(data, size);
      if (chunked_) c_.out.append("\r\n");
    }
    offset += size;
    wake_();
    return true;
  }
  void done() override { done_ = true; }
  bool is_writable() const override {
    std::lock_guard<std::mutex> lock(c_.mu);
    return !c_.closed && !c_.peer_gone;
  }
  bool finished() const { return done_; }
  size_t offset = 0;

 private:
  Server::Conn& c_;
  const bool chunked_;
  const size_t max_unsent_;
  Wake wake_;
  bool done_ = false;
};

}  // namespace

Server::Server(ServerOptions options, Handler handler, ErrorRenderer render_error)
    : options_(options),
      handler_(std::move(handler)),
      render_error_(render_error ? std::move(render_error) : ErrorRenderer(plain_error)),
      workers_(std::make_unique<Workers>(options.max_workers, options.max_pending)) {}

Server::~Server() {
  stop();
  // Handlers still running see their sinks fail; wait for them before the table goes.
  workers_.reset();
  for (auto& [id, c] : conns_) {
    if (c->fd >= 0) ::close(c->fd);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status Server::bind(const std::string& host, int port) {
  raise_fd_limit();
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string h = host.size() > 2 && host.front() == '[' && host.back() == ']' ? host.substr(1, host.size() - 2) : host;
  if (int e = getaddrinfo(h.empty() ? nullptr : h.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0) {
    return make_error("cannot listen on " + where + ": " + gai_strerror(e) + "; pick another with --host");
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) {
    return make_error("cannot listen on " + where + " (" + why +
                      "; in use, or not an address of this machine); pick another with --port/--host");
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6&>(addr).sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in&>(addr).sin_port);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return make_error(std::string("cannot start the HTTP loop: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = kWakeId;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  return ok_status();
}

void Server::stop() {
  stopping_.store(true);
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }
}

bool Server::drain(int timeout_ms) {
  draining_.store(true);
  wake(kDrainWake);
  std::unique_lock<std::mutex> lock(drain_mu_);
  return drained_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return n_in_flight_.load() == 0; });
}

void Server::wake(uint64_t id) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    first = woken_.empty();
    woken_.push_back(id);
  }
  if (first) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }
}

void Server::run() {
  std::vector<epoll_event> events(512);
  int64_t next_tick = now_ms() + kTickMs;
  while (!stopping_.load()) {
    const int n = epoll_wait(epoll_fd_, events.data(), int(events.size()), kTickMs);
    for (int i = 0; i < n && !stopping_.load(); ++i) {
      // epoll_event is packed: its fields are copied, never bound by reference.
      const uint64_t id = events[size_t(i)].data.u64;
      const uint32_t ready = events[size_t(i)].events;
      if (id == kListenId) {
        accept_all();
        continue;
      }
      if (id == kWakeId) {
        uint64_t count = 0;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &count, sizeof count);
        drain_wakes();
        continue;
      }
      auto it = conns_.find(id);
      if (it == conns_.end()) continue;
      std::shared_ptr<Conn> c = it->second;
      if (ready & (EPOLLERR | EPOLLHUP)) {  // reset, or both directions closed
        close_conn(c);
        continue;
      }
      if (ready & (EPOLLIN | EPOLLRDHUP)) on_readable(c);
      if (c->fd >= 0 && (ready & EPOLLOUT)) flush(c);
    }
    if (now_ms() >= next_tick) {
      sweep_timeouts();
      next_tick = now_ms() + kTickMs;
    }
  }
  // Stopped: bytes already queued (the last chunks of replies a shutdown ended) get a moment to go
  // out; then every connection closes, and writers waiting for room see it.
  const int64_t flush_until = now_ms() + kStopFlushMs;
  while (now_ms() < flush_until && any_unsent()) {
    const int n = epoll_wait(epoll_fd_, events.data(), int(events.size()), 20);
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[size_t(i)].data.u64;
      const uint32_t ready = events[size_t(i)].events;
      if (id == kWakeId) {
        uint64_t count = 0;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &count, sizeof count);
        drain_wakes();
      } else if (id != kListenId && (ready & EPOLLOUT)) {
        if (auto it = conns_.find(id); it != conns_.end()) flush(it->second);
      }
    }
  }
  std::vector<std::shared_ptr<Conn>> all;
  for (auto& [id, c] : conns_) all.push_back(c);
  for (auto& c : all) close_conn(c);
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
}

void Server::accept_all() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: stop watching the listener until a connection closes (no spin).
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        listen_paused_ = true;
      }
      return;
    }
    if (conns_.size() >= options_.max_connections || draining_.load()) {
      const auto [type, body] = render_error_(503, draining_.load() ? "the server is shutting down" : "too many open connections; retry later");
      Response res;
      res.status = 503;
      res.set_content(body, type);
      const std::string bytes = serialize_head(res, int64_t(body.size()), true) + body;
      [[maybe_unused]] ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // a streamed token goes out at once
    auto c = std::make_shared<Conn>(options_.limits);
    c->id = ++next_id_ + kWakeId;
    c->fd = fd;
    c->peer = peer_name(addr);
    c->last_read_ms = now_ms();
    conns_[c->id] = c;
    n_open_.fetch_add(1);
    update_events(c);
  }
}

void Server::update_events(const std::shared_ptr<Conn>& c) {
  if (c->fd < 0) return;
  bool pending = false;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    pending = c->unsent() > 0;
  }
  const bool read = !c->read_eof && (c->state == Conn::State::kReading || c->state == Conn::State::kLingering ||
                                     (c->state == Conn::State::kServing && c->parser.buffered() < options_.max_pipelined_bytes));
  const uint32_t want = (read ? EPOLLIN | EPOLLRDHUP : 0u) | (pending ? EPOLLOUT : 0u);
  if (c->registered && c->events == want) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c->id;
  if (epoll_ctl(epoll_fd_, c->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &ev) == 0) {
    c->registered = true;
    c->events = want;
  }
}

void Server::on_readable(const std::shared_ptr<Conn>& c) {
  char buf[64 * 1024];
  for (int i = 0; i < 4; ++i) {
    const ssize_t n = ::recv(c->fd, buf, sizeof buf, 0);
    if (n > 0 && c->state == Conn::State::kLingering) continue;  // dropped
    if (n > 0) {
      c->last_read_ms = now_ms();
      if (c->request_start_ms < 0 && c->state == Conn::State::kReading) c->request_start_ms = c->last_read_ms;
      c->parser.append(std::string_view(buf, size_t(n)));
      if (size_t(n) < sizeof buf) break;
      continue;
    }
    if (n == 0) {
      c->read_eof = true;
      if (c->state == Conn::State::kServing) {  // a stream waiting for tokens learns it now
        std::lock_guard<std::mutex> lock(c->mu);
        c->peer_gone = true;
      }
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    close_conn(c);  // reset
    return;
  }
  if (c->state == Conn::State::kLingering && c->read_eof) return close_conn(c);
  if (c->state == Conn::State::kReading) {
    advance(c);
  } else {
    update_events(c);
  }
}

void Server::linger_close(const std::shared_ptr<Conn>& c) {
  if (c->read_eof) return close_conn(c);
  ::shutdown(c->fd, SHUT_WR);
  c->state = Conn::State::kLingering;
  c->linger_until_ms = now_ms() + kLingerMs;
  update_events(c);
}

bool Server::any_unsent() {
  for (auto& [id, c] : conns_) {
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->unsent() > 0) return true;
  }
  return false;
}

void Server::advance(const std::shared_ptr<Conn>& c) {
  if (c->fd < 0 || c->state != Conn::State::kReading) return;
  if (stopping_.load()) return close_conn(c);
  if (!c->parser.started()) {
    c->request_start_ms = -1;
    // Nothing of a request: a client that closed or a draining server ends the connection.
    if (c->read_eof || draining_.load()) return close_conn(c);
    return update_events(c);
  }
  if (c->request_start_ms < 0) c->request_start_ms = now_ms();
  const ParseResult r = c->parser.parse();
  if (r == ParseResult::kError) return reply_error(c, c->parser.error_status(), c->parser.error_message());
  if (r == ParseResult::kNeedMore) {
    if (c->read_eof) return close_conn(c);  // half a request, and no more will come
    if (c->parser.wants_continue()) {
      c->parser.continue_sent();
      {
        std::lock_guard<std::mutex> lock(c->mu);
        if (c->unsent() == 0) c->last_write_ms = now_ms();
        c->out += "HTTP/1.1 100 Continue\r\n\r\n";
      }
      flush(c);
      return;
    }
    return update_events(c);
  }
  Request req = c->parser.take();
  req.remote_addr = c->peer;
  c->request_start_ms = -1;
  if (draining_.load()) return reply_error(c, 503, "the server is shutting down");
  dispatch(c, std::move(req));
}

void Server::dispatch(const std::shared_ptr<Conn>& c, Request req) {
  c->state = Conn::State::kServing;
  const bool keep_alive = wants_keep_alive(req) && ++c->n_requests < options_.max_requests_per_connection;
  n_in_flight_.fetch_add(1);
  auto shared_req = std::make_shared<Request>(std::move(req));
  const bool queued = workers_->submit([this, c, shared_req, keep_alive]() mutable {
    serve(c, *shared_req, keep_alive);
    // Memory of a big request goes back to the system, not only to the allocator.
    const bool big = shared_req->body.size() > kTrimAfterBytes;
    shared_req.reset();
    if (big) malloc_trim(0);
    if (n_in_flight_.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(drain_mu_);
      drained_.notify_all();
    }
  });
  if (!queued) {
    n_in_flight_.fetch_sub(1);
    return reply_error(c, 503, "the server is busy (too many requests waiting); retry later");
  }
  update_events(c);
}

void Server::serve(const std::shared_ptr<Conn>& c, const Request& req, bool keep_alive) {
  Response res;
  try {
    handler_(req, res);
  } catch (const std::exception& e) {
    res = Response{};
    res.status = 500;
    const auto [type, body] = render_error_(500, std::string("internal error: ") + e.what());
    res.set_content(body, type);
  } catch (...) {
    res = Response{};
    res.status = 500;
    const auto [type, body] = render_error_(500, "internal error");
    res.set_content(body, type);
  }
  const bool head_only = req.method == "HEAD";
  auto enqueue = [&](const std::string& bytes, bool done, bool close) {
    {
      std::lock_guard<std::mutex> lock(c->mu);
      if (!c->closed) {
        if (c->unsent() == 0) c->last_write_ms = now_ms();
        c->out += bytes;
      }
      if (done) {
        c->reply_done = true;
        c->close_after = c->close_after || close;
      }
    }
    wake(c->id);
  };
  if (!res.provider || head_only) {
    const bool close = !keep_alive || draining_.load();
    std::string bytes = serialize_head(res, int64_t(res.body.size()), close);
    if (!head_only && res.status != 204 && res.status != 304) bytes += res.body;
    if (res.releaser) res.releaser(false);
    res = Response{};  // what the handler held is let go before the client hears the end
    return enqueue(bytes, true, close);
  }
  // A stream: chunked for HTTP/1.1; an HTTP/1.0 client reads until the connection closes.
  const bool chunked = req.minor_version >= 1;
  const bool close = !keep_alive || !chunked || draining_.load();
  enqueue(serialize_head(res, chunked ? -1 : -2, close), false, close);
  ConnSink sink(*c, chunked, options_.max_unsent_bytes, [this, id = c->id] { wake(id); });
  bool ok = true;
  try {
    while (ok && !sink.finished()) ok = sink.is_writable() && res.provider(sink.offset, sink);
  } catch (...) {
    ok = false;
  }
  if (res.releaser) res.releaser(ok && sink.finished());
  res = Response{};  // what the provider held (a router place, a sequence) goes before the end is sent
  if (ok && sink.finished()) return enqueue(chunked ? "0\r\n\r\n" : "", true, close);
  enqueue("", true, true);  // abandoned: the client sees the body cut short
}

void Server::flush(const std::shared_ptr<Conn>& c) {
  if (c->fd < 0) return;
  bool finished = false, close_after = false, failed = false;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    while (c->unsent() > 0) {
      const ssize_t n = ::send(c->fd, c->out.data() + c->out_off, c->unsent(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c->out_off += size_t(n);
        c->last_write_ms = now_ms();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      failed = true;
      break;
    }
    if (c->unsent() == 0) {
      c->out.clear();
      c->out_off = 0;
      if (c->out.capacity() > (1u << 20)) c->out.shrink_to_fit();
    } else if (c->out_off > (1u << 20)) {
      c->out.erase(0, c->out_off);
      c->out_off = 0;
    }
    finished = c->reply_done && c->unsent() == 0;
    close_after = c->close_after;
    if (finished) {
      c->reply_done = false;
      c->close_after = false;
    }
  }
  c->room.notify_all();
  if (failed) return close_conn(c);
  if (!finished) return update_events(c);
  if (close_after || c->state == Conn::State::kClosing) return linger_close(c);
  if (c->state == Conn::State::kServing) {
    c->state = Conn::State::kReading;
    c->last_read_ms = now_ms();  // the idle timeout starts when the reply is sent
    advance(c);                  // a pipelined request may be waiting
  } else {
    update_events(c);
  }
}

void Server::reply_error(const std::shared_ptr<Conn>& c, int status, const std::string& message) {
  const auto [type, body] = render_error_(status, message);
  Response res;
  res.status = status;
  res.set_content(body, type);
  c->state = Conn::State::kClosing;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->unsent() == 0) c->last_write_ms = now_ms();
    c->out += serialize_head(res, int64_t(body.size()), true) + body;
    c->reply_done = true;
    c->close_after = true;
  }
  flush(c);
}

void Server::close_conn(const std::shared_ptr<Conn>& c) {
  if (c->fd < 0) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  ::close(c->fd);
  c->fd = -1;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->closed = true;
  }
  c->room.notify_all();
  conns_.erase(c->id);
  n_open_.fetch_sub(1);
  if (listen_paused_ && listen_fd_ >= 0 && !draining_.load()) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenId;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev) == 0) listen_paused_ = false;
  }
}

void Server::drain_wakes() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    ids.swap(woken_);
  }
  for (uint64_t id : ids) {
    if (id == kDrainWake) {
      // Draining: no new connections; idle ones close (requests in progress go on).
      if (listen_fd_ >= 0) {
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        ::close(listen_fd_);
        listen_fd_ = -1;
      }
      std::vector<std::shared_ptr<Conn>> idle;
      for (auto& [cid, c] : conns_) {
        if (c->state == Conn::State::kReading && !c->parser.started()) idle.push_back(c);
      }
      for (auto& c : idle) close_conn(c);
      continue;
    }
    auto it = conns_.find(id);
    if (it != conns_.end()) flush(it->second);
  }
}

void Server::sweep_timeouts() {
  const int64_t now = now_ms();
  std::vector<std::pair<std::shared_ptr<Conn>, int>> expired;  // (connection, 408 or 0: just close)
  for (auto& [id, c] : conns_) {
    int64_t last_write = 0;
    size_t unsent = 0;
    {
      std::lock_guard<std::mutex> lock(c->mu);
      last_write = c->last_write_ms;
      unsent = c->unsent();
    }
    if (unsent > 0 && now - last_write > options_.write_timeout_ms) {
      expired.emplace_back(c, 0);
    } else if (c->state == Conn::State::kLingering) {
      if (now > c->linger_until_ms) expired.emplace_back(c, 0);
    } else if (c->state == Conn::State::kReading) {
      if (!c->parser.started()) {
        if (now - c->last_read_ms > options_.idle_timeout_ms) expired.emplace_back(c, 0);
      } else if (!c->parser.head_done() ? now - c->request_start_ms > options_.head_timeout_ms
                                        : now - c->last_read_ms > options_.body_timeout_ms) {
        expired.emplace_back(c, 408);
      }
    }
  }
  for (auto& [c, status] : expired) {
    if (status == 0) {
      close_conn(c);
    } else {
      reply_error(c, status, c->parser.head_done() ? "request body timed out (no bytes for " + std::to_string(options_.body_timeout_ms / 1000) + " s)"
                                                   : "request header timed out (not complete within " + std::to_string(options_.head_timeout_ms / 1000) + " s)");
    }
  }
}

}  // namespace onebit::http
