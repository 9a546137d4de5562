// The DFlash block drafter (`qwen3_dflash` GGUF, docs/models.md): the context c_p =
// hidden_norm(fc([target layer outputs at p])) is kept as each layer's K/V (attn_k/attn_v of c_p,
// no attn_norm) in a paged pool; a block of rows (the anchor token's embedding, then mask_embd,
// plus c_{anchor-1} when add_last_context) runs through the Qwen3 blocks, attending to the context
// and to the whole block; output_norm and the target's output matrix give the drafts.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "model/model.h"
#include "model/qwen3_block.h"

namespace onebit {

class DflashModel {
 public:
  // Binds the drafter from `file` (which must outlive it) on the target's backend, sharing the
  // target's token_embd / output. Errors name the key, tensor, layer id or geometry mismatch.
  static Result<std::unique_ptr<DflashModel>> load(const GgufFile& file, Model& target);
  ~DflashModel();

  int32_t block_size() const { return block_size_; }
  const std::vector<int32_t>& target_layers() const { return target_layers_; }
  bool add_last_context() const { return add_last_; }
  int32_t hidden() const { return d_.hidden; }
  int32_t vocab_size() const { return vocab_; }
  Status reserve(int32_t max_rows, int32_t max_seqs, int32_t max_blocks, int32_t max_out);
  Result<KvPool> new_pool(int32_t n_blocks, int32_t block_size, GgmlType type);
  void free_pool(KvPool& pool);
  void copy_block(const KvPool& pool, int32_t src, int32_t dst);

  // Context entries: rows [n, layers * hidden] (target layer outputs) -> c [n, hidden], each
  // layer's K/V of c at b.slots (RoPE b.rope_pos). ctx_out = c of b.out_rows [n_out, hidden].
  Status store_context(const HeadBatch& b, std::span<const float> rows, KvPool& pool, std::vector<float>& ctx_out);
  // Block rows: input = token_embd[b.tokens[i]] (tokens >= 0) or mask_embd (tokens < 0), plus
  // add[b.seq_ids[i]] when `add` ([n_seqs, hidden]) is not empty. logits of b.out_rows [n_out, vocab].
  Status draft(const HeadBatch& b, std::span<const float> add, KvPool& pool, std::vector<float>& logits);

 private:
  DflashModel(Backend& be, const Model& target) : be_(be), target_(target) {}
  Backend& be_;
  const Model& target_;
  BlockDims d_;
  int32_t vocab_ = 0, block_size_ = 0;
  std::vector<int32_t> target_layers_;
  bool add_last_ = false;
  Tensor fc_, hidden_norm_, output_norm_;
  std::span<const float> mask_;  // mask_embd [hidden], F32 in the mapped file
  std::vector<LayerWeights> layers_;
  BlockScratch s_;
  HeadInputs in_;
  Tensor x_, rows_, e_, out_rows_, logits_;  // [rows, hidden], [rows, layers * hidden], [rows, hidden], [out, hidden], [out, vocab]
  std::vector<int32_t> ids_tmp_, tok_idx_;
  std::vector<float> base_;                  // [rows, hidden] host block inputs
};

// block_size of a qwen3_dflash file (0 when absent): `1bit serve` drafts block_size - 1 tokens.
int32_t dflash_block_size(const GgufFile& file);

}  // namespace onebit
