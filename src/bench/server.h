// One `1bit serve` under test: started as a child of the benchmark (its output to a log file),
// waited for until /health says 200 (failing early when it exits, with its log's last lines),
// stopped with SIGTERM then SIGKILL on every path (the destructor too).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "serve/child_process.h"

namespace onebit {

// Shared with the signal watcher: Ctrl-C sets `interrupted` and stops the running server, so a
// request in flight fails at once and the benchmark unwinds.
struct RunControl {
  std::atomic<bool> interrupted{false};
  std::atomic<pid_t> server_pid{0};
};

class BenchServer {
 public:
  // Starts `binary serve -m model --port P args...` with its output in `log_path`. Call from the
  // main thread (the child dies with the thread that started it).
  static Result<std::unique_ptr<BenchServer>> start(const std::string& binary, const std::string& model,
                                                     const std::vector<std::string>& args, const std::string& log_path,
                                                     RunControl& control);
  ~BenchServer();
  BenchServer(const BenchServer&) = delete;
  BenchServer& operator=(const BenchServer&) = delete;

  int port() const { return port_; }
  const std::string& log_path() const { return log_path_; }

  // Polls /health every 100 ms until 200. Errors: the server exited, `timeout_s` passed,
  // the run was interrupted; each names `what` and quotes the log's last lines.
  Status wait_healthy(const std::string& what, int timeout_s);
  // Waits for the server to exit by itself (a --dry-run) up to `timeout_s`; its exit status.
  Result<int> wait_exit(int timeout_s);
  // SIGTERM, SIGKILL after 10 s; idempotent.
  void stop();

 private:
  BenchServer(RunControl& control) : control_(control) {}
  RunControl& control_;
  std::unique_ptr<ChildProcess> child_;
  int port_ = 0;
  std::string log_path_;
};

// The last `n` lines of a text file, each indented by two spaces ("" when unreadable).
std::string log_tail(const std::string& path, int n);

}  // namespace onebit
