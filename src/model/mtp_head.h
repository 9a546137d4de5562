// The MTP head (`qwen3_mtp` GGUF, docs/models.md): entry p = eh_proj([enorm(embed(token p+1));
// hnorm(h_p)]), one Qwen3 block with its own paged K/V, shared_head_norm and the target's output
// matrix. The forward of a batch of entries; which entries to run is the caller's (engine drafter).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "model/model.h"
#include "model/qwen3_block.h"

namespace onebit {

class MtpHead {
 public:
  // Binds the head's tensors from `file` (which must outlive the head) on the target's backend,
  // sharing the target's token_embd / output. Errors name the key, tensor or geometry mismatch.
  static Result<std::unique_ptr<MtpHead>> load(const GgufFile& file, Model& target);
  ~MtpHead();

  const BlockDims& dims() const { return d_; }
  int32_t vocab_size() const { return vocab_; }
  // Sizes the buffers for forwards of up to max_rows entries of max_seqs sequences (tables of
  // max_blocks) with up to max_out output rows. Allocates; call once.
  Status reserve(int32_t max_rows, int32_t max_seqs, int32_t max_blocks, int32_t max_out);
  Result<KvPool> new_pool(int32_t n_blocks, int32_t block_size, GgmlType type);
  void free_pool(KvPool& pool);
  void copy_block(const KvPool& pool, int32_t src, int32_t dst);

  // Entries b.tokens[i] (token p+1) with h[i] ([n, hidden]: the target's last layer output, or the
  // head's own earlier output) at RoPE position b.rope_pos[i], K/V stored at b.slots[i]. For
  // b.out_rows: `out` = block outputs before the norm [n_out, hidden], `logits` [n_out, vocab].
  Status forward(const HeadBatch& b, std::span<const float> h, KvPool& pool, std::vector<float>& out,
                 std::vector<float>& logits);

 private:
  MtpHead(Backend& be, const Model& target) : be_(be), target_(target) {}
  Backend& be_;
  const Model& target_;
  BlockDims d_;
  int32_t vocab_ = 0;
  Tensor enorm_, hnorm_, eh_proj_, head_norm_;
  LayerWeights block_;
  BlockScratch s_;
  HeadInputs in_;
  Tensor x_, e_, cat_, out_rows_, logits_;  // [rows, hidden] x3 (e_ reused for h), [rows, 2 hidden], [out, hidden], [out, vocab]
  std::vector<int32_t> ids_tmp_;
};

// The block geometry of a drafter file with key prefix `arch` (qwen3_mtp, qwen3_dflash), checked
// against the target: architecture, vocabulary, hidden size, heads, head size, RoPE. Errors name
// the mismatch.
Result<BlockDims> drafter_dims(const GgufFile& file, const std::string& arch, const Model& target);

}  // namespace onebit
