// Helpers of the engine tests: one request run to its end.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "engine/engine.h"

namespace onebit::testing {

// Submits `req` and returns the tokens it streams until it finishes, with the final events in
// `last` (left as they are when the submission is refused, which the test fails).
inline std::vector<TokenId> run_to_end(Engine& engine, const SequenceRequest& req, SequenceEvents* last = nullptr) {
  auto h = engine.submit(req);
  EXPECT_TRUE(h.ok()) << h.message();
  std::vector<TokenId> out;
  if (!h.ok()) return out;
  for (;;) {
    SequenceEvents ev = (*h)->wait(1000);
    out.insert(out.end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.finished) {
      if (last) *last = ev;
      return out;
    }
  }
}

}  // namespace onebit::testing
