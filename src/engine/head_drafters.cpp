// MTP and DFlash drafters (head_drafters.h): per-sequence state, batching and scratch tables over
// the forwards of model/mtp_head.h and model/dflash_model.h.
#include "engine/head_drafters.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <unordered_map>

#include "engine/ahead_tables.h"
#include "engine/model_drafters.h"
#include "model/dflash_model.h"
#include "model/mtp_head.h"

namespace onebit {
namespace {

// Greedy token of a logits row and its softmax probability (1 when p_min <= 0: top_token).
std::pair<TokenId, float> argmax_prob(const float* row, int32_t vocab, float p_min) {
  const TopToken t = top_token(std::span<const float>(row, size_t(vocab)), p_min);
  return {t.id, t.p};
}

// Pool slot of position p through table.
int32_t slot_of(std::span<const int32_t> table, int32_t p, int32_t bs) { return table[size_t(p / bs)] * bs + p % bs; }

// Appends seq's table padded with -1 to width entries.
void push_table(std::vector<int32_t>& out, std::span<const int32_t> table, int32_t width) {
  const size_t n = std::min(table.size(), size_t(width));
  out.insert(out.end(), table.begin(), table.begin() + n);
  out.insert(out.end(), size_t(width) - n, -1);
}

// What a drafter keeps per sequence: how far its entries reach, and the last entry's state.
struct SeqState {
  int32_t frontier = -1;       // entries 0..frontier-1 observed (-1: broken, never drafts)
  std::vector<float> state;    // mtp: the last entry's block output; dflash: the last context c
  TokenId draft1 = -1;         // mtp: the head's guess after the last entry
  float p1 = 0.0f;
};

// Observation bookkeeping shared by both drafters: a gap (first past the frontier of a known
// sequence) breaks the sequence.
void advance(std::unordered_map<int64_t, SeqState>& seqs, const DraftObservation& r, SeqState*& st) {
  auto [it, fresh] = seqs.try_emplace(r.seq.id);
  st = &it->second;
  const bool gap = !fresh && (st->frontier < 0 || r.first > st->frontier);
  st->frontier = gap ? -1 : r.first + r.n;
}

class MtpDrafter final : public Drafter {
 public:
  MtpDrafter(std::unique_ptr<MtpHead> head, float p_min) : head_(std::move(head)), p_min_(p_min) {}
  ~MtpDrafter() override {
    if (!pool_.k.empty()) head_->free_pool(pool_);
  }

  std::vector<int32_t> target_layers() const override { return {head_->target_layer()}; }

  Status start(const DrafterLayout& l) override {
    layout_ = l;
    ahead_.emplace(l, std::max(l.max_draft, 1));
    const int32_t max_blocks = std::max(l.max_blocks, ahead_->max_blocks());
    ONEBIT_TRY(head_->reserve(std::max(l.max_tokens, l.max_seqs), l.max_seqs, max_blocks, l.max_seqs));
    ONEBIT_ASSIGN_OR_RETURN(pool_, head_->new_pool(ahead_->pool_blocks(), l.block_size, l.cache_type));
    const size_t hd = size_t(head_->dims().hidden);
    h_.reserve(size_t(std::max(l.max_tokens, l.max_seqs)) * hd);
    tables_.resize(size_t(l.max_seqs));
    for (auto& t : tables_) t.reserve(size_t(max_blocks));
    active_.reserve(size_t(l.max_seqs));
    seqs_.reserve(size_t(l.max_seqs) * 2);
    return ok_status();
  }

  void copy_blocks(std::span<const BlockCopy> copies) override {
    if (failed_) return;
    for (const BlockCopy& c : copies) head_->copy_block(pool_, c.src, c.dst);
  }

  void observe(std::span<const DraftObservation> runs) override {
    if (failed_ || runs.empty()) return;
    const int32_t bs = layout_.block_size, hd = head_->dims().hidden;
    b_.clear();
    b_.max_blocks = layout_.max_blocks;
    h_.clear();
    for (size_t s = 0; s < runs.size(); ++s) {
      const DraftObservation& r = runs[s];
      for (int32_t p = r.first; p < r.first + r.n; ++p) {
        b_.tokens.push_back(r.seq.tokens[size_t(p + 1)]);
        b_.rope_pos.push_back(p);
        b_.attn_pos.push_back(p);
        b_.slots.push_back(slot_of(r.seq.block_table, p, bs));
        b_.seq_ids.push_back(int32_t(s));
      }
      push_table(b_.block_tables, r.seq.block_table, b_.max_blocks);
      b_.out_rows.push_back(b_.n() - 1);
      h_.insert(h_.end(), r.rows.begin(), r.rows.begin() + size_t(r.n) * hd);
    }
    if (!run(h_)) return;
    for (size_t s = 0; s < runs.size(); ++s) {
      SeqState* st = nullptr;
      advance(seqs_, runs[s], st);
      st->state.assign(out_.begin() + s * hd, out_.begin() + (s + 1) * hd);
      std::tie(st->draft1, st->p1) = argmax_prob(logits_.data() + s * head_->vocab_size(), head_->vocab_size(), p_min_);
    }
  }

  void propose(std::span<const DraftAsk> asks) override {
    if (failed_) return;
    const int32_t bs = layout_.block_size, hd = head_->dims().hidden, vocab = head_->vocab_size();
    // draft 1 from the observation; the asks that chain on
    active_.clear();
    for (size_t i = 0; i < asks.size(); ++i) {
      const DraftAsk& a = asks[i];
      auto it = seqs_.find(a.seq.id);
      if (it == seqs_.end() || it->second.frontier != a.seq.n_computed || a.seq.n_computed < 1 || a.max < 1) continue;
      if (it->second.p1 < p_min_) continue;
      a.out->push_back(it->second.draft1);
      if (a.max < 2) continue;
      int32_t copy[2];
      ahead_->build(a.seq, int32_t(active_.size()), tables_[active_.size()], copy);
      if (copy[0] >= 0) head_->copy_block(pool_, copy[0], copy[1]);
      active_.push_back({i, &it->second});
    }
    // chain: entry a+k-1 = (previous output, draft k) -> draft k+1
    for (int32_t k = 1; !active_.empty(); ++k) {
      b_.clear();
      b_.max_blocks = ahead_->max_blocks();
      h_.clear();
      for (size_t s = 0; s < active_.size(); ++s) {
        const DraftAsk& a = asks[active_[s].ask];
        const int32_t q = a.seq.n_computed + k - 1;
        b_.tokens.push_back(a.out->back());
        b_.rope_pos.push_back(q);
        b_.attn_pos.push_back(q);
        b_.slots.push_back(slot_of(tables_[s], q, bs));
        b_.seq_ids.push_back(int32_t(s));
        push_table(b_.block_tables, tables_[s], b_.max_blocks);
        b_.out_rows.push_back(int32_t(s));
        const std::vector<float>& prev = k == 1 ? active_[s].st->state : prev_[s];
        h_.insert(h_.end(), prev.begin(), prev.end());
      }
      if (!run(h_)) return;
      size_t kept = 0;
      if (prev_.size() < active_.size()) prev_.resize(active_.size());
      for (size_t s = 0; s < active_.size(); ++s) {
        const DraftAsk& a = asks[active_[s].ask];
        auto [tok, p] = argmax_prob(logits_.data() + s * vocab, vocab, p_min_);
        if (p < p_min_) continue;
        a.out->push_back(tok);
        if (int32_t(a.out->size()) >= a.max) continue;
        // keep going: compact the ask, its table and its output
        prev_[kept].assign(out_.begin() + s * hd, out_.begin() + (s + 1) * hd);
        if (kept != s) std::swap(tables_[kept], tables_[s]);
        active_[kept++] = active_[s];
      }
      active_.resize(kept);
    }
  }

  void forget(int64_t seq_id) override { seqs_.erase(seq_id); }

 private:
  struct Active { size_t ask; SeqState* st; };

  bool run(const std::vector<float>& h) {
    Status st = head_->forward(b_, h, pool_, out_, logits_);
    if (!st.ok()) {
      std::fprintf(stderr, "mtp drafter: %s; drafting is off from now on\n", st.message().c_str());
      failed_ = true;
    }
    return st.ok();
  }

  std::unique_ptr<MtpHead> head_;
  float p_min_;
  DrafterLayout layout_;
  std::optional<AheadTables> ahead_;
  KvPool pool_;
  bool failed_ = false;
  std::unordered_map<int64_t, SeqState> seqs_;
  HeadBatch b_;
  std::vector<float> h_, out_, logits_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<std::vector<float>> prev_;
  std::vector<Active> active_;
};

class DflashDrafter final : public Drafter {
 public:
  DflashDrafter(std::unique_ptr<DflashModel> m, float p_min) : m_(std::move(m)), p_min_(p_min) {}
  ~DflashDrafter() override {
    if (!pool_.k.empty()) m_->free_pool(pool_);
  }

  std::vector<int32_t> target_layers() const override { return m_->target_layers(); }

  Status start(const DrafterLayout& l) override {
    layout_ = l;
    const int32_t B = m_->block_size();
    ahead_.emplace(l, B);
    const int32_t max_blocks = std::max(l.max_blocks, ahead_->max_blocks());
    const int32_t rows = std::max(l.max_tokens, l.max_seqs * B);
    ONEBIT_TRY(m_->reserve(rows, l.max_seqs, max_blocks, l.max_seqs * B));
    ONEBIT_ASSIGN_OR_RETURN(pool_, m_->new_pool(ahead_->pool_blocks(), l.block_size, l.cache_type));
    rows_.reserve(size_t(l.max_tokens) * m_->target_layers().size() * size_t(m_->hidden()));
    add_.reserve(size_t(l.max_seqs) * m_->hidden());
    tables_.resize(size_t(l.max_seqs));
    for (auto& t : tables_) t.reserve(size_t(max_blocks));
    who_.reserve(size_t(l.max_seqs));
    seqs_.reserve(size_t(l.max_seqs) * 2);
    return ok_status();
  }

  void copy_blocks(std::span<const BlockCopy> copies) override {
    if (failed_) return;
    for (const BlockCopy& c : copies) m_->copy_block(pool_, c.src, c.dst);
  }

  void observe(std::span<const DraftObservation> runs) override {
    if (failed_ || runs.empty()) return;
    const int32_t bs = layout_.block_size, hd = m_->hidden();
    const size_t width = m_->target_layers().size() * size_t(hd);
    b_.clear();
    b_.max_blocks = layout_.max_blocks;
    rows_.clear();
    for (size_t s = 0; s < runs.size(); ++s) {
      const DraftObservation& r = runs[s];
      for (int32_t p = r.first; p < r.first + r.n; ++p) {
        b_.tokens.push_back(-1);
        b_.rope_pos.push_back(p);
        b_.attn_pos.push_back(p);
        b_.slots.push_back(slot_of(r.seq.block_table, p, bs));
        b_.seq_ids.push_back(int32_t(s));
      }
      push_table(b_.block_tables, r.seq.block_table, b_.max_blocks);
      b_.out_rows.push_back(b_.n() - 1);
      rows_.insert(rows_.end(), r.rows.begin(), r.rows.begin() + size_t(r.n) * width);
    }
    if (!check(m_->store_context(b_, rows_, pool_, ctx_))) return;
    for (size_t s = 0; s < runs.size(); ++s) {
      SeqState* st = nullptr;
      advance(seqs_, runs[s], st);
      st->state.assign(ctx_.begin() + s * hd, ctx_.begin() + (s + 1) * hd);
    }
  }

  void propose(std::span<const DraftAsk> asks) override {
    if (failed_) return;
    const int32_t bs = layout_.block_size, hd = m_->hidden(), B = m_->block_size(), vocab = m_->vocab_size();
    b_.clear();
    b_.max_blocks = ahead_->max_blocks();
    add_.clear();
    who_.clear();
    for (size_t i = 0; i < asks.size(); ++i) {
      const DraftAsk& a = asks[i];
      auto it = seqs_.find(a.seq.id);
      const int32_t pos = a.seq.n_computed;
      if (it == seqs_.end() || it->second.frontier != pos || pos < 1 || a.max < 1) continue;
      const int32_t s = int32_t(who_.size());
      int32_t copy[2];
      ahead_->build(a.seq, s, tables_[size_t(s)], copy);
      if (copy[0] >= 0) m_->copy_block(pool_, copy[0], copy[1]);
      const int32_t first = b_.n();
      for (int32_t j = 0; j < B; ++j) {
        b_.tokens.push_back(j == 0 ? a.seq.tokens[size_t(pos)] : -1);
        b_.rope_pos.push_back(pos + j);
        b_.attn_pos.push_back(pos + B - 1);  // the whole block and the context 0..pos-1
        b_.slots.push_back(slot_of(tables_[size_t(s)], pos + j, bs));
        b_.seq_ids.push_back(s);
      }
      for (int32_t j = 1; j <= std::min(a.max, B - 1); ++j) b_.out_rows.push_back(first + j);
      push_table(b_.block_tables, tables_[size_t(s)], b_.max_blocks);
      if (m_->add_last_context()) add_.insert(add_.end(), it->second.state.begin(), it->second.state.end());
      who_.push_back(i);
    }
    if (who_.empty()) return;
    if (!check(m_->draft(b_, add_, pool_, logits_))) return;
    size_t row = 0;
    for (size_t i : who_) {
      const DraftAsk& a = asks[i];
      const int32_t n = std::min(a.max, B - 1);
      bool stop = false;
      for (int32_t j = 0; j < n; ++j, ++row) {
        if (stop) continue;
        auto [tok, p] = argmax_prob(logits_.data() + row * vocab, vocab, p_min_);
        stop = p < p_min_;
        if (!stop) a.out->push_back(tok);
      }
    }
    (void)hd;
  }

  void forget(int64_t seq_id) override { seqs_.erase(seq_id); }

 private:
  bool check(const Status& st) {
    if (!st.ok()) {
      std::fprintf(stderr, "dflash drafter: %s; drafting is off from now on\n", st.message().c_str());
      failed_ = true;
    }
    return st.ok();
  }

  std::unique_ptr<DflashModel> m_;
  float p_min_;
  DrafterLayout layout_;
  std::optional<AheadTables> ahead_;
  KvPool pool_;
  bool failed_ = false;
  std::unordered_map<int64_t, SeqState> seqs_;
  HeadBatch b_;
  std::vector<float> rows_, ctx_, add_, logits_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<size_t> who_;
};

}  // namespace

Result<std::shared_ptr<Drafter>> make_mtp_drafter(const GgufFile& file, Model& target, float p_min) {
  // A model of the target's family carrying MTP layers: its own MTP layer; else a head file.
  auto arch = file.get_string("general.architecture");
  const bool in_model = arch.ok() && *arch == target.config().arch_name;
  if (in_model && !file.find(*arch + ".nextn_predict_layers")) {
    return make_error("mtp: " + file.name() + " is a " + *arch + " model without MTP layers (no " + *arch +
                      ".nextn_predict_layers); give a qwen3_mtp head file");
  }
  ONEBIT_ASSIGN_OR_RETURN(auto head, in_model ? MtpHead::load_nextn(file, target) : MtpHead::load(file, target));
  return std::shared_ptr<Drafter>(std::make_shared<MtpDrafter>(std::move(head), p_min));
}

Result<std::shared_ptr<Drafter>> make_dflash_drafter(const GgufFile& file, Model& target, float p_min) {
  ONEBIT_ASSIGN_OR_RETURN(auto m, DflashModel::load(file, target));
  return std::shared_ptr<Drafter>(std::make_shared<DflashDrafter>(std::move(m), p_min));
}

}  // namespace onebit
