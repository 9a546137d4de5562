// The optimized CPU backend: the Backend ops over host memory, split across a ThreadPool, with the
// dot kernels of one SIMD target (cpu_kernels.h). Matmul quantizes activations as ggml does (Q8 for
// the 32-blocks, Q8_K for the K-quants) and then runs matrix-vector (n == 1: weight rows split
// across threads) or register-tiled matrix-matrix (n > 1: weight-row x activation-row tiles), on
// 8-row panels (panels.h) for the weights repacked at load, else row by row.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/panels.h"
#include "backend/cpu/recurrent.h"
#include "backend/hadamard.h"
#include "backend/host_backend.h"
#include "base/check.h"
#include "base/large_alloc.h"
#include "base/thread_pool.h"
#include "gguf/quants.h"

namespace onebit {
namespace {

using cpu::ActFormat;
using cpu::ActQ8;
using cpu::DotKernel;

void check_f32(const Tensor& t) { ONEBIT_CHECK(t.type == GgmlType::kF32); }

// Rows per task of matrix-vector, and the matrix-matrix tile: kTileRows weight rows times
// kTileCols activation rows, swept kMaxDotRows activation rows at a time so that each unpacked
// weight block meets several activations while it is in registers.
constexpr int64_t kMatvecRows = 16;
constexpr int64_t kTileRows = 16;
constexpr int64_t kTileCols = 64;

// Units per grab of a dynamic loop over n units of about unit_bytes of weight-bytes x activation
// rows each: about 8 grabs per thread, but none under kMinGrabBytes (unless that leaves a thread
// without one). A grab is a contended cache line (~0.1-0.2 us), and a thread that keeps reading one
// long stretch of a matrix keeps its prefetchers running: onebit-20m's 1-token step on this 2-vCPU
// EPYC took 0.73 ms with grabs of 16 rows (6.5 KB), 0.43 ms with 256 KiB grabs.
constexpr int64_t kMinGrabBytes = 256 << 10;
inline int64_t grab_chunk_for(int64_t n, size_t unit_bytes, int n_threads) {
  const int64_t by_count = std::max<int64_t>(1, n / (8 * n_threads));
  const int64_t by_bytes = kMinGrabBytes / int64_t(std::max<size_t>(1, unit_bytes));
  return std::max(by_count, std::min(by_bytes, (n + n_threads - 1) / n_threads));
}

class CpuBackend final : public HostBackend {
 public:
  CpuBackend(int n_threads, CpuIsa isa, bool panels, bool amx)
      : HostBackend("cpu backend"), pool_(n_threads), table_(&cpu::dot_table(isa)),
        name_("cpu-" + std::string(cpu_isa_name(isa)) + (amx ? "+amx" : "")), panels_(panels), amx_(amx),
        scratch_(pool_.n_threads()) {}

  std::string_view name() const override { return name_; }
  bool rotates_inputs() const override { return true; }

  // Aliases the bytes; weights of the panel types in whole panels also get a repacked copy.
  Result<Tensor> weight_from_host(GgmlType type, int64_t n_rows, int64_t n_cols,
                                  std::span<const uint8_t> bytes) override {
    Result<Tensor> t = HostBackend::weight_from_host(type, n_rows, n_cols, bytes);
    if (t.ok() && panels_ && table_->panel_by_type[static_cast<uint32_t>(type) & 31] != nullptr &&
        cpu::has_panels(type) && n_rows > 0 && n_rows % cpu::kPanelRows == 0) {
      if (Status s = pack_panels(*t, bytes); !s.ok()) {
        HostBackend::free(*t);
        return make_error(s.message());
      }
    }
    return t;
  }

  void free(const Tensor& t) override {
    panels_of_.erase(t.buffer);
    HostBackend::free(t);
  }

  void get_rows(const Tensor& table, const Tensor& ids, const Tensor& out) override {
    ONEBIT_CHECK(ids.type == GgmlType::kI32 && ids.n_rows == 1);
    ONEBIT_CHECK(ids.n_cols == out.n_rows && table.n_cols == out.n_cols);
    check_f32(out);
    const int32_t* id = reinterpret_cast<const int32_t*>(row_ptr(ids, 0));
    for (int64_t i = 0; i < out.n_rows; ++i) ONEBIT_CHECK(id[i] >= 0 && id[i] < table.n_rows);
    pool_.parallel_for(Parallel::kDynamic, out.n_rows, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        dequantize_row(table.type, row_ptr(table, id[i]), f32_row(out, i), table.n_cols);
      }
    });
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
    check_same_shape(x, out);
    check_f32(x), check_f32(out), check_f32(weight);
    ONEBIT_CHECK(weight.n_rows == 1 && weight.n_cols == x.n_cols);
    const float* w = f32_row(weight, 0);
    const int64_t d = x.n_cols;
    pool_.parallel_for(Parallel::kStatic, x.n_rows, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) {
        const float inv = float(1.0 / std::sqrt(cpu::sum_squares(f32_row(x, r), d) / double(d) + eps));
        cpu::scale_mul(f32_row(x, r), inv, w, f32_row(out, r), d);
      }
    });
  }

  void matmul(const Tensor& w, const Tensor& x, const Tensor& out) override;

  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    check_same_shape(a, out);
    check_f32(a), check_f32(b), check_f32(out);
    ONEBIT_CHECK(b.n_cols == a.n_cols && (b.n_rows == a.n_rows || b.n_rows == 1));
    pool_.parallel_for(Parallel::kStatic, a.n_rows, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        cpu::add_rows(f32_row(a, r), f32_row(b, b.n_rows == 1 ? 0 : r), f32_row(out, r), a.n_cols);
      }
    });
  }

  void swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) override {
    check_same_shape(gate, up);
    check_same_shape(gate, out);
    check_f32(gate), check_f32(up), check_f32(out);
    // Split columns too: at decode there is one row of `intermediate_size` elements.
    const int64_t n_col_chunks = (gate.n_cols + 1023) / 1024;
    pool_.parallel_for(Parallel::kStatic, gate.n_rows * n_col_chunks, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t r = t / n_col_chunks, c0 = (t % n_col_chunks) * 1024;
        const int64_t nc = std::min<int64_t>(1024, gate.n_cols - c0);
        cpu::swiglu_row(f32_row(gate, r) + c0, f32_row(up, r) + c0, f32_row(out, r) + c0, nc);
      }
    });
  }

  void softmax(const Tensor& x, const Tensor& out) override {
    check_same_shape(x, out);
    check_f32(x), check_f32(out);
    pool_.parallel_for(Parallel::kStatic, x.n_rows, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) cpu::softmax_row(f32_row(x, r), f32_row(out, r), x.n_cols);
    });
  }

  // F32 rows copied, F16 rows rounded by F16C (the bits of fp32_to_fp16).
  void store_kv(const Tensor& src, const Tensor& slots, const Tensor& dst) override {
    check_store_kv(src, slots, dst);
    const int32_t* slot = i32_row(slots, 0);
    const bool f16 = dst.type == GgmlType::kF16;
    pool_.parallel_for(Parallel::kStatic, src.n_rows, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        if (f16) {
          auto* d = reinterpret_cast<uint16_t*>(row_ptr(dst, slot[i]));
          cpu::fp32_to_fp16_row(f32_row(src, i), d, src.n_cols);
        } else {
          std::memcpy(row_ptr(dst, slot[i]), f32_row(src, i), size_t(src.n_cols) * sizeof(float));
        }
      }
    });
  }

  void rope(const Tensor& x, const Tensor& positions, const RopeParams& p) override;

  void moe_route(const Tensor& logits, bool normalize, const Tensor& ids, const Tensor& weights) override;
  void ssm_conv(const Tensor& x, const Tensor& w, const Tensor& seq_ids, const Tensor& state_rows,
                const Tensor& ckpt_rows, const Tensor& states, bool silu, const Tensor& out) override;
  void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                        const Tensor& A, const Tensor& dt_bias, const Tensor& seq_ids, const Tensor& state_rows,
                        const Tensor& ckpt_rows, const Tensor& states, const Tensor& out,
                        const DeltaParams& p) override;
  void moe_matmul(const Tensor& w, int32_t n_experts, const Tensor& x, const Tensor& ids, const Tensor& out) override;

  void moe_combine(const Tensor& y, const Tensor& weights, const Tensor& out) override {
    check_moe_combine(y, weights, out);
    const int64_t top_k = weights.n_cols, d = out.n_cols;
    pool_.parallel_for(Parallel::kStatic, out.n_rows, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        float* o = f32_row(out, i);
        const float* wi = f32_row(weights, i);
        for (int64_t c = 0; c < d; ++c) o[c] = wi[0] * f32_row(y, i * top_k)[c];
        for (int64_t j = 1; j < top_k; ++j) {
          const float* yr = f32_row(y, i * top_k + j);
          for (int64_t c = 0; c < d; ++c) o[c] += wi[j] * yr[c];
        }
      }
    });
  }

  void sigmoid_mul(const Tensor& x, const Tensor& g, const Tensor& out) override {
    check_sigmoid_mul(x, g, out);
    pool_.parallel_for(Parallel::kStatic, x.n_rows, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) {
        const float* xr = f32_row(x, r);
        const float* gr = f32_row(g, r);
        float* o = f32_row(out, r);
        for (int64_t c = 0; c < x.n_cols; ++c) o[c] = xr[c] / (1.0f + std::exp(-gr[g.n_cols == 1 ? 0 : c]));
      }
    });
  }

  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const AttentionParams& p) override;
  void paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const Tensor& positions,
                       const Tensor& seq_ids, const Tensor& block_tables, const Tensor& out,
                       const PagedAttentionParams& p) override;

 private:
  int64_t grab_chunk(int64_t n, size_t unit_bytes) const { return grab_chunk_for(n, unit_bytes, pool_.n_threads()); }
  // Per-thread scratch (attention scores, dequantized rows, rope angles).
  struct alignas(64) Scratch {
    std::vector<float> a, b;
  };
  void matmul_dequantized(const Tensor& w, const Tensor& x, const Tensor& out);
  // The step's rows grouped by sequence (seq_rows_ from seq_first_[s] to seq_first_[s + 1], in
  // order); CHECKs every sequence index and its state row.
  // Also CHECKs the checkpoint rows (if any) and returns them (nullptr: none).
  const int32_t* group_by_sequence(const Tensor& seq_ids, const Tensor& state_rows, const Tensor& ckpt_rows,
                                   const Tensor& states);
  // Repacks weight t's rows (bytes) into panels owned by its buffer.
  Status pack_panels(const Tensor& t, std::span<const uint8_t> bytes);

  ThreadPool pool_;
  const cpu::DotTable* table_;
  std::string name_;
  bool panels_;                       // repack the panel types' weights (panels.h)
  bool amx_;                          // prompt products of the 32-element panel types on AMX tiles
  // Activations of rotated Q4_0 prompt products (>= kW4A4Rows rows) on a 4-bit grid, when
  // ONEBIT_W4A4=1: the accuracy of W4A4 measured, not its speed (docs/engine.md: no x86
  // instruction multiplies int4 faster than int8, so it runs at W4A8's speed). Off by default.
  static constexpr int64_t kW4A4Rows = 16;
  bool w4a4_ = [] {
    const char* e = std::getenv("ONEBIT_W4A4");
    return e != nullptr && std::string_view(e) == "1";
  }();
  // Several activation rows meet two panels at once (DotTable::panel2_by_type; products of 8 or
  // 64 rows 1.2-2.5x on a Zen 4 EPYC, 1.1-1.7x on a Sapphire Rapids Xeon: docs/kernels.md);
  // ONEBIT_CPU_DUAL_PANELS=0 turns it off.
  bool dual_panels_ = [] {
    const char* e = std::getenv("ONEBIT_CPU_DUAL_PANELS");
    return e == nullptr || e[0] == '\0' || std::string_view(e) != "0";
  }();
  // Decode's matrix-vector grabs shrink toward a job's end (Parallel::kGuided), so the threads
  // finish within a short grab of each other (docs/kernels.md); ONEBIT_CPU_GUIDED=0: fixed grabs.
  bool guided_ = [] {
    const char* e = std::getenv("ONEBIT_CPU_GUIDED");
    return e == nullptr || e[0] == '\0' || std::string_view(e) != "0";
  }();
  std::vector<Scratch> scratch_;      // [n_threads]
  std::vector<uint8_t> act_;          // [n, row bytes of the activation format]
  // paged_attention: the pool rows of each sequence's keys (up to the furthest position asked for
  // it), sequence after sequence; where each sequence's list starts (-1: not in the batch) and its
  // length.
  std::vector<int32_t> kv_rows_;      // [sum of key counts]
  std::vector<int64_t> kv_first_;     // [n_seqs]
  std::vector<int64_t> kv_count_;     // [n_seqs]
  // paged_attention's tasks: from step row row0 of a run of one sequence's rows, its (row, query
  // head) pairs pair0 .. pair0 + n_pairs - 1 (row-major, at most 8) of K/V head kvh.
  struct AttnTask {
    int32_t row0, pair0, n_pairs, kvh;
  };
  std::vector<AttnTask> attn_tasks_;
  // moe_matmul: pairs grouped by expert (pair indices, and where each expert's group starts), and
  // the gathered activation and output rows of the groups of more than one pair.
  std::vector<int32_t> moe_order_;    // [n * top_k]
  std::vector<int64_t> moe_first_;    // [n_experts + 1]
  Tensor moe_x_, moe_y_;              // F32 [1, capacity] each, grown on demand
  Tensor rot_x_;                      // matmul: the rotated input of a rotated weight, grown on demand
  std::vector<int32_t> seq_rows_;     // recurrent ops: the step's rows by sequence
  std::vector<int64_t> seq_first_;    // [n_seqs + 1]
  // Repacked weights (panels.h) by the buffer of the weight they were made from.
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  struct Panels {
    std::unique_ptr<uint8_t, FreeDeleter> bytes;
    int64_t n_rows = 0;
  };
  std::unordered_map<const BackendBuffer*, Panels> panels_of_;
};

namespace {
// A row of k activations rotated per block (blocks of 32: the SIMD transform).
void rotate_row(float* x, int64_t k, int64_t block) {
  if (block == 32) return hadamard_rotate32(x, k);
  hadamard_rotate(x, k, block);
}
}  // namespace

void CpuBackend::matmul(const Tensor& w, const Tensor& x, const Tensor& out) {
  ONEBIT_CHECK(w.n_cols == x.n_cols && out.n_rows == x.n_rows && out.n_cols == w.n_rows);
  check_f32(x), check_f32(out);
  const int64_t m = w.n_rows, n = x.n_rows, k = w.n_cols;
  if (m == 0 || n == 0) return;
  const DotKernel kern = table_->by_type[static_cast<uint32_t>(w.type) & 31];
  const bool quantized_act = kern.fn != nullptr && static_cast<uint32_t>(w.type) < 32 && kern.act != ActFormat::kF32;
  const int64_t rot = w.in_rotation;  // a Hadamard-rotated weight: the product of the rotated input
  ONEBIT_CHECK(rot == 0 || k % rot == 0);
  if (rot > 0 && !quantized_act) {  // float activations: a rotated copy of x (quantized ones rotate below)
    const Tensor xr = scratch_rows(*this, rot_x_, n * k, n, k);
    pool_.parallel_for(Parallel::kStatic, n, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) {
        std::memcpy(f32_row(xr, r), f32_row(x, r), size_t(k) * sizeof(float));
        rotate_row(f32_row(xr, r), k, rot);
      }
    });
    Tensor plain = w;
    plain.in_rotation = 0;
    return matmul(plain, xr, out);
  }
  if (kern.fn == nullptr || static_cast<uint32_t>(w.type) >= 32) return matmul_dequantized(w, x, out);

  // Activations in the kernel's format: [n, act_stride] bytes (or x itself for float weights).
  const void* act = f32_row(x, 0);
  size_t act_stride = x.row_stride_bytes;
  if (kern.act != ActFormat::kF32) {
    const bool q8 = kern.act == ActFormat::kQ8;
    // W4A4 (ONEBIT_W4A4=1): prompt rows of a Hadamard-rotated Q4_0 weight on the 4-bit grid.
    const bool w4a4 = w4a4_ && rot > 0 && w.type == GgmlType::kQ4_0 && n >= kW4A4Rows;
    const int64_t block = q8 ? kQK8_0 : kQK_K;
    ONEBIT_CHECK(k % block == 0);
    act_stride = size_t(k / block) * (q8 ? sizeof(ActQ8) : sizeof(BlockQ8_K));
    // Rows up to a multiple of 16 stay readable: an AMX tile loads 16 activation rows.
    const size_t act_rows = size_t((n + cpu::kAmxRows - 1) / cpu::kAmxRows * cpu::kAmxRows);
    if (act_.size() < act_stride * act_rows) act_.resize(act_stride * act_rows);
    uint8_t* dst = act_.data();
    const auto quantize_rows = [&](int64_t b, int64_t e, std::vector<float>& tmp) {
      for (int64_t r = b; r < e; ++r) {
        const float* src = f32_row(x, r);
        if (rot > 0) {  // rotated as the weight's columns were, then quantized
          tmp.assign(src, src + k);
          rotate_row(tmp.data(), k, rot);
          src = tmp.data();
        }
        if (w4a4) {
          cpu::quantize_act_q4(src, reinterpret_cast<ActQ8*>(dst + r * act_stride), k);
        } else if (q8) {
          cpu::quantize_act_q8(src, reinterpret_cast<ActQ8*>(dst + r * act_stride), k);
        } else {
          cpu::quantize_act_q8k(src, reinterpret_cast<BlockQ8_K*>(dst + r * act_stride), k);
        }
      }
    };
    if (n == 1) {
      quantize_rows(0, 1, scratch_[0].b);  // decode: one row, not worth a dispatch
    } else {
      pool_.parallel_for(Parallel::kDynamic, n, [&](int64_t b, int64_t e, int t) { quantize_rows(b, e, scratch_[t].b); },
                         /*chunk=*/1);
    }
    act = dst;
  }

  // Weight rows go to the kernel in groups: one row, or one panel of kPanelRows rows when the
  // weight was repacked (the whole tensor or a view of whole panels, such as one expert of a
  // stack). Every tile edge is a group edge.
  const auto panels = panels_of_.find(w.buffer);
  const int64_t first_row = w.row_stride_bytes > 0 ? int64_t(w.offset_bytes / w.row_stride_bytes) : 0;
  const bool panel = panels != panels_of_.end() && w.offset_bytes % w.row_stride_bytes == 0 &&
                     first_row % cpu::kPanelRows == 0 && m % cpu::kPanelRows == 0 &&
                     first_row + m <= panels->second.n_rows;
  const cpu::DotFn fn = panel ? table_->panel_by_type[static_cast<uint32_t>(w.type)] : kern.fn;
  const int64_t g = panel ? cpu::kPanelRows : 1;
  const size_t ws = panel ? cpu::panel_bytes(w.type, k) : w.row_stride_bytes;  // bytes per group
  const uint8_t* w0 = panel ? panels->second.bytes.get() + size_t(first_row / g) * ws : row_ptr(w, 0);
  float* out0 = f32_row(out, 0);
  const size_t os = out.row_stride_bytes / sizeof(float);
  // Pairs of panels for several activation rows where the target has a kernel for them.
  const cpu::DotFn fn2 = panel && dual_panels_ ? table_->panel2_by_type[static_cast<uint32_t>(w.type)] : nullptr;
  // n_x activation rows (up to kMaxDualRows with fn2, else kMaxDotRows) against weight rows r0..r1.
  auto run_rows = [&](int64_t r0, int64_t r1, const void* a, int n_x, float* o) {
    int64_t row = r0;
    if (fn2 != nullptr && n_x > 1) {
      for (; row + 2 * g <= r1; row += 2 * g) fn2(k, w0 + (row / g) * ws, a, act_stride, n_x, o + row, os);
    }
    for (; row < r1; row += g) {
      for (int c = 0; c < n_x; c += cpu::kMaxDotRows) {
        fn(k, w0 + (row / g) * ws, static_cast<const uint8_t*>(a) + c * act_stride, act_stride,
           std::min(cpu::kMaxDotRows, n_x - c), o + c * os + row, os);
      }
    }
  };
  const int64_t sweep = fn2 != nullptr ? cpu::kMaxDualRows : cpu::kMaxDotRows;  // activation rows per kernel call
  if (amx_ && panel && n >= cpu::kAmxRows && cpu::amx_supports(w.type)) {
    // Prompt on AMX: weight tiles of two panels (16 rows), each unpacked once and met by every
    // group of 16 activation rows (amx.h).
    const int64_t n_tiles = (m / g + 1) / 2;
    const size_t scratch_floats = (cpu::amx_scratch_bytes(w.type, k) + sizeof(float) - 1) / sizeof(float);
    pool_.parallel_for(Parallel::kDynamic, n_tiles, [&](int64_t b, int64_t e, int t) {
      std::vector<float>& scratch = scratch_[t].a;
      if (scratch.size() < scratch_floats) scratch.resize(scratch_floats);
      for (int64_t tile = b; tile < e; ++tile) {
        const int64_t row = tile * cpu::kAmxRows;
        const uint8_t* p1 = row + g < m ? w0 + (row / g + 1) * ws : nullptr;
        cpu::amx_panel_tile(w.type, k, w0 + (row / g) * ws, p1, act, act_stride, n, out0 + row, os,
                            reinterpret_cast<uint8_t*>(scratch.data()));
      }
    }, /*chunk=*/1);
    return;
  }
  if (n == 1) {
    // Decode: stream the weight rows once, split across threads in chunks (dynamic, so a thread
    // slowed by a neighbour on a shared machine does not hold the step).
    const int64_t n_chunks = (m + kMatvecRows - 1) / kMatvecRows;
    const int64_t grab = grab_chunk(n_chunks, kMatvecRows / g * ws);
    pool_.parallel_for(guided_ ? Parallel::kGuided : Parallel::kDynamic, n_chunks, [&](int64_t b, int64_t e, int) {
      run_rows(b * kMatvecRows, std::min(m, e * kMatvecRows), act, 1, out0);
    }, /*chunk=*/guided_ ? std::max<int64_t>(1, grab / 4) : grab);
    return;
  }
  // Prompt: tiles of kTileRows weight rows x kTileCols activation rows; consecutive tiles share
  // weight rows, so each weight byte comes from DRAM about once while activations stay in cache.
  // Handed out as decode's chunks are, ~8 grabs per thread: one tile per grab made the threads
  // contend for the job's counter (a verification step of 2-4 tokens took 1.8x one token's time).
  const int64_t n_rb = (m + kTileRows - 1) / kTileRows, n_cb = (n + kTileCols - 1) / kTileCols;
  const int64_t n_tiles = n_rb * n_cb;
  pool_.parallel_for(Parallel::kDynamic, n_tiles, [&](int64_t b, int64_t e, int) {
    for (int64_t tile = b; tile < e; ++tile) {
      const int64_t r0 = (tile / n_cb) * kTileRows, c0 = (tile % n_cb) * kTileCols;
      const int64_t r1 = std::min(m, r0 + kTileRows), c1 = std::min(n, c0 + kTileCols);
      for (int64_t c = c0; c < c1; c += sweep) {
        const int n_x = static_cast<int>(std::min<int64_t>(sweep, c1 - c));
        run_rows(r0, r1, static_cast<const uint8_t*>(act) + c * act_stride, n_x, out0 + c * os);
      }
    }
  }, /*chunk=*/grab_chunk(n_tiles, kTileRows / g * ws * std::min<int64_t>(n, kTileCols)));
}

// Float softmax, then the top_k by a partial sort (descending p, lower index first on ties).
void CpuBackend::moe_route(const Tensor& logits, bool normalize, const Tensor& ids, const Tensor& weights) {
  check_moe_route(logits, ids, weights);
  const int64_t n_exp = logits.n_cols, top_k = ids.n_cols;
  pool_.parallel_for(Parallel::kStatic, logits.n_rows, [&](int64_t b, int64_t e, int t) {
    std::vector<float>& p = scratch_[t].a;
    p.resize(size_t(n_exp));
    std::vector<int32_t> order(static_cast<size_t>(n_exp));
    for (int64_t i = b; i < e; ++i) {
      cpu::softmax_row(f32_row(logits, i), p.data(), n_exp);
      for (int64_t x = 0; x < n_exp; ++x) order[x] = int32_t(x);
      std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                        [&](int32_t a, int32_t c) { return p[a] > p[c] || (p[a] == p[c] && a < c); });
      float sum = 0.0f;
      for (int64_t j = 0; j < top_k; ++j) sum += p[order[j]];
      int32_t* id = reinterpret_cast<int32_t*>(row_ptr(ids, i));
      float* wt = f32_row(weights, i);
      for (int64_t j = 0; j < top_k; ++j) {
        id[j] = order[j];
        wt[j] = normalize ? p[order[j]] / sum : p[order[j]];
      }
    }
  });
}

// Pairs grouped by expert (a counting sort), then one matmul per expert over its group: the
// expert's weights stream once whatever the group size. A group of one pair runs on the views
// of its rows in place; larger groups gather their activation rows first and scatter after.
void CpuBackend::moe_matmul(const Tensor& w, int32_t n_experts, const Tensor& x, const Tensor& ids,
                            const Tensor& out) {
  check_moe_matmul(w, n_experts, x, ids, out);
  const int64_t m = w.n_rows / n_experts, top_k = ids.n_cols, pairs = ids.n_rows * top_k;
  const bool shared_x = x.n_rows == ids.n_rows && top_k > 1;  // x row i serves pairs i * top_k ..
  moe_first_.assign(size_t(n_experts) + 1, 0);
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t e = i32_row(ids, p / top_k)[p % top_k];
    ONEBIT_CHECK(e >= 0 && e < n_experts);
    ++moe_first_[size_t(e) + 1];
  }
  for (int32_t e = 0; e < n_experts; ++e) moe_first_[e + 1] += moe_first_[e];
  moe_order_.resize(size_t(pairs));
  std::vector<int64_t> fill(moe_first_.begin(), moe_first_.end() - 1);
  for (int64_t p = 0; p < pairs; ++p) moe_order_[size_t(fill[i32_row(ids, p / top_k)[p % top_k]]++)] = int32_t(p);
  const auto x_row = [&](int64_t p) { return shared_x ? p / top_k : p; };
  for (int32_t e = 0; e < n_experts; ++e) {
    const int64_t first = moe_first_[e], c = moe_first_[e + 1] - first;
    if (c == 0) continue;
    const Tensor we = w.rows(int64_t(e) * m, m);
    if (c == 1) {
      const int64_t p = moe_order_[size_t(first)];
      matmul(we, x.rows(x_row(p), 1), out.rows(p, 1));
      continue;
    }
    const Tensor xs = scratch_rows(*this, moe_x_, pairs * x.n_cols, c, x.n_cols);
    const Tensor ys = scratch_rows(*this, moe_y_, pairs * m, c, m);
    for (int64_t r = 0; r < c; ++r) {
      std::memcpy(f32_row(xs, r), f32_row(x, x_row(moe_order_[size_t(first + r)])), size_t(x.n_cols) * sizeof(float));
    }
    matmul(we, xs, ys);
    for (int64_t r = 0; r < c; ++r) {
      std::memcpy(f32_row(out, moe_order_[size_t(first + r)]), f32_row(ys, r), size_t(m) * sizeof(float));
    }
  }
}

const int32_t* CpuBackend::group_by_sequence(const Tensor& seq_ids, const Tensor& state_rows,
                                             const Tensor& ckpt_rows, const Tensor& states) {
  const int64_t n = seq_ids.n_cols, n_seqs = state_rows.n_cols;
  const int32_t* seq = i32_row(seq_ids, 0);
  seq_first_.assign(size_t(n_seqs) + 1, 0);
  for (int64_t t = 0; t < n; ++t) {
    ONEBIT_CHECK(seq[t] >= 0 && seq[t] < n_seqs);
    ++seq_first_[size_t(seq[t]) + 1];
  }
  for (int64_t s = 0; s < n_seqs; ++s) {
    seq_first_[s + 1] += seq_first_[s];
    const int32_t row = i32_row(state_rows, 0)[s];
    ONEBIT_CHECK(row >= 0 && row < states.n_rows);
  }
  seq_rows_.resize(size_t(n));
  std::vector<int64_t> fill(seq_first_.begin(), seq_first_.end() - 1);
  for (int64_t t = 0; t < n; ++t) seq_rows_[size_t(fill[seq[t]]++)] = int32_t(t);
  if (!ckpt_rows.valid()) return nullptr;
  const int32_t* ckpt = i32_row(ckpt_rows, 0);
  for (int64_t t = 0; t < n; ++t) ONEBIT_CHECK(ckpt[t] >= -1 && ckpt[t] < states.n_rows);
  return ckpt;
}

// Per sequence, channel ranges in parallel (channels are independent; a sequence's tokens in order).
void CpuBackend::ssm_conv(const Tensor& x, const Tensor& w, const Tensor& seq_ids, const Tensor& state_rows,
                          const Tensor& ckpt_rows, const Tensor& states, bool silu, const Tensor& out) {
  const int64_t K = check_ssm_conv(x, w, seq_ids, state_rows, ckpt_rows, states, out), C = x.n_cols;
  const int32_t* ckpt = group_by_sequence(seq_ids, state_rows, ckpt_rows, states);
  const int64_t n_seqs = state_rows.n_cols, chunks = (C + 255) / 256;
  pool_.parallel_for(Parallel::kDynamic, n_seqs * chunks, [&](int64_t b, int64_t e, int) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t s = task / chunks, c0 = (task % chunks) * 256;
      const int64_t first = seq_first_[s], count = seq_first_[s + 1] - first;
      if (count == 0) continue;
      cpu::ssm_conv_run(f32_row(x, 0), int64_t(x.row_stride_bytes / 4), seq_rows_.data() + first, count, C, K,
                        f32_row(w, 0), int64_t(w.row_stride_bytes / 4), f32_row(states, i32_row(state_rows, 0)[s]),
                        silu, f32_row(out, 0), int64_t(out.row_stride_bytes / 4), c0, std::min(C, c0 + 256), ckpt,
                        f32_row(states, 0), int64_t(states.row_stride_bytes / 4));
    }
  }, /*chunk=*/1);
}

// Per (sequence, head) in parallel: a run of kChunkedFrom tokens or more (a prompt chunk) in the
// chunked form, shorter runs (decode, drafts) and runs with checkpoints token by token.
void CpuBackend::gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                                  const Tensor& A, const Tensor& dt_bias, const Tensor& seq_ids,
                                  const Tensor& state_rows, const Tensor& ckpt_rows, const Tensor& states,
                                  const Tensor& out, const DeltaParams& p) {
  constexpr int64_t kChunkedFrom = 32, kChunk = 64;
  const DeltaDims d =
      check_gated_delta_rule(q, k, v, a, b, A, dt_bias, seq_ids, state_rows, ckpt_rows, states, out, p);
  const int32_t* ckpt = group_by_sequence(seq_ids, state_rows, ckpt_rows, states);
  const int64_t n_seqs = state_rows.n_cols;
  pool_.parallel_for(Parallel::kDynamic, n_seqs * d.n_heads, [&](int64_t b0, int64_t e0, int) {
    for (int64_t task = b0; task < e0; ++task) {
      const int64_t s = task / d.n_heads, h = task % d.n_heads;
      const int64_t first = seq_first_[s], count = seq_first_[s + 1] - first;
      if (count == 0) continue;
      const auto stride = [](const Tensor& t) { return int64_t(t.row_stride_bytes / sizeof(float)); };
      const int32_t* rows = seq_rows_.data() + first;
      const bool checkpoints = ckpt != nullptr && std::any_of(rows, rows + count, [&](int32_t t) { return ckpt[t] >= 0; });
      const cpu::DeltaRun run{f32_row(q, 0) + d.k_head(h) * d.dk, f32_row(k, 0) + d.k_head(h) * d.dk,
                              f32_row(v, 0) + h * d.dv,
                              f32_row(a, 0) + h, f32_row(b, 0) + h, stride(q), stride(k), stride(v), stride(a),
                              stride(b), rows, count,
                              f32_row(A, 0)[h], f32_row(dt_bias, 0)[h], f32_row(out, 0) + h * d.dv,
                              stride(out), checkpoints ? ckpt : nullptr, f32_row(states, 0) + h * d.dk * d.dv,
                              stride(states)};
      float* S = f32_row(states, i32_row(state_rows, 0)[s]) + h * d.dk * d.dv;
      if (count >= kChunkedFrom && !checkpoints) {
        cpu::gated_delta_chunked(run, d.dk, d.dv, S, kChunk);
      } else {
        cpu::gated_delta_recurrent(run, d.dk, d.dv, S);
      }
    }
  }, /*chunk=*/1);
}

Status CpuBackend::pack_panels(const Tensor& t, std::span<const uint8_t> bytes) {
  const int64_t n_panels = t.n_rows / cpu::kPanelRows;
  const size_t panel_bytes = cpu::panel_bytes(t.type, t.n_cols);
  const size_t rows_bytes = t.row_bytes() * cpu::kPanelRows;  // one panel's rows in GGUF layout
  const size_t total = panel_bytes * size_t(n_panels);
  auto* dst = static_cast<uint8_t*>(large_alloc(total));
  if (dst == nullptr) {
    return make_error("cpu backend: out of memory repacking a " + std::to_string(total) +
                      "-byte weight; use a smaller model or ONEBIT_CPU_PANELS=0");
  }
  pool_.parallel_for(Parallel::kDynamic, n_panels, [&](int64_t b, int64_t e, int) {
    for (int64_t p = b; p < e; ++p) {
      cpu::pack_panel(t.type, bytes.data() + p * rows_bytes, t.row_bytes(), t.n_cols, dst + p * panel_bytes);
    }
  });
  panels_of_[t.buffer] = Panels{std::unique_ptr<uint8_t, FreeDeleter>(dst), t.n_rows};
  return ok_status();
}

// Types without a dot kernel (Q8_1, Q8_K weights): dequantize each row, then f32 dots.
void CpuBackend::matmul_dequantized(const Tensor& w, const Tensor& x, const Tensor& out) {
  pool_.parallel_for(Parallel::kDynamic, w.n_rows, [&](int64_t b, int64_t e, int t) {
    std::vector<float>& row = scratch_[t].a;
    row.resize(size_t(w.n_cols));
    for (int64_t m = b; m < e; ++m) {
      dequantize_row(w.type, row_ptr(w, m), row.data(), w.n_cols);
      for (int64_t n = 0; n < x.n_rows; ++n) f32_row(out, n)[m] = cpu::dot_f32(row.data(), f32_row(x, n), w.n_cols);
    }
  });
}

// RoPE as the reference computes it (llama.cpp's rope_yarn; angles in double, once per row and
// shared by its heads), then the pair rotations in float.
void CpuBackend::rope(const Tensor& x, const Tensor& positions, const RopeParams& p) {
  check_f32(x);
  ONEBIT_CHECK(x.n_cols == int64_t(p.n_heads) * p.head_dim);
  ONEBIT_CHECK(positions.type == GgmlType::kI32 && positions.n_rows == 1 && positions.n_cols == x.n_rows);
  const RopeAngles angles(p);
  const float* freq_factors = p.freq_factors.valid() ? f32_row(p.freq_factors, 0) : nullptr;
  const int32_t* pos = reinterpret_cast<const int32_t*>(row_ptr(positions, 0));
  const int half = p.n_rot / 2;
  pool_.parallel_for(Parallel::kStatic, x.n_rows, [&](int64_t r0, int64_t r1, int t) {
    std::vector<float>& cs = scratch_[t].b;  // [half][cos, sin]
    cs.resize(size_t(2 * half));
    for (int64_t r = r0; r < r1; ++r) {
      for (int i = 0; i < half; ++i) {
        const double theta = angles.theta(pos[r], i, freq_factors);
        cs[2 * i] = float(std::cos(theta) * angles.mscale());
        cs[2 * i + 1] = float(std::sin(theta) * angles.mscale());
      }
      float* row = f32_row(x, r);
      const bool normal = p.ordering == RopeOrdering::kNormal;
      for (int h = 0; h < p.n_heads; ++h) {
        float* head = row + int64_t(h) * p.head_dim;
        for (int i = 0; i < half; ++i) {
          const int a = normal ? 2 * i : i, b = normal ? 2 * i + 1 : i + half;
          const float x0 = head[a], x1 = head[b], c = cs[2 * i], s = cs[2 * i + 1];
          head[a] = x0 * c - x1 * s;
          head[b] = x0 * s + x1 * c;
        }
      }
    }
  });
}

// Causal attention, one (query row, K/V head, block of up to 8 of its query heads) per task: the
// block's scores with each key row loaded once (dot_heads_keys), a vectorized softmax per head,
// then the value rows weighted into two heads at a time (weighted_sum_heads). Head sizes that
// are not a multiple of 8 take f32 dots and axpy per head.
void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                           const AttentionParams& p) {
  check_f32(q), check_f32(k), check_f32(v), check_f32(out);
  ONEBIT_CHECK(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0);
  ONEBIT_CHECK(q.n_cols == int64_t(p.n_heads) * p.head_dim);
  ONEBIT_CHECK(k.n_cols == int64_t(p.n_kv_heads) * p.head_dim && v.n_cols == k.n_cols);
  ONEBIT_CHECK(k.n_rows == v.n_rows && k.n_rows >= p.first_pos + q.n_rows);
  check_same_shape(q, out);
  const int group = p.n_heads / p.n_kv_heads;
  const int64_t hd = p.head_dim;
  const int64_t n_blocks = (group + 7) / 8;  // blocks of up to 8 query heads per K/V head
  const int64_t ks = int64_t(k.row_stride_bytes / sizeof(float)), vs = int64_t(v.row_stride_bytes / sizeof(float));
  const bool vec = hd % 8 == 0, wide = hd % 16 == 0 && table_->attn_sum != nullptr;
  pool_.parallel_for(Parallel::kDynamic, q.n_rows * p.n_kv_heads * n_blocks, [&](int64_t b, int64_t e, int t) {
    std::vector<float>& scores = scratch_[t].a;  // [heads of the block][n_keys]
    for (int64_t task = b; task < e; ++task) {
      const int64_t i = task / (p.n_kv_heads * n_blocks);
      const int64_t kvh = (task / n_blocks) % p.n_kv_heads, g0 = (task % n_blocks) * 8;
      const int n_g = int(std::min<int64_t>(8, group - g0));
      const int64_t n_keys = p.first_pos + i + 1;
      if (scores.size() < size_t(n_g * n_keys)) scores.resize(size_t(n_g * n_keys));
      const float* q0 = f32_row(q, i) + (kvh * group + g0) * hd;
      const float* k0 = f32_row(k, 0) + kvh * hd;
      const float* v0 = f32_row(v, 0) + kvh * hd;
      float* o0 = f32_row(out, i) + (kvh * group + g0) * hd;
      if (vec) {
        cpu::dot_heads_keys(q0, n_g, hd, k0, ks, n_keys, p.scale, scores.data(), n_keys);
      } else {
        for (int g = 0; g < n_g; ++g)
          for (int64_t j = 0; j < n_keys; ++j) scores[g * n_keys + j] = cpu::dot_f32(q0 + g * hd, k0 + j * ks, hd) * p.scale;
      }
      float inv_sum[8];
      for (int g = 0; g < n_g; ++g) {
        float* sg = scores.data() + g * n_keys;
        const float max_s = *std::max_element(sg, sg + n_keys);
        inv_sum[g] = 1.0f / cpu::exp_sub_sum(sg, max_s, n_keys);
      }
      if (wide) {
        table_->attn_sum(scores.data(), n_g, n_keys, cpu::KvRows{v0, vs, nullptr, false}, n_keys, hd, o0);
      } else if (vec) {
        cpu::weighted_sum_heads(scores.data(), n_g, n_keys, v0, vs, n_keys, hd, o0);
      } else {
        for (int g = 0; g < n_g; ++g) {
          std::memset(o0 + g * hd, 0, size_t(hd) * sizeof(float));
          for (int64_t j = 0; j < n_keys; ++j) cpu::axpy_f32(scores[g * n_keys + j], v0 + j * vs, o0 + g * hd, hd);
        }
      }
      for (int g = 0; g < n_g; ++g) cpu::scale_f32(inv_sum[g], o0 + g * hd, hd);
    }
  });
}

// Attention over the paged pool, with attention()'s arithmetic per (row, query head), its tasks
// blocks of up to 8 (row, head) pairs of one K/V head from consecutive rows of one sequence. Each
// sequence's key rows are looked up once per call into a row list; the kernels read keys and values
// through it (F16 widened as they load), in key order with the same arithmetic whatever the layout,
// batch or thread count. With an F32 pool and an identity block table this is attention()'s
// arithmetic exactly.
void CpuBackend::paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                                 const Tensor& positions, const Tensor& seq_ids, const Tensor& block_tables,
                                 const Tensor& out, const PagedAttentionParams& p) {
  check_paged_attention(q, k_pool, v_pool, positions, seq_ids, block_tables, out, p);
  const int32_t* pos = i32_row(positions, 0);
  const int32_t* seq = i32_row(seq_ids, 0);
  // Key counts per sequence, then their row lists block by block.
  kv_first_.assign(size_t(block_tables.n_rows), -1);
  std::vector<int64_t>& n_keys_of = kv_count_;
  n_keys_of.assign(size_t(block_tables.n_rows), 0);
  for (int64_t i = 0; i < q.n_rows; ++i) {
    n_keys_of[seq[i]] = std::max<int64_t>(n_keys_of[seq[i]], int64_t(pos[i]) + 1);
  }
  int64_t total = 0;
  for (int64_t s = 0; s < block_tables.n_rows; ++s) {
    if (n_keys_of[s] > 0) kv_first_[s] = total, total += n_keys_of[s];
  }
  kv_rows_.resize(size_t(total));
  for (int64_t s = 0; s < block_tables.n_rows; ++s) {
    if (n_keys_of[s] == 0) continue;
    int32_t* rows = kv_rows_.data() + kv_first_[s];
    for (int64_t j0 = 0; j0 < n_keys_of[s]; j0 += p.block_size) {
      const int64_t row0 = paged_kv_row(block_tables, int32_t(s), j0, p.block_size, k_pool.n_rows);
      const int64_t n = std::min<int64_t>(p.block_size, n_keys_of[s] - j0);
      for (int64_t r = 0; r < n; ++r) rows[j0 + r] = int32_t(row0 + r);
    }
  }

  const int group = p.n_heads / p.n_kv_heads;
  const int64_t hd = p.head_dim;
  const bool f16 = k_pool.type == GgmlType::kF16;
  const size_t elem = f16 ? 2 : 4;
  ONEBIT_CHECK(k_pool.row_stride_bytes % elem == 0 && v_pool.row_stride_bytes % elem == 0);
  const int64_t ks = int64_t(k_pool.row_stride_bytes / elem), vs = int64_t(v_pool.row_stride_bytes / elem);
  const bool wide = hd % 16 == 0 && table_->attn_sum != nullptr;  // the target's 512-bit value sums
  // Tasks: per run of consecutive rows of one sequence and K/V head, its (row, query head) pairs
  // (row-major) in blocks of up to 8, so that a verification step or a prompt loads each key row
  // once for several rows when a K/V head has fewer than 8 query heads.
  attn_tasks_.clear();
  for (int64_t i0 = 0; i0 < q.n_rows;) {
    int64_t i1 = i0 + 1;
    while (i1 < q.n_rows && seq[i1] == seq[i0]) ++i1;
    const int64_t n_pairs = (i1 - i0) * group;
    for (int32_t kvh = 0; kvh < p.n_kv_heads; ++kvh) {
      for (int64_t p0 = 0; p0 < n_pairs; p0 += 8) {
        attn_tasks_.push_back({int32_t(i0), int32_t(p0), int32_t(std::min<int64_t>(8, n_pairs - p0)), kvh});
      }
    }
    i0 = i1;
  }
  pool_.parallel_for(Parallel::kDynamic, int64_t(attn_tasks_.size()), [&](int64_t b, int64_t e, int t) {
    std::vector<float>& scores = scratch_[t].a;  // [pairs of the block][n_keys]
    std::vector<float>& qo = scratch_[t].b;      // [pairs of the block][hd]: queries, then outputs
    if (qo.size() < size_t(8 * hd)) qo.resize(size_t(8 * hd));
    for (int64_t task = b; task < e; ++task) {
      const AttnTask& a = attn_tasks_[size_t(task)];
      const auto row_of = [&](int pi) { return int64_t(a.row0) + (a.pair0 + pi) / group; };
      const auto head_of = [&](int pi) { return int64_t(a.kvh) * group + (a.pair0 + pi) % group; };
      int64_t n_keys = 0;  // the block's furthest key; each pair's softmax stops at its own
      for (int pi = 0; pi < a.n_pairs; ++pi) {
        n_keys = std::max<int64_t>(n_keys, int64_t(pos[row_of(pi)]) + 1);
        std::memcpy(qo.data() + pi * hd, f32_row(q, row_of(pi)) + head_of(pi) * hd, size_t(hd) * sizeof(float));
      }
      if (scores.size() < size_t(a.n_pairs * n_keys)) scores.resize(size_t(a.n_pairs * n_keys));
      const int32_t* rows = kv_rows_.data() + kv_first_[seq[a.row0]];
      const cpu::KvRows k_rows{row_ptr(k_pool, 0) + a.kvh * hd * elem, ks, rows, f16};
      const cpu::KvRows v_rows{row_ptr(v_pool, 0) + a.kvh * hd * elem, vs, rows, f16};
      cpu::dot_heads_keys_rows(qo.data(), a.n_pairs, hd, k_rows, n_keys, p.scale, scores.data(), n_keys);
      float inv_sum[8];
      for (int pi = 0; pi < a.n_pairs; ++pi) {
        // Keys past the pair's own position weigh exactly 0: the value sums (key by key, in order)
        // then carry the bits of a block of this row alone.
        const int64_t own = int64_t(pos[row_of(pi)]) + 1;
        float* sg = scores.data() + pi * n_keys;
        const float max_s = *std::max_element(sg, sg + own);
        inv_sum[pi] = 1.0f / cpu::exp_sub_sum(sg, max_s, own);
        std::fill(sg + own, sg + n_keys, 0.0f);
      }
      if (wide) {
        table_->attn_sum(scores.data(), a.n_pairs, n_keys, v_rows, n_keys, hd, qo.data());
      } else {
        cpu::weighted_sum_heads_rows(scores.data(), a.n_pairs, n_keys, v_rows, n_keys, hd, qo.data());
      }
      for (int pi = 0; pi < a.n_pairs; ++pi) {
        cpu::scale_f32(inv_sum[pi], qo.data() + pi * hd, hd);
        std::memcpy(f32_row(out, row_of(pi)) + head_of(pi) * hd, qo.data() + pi * hd, size_t(hd) * sizeof(float));
      }
    }
  });
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return make_cpu_backend(n_threads, cpu_isa()); }

std::unique_ptr<Backend> make_cpu_backend(int n_threads, CpuIsa isa) {
  const char* env = std::getenv("ONEBIT_CPU_PANELS");
  return make_cpu_backend(n_threads, isa, env == nullptr || std::string_view(env) != "0");
}

namespace {
// The AMX path reads panels and shares the avx512_vnni target's activation formats.
bool amx_can_run(CpuIsa isa, bool panels) { return panels && isa == CpuIsa::kAvx512Vnni && cpu::amx_ready(); }
}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads, CpuIsa isa, bool panels) {
  const char* env = std::getenv("ONEBIT_AMX");
  const bool amx = env == nullptr || std::string_view(env) != "0";
  return make_cpu_backend(n_threads, isa, panels, amx && amx_can_run(isa, panels));
}

std::unique_ptr<Backend> make_cpu_backend(int n_threads, CpuIsa isa, bool panels, bool amx) {
  ONEBIT_CHECK_MSG(cpu_isa_supported(isa), "make_cpu_backend: ISA not supported by this CPU");
  ONEBIT_CHECK_MSG(!amx || amx_can_run(isa, panels),
                   "make_cpu_backend: AMX needs panels, the avx512_vnni kernels and cpu::amx_ready()");
  return std::make_unique<CpuBackend>(n_threads, isa, panels, amx);
}

}  // namespace onebit
