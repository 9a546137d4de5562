// Model internals shared by model.cpp and the per-architecture forward files; not a public API.
#pragma once

#include "model/model.h"

namespace onebit {

// Activations of one forward, sized for the largest batch so far (views of the first rows are
// used). A device backend can capture a step over these fixed buffers as one graph.
struct Model::Scratch {
  int64_t cap_tokens = 0;  // rows of the per-token buffers
  int64_t cap_out = 0;     // rows of the output buffers
  Tensor ids;              // I32 [cap_tokens, 1]
  Tensor positions;        // I32 [cap_tokens, 1]
  Tensor x;                // [cap_tokens, hidden] the residual stream
  Tensor h;                // [cap_tokens, hidden] normed input / branch output
  Tensor q;                // [cap_tokens, n_heads * head_dim]
  Tensor k, v;             // [cap_tokens, n_kv_heads * head_dim]
  Tensor attn;             // [cap_tokens, n_heads * head_dim]
  Tensor gate, up;         // [cap_tokens, intermediate]
  Tensor out_rows;         // [cap_out, hidden] final-normed rows that get logits
  Tensor logits;           // [cap_out, vocab]

  void free_all(Backend& backend);
};

}  // namespace onebit
