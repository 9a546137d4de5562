// The model-backed runner; see model_runner.h.
#include "engine/model_runner.h"

#include "base/check.h"

namespace onebit {
namespace {

class ModelBackedRunner final : public ModelRunner {
 public:
  ModelBackedRunner(Model& model, KvPool pool, bool hidden, int32_t rows, int32_t checkpoints)
      : model_(model), pool_(std::move(pool)), hidden_(hidden), rows_(rows), checkpoints_(checkpoints) {}
  ~ModelBackedRunner() override { model_.free_kv_pool(pool_); }

  int32_t vocab_size() const override { return model_.config().vocab_size; }
  int32_t state_rows() const override { return rows_; }
  // The pool's state rows: rows_ for sequences, then checkpoints_ per sequence row.
  int32_t checkpoint_row(int32_t state_row, int32_t i) const override {
    if (state_row < 0 || state_row >= rows_ || i < 0 || i >= checkpoints_) return -1;
    return rows_ + state_row * checkpoints_ + i;
  }
  void copy_state(int32_t from, int32_t to) override { model_.copy_state_row(pool_, from, to); }

  void copy_blocks(std::span<const BlockCopy> copies) override {
    for (const BlockCopy& c : copies) model_.copy_kv_block(pool_, c.src, c.dst);
  }

  void logits_row(int32_t o, std::span<float> dst) override { model_.read_logits_row(o, dst); }

  Status run(const StepBatch& batch, StepOutput& out) override {
    out.hidden.clear();
    out.argmax.clear();
    return model_.forward(batch, pool_, out.logits, hidden_ ? &out.hidden : nullptr,
                          model_.limits().capture_layers.empty() ? nullptr : &out.captured, &out.argmax);
  }

 private:
  Model& model_;
  KvPool pool_;
  bool hidden_ = false;
  int32_t rows_ = 0, checkpoints_ = 0;
};

}  // namespace

void ModelRunner::logits_row(int32_t, std::span<float>) {
  ONEBIT_CHECK_MSG(false, "this runner hands back no argmax ids, so no row is asked for again");
}

Result<std::unique_ptr<ModelRunner>> make_model_runner(Model& model, const RunnerOptions& options) {
  ONEBIT_TRY(model.reserve(options.limits));
  // Recurrent layers: a state row for each sequence a step can hold, and its checkpoint rows.
  const bool recurrent = !model.config().recurrent.empty();
  const int32_t rows = recurrent ? options.limits.max_seqs : 0, checkpoints = recurrent ? options.checkpoints : 0;
  ONEBIT_ASSIGN_OR_RETURN(KvPool pool, model.new_kv_pool(options.n_blocks, options.block_size, options.cache_type,
                                                         rows * (1 + checkpoints)));
  return std::unique_ptr<ModelRunner>(new ModelBackedRunner(model, std::move(pool), options.hidden, rows, checkpoints));
}

}  // namespace onebit
