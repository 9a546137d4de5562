// The progress display of `1bit bench` on stderr: on a terminal one status line rewritten in
// place ("round 1/2 · base · decode prose 2/3 · 41.2 tok/s"); otherwise one line per finished step.
#pragma once

#include <mutex>
#include <string>

namespace onebit {

class Progress {
 public:
  // `tty`: rewrite one line (true) or print finished steps only (false). `quiet` prints nothing.
  explicit Progress(bool tty, bool quiet = false) : tty_(tty), quiet_(quiet) {}
  // True when stderr is a terminal.
  static bool stderr_is_tty();

  // What is running now (a terminal shows it; a log does not).
  void status(const std::string& line);
  // A finished step with its result: rewritten in place on a terminal, a new line otherwise.
  void step(const std::string& line);
  // A message that must stay (a warning, a phase end): clears the status line first.
  void note(const std::string& line);
  // Clears the status line (before the final output).
  void finish();

 private:
  void write_status(const std::string& line);
  std::mutex mu_;
  bool tty_;
  bool quiet_;
  bool line_shown_ = false;
};

}  // namespace onebit
