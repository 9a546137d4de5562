// A loaded transformer (llama, qwen2, qwen3) over a Backend: weights bound from the mapped GGUF,
// per-sequence K/V storage, and the one seam the engine uses: a batch of (sequence, positions,
// tokens) in, logits out. Knows nothing of HTTP, tokenizers or sampling.
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
#include "model/model_config.h"

namespace onebit {

using TokenId = int32_t;

// One sequence's keys and values, resident in the backend. Rows are positions.
struct KvCache {
  int32_t n_ctx = 0;              // capacity in positions
  int32_t n_past = 0;             // positions filled (0 .. n_ctx); the next token goes here
  std::vector<Tensor> k;          // [n_layers] each [n_ctx, n_kv_heads * head_dim]
  std::vector<Tensor> v;          // [n_layers] each [n_ctx, n_kv_heads * head_dim]
};

// A run of consecutive tokens of one sequence, starting at the cache's n_past.
struct BatchSequence {
  KvCache* kv = nullptr;               // not owned; gets n_past += tokens.size()
  std::span<const TokenId> tokens;     // [n_tokens], at least one
  bool all_logits = false;             // logits for every token, else for the last only
};

struct Batch {
  std::vector<BatchSequence> sequences;
};

// Debug hook: called with each named intermediate (a host copy, row-major [n_rows, n_cols]) after
// it is computed. layer_idx is -1 outside the layers. Names follow llama.cpp's graph
// ("attn_norm", "Qcur", "Kcur", "Vcur", "kq_out", "attn_out", "ffn_inp", "ffn_norm", "ffn_out",
// "l_out", "result_norm", "result_output").
using DebugHook = std::function<void(std::string_view name, int layer_idx, int64_t n_rows,
                                     int64_t n_cols, std::span<const float> data)>;

// Weights of one layer; optional tensors are !valid() when the architecture has none.
struct LayerWeights {
  Tensor attn_norm;                 // [1, hidden]
  Tensor wq, wk, wv;                // [n_heads*head_dim | n_kv_heads*head_dim, hidden]
  Tensor bq, bk, bv;                // qwen2: [1, n_heads*head_dim | n_kv_heads*head_dim]
  Tensor q_norm, k_norm;            // qwen3: [1, head_dim]
  Tensor wo;                        // [hidden, n_heads*head_dim]
  Tensor ffn_norm;                  // [1, hidden]
  Tensor w_gate, w_up;              // [intermediate, hidden]
  Tensor w_down;                    // [hidden, intermediate]
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

  // K/V storage for one sequence of up to n_ctx positions. Errors when memory runs out.
  Result<KvCache> new_kv_cache(int32_t n_ctx);
  void free_kv_cache(KvCache& kv);

  // Runs the batch and writes logits [n_out, vocab_size] to `logits` (resized), n_out summing one
  // row per sequence or one per token for all_logits sequences, in batch order. Errors (and runs
  // nothing) on a token id outside the vocabulary or a sequence that would overflow its cache.
  Status forward(const Batch& batch, std::vector<float>& logits);

  // Installs (or with nullptr removes) the debug hook; slows every step while set.
  void set_debug_hook(DebugHook hook) { hook_ = std::move(hook); }

 private:
  struct Scratch;
  Model(const GgufFile& file, Backend& backend, ModelConfig config);
  Status bind_weights();
  Status ensure_scratch(int64_t n_tokens, int64_t n_out);
  // Calls the hook with a host copy of `t` (no-op without a hook).
  void observe(std::string_view name, int layer_idx, const Tensor& t);
  // The llama-family forward (model/llama.cpp): tokens already in scratch.
  void forward_llama(const Batch& batch, int64_t n_tokens, int64_t n_out);

  const GgufFile& file_;
  Backend& backend_;
  ModelConfig config_;
  ModelWeights w_;
  std::unique_ptr<Scratch> scratch_;
  DebugHook hook_;
};

}  // namespace onebit
