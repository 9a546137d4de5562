// The draft-model drafter; see model_drafters.h.
#include "engine/model_drafters.h"

#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "engine/ahead_tables.h"

namespace onebit {

TopToken top_token(std::span<const float> logits, float p_min) {
  TopToken t;
  if (logits.empty()) return t;
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) best = logits[i] > logits[best] ? i : best;
  t.id = static_cast<TokenId>(best);
  t.p = 1.0f;
  if (p_min <= 0.0f) return t;  // 7 x 8,192 exps took 0.9 ms of a 4 ms DFlash step of onebit-20m
  double sum = 0.0;
  for (float x : logits) sum += std::exp(double(x) - double(logits[best]));
  t.p = static_cast<float>(1.0 / sum);
  return t;
}

namespace {

class DraftModelDrafter final : public Drafter {
 public:
  DraftModelDrafter(std::unique_ptr<Model> draft, float p_min) : model_(std::move(draft)), p_min_(p_min) {}
  ~DraftModelDrafter() override {
    if (!pool_.k.empty()) model_->free_kv_pool(pool_);
  }

  Status start(const DrafterLayout& layout) override {
    tables_ = std::make_unique<AheadTables>(layout, layout.max_draft);
    max_draft_ = layout.max_draft;
    ONEBIT_ASSIGN_OR_RETURN(pool_, model_->new_kv_pool(tables_->pool_blocks(), layout.block_size, layout.cache_type));
    StepLimits lim;
    lim.max_tokens = std::max(layout.max_tokens, layout.max_seqs);
    lim.max_seqs = layout.max_seqs;
    lim.max_blocks = tables_->max_blocks();
    lim.max_out = layout.max_seqs;
    return model_->reserve(lim);
  }

  void copy_blocks(std::span<const BlockCopy> copies) override {
    for (const BlockCopy& c : copies) model_->copy_kv_block(pool_, c.src, c.dst);
  }

  // The draft model runs every kept position (its K/V), no logits.
  void observe(std::span<const DraftObservation> runs) override {
    if (broken_) return;
    StepBatch& b = batch_;
    b.clear();
    int32_t widest = 1;
    for (const DraftObservation& r : runs) widest = std::max(widest, int32_t(r.seq.block_table.size()));
    b.max_blocks = StepBatch::table_width(widest, tables_->max_blocks());
    const int32_t bs = pool_.block_size;
    for (size_t s = 0; s < runs.size(); ++s) {
      const DraftObservation& r = runs[s];
      for (int32_t p = r.first; p < r.first + r.n; ++p) {
        b.tokens.push_back(r.seq.tokens[size_t(p)]);
        b.positions.push_back(p);
        b.slots.push_back(r.seq.block_table[size_t(p / bs)] * bs + p % bs);
        b.seq_ids.push_back(static_cast<int32_t>(s));
      }
      b.block_tables.insert(b.block_tables.end(), r.seq.block_table.begin(), r.seq.block_table.end());
      b.block_tables.resize(size_t(s + 1) * b.max_blocks, -1);
      frontier_[r.seq.id] = r.first + r.n;
    }
    run(b);
  }

  // Each ask's chain: the token just sampled at position n_computed, then each drafted token, one
  // forward per drafted token over every ask still drafting.
  void propose(std::span<const DraftAsk> asks) override {
    if (broken_) return;
    const int32_t bs = pool_.block_size;
    live_.clear();
    for (size_t i = 0; i < asks.size(); ++i) {
      const DraftAsk& a = asks[i];
      auto f = frontier_.find(a.seq.id);
      if (f == frontier_.end() || f->second != a.seq.n_computed) continue;  // not observed up to here
      Chain c;
      c.ask = &a;
      int32_t copy[2];
      tables_->build(a.seq, static_cast<int32_t>(live_.size()), c.table, copy);
      if (copy[0] >= 0) model_->copy_kv_block(pool_, copy[0], copy[1]);
      c.next = a.seq.tokens.back();
      live_.push_back(std::move(c));
    }
    for (int32_t j = 0; j < max_draft_ && !live_.empty(); ++j) {
      StepBatch& b = batch_;
      b.clear();
      int32_t widest = 1;
      for (const Chain& c : live_) widest = std::max(widest, static_cast<int32_t>(c.table.size()));
      b.max_blocks = StepBatch::table_width(widest, tables_->max_blocks());
      int32_t s = 0;
      for (Chain& c : live_) {
        if (c.done) continue;
        const int32_t pos = c.ask->seq.n_computed + j;
        b.tokens.push_back(c.next);
        b.positions.push_back(pos);
        b.slots.push_back(c.table[size_t(pos / bs)] * bs + pos % bs);
        b.seq_ids.push_back(s);
        b.out_rows.push_back(s);
        b.block_tables.insert(b.block_tables.end(), c.table.begin(), c.table.end());
        b.block_tables.resize(size_t(s + 1) * b.max_blocks, -1);
        ++s;
      }
      if (s == 0 || !run(b)) return;
      const size_t vocab = logits_.size() / size_t(s);
      int32_t row = 0;
      for (Chain& c : live_) {
        if (c.done) continue;
        const TopToken t = top_token(std::span<const float>(logits_).subspan(size_t(row++) * vocab, vocab), p_min_);
        if (t.p < p_min_) {
          c.done = true;
          continue;
        }
        c.ask->out->push_back(t.id);
        c.next = t.id;
        c.done = static_cast<int32_t>(c.ask->out->size()) >= c.ask->max;
      }
    }
  }

  void forget(int64_t seq_id) override { frontier_.erase(seq_id); }

 private:
  struct Chain {
    const DraftAsk* ask = nullptr;
    std::vector<int32_t> table;  // the sequence's blocks, then its scratch blocks
    TokenId next = -1;           // the token the next forward runs
    bool done = false;
  };

  bool run(const StepBatch& b) {
    Status st = model_->forward(b, pool_, logits_);
    if (st.ok()) return true;
    std::fprintf(stderr, "1bit: draft model: %s; drafting stops\n", st.message().c_str());
    broken_ = true;
    return false;
  }

  std::unique_ptr<Model> model_;
  float p_min_;
  KvPool pool_;
  std::unique_ptr<AheadTables> tables_;
  int32_t max_draft_ = 0;
  std::unordered_map<int64_t, int32_t> frontier_;  // per sequence: positions observed so far
  StepBatch batch_;
  std::vector<float> logits_;
  std::vector<Chain> live_;
  bool broken_ = false;
};

}  // namespace

Result<std::shared_ptr<Drafter>> make_draft_model_drafter(const GgufFile& target_file, const Model& target,
                                                          const GgufFile& draft_file, std::unique_ptr<Model> draft,
                                                          float p_min) {
  if (!draft->config().recurrent.empty()) {
    return make_error("the draft model (" + draft->config().arch_name + ") has recurrent layers, which a draft "
                      "model's running ahead would leave in a drafted state; draft with an attention-only model, "
                      "or --mtp with the model's own MTP layers");
  }
  const int32_t nv = target.config().vocab_size, dv = draft->config().vocab_size;
  if (nv != dv) {
    return make_error("the draft model's vocabulary has " + std::to_string(dv) + " tokens, the target's " +
                      std::to_string(nv) + "; a draft model must share the target's tokenizer");
  }
  auto a = target_file.get_string_array("tokenizer.ggml.tokens");
  auto b = draft_file.get_string_array("tokenizer.ggml.tokens");
  if (!a.ok() || !b.ok()) {
    return make_error("the draft model or the target has no vocabulary (tokenizer.ggml.tokens) to compare; "
                      "a draft model must share the target's tokenizer");
  }
  for (size_t i = 0; i < a->size() && i < b->size(); ++i) {
    if ((*a)[i] != (*b)[i]) {
      return make_error("the draft model's token " + std::to_string(i) + " is '" + std::string((*b)[i]) +
                        "', the target's '" + std::string((*a)[i]) + "'; a draft model must share the target's tokenizer");
    }
  }
  return std::shared_ptr<Drafter>(std::make_shared<DraftModelDrafter>(std::move(draft), p_min));
}

}  // namespace onebit
