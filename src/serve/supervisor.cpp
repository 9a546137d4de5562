// The child supervisor: start, readiness polling, monitoring, signals, orderly stop.
#include "serve/supervisor.h"

#include <signal.h>

#include <cstdio>
#include <thread>

#include "serve/child_process.h"
#include "serve/front.h"
#include "serve/http_util.h"
#include "serve/proxy.h"

namespace onebit {
namespace {

struct RunningChild {
  ChildBackend* backend;
  std::unique_ptr<ChildProcess> process;
};

// Waits up to `timeout` for the next SIGINT/SIGTERM; true when one arrived.
bool wait_for_signal(const sigset_t& set, std::chrono::milliseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>((timeout.count() % 1000) * 1000000)};
  return sigtimedwait(&set, nullptr, &ts) > 0;
}

// Returns the first child that has exited, with its status.
std::optional<std::pair<const RunningChild*, int>> dead_child(std::vector<RunningChild>& children) {
  for (auto& c : children) {
    if (auto status = c.process->poll_exit()) return std::make_pair(&c, *status);
  }
  return std::nullopt;
}

}  // namespace

int run_child_plan(const Plan& plan, const ServeOptions& options, const SupervisorOptions& sup) {
  const sigset_t signals = block_stop_signals();

  std::vector<std::unique_ptr<FrontBackend>> backends;
  std::vector<std::pair<ChildBackend*, ChildSpec>> specs;
  for (const auto& b : plan.backends) {
    auto port = find_free_loopback_port();
    if (!port.ok()) {
      std::fprintf(stderr, "1bit serve: %s\n", port.message().c_str());
      return 1;
    }
    auto child = std::make_unique<ChildBackend>(b.role + "/" + b.route, b.route, *port);
    ChildSpec spec{b.binary, b.argv, b.env_added, "[" + b.role + "/" + b.route + "] "};
    for (auto& a : spec.argv)
      if (a == kPortPlaceholder) a = std::to_string(*port);
    specs.emplace_back(child.get(), std::move(spec));
    backends.push_back(std::move(child));
  }
  FrontOptions fo{plan.host, static_cast<int>(plan.port), plan.alias, options.api_key, sup.max_body_bytes,
                  options.adaptive_at};
  Front front(fo, std::move(backends));
  if (auto st = front.bind(); !st.ok()) {
    std::fprintf(stderr, "1bit serve: %s\n", st.message().c_str());
    return 1;
  }
  std::thread server([&] { front.serve(); });
  std::fprintf(stderr, "1bit serve: listening on http://%s:%lld as '%s'; starting %zu llama-server child(ren)\n",
               plan.host.c_str(), static_cast<long long>(plan.port), plan.alias.c_str(), specs.size());

  std::vector<RunningChild> children;
  int exit_code = 0;
  auto shut_down = [&] {
    front.stop();
    server.join();
    for (auto& c : children) c.process->stop();
  };
  for (auto& [backend, spec] : specs) {
    auto proc = ChildProcess::start(spec);
    if (!proc.ok()) {
      std::fprintf(stderr, "1bit serve: %s: %s\n", backend->label().c_str(), proc.message().c_str());
      shut_down();
      return 1;
    }
    children.push_back({backend, std::move(*proc)});
  }

  const auto deadline = std::chrono::steady_clock::now() + sup.ready_timeout;
  bool all_ready = false;
  for (;;) {
    if (wait_for_signal(signals, std::chrono::milliseconds(100))) break;
    if (auto dead = dead_child(children)) {
      std::fprintf(stderr, "1bit serve: child %s exited with status %d; stopping\n",
                   dead->first->backend->label().c_str(), dead->second);
      exit_code = 1;
      break;
    }
    if (!all_ready) {
      all_ready = true;
      for (auto& c : children) {
        if (!c.backend->ready() && child_health_ok(c.backend->port())) c.backend->set_ready(true);
        all_ready = all_ready && c.backend->ready();
      }
      if (all_ready) {
        front.set_ready(true);
        std::fprintf(stderr, "1bit serve: ready\n");
      } else if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "1bit serve: a llama-server child was not ready within %lld s; stopping\n",
                     static_cast<long long>(sup.ready_timeout.count()));
        exit_code = 1;
        break;
      }
    }
  }
  front.set_ready(false);
  std::fprintf(stderr, "1bit serve: requests per backend: %s\n", front.counts_summary().c_str());
  shut_down();
  return exit_code;
}

}  // namespace onebit
