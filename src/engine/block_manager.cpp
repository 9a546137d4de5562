// Paged K/V bookkeeping; see block_manager.h. The free list is one doubly linked list through the
// blocks: clean blocks are pushed at the head, cached ones at the tail, and blocks are taken from
// the head, so a cached block is reused only when no clean one is left, the least recently
// released first. (nano-vllm's BlockManager is the model: ref counts, prefix hashes of full
// blocks, a hash -> block map checked against the tokens.)
#include "engine/block_manager.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace onebit {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t BlockManager::block_hash(uint64_t prev, std::span<const TokenId> tokens) {
  uint64_t h = splitmix64(prev ^ 0x6A09E667F3BCC909ull);
  for (TokenId t : tokens) h = splitmix64(h ^ static_cast<uint32_t>(t));
  return h;
}

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size)
    : block_size_(block_size), blocks_(static_cast<size_t>(n_blocks)),
      block_tokens_(static_cast<size_t>(n_blocks) * static_cast<size_t>(block_size)) {
  ONEBIT_CHECK(n_blocks >= 1 && block_size >= 1);
  for (int32_t b = n_blocks - 1; b >= 0; --b) push_free(b);  // block 0 at the head
}

int32_t BlockManager::find_cached(uint64_t hash, uint64_t prev, std::span<const TokenId> tokens) const {
  const auto it = hash_to_block_.find(hash);
  if (it == hash_to_block_.end()) return -1;
  const Block& b = blocks_[it->second];
  const TokenId* content = block_tokens_.data() + static_cast<size_t>(it->second) * block_size_;
  if (b.prev_hash != prev || !std::equal(tokens.begin(), tokens.end(), content)) return -1;
  return it->second;
}

int32_t BlockManager::cached_prefix(std::span<const TokenId> tokens) const {
  const size_t bs = static_cast<size_t>(block_size_);
  uint64_t prev = 0;
  size_t n = 0;
  while (n + bs <= tokens.size()) {
    const auto block = tokens.subspan(n, bs);
    const uint64_t h = block_hash(prev, block);
    if (find_cached(h, prev, block) < 0) break;
    prev = h;
    n += bs;
  }
  return static_cast<int32_t>(n);
}

int32_t BlockManager::acquire_prefix(Sequence& seq, int32_t max_tokens) {
  ONEBIT_CHECK(seq.block_table.empty() && seq.n_computed == 0 && !seq.tokens.empty());
  seq.hashes.clear();
  const size_t bs = static_cast<size_t>(block_size_);
  const size_t limit = std::min(seq.tokens.size(), static_cast<size_t>(std::max(max_tokens, 0)));
  const std::span<const TokenId> tokens(seq.tokens);
  uint64_t prev = 0;
  for (size_t n = 0; n + bs <= limit; n += bs) {
    const auto block = tokens.subspan(n, bs);
    const uint64_t h = block_hash(prev, block);
    const int32_t b = find_cached(h, prev, block);
    if (b < 0) break;
    if (blocks_[b].ref == 0) unlink_free(b);
    ++blocks_[b].ref;
    seq.block_table.push_back(b);
    seq.hashes.push_back(h);
    prev = h;
  }
  const int32_t held = static_cast<int32_t>(seq.block_table.size() * bs);
  seq.n_computed = std::min(held, static_cast<int32_t>(seq.tokens.size()) - 1);
  stats_.prefix_hit_tokens += seq.n_computed;
  return seq.n_computed;
}

int32_t BlockManager::blocks_to_grow(const Sequence& seq, int32_t n_total) const {
  const int32_t have = static_cast<int32_t>(seq.block_table.size());
  const int32_t want = (n_total + block_size_ - 1) / block_size_;
  int32_t need = std::max(0, want - have);
  const int32_t idx = seq.n_computed / block_size_;
  if (idx < have && n_total > seq.n_computed) {
    const Block& b = blocks_[seq.block_table[idx]];
    if (b.ref > 1 || b.cached) ++need;  // copy-on-write of the block the next token goes into
  }
  return need;
}

void BlockManager::grow(Sequence& seq, int32_t n_total, std::vector<BlockCopy>& copies) {
  ONEBIT_CHECK(can_grow(seq, n_total));
  const int32_t idx = seq.n_computed / block_size_;
  if (idx < static_cast<int32_t>(seq.block_table.size()) && n_total > seq.n_computed) {
    const int32_t old = seq.block_table[idx];
    if (blocks_[old].ref > 1 || blocks_[old].cached) {
      const int32_t fresh = take_free();
      blocks_[fresh].ref = 1;
      copies.push_back({old, fresh});
      ++stats_.copies;
      unref(old);
      seq.block_table[idx] = fresh;
    }
  }
  const size_t want = static_cast<size_t>((n_total + block_size_ - 1) / block_size_);
  while (seq.block_table.size() < want) {
    const int32_t b = take_free();
    blocks_[b].ref = 1;
    seq.block_table.push_back(b);
  }
}

void BlockManager::commit(Sequence& seq, int32_t n_valid) {
  const size_t bs = static_cast<size_t>(block_size_);
  const size_t full = static_cast<size_t>(n_valid < 0 ? seq.n_computed : std::min(n_valid, seq.n_computed)) / bs;
  ONEBIT_CHECK(full <= seq.block_table.size());
  const std::span<const TokenId> tokens(seq.tokens);
  for (size_t i = seq.hashes.size(); i < full; ++i) {
    const uint64_t prev = i == 0 ? 0 : seq.hashes[i - 1];
    const auto block = tokens.subspan(i * bs, bs);
    const uint64_t h = block_hash(prev, block);
    seq.hashes.push_back(h);
    const int32_t b = seq.block_table[i];
    Block& blk = blocks_[b];
    ONEBIT_CHECK_MSG(!blk.cached, "a cached block was written without a copy");
    if (hash_to_block_.count(h)) continue;  // the same content is cached in another block already
    blk.cached = true;
    blk.hash = h;
    blk.prev_hash = prev;
    std::copy(block.begin(), block.end(), block_tokens_.begin() + static_cast<ptrdiff_t>(b * bs));
    hash_to_block_.emplace(h, b);
  }
}

void BlockManager::truncate(Sequence& seq, int32_t n_tokens) {
  const size_t keep = static_cast<size_t>((n_tokens + block_size_ - 1) / block_size_);
  ONEBIT_CHECK(keep >= seq.hashes.size());
  while (seq.block_table.size() > keep) {
    unref(seq.block_table.back());
    seq.block_table.pop_back();
  }
}

void BlockManager::release(Sequence& seq) {
  // Last block first: the tail of a prefix is evicted before its head (the head is more shared).
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) unref(*it);
  seq.block_table.clear();
  seq.hashes.clear();
  seq.n_computed = 0;
}

int32_t BlockManager::take_free() {
  ONEBIT_CHECK(head_ >= 0);
  const int32_t b = head_;
  unlink_free(b);
  if (blocks_[b].cached) {
    uncache(b);
    ++stats_.evictions;
  }
  return b;
}

void BlockManager::unlink_free(int32_t b) {
  Block& blk = blocks_[b];
  ONEBIT_CHECK(blk.ref == 0);
  (blk.prev >= 0 ? blocks_[blk.prev].next : head_) = blk.next;
  (blk.next >= 0 ? blocks_[blk.next].prev : tail_) = blk.prev;
  blk.prev = blk.next = -1;
  --n_free_;
  if (blk.cached) --n_cached_free_;
}

void BlockManager::push_free(int32_t b) {
  Block& blk = blocks_[b];
  if (blk.cached) {  // at the tail: reused last
    blk.prev = tail_;
    blk.next = -1;
    (tail_ >= 0 ? blocks_[tail_].next : head_) = b;
    tail_ = b;
    ++n_cached_free_;
  } else {  // at the head: reused first
    blk.prev = -1;
    blk.next = head_;
    (head_ >= 0 ? blocks_[head_].prev : tail_) = b;
    head_ = b;
  }
  ++n_free_;
}

void BlockManager::uncache(int32_t b) {
  Block& blk = blocks_[b];
  const auto it = hash_to_block_.find(blk.hash);
  ONEBIT_CHECK(it != hash_to_block_.end() && it->second == b);
  hash_to_block_.erase(it);
  blk.cached = false;
}

void BlockManager::unref(int32_t b) {
  Block& blk = blocks_[b];
  ONEBIT_CHECK(blk.ref > 0);
  if (--blk.ref == 0) push_free(b);
}

Status BlockManager::check(std::span<const Sequence* const> holders) const {
  const size_t n = blocks_.size();
  std::vector<int32_t> refs(n, 0);
  for (const Sequence* s : holders) {
    for (int32_t b : s->block_table) {
      if (b < 0 || static_cast<size_t>(b) >= n) return make_error("block id " + std::to_string(b) + " out of range");
      ++refs[b];
    }
    if (static_cast<size_t>(s->n_computed) > s->block_table.size() * block_size_) {
      return make_error("sequence " + std::to_string(s->id) + " has computed tokens beyond its blocks");
    }
  }
  int32_t n_zero = 0, n_cached_zero = 0;
  for (size_t b = 0; b < n; ++b) {
    if (refs[b] != blocks_[b].ref) {
      return make_error("block " + std::to_string(b) + " has ref " + std::to_string(blocks_[b].ref) + " but " +
                        std::to_string(refs[b]) + " tables name it");
    }
    if (blocks_[b].ref == 0) ++n_zero, n_cached_zero += blocks_[b].cached ? 1 : 0;
    if (blocks_[b].cached) {
      const auto it = hash_to_block_.find(blocks_[b].hash);
      if (it == hash_to_block_.end() || it->second != static_cast<int32_t>(b)) {
        return make_error("cached block " + std::to_string(b) + " is not in the hash map");
      }
    }
  }
  for (const auto& [h, b] : hash_to_block_) {
    if (!blocks_[b].cached || blocks_[b].hash != h) return make_error("hash map names a block not cached under it");
  }
  int32_t listed = 0, prev = -1;
  bool seen_cached = false;
  for (int32_t b = head_; b >= 0; prev = b, b = blocks_[b].next) {
    if (++listed > static_cast<int32_t>(n)) return make_error("free list has a cycle");
    if (blocks_[b].ref != 0) return make_error("block " + std::to_string(b) + " is free and held");
    if (blocks_[b].prev != prev) return make_error("free list back link broken at " + std::to_string(b));
    if (blocks_[b].cached) {
      seen_cached = true;
    } else if (seen_cached) {
      return make_error("clean free block " + std::to_string(b) + " after a cached one");
    }
  }
  if (prev != tail_) return make_error("free list tail is wrong");
  if (listed != n_zero || n_free_ != n_zero || n_cached_free_ != n_cached_zero) {
    return make_error("free count " + std::to_string(n_free_) + ", listed " + std::to_string(listed) +
                      ", unheld " + std::to_string(n_zero));
  }
  return ok_status();
}

}  // namespace onebit
