// CHECK / DCHECK: invariants that only a bug can break. They abort with file, line and values.
// Never use them for outside input (files, requests, options): return a Result instead.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace onebit::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* expr, const char* msg) {
  std::fprintf(stderr, "CHECK failed at %s:%d: %s%s%s\n", file, line, expr, msg[0] ? " : " : "", msg);
  std::fflush(stderr);
  std::abort();
}
}  // namespace onebit::detail

#define ONEBIT_CHECK(cond)                                                          \
  do {                                                                              \
    if (!(cond)) ::onebit::detail::check_failed(__FILE__, __LINE__, #cond, "");     \
  } while (0)
#define ONEBIT_CHECK_MSG(cond, msg)                                                 \
  do {                                                                              \
    if (!(cond)) ::onebit::detail::check_failed(__FILE__, __LINE__, #cond, (msg));  \
  } while (0)

#ifdef NDEBUG
#define ONEBIT_DCHECK(cond) \
  do {                      \
  } while (0)
#else
#define ONEBIT_DCHECK(cond) ONEBIT_CHECK(cond)
#endif
