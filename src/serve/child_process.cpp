// POSIX implementation of ChildProcess: fork/exec with a pipe for output and PR_SET_PDEATHSIG.
#include "serve/child_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace onebit {
namespace {

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Copies the child's output to stderr, line by line, each line behind `prefix`.
void relay_output(int fd, std::string prefix) {
  std::string line;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      line.push_back(buf[i]);
      if (buf[i] == '\n') {
        std::fprintf(stderr, "%s%s", prefix.c_str(), line.c_str());
        line.clear();
      }
    }
  }
  if (!line.empty()) std::fprintf(stderr, "%s%s\n", prefix.c_str(), line.c_str());
  ::close(fd);
}

// The child's environment: ours, plus the added variables that we do not already have.
std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& added) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& [k, v] : added) {
    if (::getenv(k.c_str()) == nullptr) env.push_back(k + "=" + v);
  }
  return env;
}

}  // namespace

Result<std::unique_ptr<ChildProcess>> ChildProcess::start(const ChildSpec& spec) {
  std::vector<std::string> args = {spec.binary};
  args.insert(args.end(), spec.argv.begin(), spec.argv.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = child_environment(spec.env_added);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return make_error(std::string("cannot create a pipe: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out[0]);
    ::close(out[1]);
    return make_error(std::string("cannot fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // In the child: die with the front, even when the front is SIGKILLed.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the front blocks SIGINT/SIGTERM; the child must not
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(out[1], STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    std::fprintf(stderr, "cannot run '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(out[1]);
  auto child = std::unique_ptr<ChildProcess>(new ChildProcess());
  child->pid_ = pid;
  child->log_thread_ = std::thread(relay_output, out[0], spec.log_prefix);
  return child;
}

std::optional<int> ChildProcess::poll_exit() {
  if (exit_status_) return exit_status_;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) exit_status_ = decode_status(status);
  return exit_status_;
}

int ChildProcess::stop(std::chrono::milliseconds grace) {
  if (!poll_exit()) {
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (!poll_exit() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!poll_exit()) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      exit_status_ = decode_status(status);
    }
  }
  if (log_thread_.joinable()) log_thread_.join();
  return *exit_status_;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) stop();
}

Result<int> find_free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_error(std::string("cannot create a socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::string err = std::strerror(errno);
    ::close(fd);
    return make_error("cannot find a free loopback port: " + err);
  }
  int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

}  // namespace onebit
