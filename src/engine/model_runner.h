// The engine's one door to a model: a step batch in (model.h's StepBatch: tokens, positions, K/V
// slots, block tables, rows that want logits), a step output out. The runner owns the K/V pool;
// the block manager decides what goes where in it. A fake runner stands in for a model in the
// scheduler's tests.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/block_manager.h"
#include "model/model.h"

namespace onebit {

struct StepOutput {
  std::vector<float> logits;  // [n_out, vocab] in out_rows order; rows the batch marks
                              // argmax_out left unwritten
  std::vector<int32_t> argmax;  // [n_out] each row's argmax (Backend::argmax_rows) when the batch
                                // marks any argmax_out; else empty
  std::vector<float> hidden;  // [n_out, hidden] final-normed rows; empty unless the runner was
                              // made with RunnerOptions::hidden (embeddings)
  std::vector<float> captured;  // [n_tokens, width] the limits' capture_layers outputs of every
                                // token (drafters); empty without
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual int32_t vocab_size() const = 0;
  // Copies blocks of the pool (every layer): copy-on-write before a step.
  virtual void copy_blocks(std::span<const BlockCopy> copies) = 0;
  // Runs one step. An error means nothing was stored that a later step relies on.
  virtual Status run(const StepBatch& batch, StepOutput& out) = 0;
  // The last step's logits row o [vocab], for a row that came back as its argmax id (a greedy
  // request ignoring end tokens whose argmax is one). Only runners that hand back ids get asked.
  virtual void logits_row(int32_t o, std::span<float> dst);
  // Recurrent-state rows of the pool (a row per running sequence: StepBatch::state_rows); 0 when
  // the model has no recurrent layers.
  virtual int32_t state_rows() const { return 0; }
  // Recurrent models that verify drafts: the row that keeps state row r's state after draft
  // position i (StepBatch::ckpt_rows), i < the runner's checkpoints; -1 when it keeps none.
  virtual int32_t checkpoint_row(int32_t /*state_row*/, int32_t /*i*/) const { return -1; }
  // Copies recurrent state row `from` to row `to` (rolls a sequence back to a checkpoint).
  virtual void copy_state(int32_t /*from*/, int32_t /*to*/) {}
};

// What the K/V pool and the step buffers are sized for, decided once at start.
struct RunnerOptions {
  int32_t n_blocks = 0;
  int32_t block_size = 16;
  GgmlType cache_type = GgmlType::kF16;
  StepLimits limits;  // the largest step
  bool hidden = false;  // every step also gives StepOutput::hidden
  int32_t checkpoints = 0;  // recurrent models: checkpoint rows per state row (the longest draft)
};

// A runner over `model` (which must outlive it): allocates the pool and reserves the step buffers.
Result<std::unique_ptr<ModelRunner>> make_model_runner(Model& model, const RunnerOptions& options);

}  // namespace onebit
