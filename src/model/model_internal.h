// Model internals shared by model.cpp and the per-architecture forward files; not a public API.
#pragma once

#include "model/model.h"

namespace onebit {

// Binds tensor `name` of `f` expected as [n_rows, n_cols] (GGUF ne = {n_cols, n_rows}) on `backend`;
// 1-D tensors must be F32. Absent `optional` tensors give an invalid Tensor. Errors start with
// "tensors: " and name the tensor, shape or type (also used by the drafters' loaders).
Result<Tensor> bind_tensor(const GgufFile& f, Backend& backend, const std::string& name, int64_t n_rows,
                           int64_t n_cols, bool optional = false);

// Inputs and activations of one step, sized by Model::reserve for the largest step (views of the
// first rows are used). A device backend can capture a step over these fixed buffers as a graph.
struct Model::Scratch {
  Tensor ids;              // I32 [1, max_tokens]
  Tensor positions;        // I32 [1, max_tokens]
  Tensor slots;            // I32 [1, max_tokens]
  Tensor seq_ids;          // I32 [1, max_tokens]
  Tensor block_tables;     // I32 [1, max_seqs * max_blocks]
  Tensor out_ids;          // I32 [1, max_out]
  Tensor x;                // [max_tokens, hidden] the residual stream
  Tensor h;                // [max_tokens, hidden] normed input / branch output
  Tensor q;                // [max_tokens, n_heads * head_dim]
  Tensor k, v;             // [max_tokens, n_kv_heads * head_dim]
  Tensor attn;             // [max_tokens, n_heads * head_dim]
  Tensor gate, up;         // [max_tokens, intermediate]
  Tensor out_rows;         // [max_out, hidden] final-normed rows that get logits
  Tensor logits;           // [max_out, vocab]; !valid() when the limits say no logits
  Tensor captured;         // [max_tokens, capture_layers * hidden]; !valid() without capture

  void free_all(Backend& backend);
};

}  // namespace onebit
