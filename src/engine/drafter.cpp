// Drafters; see drafter.h. Prompt lookup follows Saxena's "prompt lookup decoding" and llama.cpp's
// n-gram lookup: match the recent tokens earlier in the context, propose what followed.
#include "engine/drafter.h"

#include <algorithm>

namespace onebit {

void NgramDrafter::propose(std::span<const DraftAsk> asks) {
  for (const DraftAsk& a : asks) propose_one(a.seq.tokens, a.max, *a.out);
}

void NgramDrafter::propose_one(std::span<const TokenId> context, int32_t max, std::vector<TokenId>& out) const {
  const int64_t len = static_cast<int64_t>(context.size());
  if (max <= 0) return;
  for (int64_t n = std::min<int64_t>(n_max_, len - 1); n >= n_min_; --n) {
    const auto suffix = context.last(static_cast<size_t>(n));
    // The latest earlier start j of the suffix (j + n < len: it ends before the suffix does).
    for (int64_t j = len - n - 1; j >= 0; --j) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + j)) continue;
      const int64_t from = j + n, to = std::min(len, from + max);
      out.insert(out.end(), context.begin() + from, context.begin() + to);
      return;
    }
  }
}

}  // namespace onebit
