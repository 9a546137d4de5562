// A supervised child process (a llama-server): started with an argv and added environment, dies
// with the front (Linux parent-death signal), output relayed to our log with a prefix,
// stopped with SIGTERM then SIGKILL. Knows nothing of HTTP.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"

namespace onebit {

struct ChildSpec {
  std::string binary;
  std::vector<std::string> argv;                                 // after the binary
  std::vector<std::pair<std::string, std::string>> env_added;    // on top of our environment
  std::string log_prefix;                                        // "[primary/vulkan] "
};

// Owns one child. Not copyable; the destructor stops the child if it still runs.
class ChildProcess {
 public:
  // Starts the child. Must be called from a thread that lives as long as the child should
  // (the parent-death signal fires when the forking thread ends): the main thread.
  static Result<std::unique_ptr<ChildProcess>> start(const ChildSpec& spec);

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Non-blocking: the exit status (or 128 + signal) once the child has ended, else nullopt.
  std::optional<int> poll_exit();
  // SIGTERM, then SIGKILL after `grace`; waits for the child. Returns its exit status.
  int stop(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
  std::thread log_thread_;
};

// A TCP port on 127.0.0.1 that is free right now (the kernel's pick), or an error.
Result<int> find_free_loopback_port();

}  // namespace onebit
