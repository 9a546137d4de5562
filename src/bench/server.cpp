// A server under test; see server.h.
#include "bench/server.h"

#include <chrono>
#include <fstream>
#include <thread>

#include "bench/client.h"

namespace onebit {
namespace {

using Clock = std::chrono::steady_clock;

std::string exit_text(int status) {
  return status > 128 ? "was killed by signal " + std::to_string(status - 128) : "exited with status " + std::to_string(status);
}

}  // namespace

std::string log_tail(const std::string& path, int n) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) {
    lines.push_back(line);
    if (lines.size() > static_cast<size_t>(n)) lines.erase(lines.begin());
  }
  std::string out;
  for (const auto& l : lines) out += "  " + l + "\n";
  return out;
}

Result<std::unique_ptr<BenchServer>> BenchServer::start(const std::string& binary, const std::string& model,
                                                         const std::vector<std::string>& args, const std::string& log_path,
                                                         RunControl& control) {
  std::unique_ptr<BenchServer> s(new BenchServer(control));
  ONEBIT_ASSIGN_OR_RETURN(s->port_, find_free_loopback_port());
  s->log_path_ = log_path;
  // /bin/sh sends the output to the log and then becomes the server (exec keeps the pid and the
  // parent-death signal). The paths are arguments, never parsed by the shell.
  ChildSpec spec;
  spec.binary = "/bin/sh";
  spec.argv = {"-c", "log=$1; shift; exec \"$@\" >\"$log\" 2>&1", "sh", log_path, binary, "serve", "-m", model, "--port",
               std::to_string(s->port_)};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.log_prefix = "[server] ";
  auto child = ChildProcess::start(spec);
  if (!child.ok()) return make_error("cannot start '" + binary + " serve': " + child.message());
  s->child_ = std::move(*child);
  control.server_pid.store(s->child_->pid());
  return s;
}

BenchServer::~BenchServer() { stop(); }

void BenchServer::stop() {
  if (!child_) return;
  control_.server_pid.store(0);
  child_->stop(std::chrono::seconds(10));
  child_.reset();
}

Status BenchServer::wait_healthy(const std::string& what, int timeout_s) {
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  BenchClient client(port_, 2);
  for (;;) {
    if (control_.interrupted.load()) return make_error("interrupted");
    if (auto status = child_->poll_exit()) {
      return make_error(what + ": the server " + exit_text(*status) + " before it was healthy; the last lines of its log (" +
                        log_path_ + "):\n" + log_tail(log_path_, 15));
    }
    auto health = client.health();
    if (health.ok() && *health == 200) return ok_status();
    if (Clock::now() >= deadline) {
      stop();
      return make_error(what + ": the server was not healthy within " + std::to_string(timeout_s) +
                        " s (--timeout); the last lines of its log (" + log_path_ + "):\n" + log_tail(log_path_, 15));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Result<int> BenchServer::wait_exit(int timeout_s) {
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    if (auto status = child_->poll_exit()) {
      stop();
      return *status;
    }
    if (control_.interrupted.load()) return make_error("interrupted");
    if (Clock::now() >= deadline) return make_error("did not finish within " + std::to_string(timeout_s) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace onebit
