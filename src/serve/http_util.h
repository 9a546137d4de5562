// Small helpers shared by the front, the proxy and the serving loops: OpenAI error replies on an
// HTTP response, and the stop signals the main thread waits for.
#pragma once

#include <signal.h>

#include <string>

#include "http/http.h"

#include "api/openai_error.h"

namespace onebit {

// Sets the status of `kind` and an OpenAI error body {"error":{"code","message","type"}}.
inline void set_error(http::Response& res, ApiErrorKind kind, const std::string& message) {
  res.status = http_status(kind);
  res.set_content(error_body({kind, message}).dump(), "application/json");
}

// Blocks SIGINT and SIGTERM in this thread and every thread it starts later (the main thread then
// takes them with sigtimedwait), and ignores SIGPIPE (a client that went away is not fatal).
inline sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return signals;
}

}  // namespace onebit
