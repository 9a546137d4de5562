// The child supervisor: start, readiness polling, monitoring, signals, orderly stop.
#include "serve/supervisor.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
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
  size_t idx;  // in the front's backends (0: the primary)
  ChildSpec spec;
  std::vector<size_t> port_args;          // the spec's arguments that are its port
  std::unique_ptr<ChildProcess> process;  // null while an overflow child waits to restart
  int64_t started_ms = 0;
  bool hung = false;                      // /health unanswered past the child timeout
  int restarts = 0;                       // since it was last ready
  bool ever_ready = false;                // answered /health once since the front started
  int64_t restart_at_ms = 0;
  std::shared_ptr<std::atomic<int64_t>> last_ok_ms = std::make_shared<std::atomic<int64_t>>(0);
};

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Waits up to `timeout` for the next SIGINT/SIGTERM; true when one arrived.
bool wait_for_signal(const sigset_t& set, std::chrono::milliseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>((timeout.count() % 1000) * 1000000)};
  return sigtimedwait(&set, nullptr, &ts) > 0;
}

// Probes a child's /health twice a second on its own thread (a hung child makes a probe wait for
// its read timeout) and records when it last answered 200.
class Prober {
 public:
  Prober(const ChildBackend* child, std::shared_ptr<std::atomic<int64_t>> last_ok)
      : thread_([this, child, last_ok] {
          while (!stop_.load()) {
            if (child_health_ok(child->port())) last_ok->store(now_ms());
            for (int i = 0; i < 5 && !stop_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        }) {}
  ~Prober() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Starts of the primary child after it exited before it ever became ready.
constexpr int kPrimaryStartRetries = 2;

// Seconds an overflow child waits before its next restart: 1, 2, 4 ... 30.
int64_t restart_backoff_ms(int restarts) { return std::min<int64_t>(30000, int64_t{1000} << std::min(restarts, 5)); }

}  // namespace

int run_child_plan(const Plan& plan, const ServeOptions& options, const SupervisorOptions& sup) {
  const sigset_t signals = block_stop_signals();

  std::vector<std::unique_ptr<FrontBackend>> backends;
  std::vector<RunningChild> children;
  for (const auto& b : plan.backends) {
    auto port = find_free_loopback_port();
    if (!port.ok()) {
      std::fprintf(stderr, "1bit serve: %s\n", port.message().c_str());
      return 1;
    }
    auto child = std::make_unique<ChildBackend>(b.role + "/" + b.route, b.route, *port);
    ChildSpec spec{b.binary, b.argv, b.env_added, "[" + b.role + "/" + b.route + "] "};
    RunningChild rc;
    for (size_t i = 0; i < spec.argv.size(); ++i) {
      if (spec.argv[i] != kPortPlaceholder) continue;
      spec.argv[i] = std::to_string(*port);
      rc.port_args.push_back(i);
    }
    rc.backend = child.get();
    rc.idx = children.size();
    rc.spec = std::move(spec);
    children.push_back(std::move(rc));
    backends.push_back(std::move(child));
  }
  FrontOptions fo{plan.host, static_cast<int>(plan.port), plan.alias, options.api_key, sup.max_body_bytes,
                  options.adaptive_at};
  fo.cors_origins = plan.cors_origins;
  Front front(fo, std::move(backends));
  if (auto st = front.bind(); !st.ok()) {
    std::fprintf(stderr, "1bit serve: %s\n", st.message().c_str());
    return 1;
  }
  std::thread server([&] { front.serve(); });
  std::fprintf(stderr, "1bit serve: listening on http://%s:%lld as '%s'; starting %zu llama-server child(ren)\n",
               plan.host.c_str(), static_cast<long long>(plan.port), plan.alias.c_str(), children.size());

  std::vector<std::unique_ptr<Prober>> probers;
  int exit_code = 0;
  auto shut_down = [&] {
    front.stop();
    server.join();
    probers.clear();
    for (auto& c : children) {
      if (c.process) c.process->stop();
    }
  };
  for (auto& c : children) {
    auto proc = ChildProcess::start(c.spec);
    if (!proc.ok()) {
      std::fprintf(stderr, "1bit serve: %s: %s\n", c.backend->label().c_str(), proc.message().c_str());
      shut_down();
      return 1;
    }
    c.process = std::move(*proc);
    c.started_ms = now_ms();
    probers.push_back(std::make_unique<Prober>(c.backend, c.last_ok_ms));
  }

  const int64_t child_timeout_ms = plan.child_timeout_s * 1000;
  const auto deadline = std::chrono::steady_clock::now() + sup.ready_timeout;
  bool all_ready = false;
  for (;;) {
    if (wait_for_signal(signals, std::chrono::milliseconds(100))) {
      shut_down_on_signal(front, signals, static_cast<int>(plan.shutdown_timeout_s * 1000));
      break;
    }
    const int64_t now = now_ms();
    bool stop = false;
    for (auto& c : children) {
      const std::string& label = c.backend->label();
      // Exits: the primary's ends the front (before it was ever ready: started again on a fresh
      // port, kPrimaryStartRetries times); an overflow child is restarted with backoff.
      if (c.process) {
        if (auto status = c.process->poll_exit()) {
          // A primary that exits before it ever answered: most likely its port was taken between
          // find_free_loopback_port and its bind; started again at once on a fresh port, twice.
          if (c.idx == 0 && !c.ever_ready && c.restarts < kPrimaryStartRetries) {
            c.process.reset();
            c.restart_at_ms = now;
            std::fprintf(stderr, "1bit serve: child %s exited with status %d before it was ready; starting it again "
                         "on a fresh port (%d of %d)\n", label.c_str(), *status, c.restarts + 1, kPrimaryStartRetries);
          } else if (c.idx == 0) {
            std::fprintf(stderr, "1bit serve: child %s exited with status %d; stopping\n", label.c_str(), *status);
            exit_code = 1;
            stop = true;
            break;
          }
          c.process.reset();
          c.backend->set_ready(false);
          front.set_backend_available(c.idx, false);
          c.restart_at_ms = now + restart_backoff_ms(c.restarts);
          std::fprintf(stderr, "1bit serve: child %s exited with status %d; the primary goes on; restarting it in %lld s\n",
                       label.c_str(), *status, static_cast<long long>((c.restart_at_ms - now) / 1000));
        }
      }
      if (!c.process && c.restart_at_ms > 0 && now >= c.restart_at_ms) {
        // On a fresh port: another program may have bound the old one since (a child that
        // cannot bind exits at once, and would again on every restart).
        if (auto port = find_free_loopback_port(); port.ok()) {
          c.backend->set_port(*port);
          for (size_t i : c.port_args) c.spec.argv[i] = std::to_string(*port);
        }
        auto proc = ChildProcess::start(c.spec);
        ++c.restarts;
        if (!proc.ok()) {
          c.restart_at_ms = now + restart_backoff_ms(c.restarts);
          std::fprintf(stderr, "1bit serve: restarting %s failed: %s\n", label.c_str(), proc.message().c_str());
          continue;
        }
        c.process = std::move(*proc);
        c.started_ms = now;
        c.restart_at_ms = 0;
      }
      if (!c.process) continue;
      const int64_t last_ok = c.last_ok_ms->load();
      if (!c.backend->ready()) {
        if (last_ok > c.started_ms) {  // answered since it (re)started
          c.backend->set_ready(true);
          c.ever_ready = true;
          if (c.restarts > 0) {
            std::fprintf(stderr, "1bit serve: child %s restarted and ready\n", label.c_str());
            c.restarts = 0;
            front.set_backend_available(c.idx, true);
          }
        }
        continue;
      }
      // A child that stopped answering /health (stopped, deadlocked, swapping) gets no requests,
      // and its replies in progress end with a 504, until it answers again.
      const bool hung = now - last_ok > child_timeout_ms;
      if (hung && !c.hung) {
        c.hung = true;
        front.set_backend_available(c.idx, false);
        const std::string why = "backend " + label + " has not answered for " + std::to_string(plan.child_timeout_s) + " s";
        c.backend->cut_in_flight(why, ApiErrorKind::kGatewayTimeout);
        std::fprintf(stderr, "1bit serve: %s; sending requests elsewhere until it answers\n", why.c_str());
      } else if (!hung && c.hung) {
        c.hung = false;
        front.set_backend_available(c.idx, true);
        std::fprintf(stderr, "1bit serve: backend %s answers again\n", label.c_str());
      }
    }
    if (stop) break;
    if (!all_ready) {
      all_ready = true;
      for (auto& c : children) all_ready = all_ready && c.backend->ready();
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
