// The reference backend's ops against values worked out by hand (RoPE angles, integer matmuls that
// every weight type represents exactly, causal GQA attention on tiny inputs).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "base/fp16.h"
#include "gguf/quants.h"

namespace onebit {
namespace {

class ReferenceBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_reference_backend();

  Tensor f32(int64_t rows, int64_t cols, const std::vector<float>& values) {
    Tensor t = be->alloc(GgmlType::kF32, rows, cols).value();
    EXPECT_EQ(values.size(), size_t(rows * cols));
    be->write(t, values.data());
    return t;
  }
  Tensor i32(const std::vector<int32_t>& values) {
    Tensor t = be->alloc(GgmlType::kI32, static_cast<int64_t>(values.size()), 1).value();
    be->write(t, values.data());
    return t.reshaped(1, static_cast<int64_t>(values.size()));
  }
  std::vector<float> read(const Tensor& t) {
    std::vector<float> out(t.n_rows * t.n_cols);
    be->read(t, out.data());
    be->synchronize();
    return out;
  }
  // A weight of `type` from float rows (weights live as long as the returned bytes).
  Tensor weight(GgmlType type, int64_t rows, int64_t cols, const std::vector<float>& values,
                std::vector<uint8_t>& storage) {
    const uint64_t row_bytes = row_size(type, cols).value();
    storage.assign(row_bytes * rows, 0);
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row_reference(type, values.data() + r * cols, storage.data() + r * row_bytes, cols);
    }
    return be->weight_from_host(type, rows, cols, storage).value();
  }
};

TEST_F(ReferenceBackendTest, RopeNormalAndNeoxAngles) {
  const float p = 2.0f;
  RopeParams rp;
  rp.n_heads = 1;
  rp.head_dim = 4;
  rp.n_rot = 4;
  rp.freq_base = 10000.0f;
  // normal: pairs (0,1) at angle p, (2,3) at p * 10000^(-2/4) = p / 100
  Tensor x = f32(1, 4, {1, 0, 1, 0});
  be->rope(x, i32({2}), rp);
  auto got = read(x);
  EXPECT_NEAR(got[0], std::cos(p), 1e-6);
  EXPECT_NEAR(got[1], std::sin(p), 1e-6);
  EXPECT_NEAR(got[2], std::cos(p / 100), 1e-6);
  EXPECT_NEAR(got[3], std::sin(p / 100), 1e-6);
  // neox: pairs (0,2) and (1,3)
  rp.ordering = RopeOrdering::kNeox;
  x = f32(1, 4, {1, 1, 0, 0});
  be->rope(x, i32({2}), rp);
  got = read(x);
  EXPECT_NEAR(got[0], std::cos(p), 1e-6);
  EXPECT_NEAR(got[1], std::cos(p / 100), 1e-6);
  EXPECT_NEAR(got[2], std::sin(p), 1e-6);
  EXPECT_NEAR(got[3], std::sin(p / 100), 1e-6);
}

TEST_F(ReferenceBackendTest, RopePartialRotationScalingAndFreqFactors) {
  RopeParams rp;
  rp.n_heads = 2;
  rp.head_dim = 4;
  rp.n_rot = 2;  // only the first pair of each head turns
  rp.scaling = RopeScaling::kLinear;
  rp.scaling_factor = 4.0f;  // angle pos / 4
  Tensor x = f32(2, 8, {1, 0, 5, 6, 1, 0, 7, 8, /*pos 0:*/ 1, 2, 3, 4, 5, 6, 7, 8});
  be->rope(x, i32({8, 0}), rp);
  auto got = read(x);
  EXPECT_NEAR(got[0], std::cos(2.0), 1e-6);
  EXPECT_NEAR(got[1], std::sin(2.0), 1e-6);
  EXPECT_EQ(got[2], 5);
  EXPECT_EQ(got[3], 6);
  EXPECT_NEAR(got[4], std::cos(2.0), 1e-6);
  EXPECT_EQ(got[7], 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[8 + i], i + 1) << "position 0 is the identity";
  rp.scaling = RopeScaling::kNone;
  rp.n_heads = 1;
  rp.head_dim = 2;
  rp.freq_factors = f32(1, 1, {4.0f});
  x = f32(1, 2, {1, 0});
  be->rope(x, i32({8}), rp);
  got = read(x);
  EXPECT_NEAR(got[0], std::cos(2.0), 1e-6);
}

TEST_F(ReferenceBackendTest, MatmulAndGetRowsForEveryWeightType) {
  // Integer weights in [-8, 7] with a -8 in every block: exact in f32/f16/bf16/q4_0; other types
  // are compared with the products of their own dequantized values.
  const int64_t m = 3, k = 256, n = 2;
  std::vector<float> w(m * k), x(n * k);
  for (int64_t i = 0; i < m * k; ++i) w[i] = float((i * 7 + 3) % 16 - 8);
  for (int64_t i = 0; i < m * k; i += 32) w[i] = -8;
  for (int64_t i = 0; i < n * k; ++i) x[i] = float((i * 5) % 9 - 4) * 0.5f;
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_0, GgmlType::kQ8_0,
                        GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const bool exact = type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16 ||
                       type == GgmlType::kQ4_0;
    std::vector<uint8_t> storage;
    Tensor wt = weight(type, m, k, w, storage);
    std::vector<float> wd(m * k);  // [m, k] the values the weight holds
    const uint64_t row_bytes = row_size(type, k).value();
    for (int64_t r = 0; r < m; ++r) dequantize_row(type, storage.data() + r * row_bytes, wd.data() + r * k, k);
    if (exact) EXPECT_EQ(wd, w) << ggml_type_name(uint32_t(type));
    Tensor out = be->alloc(GgmlType::kF32, n, m).value();
    be->matmul(wt, f32(n, k, x), out);
    auto got = read(out);
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t b = 0; b < m; ++b) {
        double want = 0.0;
        for (int64_t c = 0; c < k; ++c) want += double(x[a * k + c]) * wd[b * k + c];
        EXPECT_NEAR(got[a * m + b], want, 1e-5 * std::abs(want) + 1e-5) << ggml_type_name(uint32_t(type));
      }
    }
    // get_rows dequantizes the same rows.
    Tensor rows = be->alloc(GgmlType::kF32, 2, k).value();
    be->get_rows(wt, i32({2, 0}), rows);
    auto r = read(rows);
    for (int64_t c = 0; c < k; ++c) {
      EXPECT_EQ(r[c], wd[2 * k + c]);
      EXPECT_EQ(r[k + c], wd[c]);
    }
  }
}

TEST_F(ReferenceBackendTest, NormsAndElementwise) {
  Tensor x = f32(2, 2, {3, 4, 0, 1});
  Tensor out = be->alloc(GgmlType::kF32, 2, 2).value();
  be->rms_norm(x, f32(1, 2, {1, 2}), 0.0f, out);
  auto got = read(out);
  const double rms = std::sqrt(12.5);
  EXPECT_NEAR(got[0], 3 / rms, 1e-6);
  EXPECT_NEAR(got[1], 8 / rms, 1e-6);
  EXPECT_NEAR(got[3], 2 * std::sqrt(2.0), 1e-6);
  be->softmax(f32(1, 2, {0, std::log(3.0f)}), out.rows(0, 1));
  got = read(out.rows(0, 1));
  EXPECT_NEAR(got[0], 0.25, 1e-7);
  EXPECT_NEAR(got[1], 0.75, 1e-7);
  be->swiglu(f32(1, 2, {0, 2}), f32(1, 2, {5, 3}), out.rows(0, 1));
  got = read(out.rows(0, 1));
  EXPECT_EQ(got[0], 0);
  EXPECT_NEAR(got[1], 3 * 2 / (1 + std::exp(-2.0)), 1e-6);
  be->add(x, f32(1, 2, {10, 20}), out);
  EXPECT_EQ(read(out), (std::vector<float>{13, 24, 10, 21}));
}

TEST_F(ReferenceBackendTest, CausalGqaAttention) {
  // 2 query heads share 1 kv head (head_dim 2). Keys: k0 = (0,0) so scores tie at position 1.
  AttentionParams ap;
  ap.n_heads = 2;
  ap.n_kv_heads = 1;
  ap.head_dim = 2;
  ap.scale = 1.0f;
  ap.first_pos = 0;
  Tensor k = f32(2, 2, {0, 0, std::log(3.0f), 0});
  Tensor v = f32(2, 2, {1, 2, 5, 6});
  Tensor q = f32(2, 4, {9, 9, -9, 4, /*row 1:*/ 1, 0, 0, 1});
  Tensor out = be->alloc(GgmlType::kF32, 2, 4).value();
  be->attention(q, k, v, out, ap);
  auto got = read(out);
  // row 0 sees key 0 only: both heads return v0
  EXPECT_EQ(got[0], 1);
  EXPECT_EQ(got[1], 2);
  EXPECT_EQ(got[2], 1);
  EXPECT_EQ(got[3], 2);
  // row 1, head 0: scores (0, ln 3) -> weights 1/4, 3/4; head 1: scores (0, 0) -> 1/2, 1/2
  EXPECT_NEAR(got[4], 0.25 * 1 + 0.75 * 5, 1e-6);
  EXPECT_NEAR(got[5], 0.25 * 2 + 0.75 * 6, 1e-6);
  EXPECT_NEAR(got[6], 3, 1e-6);
  EXPECT_NEAR(got[7], 4, 1e-6);
  // The second row alone at first_pos 1 gives the same result.
  ap.first_pos = 1;
  be->attention(q.rows(1, 1), k, v, out.rows(0, 1), ap);
  auto again = read(out.rows(0, 1));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(again[i], got[4 + i]);
}

TEST_F(ReferenceBackendTest, WeightSizeMismatchIsAnError) {
  std::vector<uint8_t> bytes(10);
  auto r = be->weight_from_host(GgmlType::kF32, 2, 2, bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("16 bytes"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace onebit
