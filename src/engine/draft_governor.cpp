// Whether drafting pays, as measured; see draft_governor.h.
#include "engine/draft_governor.h"

#include <algorithm>

namespace onebit {

int32_t DraftGovernor::bucket_of(int32_t n_decoding) {
  int32_t b = 0;  // 1 -> 0, 2 -> 1, 3-4 -> 2, 5-8 -> 3, .., 65+ -> 7
  for (int32_t n = std::max(n_decoding, 1) - 1; n > 0 && b + 1 < 8; n >>= 1) ++b;
  return b;
}

bool DraftGovernor::allows(int32_t n_decoding) const { return buckets_[size_t(bucket_of(n_decoding))].state != State::kOff; }

bool DraftGovernor::pays(const Bucket& b, double margin) {
  if (b.plain_tokens <= 0.0) return true;  // no baseline: nothing to hold drafting to
  return b.draft_ms * b.plain_tokens < (1.0 - margin) * b.plain_ms * b.draft_tokens;
}

void DraftGovernor::turn_off(Bucket& b, int32_t wait) {
  b.state = State::kOff;
  b.turns = 0;
  b.wait = wait;
}

void DraftGovernor::record(int32_t n_decoding, bool drafted, double ms, int32_t tokens) {
  if (tokens <= 0 || ms < 0.0) return;
  Bucket& b = buckets_[size_t(bucket_of(n_decoding))];
  if (!drafted) {  // the baseline: about the last 16 plain turns
    constexpr double kKeep = 15.0 / 16.0;
    b.plain_ms = kKeep * b.plain_ms + ms;
    b.plain_tokens = kKeep * b.plain_tokens + tokens;
  }
  auto start_counting = [&b] {
    b.turns = 0;
    b.drafted = 0;
    b.draft_ms = b.draft_tokens = 0.0;
  };
  switch (b.state) {
    case State::kOff:
      if (!drafted && ++b.turns >= b.wait) {
        b.state = State::kTrial;
        start_counting();
      }
      return;
    case State::kTrial:
    case State::kOn:
      if (b.state == State::kOn) ++b.turns;
      if (drafted) {
        b.draft_ms += ms;
        b.draft_tokens += tokens;
        ++b.drafted;
      }
      if (b.drafted >= kTrialTurns || (b.drafted >= kQuickTurns && !pays(b, 1.0 - kQuickLoss))) {
        if (!pays(b, kMargin)) {
          ++failed_;
          b.backoff = std::min(2 * b.backoff, kMaxWait);
          turn_off(b, b.backoff);
          return;
        }
        ++paid_;
        b.backoff = std::max(kRetryWait / 2, b.backoff / 2);  // paid: the waits shrink again
        if (b.state == State::kTrial) {
          b.state = State::kOn;
          start_counting();
        } else {  // on: judge the next kTrialTurns drafted turns afresh, keep counting turns
          b.drafted = 0;
          b.draft_ms = b.draft_tokens = 0.0;
        }
      }
      if (b.state == State::kOn && b.turns >= kOnTurns) turn_off(b, kFirstWait);  // a fresh baseline
      return;
  }
}

}  // namespace onebit
