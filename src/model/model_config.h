// Hyperparameters of a transformer from GGUF metadata (llama, qwen2, qwen3, qwen2moe, qwen3moe key
// sets), validated.
// Names follow the Hugging Face config (hidden_size, head_dim, rope_theta). No tensors here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "base/status.h"
#include "gguf/gguf_reader.h"

namespace onebit {

enum class Architecture { kLlama, kQwen2, kQwen3, kQwen2Moe, kQwen3Moe, kQwen3Next, kQwen35, kQwen35Moe };

// "llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "qwen3next", "qwen35", "qwen35moe".
std::string_view architecture_name(Architecture a);

// How an embedding is pooled from a prompt's final-normed hidden rows; the values are llama.cpp's
// `<arch>.pooling_type` (kNone: a vector per token; kRank: a reranker's score).
enum class Pooling : int32_t { kNone = 0, kMean = 1, kCls = 2, kLast = 3, kRank = 4 };

// "none", "mean", "cls", "last", "rank".
std::string_view pooling_name(Pooling p);

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::string arch_name;           // general.architecture as stored
  int32_t vocab_size = 0;          // rows of token_embd.weight
  int32_t hidden_size = 0;         // <arch>.embedding_length
  int32_t n_layers = 0;            // <arch>.block_count less the MTP layers
  int32_t n_nextn = 0;             // <arch>.nextn_predict_layers: MTP layers blk.<n_layers + i>.*
                                   // (the --mtp drafter's; the forward runs the n_layers others)
  int32_t n_heads = 0;             // <arch>.attention.head_count
  int32_t n_kv_heads = 0;          // <arch>.attention.head_count_kv (default n_heads)
  int32_t head_dim = 0;            // <arch>.attention.key_length (default hidden_size / n_heads)
  int32_t intermediate_size = 0;   // <arch>.feed_forward_length (dense layers; 0 when every layer
                                   // is a mixture of experts and the key is absent)
  int32_t context_length = 0;      // <arch>.context_length (training context)
  float rms_norm_eps = 1e-5f;      // <arch>.attention.layer_norm_rms_epsilon
  bool has_qkv_bias = false;       // qwen2
  bool has_qk_norm = false;        // qwen3
  bool tied_output = false;        // no output.weight: the logits use token_embd.weight
  std::optional<Pooling> pooling;  // <arch>.pooling_type (embedding models); nullopt when absent
  RopeParams rope;                 // n_heads/head_dim left for the caller to fill per tensor
  // Mixture of experts (0 experts: every FFN is dense). A layer is a mixture when its file has
  // blk.N.ffn_gate_inp.weight, else dense with intermediate_size.
  int32_t n_experts = 0;           // <arch>.expert_count
  int32_t n_experts_used = 0;      // <arch>.expert_used_count (top-k)
  int32_t expert_ffn = 0;          // <arch>.expert_feed_forward_length
  int32_t shared_expert_ffn = 0;   // <arch>.expert_shared_feed_forward_length (0: no shared expert)
  bool expert_weights_norm = false;  // <arch>.expert_weights_norm: renormalize the top-k weights
                                     // (default: qwen3moe yes, qwen2moe no, as each family does)
  // Hybrid families (qwen3next, qwen35, qwen35moe; docs/hybrid.md): which layers are gated delta
  // nets (<arch>.attention.recurrent_layers, else every layer but each full_attention_interval-th),
  // their shape (<arch>.ssm.*), and the gated attention of the others (q rows [q | gate] per head).
  std::vector<bool> recurrent;     // [n_layers]; empty: no recurrent layers
  int32_t ssm_conv_kernel = 0;     // ssm.conv_kernel
  int32_t ssm_k_heads = 0;         // ssm.group_count
  int32_t ssm_v_heads = 0;         // ssm.time_step_rank
  int32_t ssm_k_dim = 0;           // ssm.state_size
  int32_t ssm_v_dim = 0;           // ssm.inner_size / ssm.time_step_rank
  bool ssm_tiled = false;          // value heads in tiled order (qwen35, qwen35moe)
  bool gated_attention = false;
  bool is_recurrent(int32_t layer) const { return size_t(layer) < recurrent.size() && recurrent[size_t(layer)]; }
  int64_t ssm_channels() const { return 2 * int64_t(ssm_k_heads) * ssm_k_dim + int64_t(ssm_v_heads) * ssm_v_dim; }
};

// Reads and validates the config. `vocab_size` and `tied_output` are filled from the tensor
// directory. Errors start with "config: " and name the key, the value and the allowed range.
Result<ModelConfig> model_config_from_gguf(const GgufFile& file);

}  // namespace onebit
