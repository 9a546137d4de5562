// What the engine asks of a constraint on a sequence's tokens (a grammar, a JSON schema): which
// tokens may come next, and the advance over the token chosen. One instance per sequence, used
// by the engine's worker thread only.
#pragma once

#include <cstdint>
#include <span>

namespace onebit {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token that may not come next to -inf; returns how many may.
  // `budget` is how many tokens may still be generated, this one included: near the end of it a
  // constraint may keep only the tokens that can still complete its text in time.
  virtual int32_t mask(std::span<float> logits, int32_t budget) = 0;
  // Advances over `token`; false (nothing changed) when the constraint does not allow it.
  virtual bool accept(int32_t token) = 0;
  // True once the text is complete and nothing may follow: the reply ends here.
  virtual bool finished() const = 0;
};

}  // namespace onebit
