// One decoder block for the drafters' forwards (mtp_head, dflash_model): attn_norm, the attention
// block (a Qwen3 block's, or the family's gated attention for a model's own MTP layer), ffn_norm,
// SwiGLU or the family's mixture of experts, made of the same layer pieces as the target's forward
// (layers.h); plus the drafters' batch inputs and K/V pools.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "gguf/gguf_reader.h"
#include "model/layers.h"
#include "model/model.h"

namespace onebit {

// Activations of a block, sized for max_rows rows.
struct BlockScratch {
  Tensor h, o;       // [max_rows, hidden] normed input, branch output
  AttentionScratch attn;
  Tensor gate, up;   // [max_rows, ffn]; !valid() when d.ffn is 0
  MoeDims moe_dims;  // the mixture's geometry (blocks with one)
  MoeScratch moe;    // !valid() without a mixture
  // With moe (n_experts > 0) the scratch of a mixture-of-experts FFN too.
  Status alloc(Backend& be, const BlockDims& d, int64_t max_rows, const MoeDims* moe = nullptr);
  void free_all(Backend& be);
};

// Host inputs of a drafter forward of n rows (StepBatch plus a causal limit per row).
struct HeadBatch {
  std::vector<TokenId> tokens;        // [n] the row's token (mtp: token p+1; dflash: -1 = mask row)
  std::vector<int32_t> rope_pos;      // [n] RoPE position
  std::vector<int32_t> attn_pos;      // [n] the row attends to keys 0..attn_pos of its table
  std::vector<int32_t> slots;         // [n] pool row of the row's K/V
  std::vector<int32_t> seq_ids;       // [n] row of block_tables
  std::vector<int32_t> block_tables;  // [n_seqs, max_blocks]
  int32_t max_blocks = 0;
  std::vector<int32_t> out_rows;      // [n_out] rows that get outputs, in order

  int32_t n() const { return static_cast<int32_t>(rope_pos.size()); }
  int32_t n_seqs() const { return max_blocks > 0 ? static_cast<int32_t>(block_tables.size()) / max_blocks : 0; }
  void clear();
};

// Device copies of a HeadBatch's integer inputs (fixed buffers sized by alloc).
struct HeadInputs {
  Tensor ids, rope_pos, attn_pos, slots, seq_ids, tables, out_ids;  // I32
  int32_t max_rows = 0, max_seqs = 0, max_blocks = 0, max_out = 0;
  Status alloc(Backend& be, int32_t max_rows, int32_t max_seqs, int32_t max_blocks, int32_t max_out);
  void free_all(Backend& be);
  // Errors when b exceeds the sizes, its slots fall outside n_pool_rows, its attention
  // positions outside its tables or its token ids (those >= 0) outside the vocabulary.
  Status check(const HeadBatch& b, int64_t n_pool_rows, int32_t vocab, int32_t block_size) const;
  // Writes b (checked) and returns the rows' views; token ids < 0 are written as 0.
  BlockRows upload(Backend& be, const HeadBatch& b, std::vector<int32_t>& ids_tmp);
};

// Binds blk.<layer>.{attn_norm, attn_q, attn_k, attn_v, attn_q_norm, attn_k_norm, attn_output,
// ffn_norm, ffn_gate, ffn_up, ffn_down}.weight of `file` with Model's shape and type checks.
Result<LayerWeights> bind_qwen3_block(const GgufFile& file, Backend& be, const BlockDims& d, int32_t layer);

// K/V of x [n, hidden] (as is: no attn_norm): k = rope(k_norm(x wk^T)), v = x wv^T, stored at the
// rows' slots of k_pool/v_pool. Uses s.k and s.v.
void qwen3_store_kv(Backend& be, const BlockDims& d, const LayerWeights& L, const Tensor& x, const BlockRows& r,
                    const Tensor& k_pool, const Tensor& v_pool, BlockScratch& s);

// x [n, hidden] += attention(attn_norm(x)) then += ffn(ffn_norm(x)) (L.moe when bound, else the
// SwiGLU); the rows' K/V are stored in the pools first, so every row sees its own and those before
// it in its table up to attn_pos.
void qwen3_block(Backend& be, const BlockDims& d, const LayerWeights& L, const Tensor& x, const BlockRows& r,
                 const Tensor& k_pool, const Tensor& v_pool, int32_t block_size, BlockScratch& s);

// A paged K/V pool of n_layers layers of n_blocks * block_size rows of n_kv_heads * head_dim.
Result<KvPool> alloc_block_pool(Backend& be, const BlockDims& d, int32_t n_layers, int32_t n_blocks,
                                int32_t block_size, GgmlType type);
void free_block_pool(Backend& be, KvPool& pool);
// Copies block src to block dst in every layer of the pool.
void copy_pool_block(Backend& be, const KvPool& pool, int32_t src, int32_t dst);

}  // namespace onebit
