// Drafters for speculative decoding: a drafter proposes the next tokens of a sequence, the target
// model verifies them all in one step (engine.h), and the sampler keeps or replaces each one so
// the output is exactly the target's (sampler.h). Knows tokens only: no model here yet (the MTP,
// DFlash and draft-model drafters will read the step output's hidden states).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace onebit {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Appends up to `max` proposed tokens to follow `context` (prompt, reply, and the token just
  // sampled) to `out`; may append none.
  virtual void propose(std::span<const TokenId> context, int32_t max, std::vector<TokenId>& out) const = 0;
};

// Prompt lookup ("--ngram"): the tokens that followed the latest earlier occurrence of the
// context's last n tokens, for n from n_max down to n_min (longer matches first).
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(int32_t n_min = 2, int32_t n_max = 4) : n_min_(n_min), n_max_(n_max) {}
  void propose(std::span<const TokenId> context, int32_t max, std::vector<TokenId>& out) const override;

 private:
  int32_t n_min_, n_max_;
};

}  // namespace onebit
