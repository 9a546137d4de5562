// Runs a Plan whose backends are llama-server children: binds the front, starts each child on a
// free loopback port, waits for readiness, serves, and exits non-zero if a child dies.
#pragma once

#include <chrono>

#include "serve/plan.h"

namespace onebit {

struct SupervisorOptions {
  std::chrono::seconds ready_timeout{600};  // a child that is not healthy by then is an error
  size_t max_body_bytes = 16 * 1024 * 1024;
};

// Blocks until SIGINT/SIGTERM (exit code 0) or a failure (a child died, a child never became
// ready, the port could not be bound: non-zero). Must run on the main thread.
int run_child_plan(const Plan& plan, const ServeOptions& options, const SupervisorOptions& sup = {});

}  // namespace onebit
