// Paged K/V bookkeeping: which pool block holds which tokens of which sequence. The pool itself
// (the tensors) belongs to the model runner; this class only hands out block ids. A block holds
// `block_size` consecutive tokens of a sequence. Blocks have reference counts; a full block is
// named by the hash of every token up to its end and stays cached after its sequences end, so a
// later (or concurrent) sequence with the same prefix takes it instead of recomputing it. Free
// blocks are reused clean ones first, then cached ones least recently used first. A block that
// a sequence must write while it is shared or cached is first copied (copy-on-write).
// No model, no threads: the engine's worker drives it; tests drive it alone.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/sequence.h"

namespace onebit {

// Copy the K/V rows of block `src` into block `dst` (every layer) before the step runs.
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

struct BlockManagerStats {
  int64_t prefix_hit_tokens = 0;  // tokens taken from the prefix cache, over all admissions
  int64_t evictions = 0;          // cached blocks reused for other content
  int64_t copies = 0;             // copy-on-write copies
};

class BlockManager {
 public:
  BlockManager(int32_t n_blocks, int32_t block_size);

  int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  // Blocks no sequence holds (clean or cached).
  int32_t n_free() const { return n_free_; }
  // Free blocks that still hold cached content.
  int32_t n_cached_free() const { return n_cached_free_; }
  const BlockManagerStats& stats() const { return stats_; }

  // Leading tokens of `tokens` found in cached full blocks (a multiple of block_size, or all of
  // them when the last block is full too). Does not change anything.
  int32_t cached_prefix(std::span<const TokenId> tokens) const;

  // Gives `seq` (no blocks yet) the cached blocks of its longest cached prefix, at most up to
  // max_tokens, and sets n_computed to the tokens they hold, less one when that would leave
  // nothing to run (the last token is run again for its logits). Returns n_computed.
  int32_t acquire_prefix(Sequence& seq, int32_t max_tokens);

  // Blocks that growing `seq` to hold n_total tokens would take from the free list.
  int32_t blocks_to_grow(const Sequence& seq, int32_t n_total) const;
  bool can_grow(const Sequence& seq, int32_t n_total) const { return blocks_to_grow(seq, n_total) <= n_free_; }
  // Gives `seq` the blocks to hold n_total tokens (CHECKs can_grow). The block where its next
  // token (n_computed) goes is copied first when it is shared or cached: the copy is appended to
  // `copies`, to be done before the step runs.
  void grow(Sequence& seq, int32_t n_total, std::vector<BlockCopy>& copies);

  // After a step computed seq's tokens up to n_computed: the newly full blocks of its first
  // n_valid tokens (all computed ones when negative) get their hash and enter the prefix cache
  // (unless the same content is cached already). Unverified draft tokens are not valid.
  void commit(Sequence& seq, int32_t n_valid = -1);

  // Gives back the blocks past the first n_tokens tokens (rejected draft tokens' K/V).
  void truncate(Sequence& seq, int32_t n_tokens);

  // Releases every block of seq (reference counts drop; cached blocks stay cached) and empties
  // its table; n_computed becomes 0.
  void release(Sequence& seq);

  // Checks the invariants against the sequences that hold blocks (the caller lists them all):
  // free + held = total, every reference count equals the tables that name the block, the free
  // list and the hash map are consistent. For tests; O(n_blocks).
  Status check(std::span<const Sequence* const> holders) const;

  // Hash of a block's tokens chained on the previous block's hash (0 for the first block).
  static uint64_t block_hash(uint64_t prev, std::span<const TokenId> tokens);

 private:
  struct Block {
    int32_t ref = 0;
    uint64_t hash = 0;          // valid when cached
    uint64_t prev_hash = 0;     // the hash of the block before it in its sequence (0: the first)
    bool cached = false;        // in hash_to_block_ (its content is named by `hash`)
    int32_t prev = -1, next = -1;  // free-list links (while ref == 0)
  };
  // The cached block with this hash whose content is `tokens` after a block hashed `prev`, or -1.
  int32_t find_cached(uint64_t hash, uint64_t prev, std::span<const TokenId> tokens) const;
  int32_t take_free();                 // pops the head of the free list (clean first, then LRU)
  void unlink_free(int32_t b);         // removes b from the free list (a cache hit on a free block)
  void push_free(int32_t b);           // clean blocks at the head, cached ones at the tail
  void uncache(int32_t b);
  void unref(int32_t b);

  int32_t block_size_;
  std::vector<Block> blocks_;
  std::vector<TokenId> block_tokens_;  // [n_blocks * block_size] content of cached blocks
  std::unordered_map<uint64_t, int32_t> hash_to_block_;
  int32_t head_ = -1, tail_ = -1;      // free list
  int32_t n_free_ = 0, n_cached_free_ = 0;
  BlockManagerStats stats_;
};

}  // namespace onebit
