// A sequence as the scheduler and the block manager see it: plain state, no behaviour. Its tokens
// are the prompt then every token sampled so far; the first n_computed of them have their K/V in
// the sequence's blocks (block_table), and the rest run in coming steps. A preempted sequence
// keeps its tokens and loses its blocks: it is recomputed later (from the prefix cache if the
// blocks are still there), so a prompt and a recomputation are the same thing: tokens to run.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace onebit {

enum class SequenceStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  int64_t id = 0;                     // arrival order: lower ids came first
  int32_t pool = 0;                   // slot pool (0 primary, 1 overflow under --adaptive)
  std::vector<TokenId> tokens;        // [n_prompt + generated]
  int32_t n_prompt = 0;
  int32_t n_computed = 0;             // leading tokens whose K/V are in the blocks
  int32_t n_draft = 0;                // trailing tokens that a drafter proposed, not yet verified
  int32_t n_cached = 0;               // of those, taken from the prefix cache at the first admission
  bool cache_prompt = true;           // look the prompt up in the prefix cache
  bool every_row = false;             // needs every token run (mean/cls embeddings): never takes a
                                      // cached prefix, not even after a preemption
  bool admitted_once = false;         // n_cached is set
  std::vector<int32_t> block_table;   // [ceil(n_computed + scheduled) / block_size] pool blocks
  std::vector<uint64_t> hashes;       // prefix hash of each leading full block committed so far
  SequenceStatus status = SequenceStatus::kWaiting;
  int32_t n_preemptions = 0;
  int32_t state_row = -1;             // recurrent models: its state row while running, else -1

  // Tokens still to run (>= 1 while the sequence lives: the prompt rest, or the last sample and
  // its draft).
  int32_t n_pending() const { return static_cast<int32_t>(tokens.size()) - n_computed; }
};

}  // namespace onebit
