// The MTP head: entry p = eh_proj([enorm(embed(token p+1)); hnorm(h_p)]), one decoder block with its
// own paged K/V, shared_head_norm and the target's output matrix. Two sources:
//  - a `qwen3_mtp` head file (docs/models.md): a Qwen3 block; h_p is the target's last layer output
//    before the final norm, and a chained draft feeds the block output before shared_head_norm
//    (as tools/train/model.py trains it);
//  - the target's own MTP layer (<arch>.nextn_predict_layers, blk.<n_layers>.*: Qwen3-Next /
//    Qwen3.5): the family's attention layer (gated attention, the mixture of experts where the
//    model has one); h_p is the target's final-normed output, and a chained draft feeds the
//    shared_head_norm'ed output (as vLLM's qwen3_next_mtp.py runs the released checkpoints).
// The forward of a batch of entries; which entries to run is the caller's (engine drafter).
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
  // Binds the target's own MTP layer from its file `file` (the one the target was loaded from).
  static Result<std::unique_ptr<MtpHead>> load_nextn(const GgufFile& file, Model& target);
  ~MtpHead();

  const BlockDims& dims() const { return d_; }
  // The target layer whose captured output h_p is (StepLimits::capture_layers; n_layers: the
  // final-normed output).
  int32_t target_layer() const { return target_layer_; }
  int32_t vocab_size() const { return vocab_; }
  // Sizes the buffers for forwards of up to max_rows entries of max_seqs sequences (tables of
  // max_blocks) with up to max_out output rows. Allocates; call once.
  Status reserve(int32_t max_rows, int32_t max_seqs, int32_t max_blocks, int32_t max_out);
  Result<KvPool> new_pool(int32_t n_blocks, int32_t block_size, GgmlType type);
  void free_pool(KvPool& pool);
  void copy_block(const KvPool& pool, int32_t src, int32_t dst);

  // Entries b.tokens[i] (token p+1) with h[i] ([n, hidden]: the target's captured output, or the
  // head's own earlier `out`) at RoPE position b.rope_pos[i], K/V stored at b.slots[i]. For
  // b.out_rows: `out` = what a chained entry takes as h [n_out, hidden] (the block output, before
  // shared_head_norm for a head file, after it for an MTP layer), `logits` [n_out, vocab].
  Status forward(const HeadBatch& b, std::span<const float> h, KvPool& pool, std::vector<float>& out,
                 std::vector<float>& logits);

 private:
  MtpHead(Backend& be, const Model& target) : be_(be), target_(target) {}
  // blk.<layer>.nextn.{enorm, hnorm, eh_proj, shared_head_norm}.weight
  Status bind_nextn(const GgufFile& f, int32_t layer);
  Backend& be_;
  const Model& target_;
  BlockDims d_;
  MoeDims md_;               // an MTP layer's mixture (n_experts 0: a SwiGLU FFN)
  int32_t vocab_ = 0;
  int32_t target_layer_ = 0;
  bool normed_chain_ = false;  // `out` after shared_head_norm (MTP layers)
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
