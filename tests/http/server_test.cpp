// The event-loop server over real sockets: keep-alive, pipelining, streams with a slow reader,
// timeouts, connection limits, idle connections that cost no thread, draining.
#include "http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace onebit::http {
namespace {

using namespace std::chrono_literals;

// A raw client socket.
class Client {
 public:
  explicit Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Client() {
    if (fd_ >= 0) close(fd_);
  }
  bool connected() const { return connected_; }
  void send_all(std::string_view s) {
    while (!s.empty()) {
      ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      s.remove_prefix(size_t(n));
    }
  }
  // Reads until `until` appears, the peer closes, or the timeout.
  std::string read_until(std::string_view until, int timeout_ms = 5000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (buf_.find(until) == std::string::npos) {
      const int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count());
      if (left <= 0 || !read_some(left)) break;
    }
    return buf_;
  }
  // True when the server closed the connection within the timeout (reading what came before).
  bool closed_by_peer(int timeout_ms = 5000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      const int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count());
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, left) <= 0) return false;
      char b[4096];
      const ssize_t n = recv(fd_, b, sizeof b, 0);
      if (n <= 0) return true;
      buf_.append(b, size_t(n));
    }
  }
  std::string& buffer() { return buf_; }
  int fd() const { return fd_; }

 private:
  bool read_some(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char b[65536];
    const ssize_t n = recv(fd_, b, sizeof b, 0);
    if (n <= 0) return false;
    buf_.append(b, size_t(n));
    return true;
  }
  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

int count_of(const std::string& s, std::string_view what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// A server on a free port, run on its own thread.
class Running {
 public:
  Running(ServerOptions options, Handler handler) : server_(options, std::move(handler)) {
    EXPECT_TRUE(server_.bind("127.0.0.1", 0).ok());
    thread_ = std::thread([this] { server_.run(); });
  }
  ~Running() {
    server_.stop();
    thread_.join();
  }
  Server& server() { return server_; }
  int port() const { return server_.port(); }

 private:
  Server server_;
  std::thread thread_;
};

void echo(const Request& req, Response& res) {
  res.set_content(req.method + " " + req.path + " " + req.body, "text/plain");
}

TEST(Server, KeepAliveAndPipelinedRequestsAnsweredInOrder) {
  Running s({}, echo);
  Client c(s.port());
  ASSERT_TRUE(c.connected());
  c.send_all("GET /one HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_NE(c.read_until("GET /one ").find("HTTP/1.1 200 OK"), std::string::npos);
  c.buffer().clear();
  // Three in one write: three replies, in order, on the same connection.
  c.send_all("POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\n1"
             "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\n2"
             "GET /c HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(c.closed_by_peer());
  const std::string& all = c.buffer();
  EXPECT_EQ(count_of(all, "HTTP/1.1 200 OK"), 3) << all;
  const size_t a = all.find("POST /a 1"), b = all.find("POST /b 2"), cc = all.find("GET /c ");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(cc, std::string::npos);
  EXPECT_LT(a, b);
  EXPECT_LT(b, cc);
  EXPECT_NE(all.find("Connection: close"), std::string::npos);
}

TEST(Server, ConnectionClosesAfterItsRequestLimit) {
  ServerOptions o;
  o.max_requests_per_connection = 3;
  Running s(o, echo);
  Client c(s.port());
  c.send_all("GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\nGET /3 HTTP/1.1\r\nHost: h\r\n\r\n"
             "GET /4 HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_TRUE(c.closed_by_peer());
  EXPECT_EQ(count_of(c.buffer(), "HTTP/1.1 200 OK"), 3) << c.buffer();
  EXPECT_EQ(count_of(c.buffer(), "Connection: close"), 1);
  EXPECT_EQ(c.buffer().find("GET /4"), std::string::npos);
}

TEST(Server, MalformedFramingIsAnsweredAtOnceAndClosed) {
  Running s({}, echo);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"GARBAGE\r\n\r\n", "400"},
      {"GET / HTTP/1.1\r\n\r\n", "400"},  // no Host
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "400"},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 999999999\r\n\r\n", "413"},
      {"GET / HTTP/2.0\r\n\r\n", "505"},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: br\r\n\r\n", "501"},
  };
  for (const auto& [bytes, status] : cases) {
    Client c(s.port());
    const auto t0 = std::chrono::steady_clock::now();
    c.send_all(bytes);
    EXPECT_TRUE(c.closed_by_peer(2000)) << bytes;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s) << bytes;
    EXPECT_EQ(c.buffer().substr(0, 12), "HTTP/1.1 " + status) << bytes << " -> " << c.buffer();
    EXPECT_NE(c.buffer().find("\"message\""), std::string::npos) << c.buffer();
  }
}

TEST(Server, ExpectContinueGetsInterimResponse) {
  Running s({}, echo);
  Client c(s.port());
  c.send_all("POST /x HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
  EXPECT_NE(c.read_until("100 Continue\r\n\r\n").find("HTTP/1.1 100 Continue"), std::string::npos);
  c.send_all("body");
  EXPECT_NE(c.read_until("POST /x body").find("200 OK"), std::string::npos);
}

TEST(Server, HandlerExceptionIs500AndServerLives) {
  Running s({}, [](const Request& req, Response& res) {
    if (req.path == "/throw") throw std::runtime_error("boom");
    echo(req, res);
  });
  Client c(s.port());
  c.send_all("GET /throw HTTP/1.1\r\nHost: h\r\n\r\nGET /ok HTTP/1.1\r\nHost: h\r\n\r\n");
  const std::string got = c.read_until("GET /ok");
  EXPECT_NE(got.find("HTTP/1.1 500"), std::string::npos);
  EXPECT_NE(got.find("boom"), std::string::npos);
  EXPECT_NE(got.find("GET /ok"), std::string::npos);
}

// Decodes a chunked body from `raw` (after the head); false if it is not complete.
bool dechunk(const std::string& raw, std::string& body) {
  size_t at = raw.find("\r\n\r\n");
  if (at == std::string::npos) return false;
  at += 4;
  body.clear();
  for (;;) {
    const size_t eol = raw.find("\r\n", at);
    if (eol == std::string::npos) return false;
    const size_t n = std::stoul(raw.substr(at, eol - at), nullptr, 16);
    if (n == 0) return raw.compare(eol, 4, "\r\n\r\n") == 0;
    if (raw.size() < eol + 2 + n + 2) return false;
    body += raw.substr(eol + 2, n);
    at = eol + 2 + n + 2;
  }
}

TEST(Server, StreamIsChunkedAndEndsProperly) {
  Running s({}, [](const Request&, Response& res) {
    auto n = std::make_shared<int>(0);
    res.set_chunked_content_provider("text/event-stream", [n](size_t, DataSink& sink) {
      if (*n == 5) {
        sink.done();
        return true;
      }
      const std::string part = "data: " + std::to_string((*n)++) + "\n\n";
      return sink.write(part);
    });
  });
  Client c(s.port());
  c.send_all("GET /s HTTP/1.1\r\nHost: h\r\n\r\n");
  const std::string raw = c.read_until("0\r\n\r\n");
  std::string body;
  ASSERT_TRUE(dechunk(raw, body)) << raw;
  EXPECT_EQ(body, "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n");
  EXPECT_NE(raw.find("Transfer-Encoding: chunked"), std::string::npos);
  // HTTP/1.0: no chunks, the body ends when the connection closes.
  Client old(s.port());
  old.send_all("GET /s HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(old.closed_by_peer());
  EXPECT_NE(old.buffer().find("\r\n\r\ndata: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n"), std::string::npos);
  EXPECT_EQ(old.buffer().find("chunked"), std::string::npos);
}

TEST(Server, SlowReaderBlocksTheWriterAndAGoneClientReleasesIt) {
  std::atomic<size_t> written{0};
  std::atomic<int> released{-1};
  ServerOptions o;
  o.max_unsent_bytes = 64 * 1024;
  Running s(o, [&](const Request&, Response& res) {
    res.set_chunked_content_provider(
        "application/octet-stream",
        [&](size_t, DataSink& sink) {
          const std::string block(16 * 1024, 'x');
          if (!sink.write(block)) return false;
          written += block.size();
          return true;
        },
        [&](bool ok) { released = ok ? 1 : 0; });
  });
  {
    Client c(s.port());
    int small = 4096;
    setsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    c.send_all("GET /big HTTP/1.1\r\nHost: h\r\n\r\n");
    std::this_thread::sleep_for(500ms);
    // Never read: the writer waits once the socket buffers and 64 KiB of queue are full.
    const size_t a = written.load();
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(written.load(), a);
    EXPECT_LT(a, size_t(16) << 20);
    EXPECT_EQ(released.load(), -1);
  }
  // The client is gone: the next write fails and the provider is released.
  for (int i = 0; i < 100 && released.load() == -1; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(released.load(), 0);
  EXPECT_EQ(s.server().in_flight(), 0u);
}

TEST(Server, SlowHeadsTimeOutWith408WhileOthersAreServed) {
  ServerOptions o;
  o.head_timeout_ms = 400;
  Running s(o, echo);
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(std::make_unique<Client>(s.port()));
    slow.back()->send_all("GET / HTTP/1.1\r\nHo");
  }
  Client ok(s.port());
  const auto t0 = std::chrono::steady_clock::now();
  ok.send_all("GET /fine HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_NE(ok.read_until("GET /fine").find("200 OK"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 200ms);
  for (auto& c : slow) {
    EXPECT_TRUE(c->closed_by_peer(3000));
    EXPECT_EQ(c->buffer().substr(0, 12), "HTTP/1.1 408");
  }
}

TEST(Server, IdleConnectionsCostNoThreadAndTimeOut) {
  ServerOptions o;
  o.idle_timeout_ms = 600;
  o.max_workers = 4;
  Running s(o, echo);
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 1000; ++i) idle.push_back(std::make_unique<Client>(s.port()));
  for (int i = 0; i < 100 && s.server().open_connections() < 1000; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(s.server().open_connections(), 1000u);
  // Four workers, a thousand idle connections: requests are still answered at once.
  for (int i = 0; i < 8; ++i) {
    Client c(s.port());
    c.send_all("GET /x HTTP/1.1\r\nHost: h\r\n\r\n");
    EXPECT_NE(c.read_until("GET /x").find("200 OK"), std::string::npos);
  }
  EXPECT_TRUE(idle.front()->closed_by_peer(3000));
  for (int i = 0; i < 200 && s.server().open_connections() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(s.server().open_connections(), 0u);
}

TEST(Server, ConnectionLimitAnswers503) {
  ServerOptions o;
  o.max_connections = 4;
  Running s(o, echo);
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 4; ++i) held.push_back(std::make_unique<Client>(s.port()));
  for (int i = 0; i < 100 && s.server().open_connections() < 4; ++i) std::this_thread::sleep_for(10ms);
  Client extra(s.port());
  EXPECT_TRUE(extra.closed_by_peer());
  EXPECT_EQ(extra.buffer().substr(0, 12), "HTTP/1.1 503");
}

TEST(Server, DrainFinishesRepliesInProgressAndRefusesNewOnes) {
  std::atomic<bool> release{false};
  Running s({}, [&](const Request& req, Response& res) {
    if (req.path == "/slow") {
      while (!release.load()) std::this_thread::sleep_for(5ms);
    }
    echo(req, res);
  });
  Client busy(s.port()), idle(s.port());
  busy.send_all("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n");
  for (int i = 0; i < 100 && s.server().in_flight() == 0; ++i) std::this_thread::sleep_for(5ms);
  std::atomic<bool> drained{false};
  std::thread drainer([&] { drained = s.server().drain(5000); });
  EXPECT_TRUE(idle.closed_by_peer(2000));  // idle keep-alive connections close at once
  Client late(s.port());
  EXPECT_FALSE(late.connected() && !late.closed_by_peer(2000));  // nothing new is served
  release = true;
  drainer.join();
  EXPECT_TRUE(drained.load());
  EXPECT_TRUE(busy.closed_by_peer());
  EXPECT_NE(busy.buffer().find("GET /slow"), std::string::npos);
  EXPECT_NE(busy.buffer().find("Connection: close"), std::string::npos);
}

}  // namespace
}  // namespace onebit::http
