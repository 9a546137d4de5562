// Model loading (the layers bound by model/decoder.cpp through layers.h), K/V storage, batch
// validation and the scratch activations; the forward lives in model/decoder.cpp.
#include "model/model.h"

#include <algorithm>
#include <tuple>

#include "base/check.h"
#include "model/model_internal.h"
#include "model/rotation.h"

namespace onebit {
namespace {

// Block size of single-sequence caches (their table is the identity, so any size works).
constexpr int32_t kCacheBlock = 16;

// The first n entries of an I32 scratch vector [max, 1], as the [1, n] row ops take.
Tensor first_i32(const Tensor& t, int64_t n) { return t.rows(0, n).reshaped(1, n); }

}  // namespace

Model::Model(const GgufFile& file, Backend& backend, ModelConfig config)
    : file_(file), backend_(backend), config_(std::move(config)) {}

Model::~Model() {
  if (scratch_) scratch_->free_all(backend_);
}

Result<std::unique_ptr<Model>> Model::load(const GgufFile& file, Backend& backend) {
  ONEBIT_ASSIGN_OR_RETURN(ModelConfig config, model_config_from_gguf(file));
  ONEBIT_ASSIGN_OR_RETURN(const int32_t rotation, hadamard_block(file));
  if (rotation > 0 && !backend.rotates_inputs()) {
    return make_error("this file's weights are Hadamard-rotated (" + std::string(kHadamardKey) +
                      "), which the " + std::string(backend.name()) + " backend does not run; use another device");
  }
  std::unique_ptr<Model> m(new Model(file, backend, std::move(config)));
  ONEBIT_TRY(m->bind_weights());
  m->scratch_ = std::make_unique<Scratch>();
  return m;
}

Status Model::bind_weights() {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  auto bind = [&](const std::string& name, int64_t rows, int64_t cols, bool optional = false) {
    return bind_tensor(file_, backend_, name, rows, cols, optional);
  };
  ONEBIT_ASSIGN_OR_RETURN(w_.token_embd, bind("token_embd.weight", c.vocab_size, hidden));
  ONEBIT_ASSIGN_OR_RETURN(w_.output_norm, bind("output_norm.weight", 1, hidden));
  if (c.tied_output) {
    w_.output = w_.token_embd;
  } else {
    ONEBIT_ASSIGN_OR_RETURN(w_.output, bind("output.weight", c.vocab_size, hidden));
  }
  ONEBIT_ASSIGN_OR_RETURN(w_.rope_freqs, bind("rope_freqs.weight", 1, c.rope.n_rot / 2, true));
  config_.rope.freq_factors = w_.rope_freqs;
  w_.layers.resize(c.n_layers);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    ONEBIT_ASSIGN_OR_RETURN(w_.layers[l], bind_layer(file_, backend_, c, l));
  }
  return ok_status();
}

void StepBatch::clear() {
  tokens.clear();
  positions.clear();
  slots.clear();
  seq_ids.clear();
  block_tables.clear();
  max_blocks = 0;
  out_rows.clear();
  argmax_out.clear();
  state_rows.clear();
  ckpt_rows.clear();
}

int32_t StepBatch::table_width(int32_t widest, int32_t limit) {
  int32_t w = 1;
  while (w < widest && w < limit) w *= 2;
  return std::max(widest, std::min(w, limit));
}

int64_t Model::kv_bytes_per_token(GgmlType type) const {
  const int64_t elem = type == GgmlType::kF16 ? 2 : 4;
  int64_t attention_layers = 0;
  for (int32_t l = 0; l < config_.n_layers; ++l) attention_layers += !config_.is_recurrent(l);
  return 2 * attention_layers * config_.n_kv_heads * config_.head_dim * elem;
}

int64_t Model::state_bytes_per_sequence() const {
  const ModelConfig& c = config_;
  int64_t recurrent = 0;
  for (int32_t l = 0; l < c.n_layers; ++l) recurrent += c.is_recurrent(l);
  const int64_t per_layer = int64_t(c.ssm_conv_kernel - 1) * c.ssm_channels() +
                            int64_t(c.ssm_v_heads) * c.ssm_k_dim * c.ssm_v_dim;
  return recurrent * per_layer * int64_t(sizeof(float));
}

Result<KvPool> Model::new_kv_pool(int32_t n_blocks, int32_t block_size, GgmlType type, int32_t n_states) {
  if (n_blocks < 1 || block_size < 1) {
    return make_error("kv pool: " + std::to_string(n_blocks) + " blocks of " + std::to_string(block_size) +
                      " positions; need at least one of one");
  }
  if (type != GgmlType::kF16 && type != GgmlType::kF32) {
    return make_error(std::string("kv pool: cache type ") + ggml_type_name(static_cast<uint32_t>(type)) +
                      " is not supported; use f16 or f32");
  }
  const ModelConfig& c = config_;
  if (!c.recurrent.empty() && n_states < 1) {
    return make_error("kv pool: the model has recurrent layers and needs a state row per sequence");
  }
  KvPool pool;
  pool.type = type;
  pool.block_size = block_size;
  pool.n_blocks = n_blocks;
  pool.n_states = c.recurrent.empty() ? 0 : n_states;
  const int64_t rows = int64_t(n_blocks) * block_size, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
  const auto alloc = [&](GgmlType t, int64_t r, int64_t cols, std::vector<Tensor>& into) -> Status {
    auto a = backend_.alloc(t, r, cols);
    if (!a.ok()) return make_error("kv pool: " + a.message());
    into.push_back(*a);
    return ok_status();
  };
  for (int32_t l = 0; l < c.n_layers; ++l) {
    Status st = ok_status();
    if (c.is_recurrent(l)) {  // state rows; no K/V
      pool.k.push_back(Tensor{});
      pool.v.push_back(Tensor{});
      st = alloc(GgmlType::kF32, n_states, int64_t(c.ssm_conv_kernel - 1) * c.ssm_channels(), pool.conv);
      if (st.ok()) st = alloc(GgmlType::kF32, n_states, int64_t(c.ssm_v_heads) * c.ssm_k_dim * c.ssm_v_dim, pool.ssm);
    } else {
      pool.conv.push_back(Tensor{});
      pool.ssm.push_back(Tensor{});
      st = alloc(type, rows, kv_dim, pool.k);
      if (st.ok()) st = alloc(type, rows, kv_dim, pool.v);
    }
    if (!st.ok()) {
      free_kv_pool(pool);
      return st.error();
    }
  }
  return pool;
}

void Model::copy_state_row(const KvPool& pool, int32_t src, int32_t dst) {
  ONEBIT_CHECK(src >= 0 && src < pool.n_states && dst >= 0 && dst < pool.n_states);
  for (size_t l = 0; l < pool.conv.size(); ++l) {
    if (!pool.conv[l].valid()) continue;  // an attention layer
    backend_.copy(pool.conv[l].rows(src, 1), pool.conv[l].rows(dst, 1));
    backend_.copy(pool.ssm[l].rows(src, 1), pool.ssm[l].rows(dst, 1));
  }
}

void Model::copy_kv_block(const KvPool& pool, int32_t src, int32_t dst) {
  const int64_t bs = pool.block_size;
  for (size_t l = 0; l < pool.k.size(); ++l) {
    if (!pool.k[l].valid()) continue;  // a recurrent layer
    backend_.copy(pool.k[l].rows(src * bs, bs), pool.k[l].rows(dst * bs, bs));
    backend_.copy(pool.v[l].rows(src * bs, bs), pool.v[l].rows(dst * bs, bs));
  }
}

void Model::free_kv_pool(KvPool& pool) {
  for (auto* ts : {&pool.k, &pool.v, &pool.conv, &pool.ssm}) {
    for (auto& t : *ts) {
      if (t.valid()) backend_.free(t);
    }
    ts->clear();
  }
}

Status Model::reserve(const StepLimits& lim) {
  if (lim.max_tokens < 1 || lim.max_seqs < 1 || lim.max_blocks < 1 || lim.max_out < 1) {
    return make_error("forward: step limits must be at least 1 token, sequence, block and output row");
  }
  Scratch& s = *scratch_;
  s.free_all(backend_);
  limits_ = StepLimits{};
  const ModelConfig& c = config_;
  const int64_t n = lim.max_tokens, no = lim.max_out;
  struct Want { Tensor* t; GgmlType type; int64_t rows, cols; };
  const Want wants[] = {
      {&s.ids, GgmlType::kI32, n, 1},           {&s.positions, GgmlType::kI32, n, 1},
      {&s.slots, GgmlType::kI32, n, 1},         {&s.seq_ids, GgmlType::kI32, n, 1},
      {&s.block_tables, GgmlType::kI32, int64_t(lim.max_seqs) * lim.max_blocks, 1},
      {&s.out_ids, GgmlType::kI32, no, 1},      {&s.argmax, GgmlType::kI32, no, 1},
      {&s.x, GgmlType::kF32, n, c.hidden_size}, {&s.h, GgmlType::kF32, n, c.hidden_size},
      {&s.o, GgmlType::kF32, n, c.hidden_size},
      {&s.gate, GgmlType::kF32, n, c.intermediate_size}, {&s.up, GgmlType::kF32, n, c.intermediate_size},
      {&s.out_rows, GgmlType::kF32, no, c.hidden_size},  {&s.logits, GgmlType::kF32, no, c.vocab_size},
  };
  for (int32_t l : lim.capture_layers) {
    if (l < 0 || l > c.n_layers) {
      return make_error("forward: capture of layer " + std::to_string(l) + "; the model has layers 0.." +
                        std::to_string(c.n_layers - 1) + " (and " + std::to_string(c.n_layers) + ": the final norm)");
    }
  }
  const int64_t capture_cols = int64_t(lim.capture_layers.size()) * c.hidden_size;
  for (const Want& want : wants) {
    if ((want.t == &s.logits && !lim.logits) || want.cols == 0) continue;
    auto t = backend_.alloc(want.type, want.rows, want.cols);
    if (!t.ok()) {
      s.free_all(backend_);
      return make_error("forward: step buffers for " + std::to_string(n) + " tokens: " + t.message());
    }
    *want.t = *t;
  }
  Status st = s.attn.alloc(backend_, block_dims(), n);
  if (st.ok() && c.n_experts > 0) st = s.moe.alloc(backend_, moe_dims(), n);
  if (st.ok() && !c.recurrent.empty()) {
    st = s.delta.alloc(backend_, delta_dims(), n);
    const int64_t widest = std::max(int64_t(c.ssm_conv_kernel - 1) * c.ssm_channels(),
                                    int64_t(c.ssm_v_heads) * c.ssm_k_dim * c.ssm_v_dim);
    for (auto [t, type, rows, cols] : {std::tuple{&s.state_rows, GgmlType::kI32, int64_t(lim.max_seqs), int64_t(1)},
                                       std::tuple{&s.ckpt_rows, GgmlType::kI32, n, int64_t(1)},
                                       std::tuple{&s.zero, GgmlType::kF32, int64_t(1), widest}}) {
      if (!st.ok()) break;
      auto a = backend_.alloc(type, rows, cols);
      if (a.ok()) *t = *a;
      else st = make_error(a.message());
    }
  }
  if (!st.ok()) {
    s.free_all(backend_);
    return make_error("forward: step buffers for " + std::to_string(n) + " tokens: " + st.message());
  }
  if (capture_cols > 0) {
    auto t = backend_.alloc(GgmlType::kF32, n, capture_cols);
    if (!t.ok()) {
      s.free_all(backend_);
      return make_error("forward: capture buffer for " + std::to_string(n) + " tokens: " + t.message());
    }
    s.captured = *t;
  }
  limits_ = lim;
  return ok_status();
}

void Model::Scratch::free_all(Backend& backend) {
  for (Tensor* t : {&ids, &positions, &slots, &seq_ids, &block_tables, &out_ids, &argmax, &x, &h, &o, &gate, &up,
                    &out_rows, &logits, &captured}) {
    if (t->valid()) backend.free(*t);
    *t = Tensor{};
  }
  attn.free_all(backend);
  moe.free_all(backend);
  delta.free_all(backend);
  for (Tensor* t : {&state_rows, &ckpt_rows, &zero}) {
    if (t->valid()) backend.free(*t);
    *t = Tensor{};
  }
}

void Model::observe(std::string_view name, int layer_idx, const Tensor& t) {
  if (!hook_) return;
  std::vector<float> host(static_cast<size_t>(t.n_rows * t.n_cols));
  backend_.read(t, host.data());
  backend_.synchronize();
  hook_(name, layer_idx, t.n_rows, t.n_cols, host);
}

Status Model::validate(const StepBatch& b, const KvPool& pool) const {
  const int64_t n = b.n_tokens();
  if (n == 0) return make_error("forward: empty step");
  if (int64_t(b.positions.size()) != n || int64_t(b.slots.size()) != n || int64_t(b.seq_ids.size()) != n ||
      b.max_blocks < 1 || b.block_tables.size() % size_t(b.max_blocks) != 0) {
    return make_error("forward: step arrays disagree in length");
  }
  const int64_t n_seqs = b.n_seqs();
  if (n > limits_.max_tokens || n_seqs > limits_.max_seqs || b.max_blocks > limits_.max_blocks ||
      int64_t(b.out_rows.size()) > limits_.max_out) {
    return make_error("forward: step of " + std::to_string(n) + " tokens, " + std::to_string(n_seqs) + " sequences, " +
                      std::to_string(b.max_blocks) + " blocks, " + std::to_string(b.out_rows.size()) +
                      " outputs is beyond the reserved " + std::to_string(limits_.max_tokens) + ", " +
                      std::to_string(limits_.max_seqs) + ", " + std::to_string(limits_.max_blocks) + ", " +
                      std::to_string(limits_.max_out));
  }
  if (static_cast<int32_t>(pool.k.size()) != config_.n_layers) return make_error("forward: the K/V pool is not this model's");
  const int64_t bs = pool.block_size;
  std::vector<int32_t> max_pos(static_cast<size_t>(n_seqs), -1);
  for (int64_t i = 0; i < n; ++i) {
    const TokenId id = b.tokens[i];
    if (id < 0 || id >= config_.vocab_size) {
      return make_error("forward: token id " + std::to_string(id) + " is outside the vocabulary 0.." +
                        std::to_string(config_.vocab_size - 1));
    }
    const int32_t s = b.seq_ids[i], pos = b.positions[i];
    if (s < 0 || s >= n_seqs || pos < 0 || pos / bs >= b.max_blocks) {
      return make_error("forward: token " + std::to_string(i) + " has sequence " + std::to_string(s) + " and position " +
                        std::to_string(pos) + " outside the step's block tables");
    }
    const int32_t block = b.block_tables[size_t(s) * b.max_blocks + pos / bs];
    if (b.slots[i] != block * bs + pos % bs) {
      return make_error("forward: token " + std::to_string(i) + " at position " + std::to_string(pos) +
                        " has K/V slot " + std::to_string(b.slots[i]) + ", not where its block table puts it");
    }
    max_pos[s] = std::max(max_pos[s], pos);
  }
  // Every key a query reads (and so every slot written) lies in a block of the pool.
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t j = 0; j <= max_pos[s] / bs && max_pos[s] >= 0; ++j) {
      const int32_t block = b.block_tables[size_t(s) * b.max_blocks + j];
      if (block < 0 || block >= pool.n_blocks) {
        return make_error("forward: block table " + std::to_string(s) + " entry " + std::to_string(j) + " is " +
                          std::to_string(block) + "; the pool has " + std::to_string(pool.n_blocks) + " blocks");
      }
    }
  }
  for (size_t o = 0; o < b.out_rows.size(); ++o) {
    if (b.out_rows[o] < 0 || b.out_rows[o] >= n || (o > 0 && b.out_rows[o] <= b.out_rows[o - 1])) {
      return make_error("forward: output rows must be increasing token indices");
    }
  }
  if (!b.argmax_out.empty() && b.argmax_out.size() != b.out_rows.size()) {
    return make_error("forward: argmax_out has " + std::to_string(b.argmax_out.size()) + " entries for " +
                      std::to_string(b.out_rows.size()) + " output rows (one each, or none)");
  }
  // Recurrent layers: one distinct state row of the pool per sequence.
  if (!config_.recurrent.empty()) {
    if (int64_t(b.state_rows.size()) != n_seqs) {
      return make_error("forward: the model has recurrent layers; the step needs a state row per sequence");
    }
    std::vector<int32_t> rows = b.state_rows;
    std::sort(rows.begin(), rows.end());
    if (rows.front() < 0 || rows.back() >= pool.n_states || std::adjacent_find(rows.begin(), rows.end()) != rows.end()) {
      return make_error("forward: state rows must be distinct rows of the pool's " + std::to_string(pool.n_states));
    }
    if (!b.ckpt_rows.empty()) {  // checkpoints: distinct rows of the pool, none of them a state row
      if (int64_t(b.ckpt_rows.size()) != n) return make_error("forward: checkpoint rows must be given per token");
      std::vector<int32_t> all = b.state_rows;
      for (int32_t r : b.ckpt_rows) {
        if (r < -1 || r >= pool.n_states) {
          return make_error("forward: checkpoint row " + std::to_string(r) + " outside the pool's " +
                            std::to_string(pool.n_states) + " state rows");
        }
        if (r >= 0) all.push_back(r);
      }
      std::sort(all.begin(), all.end());
      if (std::adjacent_find(all.begin(), all.end()) != all.end()) {
        return make_error("forward: checkpoint rows must be distinct and none of the step's state rows");
      }
    }
  } else if (!b.ckpt_rows.empty()) {
    return make_error("forward: checkpoint rows for a model without recurrent layers");
  }
  return ok_status();
}

Status Model::forward(const StepBatch& b, KvPool& pool, std::vector<float>& logits, std::vector<float>* hidden,
                      std::vector<float>* captured, std::vector<int32_t>* argmax) {
  ONEBIT_TRY(validate(b, pool));
  const int64_t n = b.n_tokens(), n_seqs = b.n_seqs(), n_out = static_cast<int64_t>(b.out_rows.size());
  Scratch& sc = *scratch_;
  backend_.write(first_i32(sc.ids, n), b.tokens.data());
  backend_.write(first_i32(sc.positions, n), b.positions.data());
  backend_.write(first_i32(sc.slots, n), b.slots.data());
  backend_.write(first_i32(sc.seq_ids, n), b.seq_ids.data());
  backend_.write(first_i32(sc.block_tables, int64_t(b.block_tables.size())), b.block_tables.data());
  if (n_out > 0) backend_.write(first_i32(sc.out_ids, n_out), b.out_rows.data());
  if (!config_.recurrent.empty()) {
    backend_.write(first_i32(sc.state_rows, n_seqs), b.state_rows.data());
    if (!b.ckpt_rows.empty()) backend_.write(first_i32(sc.ckpt_rows, n), b.ckpt_rows.data());
    // A sequence whose step starts at position 0 starts from a zero state (a new sequence, or one
    // recomputed after a preemption).
    std::vector<int32_t> first(static_cast<size_t>(n_seqs), INT32_MAX);
    for (int64_t i = 0; i < n; ++i) first[b.seq_ids[i]] = std::min(first[b.seq_ids[i]], b.positions[i]);
    for (int64_t q = 0; q < n_seqs; ++q) {
      if (first[q] != 0) continue;
      for (int32_t l = 0; l < config_.n_layers; ++l) {
        if (!config_.is_recurrent(l)) continue;
        for (const Tensor* states : {&pool.conv[l], &pool.ssm[l]}) {
          Tensor zeros = sc.zero;
          zeros.n_cols = states->n_cols;
          backend_.copy(zeros, states->rows(b.state_rows[q], 1));
        }
      }
    }
  }
  forward_decoder(pool, n, n_seqs, b.max_blocks, n_out, !b.ckpt_rows.empty());
  logits.resize(limits_.logits ? static_cast<size_t>(n_out * config_.vocab_size) : 0);
  if (n_out > 0 && limits_.logits) read_logits(b, n_out, logits, argmax);
  if (hidden) {
    hidden->resize(static_cast<size_t>(n_out * config_.hidden_size));
    if (n_out > 0) backend_.read(sc.out_rows.rows(0, n_out), hidden->data());
  }
  if (captured) {
    captured->resize(sc.captured.valid() ? static_cast<size_t>(n * sc.captured.n_cols) : 0);
    if (sc.captured.valid()) backend_.read(sc.captured.rows(0, n), captured->data());
  }
  backend_.synchronize();
  return ok_status();
}

// The step's logits rows, or for rows the batch marks argmax_out their argmax_rows ids instead
// (one launch over every row; the other rows' logits read in runs).
void Model::read_logits(const StepBatch& b, int64_t n_out, std::vector<float>& logits, std::vector<int32_t>* argmax) {
  Scratch& sc = *scratch_;
  if (argmax == nullptr || b.argmax_out.empty()) {
    backend_.read(sc.logits.rows(0, n_out), logits.data());
    return;
  }
  const Tensor ids = first_i32(sc.argmax, n_out);
  backend_.argmax_rows(sc.logits.rows(0, n_out), ids);
  argmax->resize(size_t(n_out));
  backend_.read(ids, argmax->data());
  const size_t vocab = size_t(config_.vocab_size);
  for (int64_t o = 0; o < n_out;) {
    if (b.argmax_out[size_t(o)]) {
      ++o;
      continue;
    }
    int64_t e = o + 1;
    while (e < n_out && !b.argmax_out[size_t(e)]) ++e;
    backend_.read(sc.logits.rows(o, e - o), logits.data() + size_t(o) * vocab);
    o = e;
  }
}

void Model::read_logits_row(int32_t o, std::span<float> dst) {
  ONEBIT_CHECK(limits_.logits && o >= 0 && o < limits_.max_out && dst.size() == size_t(config_.vocab_size));
  backend_.read(scratch_->logits.rows(o, 1), dst.data());
  backend_.synchronize();
}

Result<KvCache> Model::new_kv_cache(int32_t n_ctx) {
  if (n_ctx < 1) return make_error("kv cache: context of " + std::to_string(n_ctx) + " positions; need at least 1");
  KvCache kv;
  kv.n_ctx = n_ctx;
  ONEBIT_ASSIGN_OR_RETURN(kv.pool, new_kv_pool((n_ctx + kCacheBlock - 1) / kCacheBlock, kCacheBlock, GgmlType::kF32,
                                               /*n_states=*/1));
  return kv;
}

void Model::free_kv_cache(KvCache& kv) {
  free_kv_pool(kv.pool);
  kv.n_past = 0;
}

Status Model::forward(KvCache& kv, std::span<const TokenId> tokens, bool all_logits, std::vector<float>& logits) {
  if (tokens.empty()) return make_error("forward: no tokens to run");
  if (int64_t(kv.n_past) + int64_t(tokens.size()) > kv.n_ctx) {
    return make_error("forward: sequence needs " + std::to_string(kv.n_past + tokens.size()) +
                      " positions; its context is " + std::to_string(kv.n_ctx) +
                      "; shorten the prompt or raise the context size");
  }
  const int32_t n = static_cast<int32_t>(tokens.size());
  StepBatch b;
  b.tokens.assign(tokens.begin(), tokens.end());
  for (int32_t i = 0; i < n; ++i) {
    b.positions.push_back(kv.n_past + i);
    b.slots.push_back(kv.n_past + i);  // identity table: block j holds positions j * bs ..
    b.seq_ids.push_back(0);
    if (all_logits || i == n - 1) b.out_rows.push_back(i);
  }
  b.max_blocks = kv.pool.n_blocks;
  for (int32_t j = 0; j < kv.pool.n_blocks; ++j) b.block_tables.push_back(j);
  if (kv.pool.n_states > 0) b.state_rows.push_back(0);
  const StepLimits& l = limits_;
  const int32_t n_out = static_cast<int32_t>(b.out_rows.size());
  if (n > l.max_tokens || b.max_blocks > l.max_blocks || n_out > l.max_out || !l.logits) {
    ONEBIT_TRY(reserve(StepLimits{std::max(n, 2 * l.max_tokens), std::max(1, l.max_seqs),
                                  std::max(b.max_blocks, l.max_blocks), std::max(n_out, 2 * l.max_out), true, l.capture_layers}));
  }
  ONEBIT_TRY(forward(b, kv.pool, logits));
  kv.n_past += n;
  return ok_status();
}

}  // namespace onebit
