// MTP head forward (mtp_head.h); the reference is tools/train/model.py MtpHead.
#include "model/mtp_head.h"

#include "base/check.h"
#include "model/model_internal.h"

namespace onebit {

Result<BlockDims> drafter_dims(const GgufFile& f, const std::string& arch, const Model& target) {
  const ModelConfig& c = target.config();
  const std::string err = "drafter " + f.name() + ": ";
  auto got = f.get_string("general.architecture");
  if (!got.ok() || *got != arch) {
    return make_error(err + "general.architecture is '" + (got.ok() ? *got : std::string("?")) + "'; expected " + arch);
  }
  auto ta = f.get_string(arch + ".target_architecture");
  if (ta.ok() && *ta != c.arch_name) {
    return make_error(err + "made for a " + *ta + " target; the target is " + c.arch_name);
  }
  if (c.arch != Architecture::kQwen3) return make_error(err + "the target is " + c.arch_name + "; qwen3 drafters need a qwen3 target");
  struct Key { const char* key; int64_t want; };
  for (Key k : {Key{"vocab_size", c.vocab_size}, Key{"embedding_length", c.hidden_size},
                Key{"attention.head_count", c.n_heads}, Key{"attention.head_count_kv", c.n_kv_heads},
                Key{"attention.key_length", c.head_dim}, Key{"attention.value_length", c.head_dim}}) {
    auto v = f.get_int(arch + "." + k.key);
    if (!v.ok()) return make_error(err + "missing key " + arch + "." + k.key);
    if (*v != k.want) {
      return make_error(err + arch + "." + k.key + " is " + std::to_string(*v) + "; the target has " +
                        std::to_string(k.want));
    }
  }
  BlockDims d;
  d.hidden = c.hidden_size;
  d.n_heads = c.n_heads;
  d.n_kv_heads = c.n_kv_heads;
  d.head_dim = c.head_dim;
  auto ffn = f.get_int(arch + ".feed_forward_length");
  if (!ffn.ok() || *ffn < 1 || *ffn > (1 << 20)) return make_error(err + "missing or bad " + arch + ".feed_forward_length");
  d.ffn = static_cast<int32_t>(*ffn);
  auto eps = f.get_float(arch + ".attention.layer_norm_rms_epsilon");
  d.eps = eps.ok() ? static_cast<float>(*eps) : c.rms_norm_eps;
  d.rope = c.rope;
  auto base = f.get_float(arch + ".rope.freq_base");
  if (base.ok() && static_cast<float>(*base) != c.rope.freq_base) {
    return make_error(err + arch + ".rope.freq_base differs from the target's");
  }
  return d;
}

Result<std::unique_ptr<MtpHead>> MtpHead::load(const GgufFile& f, Model& target) {
  if (target.config().n_layers < 1) return make_error("mtp: target has no layers");
  std::unique_ptr<MtpHead> m(new MtpHead(target.backend(), target));
  ONEBIT_ASSIGN_OR_RETURN(m->d_, drafter_dims(f, "qwen3_mtp", target));
  auto blocks = f.get_int("qwen3_mtp.block_count");
  if (blocks.ok() && *blocks != 1) return make_error("mtp: qwen3_mtp.block_count is " + std::to_string(*blocks) + "; supported: 1");
  m->vocab_ = target.config().vocab_size;
  m->target_layer_ = target.config().n_layers - 1;
  ONEBIT_TRY(m->bind_nextn(f, 0));
  ONEBIT_ASSIGN_OR_RETURN(m->block_, bind_qwen3_block(f, m->be_, m->d_, 0));
  return m;
}

Result<std::unique_ptr<MtpHead>> MtpHead::load_nextn(const GgufFile& f, Model& target) {
  const ModelConfig& c = target.config();
  if (c.n_nextn < 1) {
    return make_error("mtp: " + f.name() + " has no MTP layers (" + c.arch_name + ".nextn_predict_layers)");
  }
  std::unique_ptr<MtpHead> m(new MtpHead(target.backend(), target));
  m->d_ = block_dims_of(c);
  m->md_ = moe_dims_of(c);
  m->vocab_ = c.vocab_size;
  m->target_layer_ = c.n_layers;  // the final-normed output
  m->normed_chain_ = true;
  ONEBIT_TRY(m->bind_nextn(f, c.n_layers));
  auto block = bind_layer(f, m->be_, c, c.n_layers);
  if (!block.ok()) return make_error("mtp: the model's MTP layer " + std::to_string(c.n_layers) + ": " + block.message());
  m->block_ = std::move(*block);
  return m;
}

Status MtpHead::bind_nextn(const GgufFile& f, int32_t layer) {
  const int64_t hd = d_.hidden;
  const std::string p = "blk." + std::to_string(layer) + ".nextn.";
  ONEBIT_ASSIGN_OR_RETURN(enorm_, bind_tensor(f, be_, p + "enorm.weight", 1, hd));
  ONEBIT_ASSIGN_OR_RETURN(hnorm_, bind_tensor(f, be_, p + "hnorm.weight", 1, hd));
  ONEBIT_ASSIGN_OR_RETURN(eh_proj_, bind_tensor(f, be_, p + "eh_proj.weight", hd, 2 * hd));
  ONEBIT_ASSIGN_OR_RETURN(head_norm_, bind_tensor(f, be_, p + "shared_head_norm.weight", 1, hd));
  return ok_status();
}

MtpHead::~MtpHead() {
  s_.free_all(be_);
  in_.free_all(be_);
  for (Tensor* t : {&x_, &e_, &cat_, &out_rows_, &logits_}) {
    if (t->valid()) be_.free(*t);
  }
}

Status MtpHead::reserve(int32_t max_rows, int32_t max_seqs, int32_t max_blocks, int32_t max_out) {
  ONEBIT_CHECK(!x_.valid());
  ONEBIT_TRY(s_.alloc(be_, d_, max_rows, &md_));
  ONEBIT_TRY(in_.alloc(be_, max_rows, max_seqs, max_blocks, max_out));
  struct Want { Tensor* t; int64_t rows, cols; };
  for (Want w : {Want{&x_, max_rows, d_.hidden}, Want{&e_, max_rows, d_.hidden}, Want{&cat_, max_rows, 2 * d_.hidden},
                 Want{&out_rows_, max_out, d_.hidden}, Want{&logits_, max_out, vocab_}}) {
    auto t = be_.alloc(GgmlType::kF32, w.rows, w.cols);
    if (!t.ok()) return make_error("mtp scratch: " + t.message());
    *w.t = *t;
  }
  return ok_status();
}

Result<KvPool> MtpHead::new_pool(int32_t n_blocks, int32_t block_size, GgmlType type) {
  return alloc_block_pool(be_, d_, 1, n_blocks, block_size, type);
}
void MtpHead::free_pool(KvPool& pool) { free_block_pool(be_, pool); }
void MtpHead::copy_block(const KvPool& pool, int32_t src, int32_t dst) { copy_pool_block(be_, pool, src, dst); }

Status MtpHead::forward(const HeadBatch& b, std::span<const float> h, KvPool& pool, std::vector<float>& out,
                        std::vector<float>& logits) {
  ONEBIT_TRY(in_.check(b, pool.k.empty() ? 0 : pool.k[0].n_rows, vocab_, pool.block_size));
  const int64_t n = b.n(), no = int64_t(b.out_rows.size()), hd = d_.hidden;
  if (h.size() != size_t(n * hd)) return make_error("mtp: hidden rows of the wrong size");
  for (TokenId t : b.tokens) {
    if (t < 0) return make_error("mtp: negative token id");
  }
  const BlockRows r = in_.upload(be_, b, ids_tmp_);
  const Tensor x = x_.rows(0, n), e = e_.rows(0, n), cat = cat_.rows(0, n);  // [n, hidden] x2, [n, 2 hidden]
  Tensor cat_e = cat, cat_h = cat;  // column halves of cat: [n, hidden] each
  cat_e.n_cols = cat_h.n_cols = hd;
  cat_h.offset_bytes += size_t(hd) * sizeof(float);
  // cat = [enorm(token_embd[tokens]); hnorm(h)]; x = eh_proj(cat)
  be_.get_rows(target_.weights().token_embd, in_.ids.reshaped(in_.ids.n_cols, 1).rows(0, n).reshaped(1, n), e);
  be_.rms_norm(e, enorm_, d_.eps, cat_e);
  be_.write(x, h.data());
  be_.rms_norm(x, hnorm_, d_.eps, cat_h);
  be_.matmul(eh_proj_, cat, x);
  qwen3_block(be_, d_, block_, x, r, pool.k[0], pool.v[0], pool.block_size, s_);
  out.resize(size_t(no * hd));
  logits.resize(size_t(no) * vocab_);
  if (no > 0) {
    const Tensor o = out_rows_.rows(0, no), lg = logits_.rows(0, no);
    be_.get_rows(x, in_.out_ids.reshaped(in_.out_ids.n_cols, 1).rows(0, no).reshaped(1, no), o);
    be_.rms_norm(o, head_norm_, d_.eps, e.rows(0, no));
    be_.read(normed_chain_ ? e.rows(0, no) : o, out.data());
    be_.matmul(target_.weights().output, e.rows(0, no), lg);
    be_.read(lg, logits.data());
  }
  be_.synchronize();
  return ok_status();
}

}  // namespace onebit
