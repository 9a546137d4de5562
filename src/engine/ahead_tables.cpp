// Scratch block tables of drafts; see ahead_tables.h.
#include "engine/ahead_tables.h"

#include "base/check.h"

namespace onebit {

AheadTables::AheadTables(const DrafterLayout& l, int32_t max_ahead)
    : n_blocks_(l.n_blocks), block_size_(l.block_size), max_seqs_(l.max_seqs), max_blocks_(l.max_blocks),
      // positions n_computed .. n_computed + max_ahead - 1 span this many blocks at most
      per_ask_((l.block_size - 1 + max_ahead + l.block_size - 1) / l.block_size) {}

void AheadTables::build(const DraftSequence& seq, int32_t slot, std::vector<int32_t>& table, int32_t copy[2]) const {
  ONEBIT_CHECK(slot >= 0 && slot < max_seqs_);
  const int32_t full = seq.n_computed / block_size_;  // blocks holding computed positions only
  ONEBIT_CHECK(static_cast<int32_t>(seq.block_table.size()) >= full);
  table.assign(seq.block_table.begin(), seq.block_table.begin() + full);
  const int32_t scratch = n_blocks_ + slot * per_ask_;
  for (int32_t j = 0; j < per_ask_; ++j) table.push_back(scratch + j);
  copy[0] = copy[1] = -1;
  if (seq.n_computed % block_size_ != 0) {
    copy[0] = seq.block_table[size_t(full)];
    copy[1] = scratch;
  }
}

}  // namespace onebit
