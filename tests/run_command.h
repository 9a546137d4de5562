// Runs a shell command for black-box tests of the `1bit` binary: exit code, stdout, stderr.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

namespace onebit::testing {

struct CommandResult {
  int exit_code = -1;  // the process's exit status, or 128 + signal when it was killed
  std::string out;
  std::string err;
};

inline std::string read_whole_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `command` with /bin/sh, capturing both streams through temporary files.
inline CommandResult run_command(const std::string& command) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string stem = "onebit_cmd_" + std::to_string(::getpid()) + "_" + std::to_string(std::rand());
  const std::string out_path = (dir / (stem + ".out")).string();
  const std::string err_path = (dir / (stem + ".err")).string();
  const std::string full = command + " >" + out_path + " 2>" + err_path;
  int status = std::system(full.c_str());
  CommandResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  r.out = read_whole_file(out_path);
  r.err = read_whole_file(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return r;
}

}  // namespace onebit::testing
