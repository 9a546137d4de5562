// Model internals shared by model.cpp and the per-architecture forward files; not a public API.
#pragma once

#include "model/model.h"

namespace onebit {

// Binds layer `l`'s tensors for the model's family (model/families.cpp): attention with the
// family's biases and norms, then a dense FFN or, where the file has blk.<l>.ffn_gate_inp, a
// mixture of experts.
Result<LayerWeights> bind_layer(const GgufFile& f, Backend& be, const ModelConfig& c, int32_t l);
// The layer pieces' geometry from the config.
BlockDims block_dims_of(const ModelConfig& c);
DeltaNetDims delta_dims_of(const ModelConfig& c);
MoeDims moe_dims_of(const ModelConfig& c);

// Inputs and activations of one step, sized by Model::reserve for the largest step (views of the
// first rows are used). A device backend can capture a step over these fixed buffers as a graph.
struct Model::Scratch {
  Tensor ids;              // I32 [1, max_tokens]
  Tensor positions;        // I32 [1, max_tokens]
  Tensor slots;            // I32 [1, max_tokens]
  Tensor seq_ids;          // I32 [1, max_tokens]
  Tensor block_tables;     // I32 [1, max_seqs * max_blocks]
  Tensor out_ids;          // I32 [1, max_out]
  Tensor argmax;           // I32 [1, max_out] the logits rows' argmax_rows (StepBatch::argmax_out)
  Tensor x;                // [max_tokens, hidden] the residual stream
  Tensor h;                // [max_tokens, hidden] normed input
  Tensor o;                // [max_tokens, hidden] a branch's output
  AttentionScratch attn;   // q, k, v, attention rows of max_tokens
  Tensor gate, up;         // [max_tokens, intermediate]; !valid() without dense layers
  MoeScratch moe;          // expert activations; !valid() without experts
  DeltaNetScratch delta;   // recurrent layers' activations; !valid() without them
  Tensor state_rows;       // I32 [max_seqs, 1] the step's sequences' state rows
  Tensor ckpt_rows;        // I32 [max_tokens, 1] the step's checkpoint rows (StepBatch::ckpt_rows)
  Tensor zero;             // F32 [1, the widest state row] of zeros (fresh sequences)
  Tensor out_rows;         // [max_out, hidden] final-normed rows that get logits
  Tensor logits;           // [max_out, vocab]; !valid() when the limits say no logits
  Tensor captured;         // [max_tokens, capture_layers * hidden]; !valid() without capture

  void free_all(Backend& backend);
};

}  // namespace onebit
