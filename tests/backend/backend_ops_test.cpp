// Every op of every backend in this build against the scalar reference backend, on random data
// (as ggml's test-backend-ops): the CPU backend always, the CUDA backend when make_cuda_backend
// gives one (else its cases skip, naming the reason). Odd shapes (n = 1, 3, 17, 64 rows; k not a
// multiple of 256 where the type allows), row-offset input views with padded rows, outputs with
// guard columns and rows that must stay untouched, in-place aliases, F16 and F32 K/V pools.
//
// Error budgets, as the normalized MSE sum((got - want)^2) / sum(want^2) (ggml's nmse), per op:
//   get_rows, add, copy, store_kv: 0 (bit-exact: the same float operations as the reference);
//   rms_norm, rope: 1e-12 (float roundings of double-accumulated values);
//   swiglu, softmax: 1e-11 (vectorized / device exp, a few ulp);
//   attention, paged_attention: 1e-10 (float online softmax and dot products); CUDA's tiles of
//   prompt rows on tensor cores (fp16 q, k, v, p): 1e-6;
//   moe_route: 1e-11 and the same expert ids; moe_combine: 1e-12; sigmoid_mul: 1e-11;
//   argmax_rows: the same ids;
//   moe_matmul: matmul's budgets; ssm_conv: 1e-12 (its states exact);
//   gated_delta_rule: 1e-10 (float, chunked for long runs, against the double token loop);
//   matmul with float weights (F32/F16/BF16), and every type on CUDA (dequantized to float,
//   float accumulation): 1e-9; quantized weights on the CPU: 5e-4 (it rounds activations to
//   Q8 / Q8_K, ~1/254 per element; ggml allows 5e-4 for quantized mul_mat); CUDA's tensor cores
//   (n > 4 rows, every type but F32 / BF16: fp16 weights and activations): 1e-6; CUDA's one-row
//   Q4_0 / Q8_0 products (integer dots, activations to 15 bits per 32: up to 2^-14 of the
//   block's max, nmse up to ~1e-8 on random normal data): 5e-8.
// Each comparison prints its max abs error and nmse ("[op-error] backend op ...").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/hadamard.h"
#include "base/fp16.h"
#include "cpu_test_util.h"
#include "gguf/quants.h"

namespace onebit {
namespace {

using namespace cpu_test;

std::unique_ptr<Backend> backend_under_test(const std::string& name, std::string* why) {
  if (name == "cpu") return make_cpu_backend(2);
  return make_cuda_backend(0, why);
}

// Compares got against want: prints the errors, EXPECTs nmse <= budget.
void expect_close(const std::string& be, const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& want, double budget) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double max_abs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - want[i]);
    max_abs = std::isnan(d) ? INFINITY : std::max(max_abs, d);
  }
  const double e = nmse(got, want);
  std::printf("[op-error] %s %s max_abs=%.3g nmse=%.3g (budget %.0e)\n", be.c_str(), what.c_str(), max_abs, e, budget);
  EXPECT_LE(e, budget) << be << " " << what << " max_abs=" << max_abs;
  EXPECT_FALSE(std::isinf(max_abs)) << be << " " << what << ": NaN in the output";
}

// An F32 input [rows, cols] as a row-offset view of a bigger tensor whose rows are 3 floats wider
// (written through the view, so write() must honour the row stride).
Tensor input_view(Backend& be, int64_t rows, int64_t cols, const std::vector<float>& values) {
  Tensor big = be.alloc(GgmlType::kF32, rows + 2, cols + 3).value();
  Tensor t = big.rows(1, rows);
  t.n_cols = cols;
  be.write(t, values.data());
  return t;
}

class BackendOpsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    be_ = backend_under_test(GetParam(), &why);
    if (be_ == nullptr) GTEST_SKIP() << "the " << GetParam() << " backend is not available: " << why;
    ref_ = make_reference_backend();
  }
  const std::string& bname() const { return GetParam(); }
  Backend& be() { return *be_; }
  Backend& ref() { return *ref_; }

  // Runs op on both backends into a guarded [rows, cols] output; compares, checks the guard.
  template <class Op>
  void check(const std::string& what, int64_t rows, int64_t cols, Op&& op, double budget) {
    Tensor out_b = guarded(be(), rows, cols);
    Tensor out_r = ref().alloc(GgmlType::kF32, rows, cols).value();
    op(be(), out_b);
    op(ref(), out_r);
    expect_close(bname(), what, download(be(), out_b), download(ref(), out_r), budget);
    EXPECT_TRUE(guard_intact(be(), out_b)) << what << ": wrote outside its view";
  }

  std::unique_ptr<Backend> be_, ref_;
};

const GgmlType kWeightTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                                 GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                                 GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

int64_t block_of(GgmlType t) { return ggml_type_traits(uint32_t(t))->block_elems; }
bool is_float(GgmlType t) { return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16; }

// matmul's budget (the header's table) for a backend named `be`, n activation rows: CUDA's
// tensor-core path (n > 4, every type but F32 / BF16) rounds weights and activations to fp16
// (~2^-12 relative each: nmse ~1e-7), so 1e-6 there; its one-row Q4_0 / Q8_0 path holds
// activations to 15 bits per block of 32, 5e-8.
double matmul_budget(const std::string& be, GgmlType type, int64_t n) {
  if (be == "cuda" && n > 4 && type != GgmlType::kF32 && type != GgmlType::kBF16) return 1e-6;
  if (be == "cuda" && n == 1 && (type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0)) return 5e-8;
  return (is_float(type) || be != "cpu") ? 1e-9 : 5e-4;
}

// Quantized bytes of rows x cols random values (one spare leading byte: unaligned host source).
std::vector<uint8_t> quantized(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  const auto f = random_floats(size_t(rows * cols), seed);
  const size_t rb = row_size(type, cols).value();
  std::vector<uint8_t> bytes(rb * rows);
  for (int64_t r = 0; r < rows; ++r) quantize_row_reference(type, f.data() + r * cols, bytes.data() + r * rb, cols);
  return bytes;
}

TEST_P(BackendOpsTest, GuardedWriteLeavesNeighboursUntouched) {
  for (int64_t rows : {1, 3, 17}) {
    Tensor t = guarded(be(), rows, 19);
    const auto v = random_floats(size_t(rows * 19), 1);
    be().write(t, v.data());
    EXPECT_EQ(download(be(), t), v);
    EXPECT_TRUE(guard_intact(be(), t)) << rows;
  }
}

TEST_P(BackendOpsTest, GetRowsEveryType) {
  for (GgmlType type : kWeightTypes) {
    for (int64_t cols : {is_float(type) ? int64_t(37) : block_of(type) * 3, int64_t(512)}) {
      const int64_t rows = 9;
      const auto bytes = quantized(type, rows, cols, 3);
      const std::vector<int32_t> ids = {8, 0, 3, 3, 7};
      check(std::string("get_rows ") + ggml_type_name(uint32_t(type)) + " d=" + std::to_string(cols), 5, cols,
            [&](Backend& b, const Tensor& o) {
              b.get_rows(b.weight_from_host(type, rows, cols, bytes).value(), upload_i32(b, ids), o);
            }, 0.0);
    }
  }
}

TEST_P(BackendOpsTest, MatmulEveryTypeOddShapes) {
  for (GgmlType type : kWeightTypes) {
    const int64_t blk = block_of(type);
    const std::vector<int64_t> ks = is_float(type) ? std::vector<int64_t>{17, 100}
                                    : blk == 32 ? std::vector<int64_t>{96, 416}
                                                : std::vector<int64_t>{256, 768};
    // m = 259 with n = 200: several output tiles both ways on CUDA's tensor cores, partial at the end;
    // m = 96 with 3 and 8 rows: CUDA's multi-row path on panels (whole 32-row groups), and k = 16384
    // with 5 rows: too wide for 5 rows of x in shared memory at once (passes of 2, then 1).
    struct Shape {
      int64_t k, m, n;
    };
    // k = 160 / 512 (whole 32-blocks for every type, F16 too) with m = 131, n = 129: CUDA's fp16 GEMM
    // for 128+ rows (gemm_f16.cuh), one whole and one partial tile both ways.
    const int64_t wide = is_float(type) ? 16383 : 16384, k32 = blk == 256 ? 512 : 160;
    for (const Shape& sh : {Shape{ks[0], 67, 1}, Shape{ks[0], 67, 3}, Shape{ks[0], 67, 17}, Shape{ks[0], 67, 64},
                            Shape{ks[1], 67, 1}, Shape{ks[1], 67, 3}, Shape{ks[1], 67, 17}, Shape{ks[1], 67, 64},
                            Shape{ks[1], 259, 200}, Shape{ks[1], 96, 3}, Shape{ks[1], 96, 8}, Shape{ks[1], 96, 12},
                            Shape{ks[0], 67, 16}, Shape{wide, 32, 5}, Shape{k32, 131, 129}}) {
      const int64_t k = sh.k, m = sh.m, n = sh.n;
      const auto bytes = quantized(type, m, k, 7);
      const double budget = matmul_budget(bname(), type, n);
      const auto x = random_floats(size_t(n * k), 8);
      for (bool weight_view : {false, true}) {
        const int64_t mm = weight_view ? m - 3 : m;
        check(std::string("matmul ") + ggml_type_name(uint32_t(type)) + " m=" + std::to_string(mm) +
                  " k=" + std::to_string(k) + " n=" + std::to_string(n) + (weight_view ? " (weight rows 2..)" : ""),
              n, mm,
              [&](Backend& b, const Tensor& o) {
                Tensor w = b.weight_from_host(type, m, k, bytes).value();
                if (weight_view) w = w.rows(2, m - 3);
                b.matmul(w, input_view(b, n, k, x), o);
              },
              budget);
      }
    }
  }
}

// matmuls (q, k and v of one input; CUDA: one launch for one row when the weights share a type and
// have whole panel copies; 2..16 rows: one launch too; prompt-sized: one GEMM launch, each block
// finding its product) against the reference's products one by one: three weights of one type,
// of mixed types, and a row view of one (not a whole panel: the products one by one), n = 1, 3 and
// 12, and n = 200 with products of several 128-row tiles and partial ones (259, 131, 64 rows).
TEST_P(BackendOpsTest, MatmulsEqualTheProductsOneByOne) {
  for (GgmlType type : {GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const int64_t k = block_of(type) == 256 ? 512 : 96 * 3, small[3] = {96, 64, 32}, large[3] = {259, 131, 64};
    for (int mix = 0; mix < 3; ++mix) {  // 0: one type, 1: the last of another type, 2: a row view first
      for (int64_t n : {1, 3, 12, 200}) {
        const int64_t* ms = n == 200 ? large : small;
        const auto x = random_floats(size_t(n * k), 91);
        std::vector<uint8_t> bytes[3];  // outlive the backends: a host backend aliases them
        GgmlType types[3];
        int64_t rows[3];
        for (int i = 0; i < 3; ++i) {
          types[i] = mix == 1 && i == 2 ? GgmlType::kQ8_0 : type;
          rows[i] = mix == 2 && i == 0 ? ms[i] + 32 : ms[i];
          bytes[i] = quantized(types[i], rows[i], k, uint32_t(92 + i));
        }
        std::vector<float> got, want;
        for (Backend* b : {&be(), &ref()}) {
          Products p;
          std::vector<Tensor> outs;
          for (int i = 0; i < 3; ++i) {
            Tensor w = b->weight_from_host(types[i], rows[i], k, bytes[i]).value();
            if (mix == 2 && i == 0) w = w.rows(32, ms[i]);
            outs.push_back(b->alloc(GgmlType::kF32, n, ms[i]).value());
            p.add(w, outs.back());
          }
          b->matmuls(input_view(*b, n, k, x), p);
          std::vector<float>& dst = b == &be() ? got : want;
          for (const Tensor& o : outs) {
            const auto d = download(*b, o);
            dst.insert(dst.end(), d.begin(), d.end());
          }
        }
        expect_close(bname(), std::string("matmuls ") + ggml_type_name(uint32_t(type)) + " mix=" + std::to_string(mix) +
                                  " n=" + std::to_string(n), got, want,
                     std::max(matmul_budget(bname(), type, n), matmul_budget(bname(), types[2], n)));
      }
    }
  }
}

// Wide products of few output rows, as a small model's k / v projections and the products after
// its attention (CUDA cuts them along k into slices whose sums the group's last slice adds:
// PanelSplit): one weight and matmuls of three, 1, 3 and 16 activation rows, each run three times
// with new activations (a slice ticket left set by one launch would corrupt the next), against the
// reference every time.
TEST_P(BackendOpsTest, WideProductsOfFewRows) {
  for (GgmlType type : {GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const int64_t k = 8192, ms[3] = {67, 64, 32};
    std::vector<uint8_t> bytes[3];
    for (int i = 0; i < 3; ++i) bytes[i] = quantized(type, ms[i], k, uint32_t(61 + i));
    for (int64_t n : {1, 3, 16}) {
      Tensor w[2][3], outs[2][3];
      Backend* bes[2] = {&be(), &ref()};
      for (int b = 0; b < 2; ++b) {
        for (int i = 0; i < 3; ++i) {
          w[b][i] = bes[b]->weight_from_host(type, ms[i], k, bytes[i]).value();
          outs[b][i] = bes[b]->alloc(GgmlType::kF32, n, ms[i]).value();
        }
      }
      for (int round = 0; round < 3; ++round) {
        const auto x = random_floats(size_t(n * k), uint32_t(70 + round));
        std::vector<float> got, want, got1, want1;
        for (int b = 0; b < 2; ++b) {
          Products p;
          for (int i = 0; i < 3; ++i) p.add(w[b][i], outs[b][i]);
          const Tensor xv = input_view(*bes[b], n, k, x);
          bes[b]->matmuls(xv, p);
          std::vector<float>& dst = b == 0 ? got : want;
          for (const Tensor& o : outs[b]) {
            const auto d = download(*bes[b], o);
            dst.insert(dst.end(), d.begin(), d.end());
          }
          bes[b]->matmul(w[b][0], xv, outs[b][0]);
          (b == 0 ? got1 : want1) = download(*bes[b], outs[b][0]);
        }
        const std::string what = std::string(ggml_type_name(uint32_t(type))) + " k=" + std::to_string(k) +
                                 " n=" + std::to_string(n) + " round " + std::to_string(round);
        expect_close(bname(), "matmuls " + what, got, want, matmul_budget(bname(), type, n));
        expect_close(bname(), "matmul m=67 " + what, got1, want1, matmul_budget(bname(), type, n));
      }
    }
  }
}

// Activation rows of very different magnitudes (1e-7 .. 1e5, as hidden states with outliers have)
// in one product: each row's error within the budget on its own (CUDA's tensor cores scale each row
// by a power of two into fp16's range first; without that, 1e5-sized rows overflow fp16 and
// 1e-7-sized ones lose their bits to its subnormals).
TEST_P(BackendOpsTest, MatmulRowsOfEveryMagnitude) {
  const float mags[] = {1e5f, 1e-7f, 3e4f, 1.0f, 1e-3f, 7e2f};
  for (GgmlType type : {GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K}) {
    const int64_t m = 67, k = block_of(type) == 256 ? 512 : 96, n = 24;
    const auto bytes = quantized(type, m, k, 71);
    auto x = random_floats(size_t(n * k), 72);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < k; ++i) x[size_t(r * k + i)] *= mags[r % 6];
    std::vector<float> got, want;
    for (Backend* b : {&be(), &ref()}) {
      Tensor o = b->alloc(GgmlType::kF32, n, m).value();
      b->matmul(b->weight_from_host(type, m, k, bytes).value(), input_view(*b, n, k, x), o);
      (b == &be() ? got : want) = download(*b, o);
    }
    const double budget = matmul_budget(bname(), type, n);
    for (int64_t r = 0; r < n; ++r) {
      const std::vector<float> g(got.begin() + r * m, got.begin() + (r + 1) * m),
          w(want.begin() + r * m, want.begin() + (r + 1) * m);
      EXPECT_LE(nmse(g, w), budget) << bname() << " " << ggml_type_name(uint32_t(type)) << " row " << r
                                    << " (activations ~" << mags[r % 6] << ")";
    }
  }
}

// add_rms_norm on whole, 16-byte-aligned rows (the CUDA float4 kernel: 1, 2 and 4 float4 per
// thread, and past that the scalar one), the sum and the normed row both checked.
TEST_P(BackendOpsTest, AddRmsNormOfAlignedRows) {
  for (int64_t rows : {1, 3}) {
    for (int64_t cols : {1000, 4096, 6144, 16384, 16400}) {
      const auto a = random_floats(size_t(rows * cols), 21, 3.0f), b = random_floats(size_t(rows * cols), 22, 3.0f);
      const auto w = random_floats(size_t(cols), 23);
      std::vector<float> got[2], want[2];
      for (Backend* be : {&be(), &ref()}) {
        const Tensor s = be->alloc(GgmlType::kF32, rows, cols).value(), o = be->alloc(GgmlType::kF32, rows, cols).value();
        be->add_rms_norm(upload(*be, rows, cols, a), upload(*be, rows, cols, b), upload(*be, 1, cols, w), 1e-5f, s, o);
        auto& dst = be == &ref() ? want : got;
        dst[0] = download(*be, s);
        dst[1] = download(*be, o);
      }
      const std::string shape = " " + std::to_string(rows) + "x" + std::to_string(cols);
      expect_close(bname(), "add_rms_norm aligned sum" + shape, got[0], want[0], 0.0);
      expect_close(bname(), "add_rms_norm aligned" + shape, got[1], want[1], 1e-12);
    }
  }
}

TEST_P(BackendOpsTest, RowOps) {
  for (int64_t rows : {1, 3, 17, 64}) {
    for (int64_t cols : {1, 7, 33, 1000}) {
      const auto a = random_floats(size_t(rows * cols), 11, 3.0f), b = random_floats(size_t(rows * cols), 12, 3.0f);
      const auto w = random_floats(size_t(cols), 13);
      const std::string shape = " " + std::to_string(rows) + "x" + std::to_string(cols);
      check("rms_norm" + shape, rows, cols, [&](Backend& be, const Tensor& o) {
        be.rms_norm(input_view(be, rows, cols, a), upload(be, 1, cols, w), 1e-5f, o);
      }, 1e-12);
      check("add_rms_norm" + shape, rows, cols, [&](Backend& be, const Tensor& o) {
        be.add_rms_norm(input_view(be, rows, cols, a), input_view(be, rows, cols, b), upload(be, 1, cols, w), 1e-5f,
                        input_view(be, rows, cols, a), o);
      }, 1e-12);
      check("add_rms_norm sum in place" + shape, rows, cols, [&](Backend& be, const Tensor& o) {
        const Tensor h = be.alloc(GgmlType::kF32, rows, cols).value();
        be.write(o, a.data());
        be.add_rms_norm(o, input_view(be, rows, cols, b), upload(be, 1, cols, w), 1e-5f, o, h);
      }, 0.0);
      check("add" + shape, rows, cols, [&](Backend& be, const Tensor& o) {
        be.add(input_view(be, rows, cols, a), input_view(be, rows, cols, b), o);
      }, 0.0);
      check("add_bcast" + shape, rows, cols, [&](Backend& be, const Tensor& o) {
        be.add(input_view(be, rows, cols, a), upload(be, 1, cols, w), o);
      }, 0.0);
      check("swiglu" + shape, rows, cols, [&](Backend& be, const Tensor& o) {
        be.swiglu(input_view(be, rows, cols, a), input_view(be, rows, cols, b), o);
      }, 1e-11);
      check("softmax" + shape, rows, cols, [&](Backend& be, const Tensor& o) {
        be.softmax(input_view(be, rows, cols, a), o);
      }, 1e-11);
      check("copy" + shape, rows, cols, [&](Backend& be, const Tensor& o) {
        be.copy(input_view(be, rows, cols, a), o);
      }, 0.0);
    }
  }
}

TEST_P(BackendOpsTest, InPlaceAliases) {
  const int64_t rows = 5, cols = 300;
  const auto a = random_floats(size_t(rows * cols), 5), b = random_floats(size_t(rows * cols), 6);
  const auto w = random_floats(size_t(cols), 7);
  check("in-place chain", rows, cols, [&](Backend& be, const Tensor& o) {
    be.write(o, a.data());
    be.rms_norm(o, upload(be, 1, cols, w), 1e-6f, o);
    be.add(o, input_view(be, rows, cols, b), o);
    be.add(o, upload(be, 1, cols, w), o);
    be.softmax(o, o);
    be.swiglu(o, input_view(be, rows, cols, b), o);
  }, 1e-11);
}

TEST_P(BackendOpsTest, CopyF16AndOverlappingRows) {
  const int64_t cols = 24;
  const auto v = random_floats(size_t(9 * cols), 21);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = fp32_to_fp16(v[i]);
  auto run = [&](Backend& b, int64_t src_first, int64_t dst_first) {
    Tensor t = b.alloc(GgmlType::kF16, 9, cols).value();
    b.write(t, h.data());
    b.copy(t.rows(src_first, 5), t.rows(dst_first, 5));
    std::vector<uint16_t> out(h.size());
    b.read(t, out.data());
    b.synchronize();
    return out;
  };
  for (auto [s, d] : {std::pair<int64_t, int64_t>{0, 2}, {3, 1}, {0, 4}}) {
    EXPECT_EQ(run(be(), s, d), run(ref(), s, d)) << "f16 copy rows " << s << " -> " << d;
  }
  // F32 overlapping views with padded rows.
  check("copy overlapping f32", 5, 10, [&](Backend& b, const Tensor& o) {
    Tensor big = b.alloc(GgmlType::kF32, 8, 12).value();
    const auto f = random_floats(8 * 12, 22);
    b.write(big, f.data());
    Tensor src = big.rows(0, 5), dst = big.rows(2, 5);
    src.n_cols = dst.n_cols = 10;
    b.copy(src, dst);
    b.copy(dst, o);
  }, 0.0);
}

TEST_P(BackendOpsTest, StoreKvF32AndF16Pools) {
  for (GgmlType pool_type : {GgmlType::kF32, GgmlType::kF16}) {
    const int64_t d = 40, pool_rows = 20;
    const std::vector<int32_t> slots = {7, 0, 19, 3};
    const auto src = random_floats(size_t(4 * d), 31, 5.0f);
    auto run = [&](Backend& b) {
      Tensor pool = b.alloc(pool_type, pool_rows, d).value();
      b.store_kv(input_view(b, 4, d, src), upload_i32(b, slots), pool);
      std::vector<uint8_t> out(size_t(pool_rows * d) * (pool_type == GgmlType::kF16 ? 2 : 4));
      b.read(pool, out.data());
      b.synchronize();
      return out;
    };
    EXPECT_EQ(run(be()), run(ref())) << ggml_type_name(uint32_t(pool_type));
  }
}

// qk_rope_store against the reference's norm, RoPE and stores in turn: q, k (normed or not, both
// orderings, with and without q) and the pools (F16, F32) at scattered slots, n = 1, 3, 17.
TEST_P(BackendOpsTest, QkRopeStoreEqualsItsOps) {
  const int n_heads = 6, n_kv = 2;
  for (int head_dim : {64, 128}) {
    for (GgmlType pool_type : {GgmlType::kF16, GgmlType::kF32}) {
      for (int variant = 0; variant < 3; ++variant) {  // 0: q and norms, 1: q without norms (neox), 2: no q
        for (int64_t rows : {1, 3, 17}) {
          const int64_t qc = int64_t(n_heads) * head_dim, kc = int64_t(n_kv) * head_dim, pool_rows = 40;
          const auto qv = random_floats(size_t(rows * qc), 51, 2.0f), kv = random_floats(size_t(rows * kc), 52, 2.0f);
          const auto vv = random_floats(size_t(rows * kc), 53, 2.0f), qn = random_floats(size_t(head_dim), 54);
          const auto kn = random_floats(size_t(head_dim), 55);
          std::vector<int32_t> pos(static_cast<size_t>(rows)), slots(static_cast<size_t>(rows));
          for (int64_t r = 0; r < rows; ++r) pos[r] = int32_t(r * 37 + 5), slots[r] = int32_t((r * 7 + 3) % pool_rows);
          RopeParams p;
          p.n_heads = n_heads, p.head_dim = head_dim, p.n_rot = head_dim, p.freq_base = 1000000.0f;
          p.ordering = variant == 1 ? RopeOrdering::kNeox : RopeOrdering::kNormal;
          const std::string what = "qk_rope_store d=" + std::to_string(head_dim) + " " +
                                   ggml_type_name(uint32_t(pool_type)) + " v" + std::to_string(variant) +
                                   " n=" + std::to_string(rows);
          // Runs the op on b; returns q, k and both pools (as floats).
          auto run = [&](Backend& b) {
            Tensor q = b.alloc(GgmlType::kF32, rows, qc).value(), k = b.alloc(GgmlType::kF32, rows, kc).value();
            Tensor kp = b.alloc(pool_type, pool_rows, kc).value(), vp = b.alloc(pool_type, pool_rows, kc).value();
            b.write(q, qv.data());
            b.write(k, kv.data());
            const Tensor qn_t = variant == 0 ? upload(b, 1, head_dim, qn) : Tensor{};
            const Tensor kn_t = variant == 0 ? upload(b, 1, head_dim, kn) : Tensor{};
            b.qk_rope_store(variant == 2 ? Tensor{} : q, k, input_view(b, rows, kc, vv), qn_t, kn_t, 1e-6f,
                            upload_i32(b, pos), p, n_kv, upload_i32(b, slots), kp, vp);
            std::vector<float> out = download(b, q), kd = download(b, k);
            out.insert(out.end(), kd.begin(), kd.end());
            for (const Tensor& t : {kp, vp}) {
              std::vector<uint8_t> raw(size_t(pool_rows * kc) * (pool_type == GgmlType::kF16 ? 2 : 4));
              b.read(t, raw.data());
              b.synchronize();
              for (int64_t i = 0; i < pool_rows * kc; ++i) {
                out.push_back(pool_type == GgmlType::kF16 ? fp16_to_fp32(reinterpret_cast<const uint16_t*>(raw.data())[i])
                                                          : reinterpret_cast<const float*>(raw.data())[i]);
              }
            }
            return out;
          };
          expect_close(bname(), what, run(be()), run(ref()), pool_type == GgmlType::kF16 ? 1e-7 : 1e-12);
        }
      }
    }
  }
}

TEST_P(BackendOpsTest, RopeOrderingsScalingsFreqFactors) {
  struct Case {
    RopeOrdering ordering;
    RopeScaling scaling;
    int n_rot;
    bool freq_factors;
  };
  const Case cases[] = {
      {RopeOrdering::kNormal, RopeScaling::kNone, 64, false}, {RopeOrdering::kNeox, RopeScaling::kNone, 64, false},
      {RopeOrdering::kNormal, RopeScaling::kLinear, 32, false}, {RopeOrdering::kNeox, RopeScaling::kYarn, 48, false},
      {RopeOrdering::kNormal, RopeScaling::kYarn, 64, true},   {RopeOrdering::kNeox, RopeScaling::kNone, 32, true},
  };
  for (const Case& c : cases) {
    for (int64_t rows : {1, 3, 17}) {
      const int n_heads = 3, head_dim = 64;
      const int64_t cols = n_heads * head_dim;
      const auto x = random_floats(size_t(rows * cols), 41);
      std::vector<int32_t> pos(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) pos[r] = int32_t(r * 397 % 5000 + (r == 1 ? 30000 : 0));
      std::vector<float> ff(size_t(c.n_rot / 2));
      for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + 0.37f * float(i % 5);
      check("rope ordering=" + std::to_string(int(c.ordering)) + " scaling=" + std::to_string(int(c.scaling)) +
                " n_rot=" + std::to_string(c.n_rot) + " ff=" + std::to_string(c.freq_factors) + " n=" + std::to_string(rows),
            rows, cols, [&](Backend& b, const Tensor& o) {
              RopeParams p;
              p.n_heads = n_heads, p.head_dim = head_dim, p.n_rot = c.n_rot, p.ordering = c.ordering;
              p.freq_base = 500000.0f, p.scaling = c.scaling, p.scaling_factor = 4.0f, p.original_context = 8192;
              if (c.freq_factors) p.freq_factors = upload(b, 1, int64_t(ff.size()), ff);
              b.write(o, x.data());
              b.rope(o, upload_i32(b, pos), p);
            }, 1e-12);
    }
  }
}

TEST_P(BackendOpsTest, AttentionCausalGqa) {
  for (int head_dim : {40, 64, 128}) {
    for (int64_t n : {1, 3, 17}) {
      AttentionParams p;
      p.n_heads = 4, p.n_kv_heads = 2, p.head_dim = head_dim, p.first_pos = 5;
      p.scale = 1.0f / std::sqrt(float(head_dim));
      const int64_t qc = p.n_heads * head_dim, kc = p.n_kv_heads * head_dim, n_kv = p.first_pos + n + 2;
      const auto q = random_floats(size_t(n * qc), 51), k = random_floats(size_t(n_kv * kc), 52),
                 v = random_floats(size_t(n_kv * kc), 53);
      check("attention hd=" + std::to_string(head_dim) + " n=" + std::to_string(n), n, qc,
            [&](Backend& b, const Tensor& o) {
              b.attention(input_view(b, n, qc, q), input_view(b, n_kv, kc, k), input_view(b, n_kv, kc, v), o, p);
            }, 1e-10);
    }
  }
}

// One paged_attention case: K and V pools of `pool_type` with n_blocks blocks of p.block_size rows
// (random values, kv_seed; rounded to fp16 for F16 pools), block tables [n_seqs, max_blocks] from
// the blocks shuffled by table_seed, query rows at positions pos of sequences seq (random q, q_seed).
struct PagedCase {
  PagedAttentionParams p;
  GgmlType pool_type;
  int64_t n_seqs, max_blocks, pool_rows, qc, kc;
  std::vector<int32_t> tables, pos, seq;
  std::vector<float> q, kv;
  std::vector<uint16_t> kv16;

  PagedCase(const PagedAttentionParams& params, GgmlType type, int64_t n_blocks, int64_t seqs, int64_t blocks_per_seq,
            uint32_t table_seed, std::vector<int32_t> positions, std::vector<int32_t> seq_ids, uint32_t q_seed,
            uint32_t kv_seed)
      : p(params), pool_type(type), n_seqs(seqs), max_blocks(blocks_per_seq), pool_rows(n_blocks * params.block_size),
        qc(int64_t(params.n_heads) * params.head_dim), kc(int64_t(params.n_kv_heads) * params.head_dim),
        pos(std::move(positions)), seq(std::move(seq_ids)) {
    std::vector<int32_t> blocks(static_cast<size_t>(n_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(table_seed));
    tables.assign(blocks.begin(), blocks.begin() + n_seqs * max_blocks);
    q = random_floats(size_t(n() * qc), q_seed);
    kv = random_floats(size_t(2 * pool_rows * kc), kv_seed);
    kv16.resize(kv.size());
    for (size_t i = 0; i < kv.size(); ++i) kv16[i] = fp32_to_fp16(kv[i]);
  }
  int64_t n() const { return int64_t(pos.size()); }
  std::string name(const std::string& what) const {
    return what + " " + ggml_type_name(uint32_t(pool_type)) + " hd=" + std::to_string(p.head_dim) +
           " n=" + std::to_string(n());
  }
  void run(Backend& b, const Tensor& o) const {
    Tensor kp = b.alloc(pool_type, pool_rows, kc).value(), vp = b.alloc(pool_type, pool_rows, kc).value();
    const bool h = pool_type == GgmlType::kF16;
    b.write(kp, h ? static_cast<const void*>(kv16.data()) : kv.data());
    b.write(vp, h ? static_cast<const void*>(kv16.data() + pool_rows * kc) : kv.data() + pool_rows * kc);
    Tensor t = b.alloc(GgmlType::kI32, n_seqs, max_blocks).value();
    b.write(t, tables.data());
    b.paged_attention(input_view(b, n(), qc, q), kp, vp, upload_i32(b, pos), upload_i32(b, seq), t, o, p);
  }
};

// A decoder layer's decode ops recorded as one step, three steps in a row on the same tensors at
// new positions (CUDA, with step programs on: the first runs op by op, the second is captured, the
// third replayed; its runs of ops with a step-program body run as one persistent kernel,
// step_program.cuh), against
// the reference after each step: x, and the K / V rows the step stored. 1 activation row (every op
// in one program) and 3 (the products outside, the rest in programs); one weight type, and the
// attention output product of another type (the program cut where the panel type changes).
TEST_P(BackendOpsTest, DecodeLayerStepsEqualTheReference) {
  std::unique_ptr<Backend> programs;  // CUDA: a backend with step programs on (ONEBIT_CUDA_PROGRAM=1)
  if (bname() == "cuda") {
    const char* was = std::getenv("ONEBIT_CUDA_PROGRAM");
    const std::string saved = was != nullptr ? was : "";
    setenv("ONEBIT_CUDA_PROGRAM", "1", 1);
    programs = make_cuda_backend(0, nullptr);
    if (was != nullptr) setenv("ONEBIT_CUDA_PROGRAM", saved.c_str(), 1); else unsetenv("ONEBIT_CUDA_PROGRAM");
    ASSERT_NE(programs, nullptr);
  }
  Backend& pbe = programs != nullptr ? *programs : be();
  const int64_t d = 256, ffn = 512, hd = 64, n_heads = 4, n_kv = 2, qc = n_heads * hd, kc = n_kv * hd;
  const int64_t block = 4, n_blocks = 12, pool_rows = n_blocks * block, max_blocks = 4;
  const float eps = 1e-5f;
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kF16, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (int mix = 0; mix < 2; ++mix) {
      for (int64_t n : {1, 3}) {
        const GgmlType wo_type = mix == 1 ? (type == GgmlType::kQ8_0 ? GgmlType::kQ4_0 : GgmlType::kQ8_0) : type;
        struct W {
          GgmlType type;
          int64_t rows, cols;
          std::vector<uint8_t> bytes;
        };
        W ws[7] = {{type, qc, d, {}},     {type, kc, d, {}},  {type, kc, d, {}},  {wo_type, d, qc, {}},
                   {type, ffn, d, {}},    {type, ffn, d, {}}, {type, d, ffn, {}}};
        for (int i = 0; i < 7; ++i) ws[i].bytes = quantized(ws[i].type, ws[i].rows, ws[i].cols, uint32_t(300 + i));
        const auto norm1 = random_floats(size_t(d), 310, 0.0625f), norm2 = random_floats(size_t(d), 311, 0.0625f);
        const auto kv = random_floats(size_t(2 * pool_rows * kc), 312);
        std::vector<uint16_t> kv16(kv.size());
        for (size_t i = 0; i < kv.size(); ++i) kv16[i] = fp32_to_fp16(kv[i]);
        std::vector<int32_t> tables(size_t(n * max_blocks));
        for (size_t i = 0; i < tables.size(); ++i) tables[i] = int32_t((i * 5 + 2) % n_blocks);
        RopeParams rope;
        rope.n_heads = int32_t(n_heads), rope.head_dim = int32_t(hd), rope.n_rot = int32_t(hd), rope.freq_base = 10000.0f;
        PagedAttentionParams ap;
        ap.n_heads = int32_t(n_heads), ap.n_kv_heads = int32_t(n_kv), ap.head_dim = int32_t(hd);
        ap.block_size = int32_t(block), ap.scale = 1.0f / 8.0f;
        struct Run {
          Tensor w[7], n1, n2, x, h, q, k, v, attn, o, g, u, kp, vp, pos, seq, slots, tables;
        };
        auto setup = [&](Backend& b) {
          Run r;
          for (int i = 0; i < 7; ++i) r.w[i] = b.weight_from_host(ws[i].type, ws[i].rows, ws[i].cols, ws[i].bytes).value();
          r.n1 = upload(b, 1, d, norm1), r.n2 = upload(b, 1, d, norm2);
          for (Tensor* t : {&r.x, &r.h, &r.o}) *t = b.alloc(GgmlType::kF32, n, d).value();
          r.q = b.alloc(GgmlType::kF32, n, qc).value(), r.attn = b.alloc(GgmlType::kF32, n, qc).value();
          r.k = b.alloc(GgmlType::kF32, n, kc).value(), r.v = b.alloc(GgmlType::kF32, n, kc).value();
          r.g = b.alloc(GgmlType::kF32, n, ffn).value(), r.u = b.alloc(GgmlType::kF32, n, ffn).value();
          r.kp = b.alloc(GgmlType::kF16, pool_rows, kc).value(), r.vp = b.alloc(GgmlType::kF16, pool_rows, kc).value();
          b.write(r.kp, kv16.data());
          b.write(r.vp, kv16.data() + pool_rows * kc);
          r.tables = b.alloc(GgmlType::kI32, n, max_blocks).value();
          b.write(r.tables, tables.data());
          for (Tensor* t : {&r.pos, &r.seq, &r.slots}) *t = b.alloc(GgmlType::kI32, 1, n).value();
          return r;
        };
        // One step at position 5 + step (row i: sequence i); returns x and the stored K / V rows.
        auto step = [&](Backend& b, Run& r, int t) {
          const auto x0 = random_floats(size_t(n * d), uint32_t(320 + t));
          std::vector<int32_t> pos, seq, slots;
          for (int64_t i = 0; i < n; ++i) {
            const int32_t p = int32_t(5 + t + 2 * i);
            pos.push_back(p), seq.push_back(int32_t(i));
            slots.push_back(tables[size_t(i * max_blocks + p / block)] * int32_t(block) + p % int32_t(block));
          }
          b.write(r.x, x0.data());
          b.write(r.pos, pos.data());
          b.write(r.seq, seq.data());
          b.write(r.slots, slots.data());
          b.rms_norm(r.x, r.n1, eps, r.h);
          Products qkv;
          qkv.add(r.w[0], r.q), qkv.add(r.w[1], r.k), qkv.add(r.w[2], r.v);
          b.matmuls(r.h, qkv);
          b.qk_rope_store(r.q, r.k, r.v, Tensor{}, Tensor{}, eps, r.pos, rope, int32_t(n_kv), r.slots, r.kp, r.vp);
          b.paged_attention(r.q, r.kp, r.vp, r.pos, r.seq, r.tables, r.attn, ap);
          b.matmul(r.w[3], r.attn, r.o);
          b.add_rms_norm(r.x, r.o, r.n2, eps, r.x, r.h);
          Products gu;
          gu.add(r.w[4], r.g), gu.add(r.w[5], r.u);
          b.matmuls(r.h, gu);
          b.swiglu(r.g, r.u, r.g);
          b.matmul(r.w[6], r.g, r.o);
          b.add(r.x, r.o, r.x);
          std::vector<float> out = download(b, r.x);
          std::vector<uint16_t> raw(size_t(pool_rows * kc));
          for (const Tensor& pool : {r.kp, r.vp}) {
            b.read(pool, raw.data());
            b.synchronize();
            for (int32_t s : slots) {
              for (int64_t c = 0; c < kc; ++c) out.push_back(fp16_to_fp32(raw[size_t(s * kc + c)]));
            }
          }
          return out;
        };
        Run rb = setup(pbe), rr = setup(ref());
        const uint64_t ops_before = cuda_program_ops(pbe);
        for (int t = 0; t < 3; ++t) {
          const double budget = std::max({1e-6, 10 * matmul_budget(bname(), type, n), 10 * matmul_budget(bname(), wo_type, n)});
          expect_close(bname(),
                       std::string("decode layer ") + ggml_type_name(uint32_t(type)) + " mix=" + std::to_string(mix) +
                           " n=" + std::to_string(n) + " step " + std::to_string(t),
                       step(pbe, rb, t), step(ref(), rr, t), budget);
        }
        if (bname() == "cuda") EXPECT_GT(cuda_program_ops(pbe), ops_before) << "no step program ran";
      }
    }
  }
}

TEST_P(BackendOpsTest, PagedAttentionF32AndF16Pools) {
  for (GgmlType pool_type : {GgmlType::kF32, GgmlType::kF16}) {
    for (int head_dim : {64, 128}) {
      PagedAttentionParams p;
      p.n_heads = 4, p.n_kv_heads = 1, p.head_dim = head_dim, p.block_size = 4;
      p.scale = 1.0f / std::sqrt(float(head_dim));
      // 17 query rows of two sequences over a shuffled block layout (24 blocks): sequence 0 prefill
      // positions 20..31 and sequence 1 decode-like positions.
      std::vector<int32_t> pos, seq;
      for (int i = 0; i < 12; ++i) pos.push_back(20 + i), seq.push_back(0);
      for (int32_t v : {0, 5, 39, 17, 2}) pos.push_back(v), seq.push_back(1);
      const PagedCase c(p, pool_type, 24, 2, 10, 7, pos, seq, 61, 62);
      check(c.name("paged_attention"), c.n(), c.qc, [&](Backend& b, const Tensor& o) { c.run(b, o); }, 1e-10);
    }
  }
}

// Prompt-sized batches (CUDA: tiles of 64 rows of one sequence's consecutive positions run on
// tensor cores, flash_attn.cuh, budget 1e-6 for its fp16 roundings; other tiles on the float path):
// 206 rows of four sequences with GQA (8 heads, 2 kv heads), 16-row blocks over a shuffled pool:
// sequence 0 positions 0..99 (rows 0..99: one whole tile, one shared with sequence 1), sequence 1
// 30..59 after a cached prefix, five decode rows of sequence 2, sequence 3 10..80 (its last tile
// partial, 14 rows).
TEST_P(BackendOpsTest, PagedAttentionPromptTiles) {
  for (GgmlType pool_type : {GgmlType::kF32, GgmlType::kF16}) {
    for (int head_dim : {64, 128}) {
      PagedAttentionParams p;
      p.n_heads = 8, p.n_kv_heads = 2, p.head_dim = head_dim, p.block_size = 16;
      p.scale = 1.0f / std::sqrt(float(head_dim));
      std::vector<int32_t> pos, seq;
      auto run = [&](int32_t s, int32_t first, int32_t last) {
        for (int32_t v = first; v <= last; ++v) pos.push_back(v), seq.push_back(s);
      };
      run(0, 0, 99);
      run(1, 30, 59);
      for (int32_t v : {70, 3, 101, 64, 0}) pos.push_back(v), seq.push_back(2);
      run(3, 10, 80);
      const int64_t n_seqs = 4, max_blocks = 7;
      const PagedCase c(p, pool_type, n_seqs * max_blocks + 3, n_seqs, max_blocks, 11, pos, seq, 63, 64);
      check(c.name("paged_attention tiles"), c.n(), c.qc, [&](Backend& b, const Tensor& o) { c.run(b, o); },
            bname() == "cuda" ? 1e-6 : 1e-10);
    }
  }
}

// make_backend: the names it knows, and CUDA's reason when it is not usable.
// Distinct random experts for each of n tokens: ids I32 [n, top_k] row-major.
std::vector<int32_t> random_routes(int64_t n, int32_t top_k, int32_t n_experts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> e(static_cast<size_t>(n_experts), 0);
    std::iota(e.begin(), e.end(), 0);
    std::shuffle(e.begin(), e.end(), rng);
    ids.insert(ids.end(), e.begin(), e.begin() + top_k);
  }
  return ids;
}

Tensor upload_ids(Backend& be, int64_t n, int32_t top_k, const std::vector<int32_t>& ids) {
  Tensor t = be.alloc(GgmlType::kI32, n, top_k).value();
  be.write(t, ids.data());
  return t;
}

std::vector<int32_t> download_i32(Backend& be, const Tensor& t) {
  std::vector<int32_t> out(size_t(t.n_rows * t.n_cols));
  be.read(t, out.data());
  be.synchronize();
  return out;
}

// The router: the same experts in the same order (logits drawn wide apart enough that float and
// double softmax agree on the order), weights within float rounding; renormalized or not.
TEST_P(BackendOpsTest, MoeRouteTopK) {
  for (int32_t n_exp : {4, 8, 60, 128}) {
    for (int32_t top_k : {1, 2, 8}) {
      if (top_k > n_exp) continue;
      for (int64_t n : {1, 3, 17}) {
        for (bool normalize : {false, true}) {
          const std::string what = "moe_route E=" + std::to_string(n_exp) + " k=" + std::to_string(top_k) +
                                   " n=" + std::to_string(n) + (normalize ? " norm" : "");
          const auto logits = random_floats(size_t(n * n_exp), 21 + n_exp, 4.0f);
          std::vector<int32_t> got_ids, want_ids;
          check(what, n, top_k, [&](Backend& b, const Tensor& w) {
            Tensor ids = b.alloc(GgmlType::kI32, n, top_k).value();
            b.moe_route(input_view(b, n, n_exp, logits), normalize, ids, w);
            (&b == &be() ? got_ids : want_ids) = download_i32(b, ids);
          }, 1e-11);
          EXPECT_EQ(got_ids, want_ids) << what;
        }
      }
    }
  }
}

// Rows of logits-like values for argmax_rows: random ones, the row's best planted again at a later
// and (another row) at an earlier column (ties), and rows of NaN and -inf: NaN first, NaN among
// numbers, all NaN, all -inf, -inf with NaN. The same ids on every backend (the reference scans).
std::vector<float> argmax_rows_data(int64_t n, int64_t d, uint32_t seed) {
  std::vector<float> x = random_floats(size_t(n * d), seed, 4.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), ninf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    float* r = x.data() + i * d;
    const int64_t best = std::max_element(r, r + d) - r;
    switch (i % 8) {
      case 1: r[d - 1] = r[best]; break;                         // a tie after the best
      case 2: r[0] = r[best]; break;                             // a tie before it
      case 3: r[0] = nan; break;                                 // NaN first: column 0
      case 4: r[d / 2] = nan; break;                             // NaN elsewhere: never taken
      case 5: std::fill(r, r + d, nan); break;                   // all NaN
      case 6: std::fill(r, r + d, ninf); break;                  // nothing to take: -1
      case 7: std::fill(r, r + d, ninf), r[d - 1] = nan; break;  // -inf and NaN: -1 (unless d is 1)
      default: break;
    }
  }
  return x;
}

TEST_P(BackendOpsTest, ArgmaxRowsEqualTheScan) {
  for (int64_t d : {1, 7, 300, 8197}) {
    for (int64_t n : {1, 3, 17}) {
      const auto x = argmax_rows_data(n, d, uint32_t(50 + d + n));
      std::vector<int32_t> got, want;
      for (Backend* b : {&be(), &ref()}) {
        Tensor ids = b->alloc(GgmlType::kI32, 1, n).value();
        b->argmax_rows(input_view(*b, n, d, x), ids);
        (b == &be() ? got : want) = download_i32(*b, ids);
      }
      EXPECT_EQ(got, want) << bname() << " argmax_rows n=" << n << " d=" << d;
    }
  }
}

// The expert-indexed product over every weight type: activations shared by a token's pairs or
// one per pair, tokens routed so that some experts get several pairs, one or none; expert
// slices of whole 8-row panels (m = 24) and of odd ones (m = 13); on CUDA also whole 32-row
// panel groups (m = 64: a single token's pairs run on the stack's panel copy).
TEST_P(BackendOpsTest, MoeMatmulEveryType) {
  const int32_t n_exp = 6, top_k = 2;
  std::vector<int64_t> ms = {24, 13};
  if (bname() == "cuda") ms.push_back(64);
  for (GgmlType type : kWeightTypes) {
    const int64_t k = is_float(type) ? 40 : block_of(type) == 32 ? 96 : 256;
    const double budget = (is_float(type) || bname() != "cpu") ? 1e-9 : 5e-4;
    for (int64_t m : ms) {
      const auto bytes = quantized(type, n_exp * m, k, 31);
      for (int64_t n : {1, 3, 17}) {
        const auto ids = random_routes(n, top_k, n_exp, uint32_t(40 + n));
        for (bool shared : {true, false}) {
          const int64_t xr = shared ? n : n * top_k;
          const auto x = random_floats(size_t(xr * k), 41);
          check(std::string("moe_matmul ") + ggml_type_name(uint32_t(type)) + " m=" + std::to_string(m) +
                    " n=" + std::to_string(n) + (shared ? " shared x" : " x per pair"),
                n * top_k, m,
                [&](Backend& b, const Tensor& o) {
                  Tensor w = b.weight_from_host(type, n_exp * m, k, bytes).value();
                  b.moe_matmul(w, n_exp, input_view(b, xr, k, x), upload_ids(b, n, top_k, ids), o);
                },
                budget);
        }
      }
    }
  }
}

TEST_P(BackendOpsTest, MoeCombineAndSigmoidMul) {
  for (int64_t n : {1, 3, 17}) {
    for (int32_t top_k : {1, 2, 8}) {
      const int64_t d = 100;
      const auto y = random_floats(size_t(n * top_k * d), 51), w = random_floats(size_t(n * top_k), 52);
      check("moe_combine n=" + std::to_string(n) + " k=" + std::to_string(top_k), n, d,
            [&](Backend& b, const Tensor& o) {
              b.moe_combine(input_view(b, n * top_k, d, y), input_view(b, n, top_k, w), o);
            }, 1e-12);
    }
    const int64_t d = 70;
    const auto x = random_floats(size_t(n * d), 53, 3.0f), g = random_floats(size_t(n * d), 54, 4.0f);
    check("sigmoid_mul n=" + std::to_string(n), n, d, [&](Backend& b, const Tensor& o) {
      b.sigmoid_mul(input_view(b, n, d, x), input_view(b, n, d, g), o);
    }, 1e-11);
    check("sigmoid_mul row gate n=" + std::to_string(n), n, d, [&](Backend& b, const Tensor& o) {
      b.sigmoid_mul(input_view(b, n, d, x), input_view(b, n, 1, g), o);
    }, 1e-11);
    check("sigmoid_mul in place n=" + std::to_string(n), n, d, [&](Backend& b, const Tensor& o) {
      b.write(o, x.data());
      b.sigmoid_mul(o, input_view(b, n, 1, g), o);
    }, 1e-11);
  }
}

// Recurrent ops: three sequences whose rows interleave in the step, state rows out of order, the
// states compared after the op too.
struct RecurrentCase {
  std::vector<int32_t> seq_ids;      // [n]
  std::vector<int32_t> state_rows;   // [n_seqs]
  int64_t n_state_rows = 0;
};

RecurrentCase interleaved(const std::vector<int>& run_lengths, uint32_t seed) {
  RecurrentCase c;
  std::mt19937 rng(seed);
  std::vector<int> left(run_lengths);
  for (int total = std::accumulate(left.begin(), left.end(), 0); total > 0; --total) {
    int s;
    do s = int(rng() % left.size()); while (left[s] == 0);
    --left[s];
    c.seq_ids.push_back(s);
  }
  c.n_state_rows = int64_t(run_lengths.size()) + 2;
  for (size_t s = 0; s < run_lengths.size(); ++s) c.state_rows.push_back(int32_t(c.n_state_rows - 1 - 2 * s % c.n_state_rows));
  return c;
}

TEST_P(BackendOpsTest, SsmConvInterleavedSequences) {
  const RecurrentCase rc = interleaved({9, 1, 5}, 71);
  const int64_t n = int64_t(rc.seq_ids.size());
  for (int64_t C : {37, 300}) {
    for (int64_t K : {2, 4}) {
      for (bool silu : {false, true}) {
        const auto x = random_floats(size_t(n * C), 72), w = random_floats(size_t(C * K), 73);
        const auto st0 = random_floats(size_t(rc.n_state_rows * (K - 1) * C), 74);
        const std::string what = "ssm_conv C=" + std::to_string(C) + " K=" + std::to_string(K) + (silu ? " silu" : "");
        std::vector<float> st_got, st_want;
        check(what, n, C, [&](Backend& b, const Tensor& o) {
          Tensor states = upload(b, rc.n_state_rows, (K - 1) * C, st0);
          b.ssm_conv(input_view(b, n, C, x), upload(b, C, K, w), upload_i32(b, rc.seq_ids), upload_i32(b, rc.state_rows),
                     Tensor{}, states, silu, o);
          (&b == &be() ? st_got : st_want) = download(b, states);
        }, 1e-12);
        expect_close(bname(), what + " states", st_got, st_want, 0.0);
      }
    }
  }
}

// The delta rule against the reference's double token loop: a 150-token run (a backend may take it
// in chunks) interleaved with a 5-token and a 1-token run; outputs and states within 1e-5 relative
// (nmse 1e-10). 4 value heads over 2 key heads, grouped and tiled; q and k l2-normalized per head
// as the model gives them.
TEST_P(BackendOpsTest, GatedDeltaRuleChunkedAndRecurrent) {
  const RecurrentCase rc = interleaved({150, 5, 1}, 81);
  const int64_t n = int64_t(rc.seq_ids.size()), H = 4, NK = 2, dk = 16, dv = 24;
  auto q = random_floats(size_t(n * NK * dk), 82), k = random_floats(size_t(n * NK * dk), 83);
  for (auto* t : {&q, &k}) {
    for (int64_t r = 0; r < n * NK; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dk; ++i) ss += double((*t)[r * dk + i]) * (*t)[r * dk + i];
      for (int64_t i = 0; i < dk; ++i) (*t)[r * dk + i] = float((*t)[r * dk + i] / std::sqrt(ss + 1e-6));
    }
  }
  for (float& x : q) x /= 4.0f;  // dk^-1/2
  const auto v = random_floats(size_t(n * H * dv), 84), a = random_floats(size_t(n * H), 85, 2.0f);
  const auto bb = random_floats(size_t(n * H), 86, 2.0f), dt = random_floats(size_t(H), 87);
  std::vector<float> A = random_floats(size_t(H), 88);
  for (float& x : A) x = -std::exp(x);
  const auto st0 = random_floats(size_t(rc.n_state_rows * H * dk * dv), 89, 0.3f);
  for (bool tiled : {false, true}) {
    const std::string what = std::string("gated_delta_rule") + (tiled ? " tiled" : " grouped");
    std::vector<float> st_got, st_want;
    check(what, n, H * dv, [&](Backend& b, const Tensor& o) {
      Tensor states = upload(b, rc.n_state_rows, H * dk * dv, st0);
      b.gated_delta_rule(input_view(b, n, NK * dk, q), input_view(b, n, NK * dk, k), input_view(b, n, H * dv, v),
                         input_view(b, n, H, a), input_view(b, n, H, bb), upload(b, 1, H, A), upload(b, 1, H, dt),
                         upload_i32(b, rc.seq_ids), upload_i32(b, rc.state_rows), Tensor{}, states, o,
                         DeltaParams{int32_t(NK), tiled});
      (&b == &be() ? st_got : st_want) = download(b, states);
    }, 1e-10);
    expect_close(bname(), what + " states", st_got, st_want, 1e-10);
  }
}

// Checkpoints (speculative verification): with a checkpoint row after every row but each
// sequence's last, the op's outputs and final states are those without checkpoints, and each
// checkpoint row holds the state that the sequence's run cut short after that row leaves (the
// reference without checkpoints on the shorter run). Sequence 0's run of 40 rows would be chunked
// without checkpoints.
TEST_P(BackendOpsTest, RecurrentCheckpointsEqualShorterRuns) {
  const std::vector<int> lens{40, 1, 4};
  const RecurrentCase rc = interleaved(lens, 91);
  const int64_t n = int64_t(rc.seq_ids.size());
  std::vector<int32_t> ckpt(size_t(n), -1);
  std::vector<int> seen(lens.size(), 0);
  int64_t n_rows = rc.n_state_rows;  // state rows, then the checkpoint rows
  for (int64_t t = 0; t < n; ++t) {
    const int s = rc.seq_ids[t];
    if (++seen[s] < lens[s]) ckpt[t] = int32_t(n_rows++);
  }
  // runs(b, rows, seq_ids, state_rows, ckpt or {}, states, out): one op call of either kind
  const auto check_op = [&](const std::string& what, int64_t width, int64_t state_width, auto&& run) {
    const auto st0 = random_floats(size_t(n_rows * state_width), 92, 0.3f);
    std::vector<float> st_got, st_plain;
    // with checkpoints on the backend, without on the reference: outputs and final states agree
    check(what + " with checkpoints", n, width, [&](Backend& b, const Tensor& o) {
      Tensor states = upload(b, n_rows, state_width, st0);
      const bool mine = &b == &be();
      run(b, std::vector<int64_t>{}, rc.seq_ids, rc.state_rows, mine ? upload_i32(b, ckpt) : Tensor{}, states, o);
      (mine ? st_got : st_plain) = download(b, states);
    }, 1e-10);
    for (int64_t r = 0; r < rc.n_state_rows; ++r) {
      const auto row = [&](const std::vector<float>& v) {
        return std::vector<float>(v.begin() + r * state_width, v.begin() + (r + 1) * state_width);
      };
      expect_close(bname(), what + " final state row " + std::to_string(r), row(st_got), row(st_plain), 1e-10);
    }
    // each checkpoint against the reference's run of the sequence's rows up to it
    for (int64_t t = 0; t < n; ++t) {
      if (ckpt[t] < 0) continue;
      const int32_t s = rc.seq_ids[t];
      std::vector<int64_t> rows;
      for (int64_t u = 0; u <= t; ++u) {
        if (rc.seq_ids[u] == s) rows.push_back(u);
      }
      Tensor states = upload(ref(), n_rows, state_width, st0);
      Tensor o = ref().alloc(GgmlType::kF32, int64_t(rows.size()), width).value();
      run(ref(), rows, std::vector<int32_t>(rows.size(), 0), std::vector<int32_t>{rc.state_rows[s]}, Tensor{}, states, o);
      const auto want = download(ref(), states);
      const auto at = [&](const std::vector<float>& v, int64_t r) {
        return std::vector<float>(v.begin() + r * state_width, v.begin() + (r + 1) * state_width);
      };
      expect_close(bname(), what + " checkpoint after row " + std::to_string(t), at(st_got, ckpt[t]),
                   at(want, rc.state_rows[s]), 1e-10);
    }
  };
  // The inputs of the rows `rows` of the step (all rows when empty).
  const auto pick = [&](const std::vector<float>& all, int64_t width, const std::vector<int64_t>& rows) {
    if (rows.empty()) return all;
    std::vector<float> v;
    for (int64_t r : rows) v.insert(v.end(), all.begin() + r * width, all.begin() + (r + 1) * width);
    return v;
  };
  {
    const int64_t C = 37, K = 4;
    const auto x = random_floats(size_t(n * C), 93), w = random_floats(size_t(C * K), 94);
    check_op("ssm_conv", C, (K - 1) * C, [&](Backend& b, const std::vector<int64_t>& rows, const std::vector<int32_t>& seq,
                                            const std::vector<int32_t>& srows, const Tensor& ck, const Tensor& states,
                                            const Tensor& o) {
      b.ssm_conv(upload(b, int64_t(seq.size()), C, pick(x, C, rows)), upload(b, C, K, w), upload_i32(b, seq),
                 upload_i32(b, srows), ck, states, /*silu=*/true, o);
    });
  }
  {
    const int64_t H = 4, NK = 2, dk = 16, dv = 24;
    auto q = random_floats(size_t(n * NK * dk), 95, 0.25f), k = random_floats(size_t(n * NK * dk), 96, 0.25f);
    const auto v = random_floats(size_t(n * H * dv), 97), a = random_floats(size_t(n * H), 98, 2.0f);
    const auto bb = random_floats(size_t(n * H), 99, 2.0f), dt = random_floats(size_t(H), 100);
    std::vector<float> A = random_floats(size_t(H), 101);
    for (float& x : A) x = -std::exp(x);
    check_op("gated_delta_rule", H * dv, H * dk * dv, [&](Backend& b, const std::vector<int64_t>& rows,
                                                         const std::vector<int32_t>& seq,
                                                         const std::vector<int32_t>& srows, const Tensor& ck,
                                                         const Tensor& states, const Tensor& o) {
      const int64_t m = int64_t(seq.size());
      b.gated_delta_rule(upload(b, m, NK * dk, pick(q, NK * dk, rows)), upload(b, m, NK * dk, pick(k, NK * dk, rows)),
                         upload(b, m, H * dv, pick(v, H * dv, rows)), upload(b, m, H, pick(a, H, rows)),
                         upload(b, m, H, pick(bb, H, rows)), upload(b, 1, H, A), upload(b, 1, H, dt), upload_i32(b, seq),
                         upload_i32(b, srows), ck, states, o, DeltaParams{int32_t(NK), false});
    });
  }
}

// Hadamard-rotated weights (Tensor::in_rotation = 32): on the reference a rotated F32 weight's
// product equals the unrotated weight's (the rotation is orthonormal: to rounding), and each
// backend equals the reference on the same rotated bytes, for matmul (decode and prompt shapes)
// and moe_matmul (experts of one rotated stack). Backends that do not rotate inputs skip (the
// loader refuses rotated files there).
TEST_P(BackendOpsTest, MatmulOfRotatedWeights) {
  if (!be().rotates_inputs()) GTEST_SKIP() << bname() << " does not rotate inputs (Model::load refuses rotated files)";
  const int64_t m = 48, k = 256;
  const int32_t n_exp = 3, top_k = 2;
  const auto wf = random_floats(size_t(n_exp * m * k), 51);
  std::vector<float> wr = wf;  // W H per block of 32
  for (int64_t r = 0; r < n_exp * m; ++r) {
    std::vector<double> d(wr.begin() + r * k, wr.begin() + (r + 1) * k);
    hadamard_rotate(d.data(), k, 32);
    std::copy(d.begin(), d.end(), wr.begin() + r * k);
  }
  const auto encode = [&](GgmlType type, const std::vector<float>& f, int64_t rows) {
    const size_t rb = row_size(type, k).value();
    std::vector<uint8_t> bytes(rb * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) quantize_row_reference(type, f.data() + r * k, bytes.data() + r * rb, k);
    return bytes;
  };
  for (int64_t n : {1, 9}) {
    const auto x = random_floats(size_t(n * k), 52);
    // the math, on the reference: rotated weight and rotated input give the plain product
    const auto plain_bytes = encode(GgmlType::kF32, wf, m), rotated_bytes = encode(GgmlType::kF32, wr, m);  // aliased
    Tensor plain = ref().weight_from_host(GgmlType::kF32, m, k, plain_bytes).value();
    Tensor rotated = ref().weight_from_host(GgmlType::kF32, m, k, rotated_bytes).value();
    rotated.in_rotation = 32;
    Tensor a = ref().alloc(GgmlType::kF32, n, m).value(), b = ref().alloc(GgmlType::kF32, n, m).value();
    ref().matmul(plain, input_view(ref(), n, k, x), a);
    ref().matmul(rotated, input_view(ref(), n, k, x), b);
    expect_close("reference", "rotated F32 weight n=" + std::to_string(n), download(ref(), b), download(ref(), a), 1e-12);
    for (GgmlType type : {GgmlType::kF32, GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K}) {
      const double budget = (is_float(type) || bname() != "cpu") ? 1e-9 : 5e-4;
      const auto bytes = encode(type, wr, n_exp * m);
      check(std::string("matmul rotated ") + ggml_type_name(uint32_t(type)) + " n=" + std::to_string(n), n, m,
            [&](Backend& bk, const Tensor& o) {
              Tensor w = bk.weight_from_host(type, n_exp * m, k, bytes).value().rows(0, m);
              w.in_rotation = 32;
              bk.matmul(w, input_view(bk, n, k, x), o);
            }, matmul_budget(bname(), type, n));
      const auto ids = random_routes(n, top_k, n_exp, uint32_t(53 + n));
      check(std::string("moe_matmul rotated ") + ggml_type_name(uint32_t(type)) + " n=" + std::to_string(n),
            n * top_k, m, [&](Backend& bk, const Tensor& o) {
              Tensor w = bk.weight_from_host(type, n_exp * m, k, bytes).value();
              w.in_rotation = 32;
              bk.moe_matmul(w, n_exp, input_view(bk, n, k, x), upload_ids(bk, n, top_k, ids), o);
            }, budget);
    }
  }
}

TEST_P(BackendOpsTest, FactoryNamesBackends) {
  auto cpu = make_backend("cpu", 1);
  ASSERT_TRUE(cpu.ok()) << cpu.message();
  EXPECT_TRUE(make_backend("reference", 1).ok());
  EXPECT_FALSE(make_backend("tpu", 1).ok());
  auto cuda = make_backend("cuda", 1);
  std::string why;
  auto direct = make_cuda_backend(0, &why);
  EXPECT_EQ(cuda.ok(), direct != nullptr);
  if (!cuda.ok()) {
    EXPECT_NE(cuda.message().find(why), std::string::npos) << cuda.message();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOpsTest, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace onebit
