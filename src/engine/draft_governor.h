// Whether drafting pays, as measured: the engine's promise that adaptive drafting is never slower
// than drafting off rests here, not on the cost model alone (engine.h: worthwhile_draft), whose
// line through step times misses what it does not model (a 2-token step costing 1.7x a 1-token one
// on a compute-bound CPU, the drafter catching up on positions it has not seen, sampling).
//
// Per bucket of decoding sequences (1, 2, 3-4, 5-8, .. 65+), the time per token the engine gives in
// its turns with drafts (the drafter's work, the step, sampling) against its turns without. A
// bucket cycles through:
//   off    no drafting; plain turns set the baseline; after `wait` of them, a trial;
//   trial  drafting as the cost model picks it, until kTrialTurns turns carried drafts: when those
//          gave tokens faster than the baseline by kMargin, on; else (or as soon as kQuickTurns
//          drafted turns were kQuickLoss slower) off, for twice as long as the last time
//          (kRetryWait .. kMaxWait turns), so a drafter that does not pay costs a vanishing share
//          of the turns; each verdict that drafting paid halves that wait again, so a drafter
//          that pays only now and then (a stretch of repetitive text) keeps long waits;
//   on     drafting, judged again every kTrialTurns drafted turns (a failed verdict: off as
//          after a failed trial); after kOnTurns turns off for kFirstWait turns to measure the
//          baseline afresh, then a trial.
#pragma once

#include <array>
#include <cstdint>

namespace onebit {

class DraftGovernor {
 public:
  static constexpr int32_t kFirstWait = 16;    // plain turns before the first trial (the baseline)
  static constexpr int32_t kRetryWait = 64;    // plain turns after the first failed trial; doubles
  static constexpr int32_t kMaxWait = 4096;    // plain turns between trials at most
  static constexpr int32_t kTrialTurns = 16;   // drafted turns a verdict rests on
  static constexpr int32_t kQuickTurns = 4;    // drafted turns enough to find drafting
  static constexpr double kQuickLoss = 1.25;   // this much slower (time per token) than the baseline
  static constexpr int32_t kOnTurns = 512;     // turns on before the baseline is measured afresh
  static constexpr double kMargin = 0.03;      // drafting must give tokens this much faster

  // May the coming turn draft, with n_decoding sequences decoding?
  bool allows(int32_t n_decoding) const;
  // After a decode-only turn (no prompt tokens) of n_decoding sequences: whether it carried a
  // draft, its time, and the tokens it gave (kept drafts and each sequence's own token).
  void record(int32_t n_decoding, bool drafted, double ms, int32_t tokens);
  // Verdicts so far (every bucket): drafting paid, or did not (it went off).
  int64_t verdicts_paid() const { return paid_; }
  int64_t verdicts_failed() const { return failed_; }

 private:
  enum class State { kOff, kTrial, kOn };
  struct Bucket {
    State state = State::kOff;
    int32_t turns = 0;                     // plain turns (off), all turns (on); unused in a trial
    int32_t wait = kFirstWait;             // plain turns of this off period
    int32_t backoff = kRetryWait / 2;      // half the off period after the next failed verdict
    double plain_ms = 0, plain_tokens = 0;  // fading sums over plain turns
    double draft_ms = 0, draft_tokens = 0;  // sums over the trial's (or on period's) drafted turns
    int32_t drafted = 0;                    // drafted turns in those sums
  };
  static int32_t bucket_of(int32_t n_decoding);
  // Drafted turns' time per token against the baseline's: true when drafting gives tokens at
  // least `margin` faster (a negative margin: at most -margin slower).
  static bool pays(const Bucket& b, double margin);
  static void turn_off(Bucket& b, int32_t wait);

  std::array<Bucket, 8> buckets_{};
  int64_t paid_ = 0, failed_ = 0;
};

}  // namespace onebit
