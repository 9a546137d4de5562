// DFlash drafter forward (dflash_model.h); the reference is tools/train/model.py DflashDrafter.
#include "model/dflash_model.h"

#include <cstring>

#include "base/check.h"
#include "model/model_internal.h"
#include "model/mtp_head.h"

namespace onebit {

int32_t dflash_block_size(const GgufFile& f) {
  auto v = f.get_int("qwen3_dflash.block_size");
  return v.ok() && *v > 0 && *v <= 256 ? static_cast<int32_t>(*v) : 0;
}

Result<std::unique_ptr<DflashModel>> DflashModel::load(const GgufFile& f, Model& target) {
  std::unique_ptr<DflashModel> m(new DflashModel(target.backend(), target));
  ONEBIT_ASSIGN_OR_RETURN(m->d_, drafter_dims(f, "qwen3_dflash", target));
  const std::string err = "dflash " + f.name() + ": ";
  m->vocab_ = target.config().vocab_size;
  m->block_size_ = dflash_block_size(f);
  if (m->block_size_ < 2) return make_error(err + "missing or bad qwen3_dflash.block_size (2..256)");
  auto n_layers = f.get_int("qwen3_dflash.block_count");
  if (!n_layers.ok() || *n_layers < 1 || *n_layers > 64) return make_error(err + "missing or bad qwen3_dflash.block_count");
  auto tl = f.get_int_array("qwen3_dflash.target_layers");
  if (!tl.ok() || tl->empty()) return make_error(err + "missing qwen3_dflash.target_layers");
  for (int64_t l : *tl) {
    if (l < 0 || l >= target.config().n_layers) {
      return make_error(err + "target layer " + std::to_string(l) + " does not exist: the target has " +
                        std::to_string(target.config().n_layers) + " layers");
    }
    m->target_layers_.push_back(static_cast<int32_t>(l));
  }
  auto add = f.get_bool("qwen3_dflash.add_last_context");
  m->add_last_ = add.ok() && *add;
  Backend& be = m->be_;
  const int64_t hd = m->d_.hidden, nl = int64_t(m->target_layers_.size());
  ONEBIT_ASSIGN_OR_RETURN(m->fc_, bind_tensor(f, be, "dflash.fc.weight", hd, nl * hd));
  ONEBIT_ASSIGN_OR_RETURN(m->hidden_norm_, bind_tensor(f, be, "dflash.hidden_norm.weight", 1, hd));
  ONEBIT_ASSIGN_OR_RETURN(m->output_norm_, bind_tensor(f, be, "output_norm.weight", 1, hd));
  ONEBIT_ASSIGN_OR_RETURN(Tensor mask, bind_tensor(f, be, "dflash.mask_embd.weight", 1, hd));
  (void)mask;  // checked (F32 [hidden]); the block inputs are built on the host from the file's bytes
  const GgufTensorInfo* mi = f.find_tensor("dflash.mask_embd.weight");
  m->mask_ = std::span<const float>(reinterpret_cast<const float*>(mi->data), size_t(hd));
  for (int32_t l = 0; l < *n_layers; ++l) {
    ONEBIT_ASSIGN_OR_RETURN(LayerWeights L, bind_qwen3_block(f, be, m->d_, l));
    m->layers_.push_back(L);
  }
  return m;
}

DflashModel::~DflashModel() {
  s_.free_all(be_);
  in_.free_all(be_);
  for (Tensor* t : {&x_, &rows_, &e_, &out_rows_, &logits_}) {
    if (t->valid()) be_.free(*t);
  }
}

Status DflashModel::reserve(int32_t max_rows, int32_t max_seqs, int32_t max_blocks, int32_t max_out) {
  ONEBIT_CHECK(!x_.valid());
  ONEBIT_TRY(s_.alloc(be_, d_, max_rows));
  ONEBIT_TRY(in_.alloc(be_, max_rows, max_seqs, max_blocks, max_out));
  const int64_t nl = int64_t(target_layers_.size());
  struct Want { Tensor* t; int64_t rows, cols; };
  for (Want w : {Want{&x_, max_rows, d_.hidden}, Want{&rows_, max_rows, nl * d_.hidden}, Want{&e_, max_rows, d_.hidden},
                 Want{&out_rows_, max_out, d_.hidden}, Want{&logits_, max_out, vocab_}}) {
    auto t = be_.alloc(GgmlType::kF32, w.rows, w.cols);
    if (!t.ok()) return make_error("dflash scratch: " + t.message());
    *w.t = *t;
  }
  base_.reserve(size_t(max_rows) * d_.hidden);
  ids_tmp_.reserve(size_t(max_rows));
  tok_idx_.reserve(size_t(max_rows));
  return ok_status();
}

Result<KvPool> DflashModel::new_pool(int32_t n_blocks, int32_t block_size, GgmlType type) {
  return alloc_block_pool(be_, d_, int32_t(layers_.size()), n_blocks, block_size, type);
}
void DflashModel::free_pool(KvPool& pool) { free_block_pool(be_, pool); }
void DflashModel::copy_block(const KvPool& pool, int32_t src, int32_t dst) { copy_pool_block(be_, pool, src, dst); }

Status DflashModel::store_context(const HeadBatch& b, std::span<const float> rows, KvPool& pool,
                                  std::vector<float>& ctx_out) {
  ONEBIT_TRY(in_.check(b, pool.k.empty() ? 0 : pool.k[0].n_rows, vocab_, pool.block_size));
  const int64_t n = b.n(), no = int64_t(b.out_rows.size()), hd = d_.hidden;
  if (rows.size() != size_t(n * rows_.n_cols)) return make_error("dflash: target rows of the wrong size");
  const BlockRows r = in_.upload(be_, b, ids_tmp_);
  const Tensor in = rows_.rows(0, n), c = x_.rows(0, n);  // [n, layers * hidden], [n, hidden]
  // c = hidden_norm(fc(rows)); per layer K = rope(k_norm(attn_k c)), V = attn_v c at the slots
  be_.write(in, rows.data());
  be_.matmul(fc_, in, c);
  be_.rms_norm(c, hidden_norm_, d_.eps, c);
  for (size_t l = 0; l < layers_.size(); ++l) qwen3_store_kv(be_, d_, layers_[l], c, r, pool.k[l], pool.v[l], s_);
  ctx_out.resize(size_t(no * hd));
  if (no > 0) {
    const Tensor o = out_rows_.rows(0, no);
    be_.get_rows(c, in_.out_ids.reshaped(in_.out_ids.n_cols, 1).rows(0, no).reshaped(1, no), o);
    be_.read(o, ctx_out.data());
  }
  be_.synchronize();
  return ok_status();
}

Status DflashModel::draft(const HeadBatch& b, std::span<const float> add, KvPool& pool, std::vector<float>& logits) {
  ONEBIT_TRY(in_.check(b, pool.k.empty() ? 0 : pool.k[0].n_rows, vocab_, pool.block_size));
  const int64_t n = b.n(), no = int64_t(b.out_rows.size()), hd = d_.hidden;
  if (!add.empty() && add.size() != size_t(b.n_seqs() * hd)) return make_error("dflash: added rows of the wrong size");
  const BlockRows r = in_.upload(be_, b, ids_tmp_);
  // base (host) = (mask_embd for mask rows, 0 for token rows) + add[seq]; x = base; token rows
  // then get their embedding added (token_embd rows gathered into e)
  base_.assign(size_t(n * hd), 0.0f);
  tok_idx_.clear();
  for (int64_t i = 0; i < n; ++i) {
    float* row = base_.data() + i * hd;
    if (b.tokens[i] < 0) std::memcpy(row, mask_.data(), size_t(hd) * sizeof(float));
    else tok_idx_.push_back(int32_t(i));
    if (!add.empty()) {
      const float* a = add.data() + size_t(b.seq_ids[i]) * hd;
      for (int64_t j = 0; j < hd; ++j) row[j] += a[j];
    }
  }
  const Tensor x = x_.rows(0, n);  // [n, hidden]
  be_.write(x, base_.data());
  be_.get_rows(target_.weights().token_embd, in_.ids.reshaped(in_.ids.n_cols, 1).rows(0, n).reshaped(1, n), e_.rows(0, n));
  for (int32_t i : tok_idx_) be_.add(x.rows(i, 1), e_.rows(i, 1), x.rows(i, 1));
  for (size_t l = 0; l < layers_.size(); ++l) {
    qwen3_block(be_, d_, layers_[l], x, r, pool.k[l], pool.v[l], pool.block_size, s_);
  }
  logits.resize(size_t(no) * vocab_);
  if (no > 0) {
    const Tensor o = out_rows_.rows(0, no), lg = logits_.rows(0, no);
    be_.get_rows(x, in_.out_ids.reshaped(in_.out_ids.n_cols, 1).rows(0, no).reshaped(1, no), o);
    be_.rms_norm(o, output_norm_, d_.eps, o);
    be_.matmul(target_.weights().output, o, lg);
    be_.read(lg, logits.data());
  }
  be_.synchronize();
  return ok_status();
}

}  // namespace onebit
