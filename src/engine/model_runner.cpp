// The model-backed runner; see model_runner.h.
#include "engine/model_runner.h"

namespace onebit {
namespace {

class ModelBackedRunner final : public ModelRunner {
 public:
  ModelBackedRunner(Model& model, KvPool pool, bool hidden) : model_(model), pool_(std::move(pool)), hidden_(hidden) {}
  ~ModelBackedRunner() override { model_.free_kv_pool(pool_); }

  int32_t vocab_size() const override { return model_.config().vocab_size; }
  int32_t state_rows() const override { return pool_.n_states; }

  void copy_blocks(std::span<const BlockCopy> copies) override {
    for (const BlockCopy& c : copies) model_.copy_kv_block(pool_, c.src, c.dst);
  }

  Status run(const StepBatch& batch, StepOutput& out) override {
    out.hidden.clear();
    return model_.forward(batch, pool_, out.logits, hidden_ ? &out.hidden : nullptr,
                          model_.limits().capture_layers.empty() ? nullptr : &out.captured);
  }

 private:
  Model& model_;
  KvPool pool_;
  bool hidden_ = false;
};

}  // namespace

Result<std::unique_ptr<ModelRunner>> make_model_runner(Model& model, const RunnerOptions& options) {
  ONEBIT_TRY(model.reserve(options.limits));
  // Recurrent layers: a state row for each sequence a step can hold.
  ONEBIT_ASSIGN_OR_RETURN(KvPool pool, model.new_kv_pool(options.n_blocks, options.block_size, options.cache_type,
                                                         options.limits.max_seqs));
  return std::unique_ptr<ModelRunner>(new ModelBackedRunner(model, std::move(pool), options.hidden));
}

}  // namespace onebit
