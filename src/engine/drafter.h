// Drafters for speculative decoding: a drafter proposes the next tokens of a sequence, the target
// model verifies them all in one step (engine.h), and the sampler keeps or replaces each one so
// the output is exactly the target's (sampler.h).
//
// Token drafters (n-gram) read the tokens only. Model drafters (MTP head, DFlash, draft model;
// model_drafters.h) keep K/V of their own in a pool that mirrors the target's: the same blocks,
// the same block size, a sequence's entry for position p in the slot where the target keeps
// position p. The engine's block manager (allocation, prefix cache, preemption, rollback) thus
// governs both pools; the drafter adds scratch blocks of its own for the positions a draft runs
// ahead of the target. After every step the engine shows the drafter the positions the target
// computed and kept, with the target's hidden rows the drafter asked for (observe); before a step
// it asks for drafts (propose). Every call comes from the engine's worker thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/block_manager.h"
#include "model/model.h"

namespace onebit {

// The target pool a model drafter mirrors, and the largest calls it will get (Drafter::start).
struct DrafterLayout {
  int32_t n_blocks = 0;       // the target pool's blocks
  int32_t block_size = 16;
  int32_t max_blocks = 0;     // block table entries of a sequence at most (the context)
  int32_t max_seqs = 1;       // sequences of one observe or propose call at most
  int32_t max_tokens = 512;   // positions of one observe call at most (a step's tokens)
  int32_t max_draft = 3;      // tokens of one proposal at most
  GgmlType cache_type = GgmlType::kF16;
};

// One sequence as a drafter sees it.
struct DraftSequence {
  int64_t id = 0;
  std::span<const TokenId> tokens;       // prompt, verified reply, the token just sampled; no draft
  std::span<const int32_t> block_table;  // the sequence's blocks (target pool ids)
  int32_t n_computed = 0;                // positions whose K/V are in the blocks (the target's,
                                         // and the drafter's entries as far as it observed them)
};

// Positions [first, first + n) of a sequence, computed by the target and kept (a rejected draft's
// positions are never shown), following on what the drafter saw of it before, or starting over at
// or before that end (a recomputation after a preemption; at a cached prefix's end for a new
// sequence). first + n <= seq.n_computed, and tokens[first + n] exists. The engine shows a
// sequence lazily (before it drafts, or when much is unseen), and a long range in pieces, in order,
// the last ending at n_computed. rows: the target's outputs for those positions of the layers
// target_layers() names, concatenated per position ([n, row_width]); empty when it names none.
struct DraftObservation {
  DraftSequence seq;
  int32_t first = 0;
  int32_t n = 0;
  std::span<const float> rows;
};

// A request for up to `max` tokens to follow seq.tokens (which end at the token just sampled,
// position seq.n_computed). The drafter appends what it proposes to `out` (maybe nothing).
struct DraftAsk {
  DraftSequence seq;
  int32_t max = 1;
  std::vector<TokenId>* out = nullptr;
};

class Drafter {
 public:
  virtual ~Drafter() = default;

  // Target layers (0-based; the last layer is the one before output_norm) whose outputs, before
  // any norm, every observation carries, in this order. Empty: the drafter needs none (the target
  // then pays nothing for it).
  virtual std::vector<int32_t> target_layers() const { return {}; }
  // Called once before any other call: allocate what the drafter keeps. Errors name the cause.
  virtual Status start(const DrafterLayout& layout) {
    (void)layout;
    return ok_status();
  }
  // Blocks the target's pool copies before a step (copy-on-write): a mirroring drafter copies its own.
  virtual void copy_blocks(std::span<const BlockCopy> copies) { (void)copies; }
  // What the target computed and kept, per sequence (sequences of pool 0 only), before they draft;
  // at most DrafterLayout::max_tokens positions per call.
  virtual void observe(std::span<const DraftObservation> runs) { (void)runs; }
  // Proposes for every ask (one call per step, batched).
  virtual void propose(std::span<const DraftAsk> asks) = 0;
  // The sequence ended: forget what is kept for it.
  virtual void forget(int64_t seq_id) { (void)seq_id; }
};

// Prompt lookup ("--ngram"): the tokens that followed the latest earlier occurrence of the
// context's last n tokens, for n from n_max down to n_min (longer matches first).
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(int32_t n_min = 2, int32_t n_max = 4) : n_min_(n_min), n_max_(n_max) {}
  void propose(std::span<const DraftAsk> asks) override;
  // One context's proposal (what propose does per ask).
  void propose_one(std::span<const TokenId> context, int32_t max, std::vector<TokenId>& out) const;

 private:
  int32_t n_min_, n_max_;
};

}  // namespace onebit
