// Block tables for a model drafter running ahead of the target (drafter.h): a draft's positions
// from n_computed on have no blocks yet, or share the sequence's last, partly filled block. The
// drafter's pool has scratch blocks past the target's; a run ahead for ask i goes to ask i's
// scratch blocks only, the partly filled block copied there first, so the sequence's own blocks
// (which may be shared through the prefix cache) are never written ahead.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/drafter.h"

namespace onebit {

class AheadTables {
 public:
  // For asks running up to max_ahead positions from n_computed on.
  AheadTables(const DrafterLayout& layout, int32_t max_ahead);

  // Blocks of the drafter's pool: the target's and the scratch ones.
  int32_t pool_blocks() const { return n_blocks_ + max_seqs_ * per_ask_; }
  // Block table entries of one sequence at most.
  int32_t max_blocks() const { return max_blocks_ + per_ask_; }

  // Ask `slot`'s table (0 <= slot < max_seqs): seq's blocks holding only computed positions, then
  // scratch blocks. When n_computed falls inside a block, `copy` = {that block, its scratch
  // block} (to copy before the run), else {-1, -1}.
  void build(const DraftSequence& seq, int32_t slot, std::vector<int32_t>& table, int32_t copy[2]) const;

 private:
  int32_t n_blocks_, block_size_, max_seqs_, max_blocks_, per_ask_;
};

}  // namespace onebit
