// The CPU backend's small ops against the reference backend on random data, every ISA, odd sizes:
// get_rows (every type), rms_norm, add (broadcast), swiglu, softmax, copy, rope (both orderings,
// linear / YaRN scaling, frequency factors), causal GQA attention with a filled cache, and the
// mixture-of-experts product (expert slices through each ISA's dot and panel kernels).
#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "gguf/quants.h"

namespace onebit {
namespace {

using namespace cpu_test;

// Element-wise float ops differ from the double reference by a few float roundings; the
// vectorized exp in swiglu / softmax / attention adds ~2 ulp.
constexpr double kExactish = 1e-12;
constexpr double kExpOps = 1e-11;

class CpuOpsTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  std::unique_ptr<Backend> cpu = make_cpu_backend(3, GetParam());
  std::unique_ptr<Backend> ref = make_reference_backend();
};

TEST_P(CpuOpsTest, GetRowsEveryType) {
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_0, GgmlType::kQ4_1,
                        GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K,
                        GgmlType::kQ6_K}) {
    const int64_t rows = 9, cols = 512;
    const auto f = random_floats(rows * cols, 3);
    const size_t rb = row_size(type, cols).value();
    std::vector<uint8_t> bytes(rb * rows + 1);
    for (int64_t r = 0; r < rows; ++r) quantize_row_reference(type, f.data() + r * cols, bytes.data() + 1 + r * rb, cols);
    std::span<const uint8_t> span(bytes.data() + 1, rb * rows);
    const std::vector<int32_t> ids = {8, 0, 3, 3, 7};
    Tensor out_c = guarded(*cpu, 5, cols);
    Tensor out_r = ref->alloc(GgmlType::kF32, 5, cols).value();
    cpu->get_rows(cpu->weight_from_host(type, rows, cols, span).value(), upload_i32(*cpu, ids), out_c);
    ref->get_rows(ref->weight_from_host(type, rows, cols, span).value(), upload_i32(*ref, ids), out_r);
    EXPECT_EQ(download(*cpu, out_c), download(*ref, out_r)) << ggml_type_name(uint32_t(type));
    EXPECT_TRUE(guard_intact(*cpu, out_c));
  }
}

TEST_P(CpuOpsTest, RmsNormAddSwigluSoftmaxCopy) {
  for (int64_t rows : {1, 4}) {
    for (int64_t cols : {1, 7, 8, 33, 2048, 5632}) {
      const auto a = random_floats(rows * cols, 11, 3.0f), b = random_floats(rows * cols, 12, 3.0f);
      const auto w = random_floats(cols, 13);
      auto check = [&](const char* what, auto&& op, double tol) {
        Tensor out_c = guarded(*cpu, rows, cols);
        Tensor out_r = ref->alloc(GgmlType::kF32, rows, cols).value();
        op(*cpu, out_c);
        op(*ref, out_r);
        EXPECT_LE(nmse(download(*cpu, out_c), download(*ref, out_r)), tol) << what << " " << rows << "x" << cols;
        EXPECT_TRUE(guard_intact(*cpu, out_c)) << what;
      };
      check("rms_norm", [&](Backend& be, const Tensor& o) {
        be.rms_norm(upload(be, rows, cols, a), upload(be, 1, cols, w), 1e-5f, o);
      }, kExactish);
      check("add", [&](Backend& be, const Tensor& o) { be.add(upload(be, rows, cols, a), upload(be, rows, cols, b), o); }, 0);
      check("add_bcast", [&](Backend& be, const Tensor& o) { be.add(upload(be, rows, cols, a), upload(be, 1, cols, w), o); }, 0);
      check("swiglu", [&](Backend& be, const Tensor& o) {
        be.swiglu(upload(be, rows, cols, a), upload(be, rows, cols, b), o);
      }, kExpOps);
      check("softmax", [&](Backend& be, const Tensor& o) { be.softmax(upload(be, rows, cols, a), o); }, kExpOps);
      check("copy", [&](Backend& be, const Tensor& o) { be.copy(upload(be, rows, cols, a), o); }, 0);
    }
  }
}

TEST_P(CpuOpsTest, InPlaceAliases) {
  const auto a = random_floats(3 * 40, 5), w = random_floats(40, 6);
  Tensor xc = upload(*cpu, 3, 40, a), xr = upload(*ref, 3, 40, a);
  cpu->rms_norm(xc, upload(*cpu, 1, 40, w), 1e-6f, xc);
  ref->rms_norm(xr, upload(*ref, 1, 40, w), 1e-6f, xr);
  cpu->softmax(xc, xc);
  ref->softmax(xr, xr);
  cpu->swiglu(xc, xc, xc);
  ref->swiglu(xr, xr, xr);
  EXPECT_LE(nmse(download(*cpu, xc), download(*ref, xr)), kExpOps);
}

TEST_P(CpuOpsTest, RopeOrderingsAndScalings) {
  Tensor factors_c = upload(*cpu, 1, 16, random_floats(16, 9, 0.2f));
  Tensor factors_r = upload(*ref, 1, 16, random_floats(16, 9, 0.2f));
  for (RopeOrdering ord : {RopeOrdering::kNormal, RopeOrdering::kNeox}) {
    for (RopeScaling sc : {RopeScaling::kNone, RopeScaling::kLinear, RopeScaling::kYarn}) {
      for (bool factors : {false, true}) {
        RopeParams p;
        p.n_heads = 3;
        p.head_dim = 40;
        p.n_rot = 32;
        p.ordering = ord;
        p.scaling = sc;
        p.scaling_factor = 4.0f;
        p.original_context = 64;
        const std::vector<int32_t> pos = {0, 1, 7, 300, 4095};
        const auto x = random_floats(5 * 120, 21);
        Tensor xc = upload(*cpu, 5, 120, x), xr = upload(*ref, 5, 120, x);
        RopeParams pc = p, pr = p;
        if (factors) pc.freq_factors = factors_c, pr.freq_factors = factors_r;
        cpu->rope(xc, upload_i32(*cpu, pos), pc);
        ref->rope(xr, upload_i32(*ref, pos), pr);
        EXPECT_LE(nmse(download(*cpu, xc), download(*ref, xr)), kExactish)
            << int(ord) << " " << int(sc) << " " << factors;
      }
    }
  }
}

TEST_P(CpuOpsTest, AttentionGqaWithCache) {
  struct Case { int n_heads, n_kv_heads, head_dim, first_pos, n; };
  for (const Case& c : {Case{4, 2, 8, 0, 1}, Case{4, 2, 8, 0, 7}, Case{8, 1, 33, 5, 3},
                        Case{32, 4, 64, 100, 1}, Case{6, 6, 16, 40, 19},
                        // groups of 10 (a block of 8 and one of 2) and 5 heads, head_dim 128 / 24
                        Case{20, 2, 128, 3, 37}, Case{10, 2, 24, 0, 9}}) {
    const int64_t n_kv = c.first_pos + c.n + 2;  // the cache has rows beyond the visible ones
    const int64_t qd = int64_t(c.n_heads) * c.head_dim, kd = int64_t(c.n_kv_heads) * c.head_dim;
    const auto q = random_floats(c.n * qd, 31), k = random_floats(n_kv * kd, 32), v = random_floats(n_kv * kd, 33);
    AttentionParams p;
    p.n_heads = c.n_heads;
    p.n_kv_heads = c.n_kv_heads;
    p.head_dim = c.head_dim;
    p.scale = 1.0f / std::sqrt(float(c.head_dim));
    p.first_pos = c.first_pos;
    Tensor out_c = guarded(*cpu, c.n, qd);
    Tensor out_r = ref->alloc(GgmlType::kF32, c.n, qd).value();
    const int64_t vis = c.first_pos + c.n;
    cpu->attention(upload(*cpu, c.n, qd, q), upload(*cpu, n_kv, kd, k).rows(0, vis),
                   upload(*cpu, n_kv, kd, v).rows(0, vis), out_c, p);
    ref->attention(upload(*ref, c.n, qd, q), upload(*ref, n_kv, kd, k).rows(0, vis),
                   upload(*ref, n_kv, kd, v).rows(0, vis), out_r, p);
    EXPECT_LE(nmse(download(*cpu, out_c), download(*ref, out_r)), kExpOps) << c.n_heads << "/" << c.n;
    EXPECT_TRUE(guard_intact(*cpu, out_c));
  }
}

// moe_matmul through this ISA's kernels: 16-row experts (whole 8-row panels) of the panel types,
// 1 and 9 tokens, top 3 of 5, some experts chosen by several tokens.
TEST_P(CpuOpsTest, MoeMatmulPanelTypes) {
  const int32_t n_exp = 5, top_k = 3;
  const int64_t m = 16, k = 512;
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const auto f = random_floats(n_exp * m * k, 61);
    const size_t rb = row_size(type, k).value();
    std::vector<uint8_t> bytes(rb * n_exp * m);
    for (int64_t r = 0; r < n_exp * m; ++r) quantize_row_reference(type, f.data() + r * k, bytes.data() + r * rb, k);
    for (int64_t n : {1, 9}) {
      std::vector<int32_t> ids;
      for (int64_t i = 0; i < n; ++i) {
        for (int32_t j = 0; j < top_k; ++j) ids.push_back(int32_t((i + 2 * j) % n_exp));
      }
      const auto x = random_floats(n * k, 62);
      std::vector<float> got, want;
      for (Backend* be : {cpu.get(), ref.get()}) {
        Tensor idt = be->alloc(GgmlType::kI32, n, top_k).value();
        be->write(idt, ids.data());
        Tensor out = be == cpu.get() ? guarded(*be, n * top_k, m) : be->alloc(GgmlType::kF32, n * top_k, m).value();
        be->moe_matmul(be->weight_from_host(type, n_exp * m, k, bytes).value(), n_exp, upload(*be, n, k, x), idt, out);
        (be == cpu.get() ? got : want) = download(*be, out);
        if (be == cpu.get()) {
          EXPECT_TRUE(guard_intact(*be, out));
        }
      }
      EXPECT_LE(nmse(got, want), 5e-4) << ggml_type_name(uint32_t(type)) << " n=" << n;  // Q8 activations
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuOpsTest, ::testing::ValuesIn(supported_isas()), isa_param_name);

TEST(CpuFeatures, NamesRoundTripAndBaselineIsSupported) {
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvxVnni, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni}) {
    EXPECT_EQ(cpu_isa_from_name(cpu_isa_name(isa)), isa);
  }
  EXPECT_FALSE(cpu_isa_from_name("sse2").has_value());
  EXPECT_TRUE(cpu_isa_supported(CpuIsa::kAvx2));  // the build's baseline runs here
  EXPECT_TRUE(cpu_isa_supported(cpu_isa()));
}

}  // namespace
}  // namespace onebit
