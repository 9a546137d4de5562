// One Qwen3 block for the drafters (qwen3_block.h) over the shared layer pieces (layers.h).
#include "model/qwen3_block.h"

#include "model/model_internal.h"

namespace onebit {

Status BlockScratch::alloc(Backend& be, const BlockDims& d, int64_t n, const MoeDims* md) {
  for (auto [t, cols] : {std::pair{&h, d.hidden}, {&o, d.hidden}, {&gate, d.ffn}, {&up, d.ffn}}) {
    if (cols == 0) continue;
    auto a = be.alloc(GgmlType::kF32, n, cols);
    if (!a.ok()) return make_error("drafter scratch: " + a.message());
    *t = *a;
  }
  Status st = attn.alloc(be, d, n);
  if (st.ok() && md != nullptr && md->n_experts > 0) {
    moe_dims = *md;
    st = moe.alloc(be, *md, n);
  }
  return st.ok() ? st : make_error("drafter " + st.message());
}

void BlockScratch::free_all(Backend& be) {
  for (Tensor* t : {&h, &o, &gate, &up}) {
    if (t->valid()) be.free(*t);
    *t = Tensor{};
  }
  attn.free_all(be);
  moe.free_all(be);
}

void HeadBatch::clear() {
  tokens.clear();
  rope_pos.clear();
  attn_pos.clear();
  slots.clear();
  seq_ids.clear();
  block_tables.clear();
  out_rows.clear();
}

Status HeadInputs::alloc(Backend& be, int32_t rows, int32_t seqs, int32_t blocks, int32_t outs) {
  max_rows = rows;
  max_seqs = seqs;
  max_blocks = blocks;
  max_out = outs;
  struct Want { Tensor* t; int64_t n; };
  for (Want w : {Want{&ids, rows}, Want{&rope_pos, rows}, Want{&attn_pos, rows}, Want{&slots, rows},
                 Want{&seq_ids, rows}, Want{&tables, int64_t(seqs) * blocks}, Want{&out_ids, outs}}) {
    auto t = be.alloc(GgmlType::kI32, 1, w.n);
    if (!t.ok()) return make_error("drafter inputs: " + t.message());
    *w.t = *t;
  }
  return ok_status();
}

void HeadInputs::free_all(Backend& be) {
  for (Tensor* t : {&ids, &rope_pos, &attn_pos, &slots, &seq_ids, &tables, &out_ids}) {
    if (t->valid()) be.free(*t);
    *t = Tensor{};
  }
}

Status HeadInputs::check(const HeadBatch& b, int64_t n_pool_rows, int32_t vocab, int32_t block_size) const {
  const int32_t n = b.n();
  if (n < 1 || n > max_rows || b.n_seqs() < 1 || b.n_seqs() > max_seqs || b.max_blocks > max_blocks ||
      int32_t(b.out_rows.size()) > max_out) {
    return make_error("drafter batch of " + std::to_string(n) + " rows, " + std::to_string(b.n_seqs()) +
                      " sequences beyond the reserved sizes");
  }
  if (int32_t(b.tokens.size()) != n || int32_t(b.attn_pos.size()) != n || int32_t(b.slots.size()) != n ||
      int32_t(b.seq_ids.size()) != n) {
    return make_error("drafter batch: row inputs of different lengths");
  }
  for (int32_t i = 0; i < n; ++i) {
    if (b.tokens[i] >= vocab) return make_error("drafter batch: token id " + std::to_string(b.tokens[i]));
    if (b.slots[i] < 0 || b.slots[i] >= n_pool_rows) return make_error("drafter batch: slot outside the pool");
    if (b.seq_ids[i] < 0 || b.seq_ids[i] >= b.n_seqs()) return make_error("drafter batch: sequence index");
    if (b.attn_pos[i] < 0 || int64_t(b.attn_pos[i]) >= int64_t(b.max_blocks) * block_size)
      return make_error("drafter batch: attention position beyond the block table");
  }
  for (int32_t r : b.out_rows) {
    if (r < 0 || r >= n) return make_error("drafter batch: output row");
  }
  return ok_status();
}

BlockRows HeadInputs::upload(Backend& be, const HeadBatch& b, std::vector<int32_t>& ids_tmp) {
  const int64_t n = b.n(), no = int64_t(b.out_rows.size());
  ids_tmp.assign(b.tokens.begin(), b.tokens.end());
  for (int32_t& t : ids_tmp) t = t < 0 ? 0 : t;
  const auto first = [](const Tensor& t, int64_t k) { return t.reshaped(t.n_cols, 1).rows(0, k).reshaped(1, k); };
  BlockRows r;
  r.rope_pos = first(rope_pos, n);
  r.attn_pos = first(attn_pos, n);
  r.slots = first(slots, n);
  r.seq_ids = first(seq_ids, n);
  r.tables = first(tables, int64_t(b.n_seqs()) * b.max_blocks).reshaped(b.n_seqs(), b.max_blocks);
  be.write(first(ids, n), ids_tmp.data());
  be.write(r.rope_pos, b.rope_pos.data());
  be.write(r.attn_pos, b.attn_pos.data());
  be.write(r.slots, b.slots.data());
  be.write(r.seq_ids, b.seq_ids.data());
  be.write(r.tables, b.block_tables.data());
  if (no > 0) be.write(first(out_ids, no), b.out_rows.data());
  return r;
}

Result<LayerWeights> bind_qwen3_block(const GgufFile& f, Backend& be, const BlockDims& d, int32_t layer) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  LayerWeights L;
  ONEBIT_ASSIGN_OR_RETURN(L.attn_norm, bind_tensor(f, be, p + "attn_norm.weight", 1, d.hidden));
  ONEBIT_ASSIGN_OR_RETURN(L.attn, bind_attention(f, be, d, layer, /*bias=*/false, /*qk_norm=*/true));
  ONEBIT_ASSIGN_OR_RETURN(L.ffn_norm, bind_tensor(f, be, p + "ffn_norm.weight", 1, d.hidden));
  ONEBIT_ASSIGN_OR_RETURN(L.ffn, bind_ffn(f, be, layer, d.hidden, d.ffn));
  return L;
}

void qwen3_store_kv(Backend& be, const BlockDims& d, const LayerWeights& L, const Tensor& x, const BlockRows& r,
                    const Tensor& k_pool, const Tensor& v_pool, BlockScratch& s) {
  store_kv_rows(be, d, L.attn, x, r, k_pool, v_pool, s.attn);
}

void qwen3_block(Backend& be, const BlockDims& d, const LayerWeights& L, const Tensor& x, const BlockRows& r,
                 const Tensor& k_pool, const Tensor& v_pool, int32_t block_size, BlockScratch& s) {
  const int64_t n = x.n_rows;
  const Tensor h = s.h.rows(0, n), o = s.o.rows(0, n);  // [n, hidden]
  // x += attention(attn_norm(x)) over keys 0..attn_pos of each row's table
  be.rms_norm(x, L.attn_norm, d.eps, h);
  attention_block(be, d, L.attn, h, r, k_pool, v_pool, block_size, s.attn, o);
  // x += ffn(ffn_norm(x)): a mixture of experts, or down(silu(gate(h)) * up(h))
  be.add_rms_norm(x, o, L.ffn_norm, d.eps, x, h);
  if (L.moe.router.valid()) {
    moe_ffn(be, s.moe_dims, L.moe, h, s.moe, o);
  } else {
    swiglu_ffn(be, L.ffn, h, s.gate.rows(0, n), s.up.rows(0, n), o);
  }
  be.add(x, o, x);
}

Result<KvPool> alloc_block_pool(Backend& be, const BlockDims& d, int32_t n_layers, int32_t n_blocks,
                                int32_t block_size, GgmlType type) {
  KvPool pool;
  pool.type = type;
  pool.block_size = block_size;
  pool.n_blocks = n_blocks;
  const int64_t rows = int64_t(n_blocks) * block_size, kvd = int64_t(d.n_kv_heads) * d.head_dim;
  for (int32_t l = 0; l < n_layers; ++l) {
    auto k = be.alloc(type, rows, kvd);
    auto v = k.ok() ? be.alloc(type, rows, kvd) : Result<Tensor>(make_error(k.message()));
    if (k.ok()) pool.k.push_back(*k);
    if (!v.ok()) {
      free_block_pool(be, pool);
      return make_error("drafter K/V pool: " + v.message());
    }
    pool.v.push_back(*v);
  }
  return pool;
}

void free_block_pool(Backend& be, KvPool& pool) {
  for (auto& t : pool.k) be.free(t);
  for (auto& t : pool.v) be.free(t);
  pool.k.clear();
  pool.v.clear();
}

void copy_pool_block(Backend& be, const KvPool& pool, int32_t src, int32_t dst) {
  const int64_t bs = pool.block_size;
  for (size_t l = 0; l < pool.k.size(); ++l) {
    be.copy(pool.k[l].rows(src * bs, bs), pool.k[l].rows(dst * bs, bs));
    be.copy(pool.v[l].rows(src * bs, bs), pool.v[l].rows(dst * bs, bs));
  }
}

}  // namespace onebit
