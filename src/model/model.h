// A loaded transformer (llama, qwen2, qwen3, qwen2moe, qwen3moe) over a Backend: weights bound from the mapped GGUF,
// paged K/V pools, and the one seam the engine uses: a step batch (tokens, positions, K/V slots,
// block tables) in, logits out. Knows nothing of HTTP, tokenizers or sampling.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "gguf/gguf_reader.h"
#include "model/layers.h"
#include "model/model_config.h"

namespace onebit {

using TokenId = int32_t;

// Paged K/V storage for many sequences: per layer one pool of n_blocks * block_size rows. Which
// rows belong to which sequence is the engine's business (engine/block_manager.h); the model
// only stores and reads rows where a StepBatch says.
struct KvPool {
  GgmlType type = GgmlType::kF16;  // F16 or F32
  int32_t block_size = 0;          // rows per block
  int32_t n_blocks = 0;
  std::vector<Tensor> k;           // [n_layers] each [n_blocks * block_size, n_kv_heads * head_dim];
                                   // !valid() for a recurrent layer
  std::vector<Tensor> v;           // [n_layers] likewise
  // Recurrent layers' per-sequence state: n_states rows (a StepBatch's state_rows name them).
  int32_t n_states = 0;
  std::vector<Tensor> conv;        // [n_layers] F32 [n_states, (conv_kernel - 1) * channels]; !valid()
                                   // for an attention layer
  std::vector<Tensor> ssm;         // [n_layers] F32 [n_states, v_heads * dk * dv] likewise
};

// One engine step: tokens of several sequences (prefill chunks and decode tokens mixed), each
// with its position, the pool row its K/V go to and the block table it attends through.
struct StepBatch {
  std::vector<TokenId> tokens;        // [n]
  std::vector<int32_t> positions;     // [n] position of each token in its sequence
  std::vector<int32_t> slots;         // [n] pool row of each token's K/V: table[pos / bs] * bs + pos % bs
  std::vector<int32_t> seq_ids;       // [n] row of block_tables the token belongs to
  std::vector<int32_t> block_tables;  // [n_seqs, max_blocks] row-major; -1 past a sequence's blocks
  int32_t max_blocks = 0;
  std::vector<int32_t> out_rows;      // [n_out] indices of the tokens that get logits, in order
  std::vector<uint8_t> argmax_out;    // [n_out] or empty: where 1, the caller takes the row's argmax
                                      // (forward's `argmax`, Backend::argmax_rows) and not its logits
                                      // (a device hands back one id, not a vocabulary of floats)
  std::vector<int32_t> state_rows;    // [n_seqs] recurrent models: each sequence's state row of the
                                      // pool (distinct); a sequence whose step starts at position 0
                                      // starts from a zero state
  std::vector<int32_t> ckpt_rows;     // [n] or empty; recurrent models: where >= 0, the state of the
                                      // token's sequence after the token is also kept in that state
                                      // row (a checkpoint to roll a rejected draft back to); distinct,
                                      // and none of the step's state rows

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t n_seqs() const { return max_blocks > 0 ? static_cast<int32_t>(block_tables.size()) / max_blocks : 0; }
  void clear();
  // max_blocks for a step whose longest block table has `widest` entries: the next power of two, at
  // most `limit`, so that the steps of growing sequences share a few shapes (the CUDA backend
  // replays a captured graph per shape of a step) for at most twice the entries needed.
  static int32_t table_width(int32_t widest, int32_t limit);
};

// The largest step the scratch buffers hold (Model::reserve).
struct StepLimits {
  int32_t max_tokens = 0;   // tokens of a step
  int32_t max_seqs = 0;     // sequences of a step
  int32_t max_blocks = 0;   // block table entries of a sequence
  int32_t max_out = 0;      // rows that get logits (or hidden rows)
  bool logits = true;       // false: hidden rows only (embeddings): no [max_out, vocab] buffer
                            // and no output matmul
  std::vector<int32_t> capture_layers;  // layers whose outputs (before any norm) every token of a
                            // step hands back, concatenated per token (drafters: Model::forward);
                            // n_layers: the final-normed output (result_norm) of every token
};

// One sequence with a pool of its own (block table = identity): for tools and tests that score a
// single text (`1bit run` and the server use the engine).
struct KvCache {
  KvPool pool;
  int32_t n_ctx = 0;              // capacity in positions
  int32_t n_past = 0;             // positions filled; the next token goes here
};

// Debug hook: called with each named intermediate (a host copy, row-major [n_rows, n_cols]) after
// it is computed. layer_idx is -1 outside the layers. Names follow llama.cpp's graph
// ("attn_norm", "Qcur", "Kcur", "Vcur", "kq_out", "attn_out", "ffn_inp", "ffn_norm", "ffn_out",
// "l_out", "result_norm", "result_output").
using DebugHook = std::function<void(std::string_view name, int layer_idx, int64_t n_rows,
                                     int64_t n_cols, std::span<const float> data)>;

// Weights of one layer: attention then a dense or a mixture-of-experts FFN (layers.h).
struct LayerWeights {
  Tensor attn_norm;                 // [1, hidden]
  AttentionWeights attn;            // !valid() in a recurrent layer
  DeltaNetWeights delta;            // a recurrent layer's (hybrid families)
  Tensor ffn_norm;                  // [1, hidden] (hybrids: post_attention_norm)
  FfnWeights ffn;                   // a dense layer's FFN; !valid() in a mixture-of-experts layer
  MoeWeights moe;                   // a mixture-of-experts layer's (moe.router.valid())
};

struct ModelWeights {
  Tensor token_embd;                // [vocab, hidden]
  Tensor output_norm;               // [1, hidden]
  Tensor output;                    // [vocab, hidden]; token_embd when tied
  Tensor rope_freqs;                // optional [1, n_rot / 2]
  std::vector<LayerWeights> layers; // [n_layers]
};

class Model {
 public:
  // Binds every tensor of `file` (which must outlive the model) on `backend` (likewise).
  // Errors start with the stage ("config: ", "tensors: ") and name the tensor, shape or type.
  static Result<std::unique_ptr<Model>> load(const GgufFile& file, Backend& backend);
  ~Model();

  const ModelConfig& config() const { return config_; }
  Backend& backend() { return backend_; }

  // Bytes of K and V of one token (every layer) stored as `type`.
  int64_t kv_bytes_per_token(GgmlType type) const;
  // A pool of n_blocks blocks of block_size rows per attention layer, of F16 or F32, and n_states
  // state rows per recurrent layer (a model with recurrent layers needs n_states >= 1). Errors when
  // memory runs out.
  Result<KvPool> new_kv_pool(int32_t n_blocks, int32_t block_size, GgmlType type, int32_t n_states = 0);
  // Bytes of one sequence's recurrent state (every recurrent layer); 0 without recurrent layers.
  int64_t state_bytes_per_sequence() const;
  void free_kv_pool(KvPool& pool);
  // Copies block src of every layer of `pool` to block dst (copy-on-write, drafts' scratch).
  void copy_kv_block(const KvPool& pool, int32_t src, int32_t dst);
  // Copies state row src of every recurrent layer of `pool` to row dst (a rollback to a checkpoint).
  void copy_state_row(const KvPool& pool, int32_t src, int32_t dst);

  // Sizes the step buffers for steps up to `limits` (frees the previous ones). The engine calls
  // it once at start; nothing is allocated while serving.
  Status reserve(const StepLimits& limits);
  const StepLimits& limits() const { return limits_; }

  // Runs one step over `pool` and writes logits [n_out, vocab_size] (out_rows order) to `logits`
  // (resized; empty when the limits say no logits) and, when `hidden` is given, the final-normed
  // rows [n_out, hidden_size] (llama.cpp's result_norm) to it; when `captured` is given, the
  // outputs of the limits' capture_layers for every token [n_tokens, layers * hidden_size]. With
  // `argmax` and batch.argmax_out, every row's argmax_rows id [n_out] goes to `argmax`, and the
  // logits rows marked there are left unwritten.
  // Errors (and runs nothing) on a token id outside the vocabulary, a step beyond the reserved
  // limits, or positions, slots and block tables that do not agree.
  Status forward(const StepBatch& batch, KvPool& pool, std::vector<float>& logits,
                 std::vector<float>* hidden = nullptr, std::vector<float>* captured = nullptr,
                 std::vector<int32_t>* argmax = nullptr);
  // The last forward's logits row o into dst [vocab_size] (a row it handed back as an argmax id).
  void read_logits_row(int32_t o, std::span<float> dst);
  // The weights, for drafters that share the target's embedding and output matrix.
  const ModelWeights& weights() const { return w_; }

  // Single-sequence use: an F32 cache of up to n_ctx positions, and a forward that continues it
  // at n_past with logits for the last token, or every token with all_logits. Grows the step
  // buffers as needed. Errors as forward, and on a run past n_ctx.
  Result<KvCache> new_kv_cache(int32_t n_ctx);
  void free_kv_cache(KvCache& kv);
  Status forward(KvCache& kv, std::span<const TokenId> tokens, bool all_logits, std::vector<float>& logits);

  // Installs (or with nullptr removes) the debug hook; slows every step while set.
  void set_debug_hook(DebugHook hook) { hook_ = std::move(hook); }

 private:
  struct Scratch;
  Model(const GgufFile& file, Backend& backend, ModelConfig config);
  Status bind_weights();
  Status validate(const StepBatch& batch, const KvPool& pool) const;
  void read_logits(const StepBatch& batch, int64_t n_out, std::vector<float>& logits, std::vector<int32_t>* argmax);
  // Calls the hook with a host copy of `t` (no-op without a hook).
  void observe(std::string_view name, int layer_idx, const Tensor& t);
  // The decoder forward (model/forward.cpp): the step's inputs already in scratch.
  // checkpoints: the step has StepBatch::ckpt_rows (uploaded to the scratch's ckpt_rows).
  void forward_decoder(const KvPool& pool, int64_t n_tokens, int64_t n_seqs, int64_t max_blocks, int64_t n_out,
                       bool checkpoints);
  BlockDims block_dims() const;
  MoeDims moe_dims() const;
  DeltaNetDims delta_dims() const;

  const GgufFile& file_;
  Backend& backend_;
  ModelConfig config_;
  ModelWeights w_;
  std::unique_ptr<Scratch> scratch_;
  StepLimits limits_;
  DebugHook hook_;
};

}  // namespace onebit
