// The CPU backend's matmul against the reference backend on random data: every weight type, every
// ISA this machine runs, sizes 0 / 1 / odd / non-multiples of the vector width / large, the
// matrix-vector and tiled matrix-matrix paths, misaligned weights and activation rows, guard
// regions around the output. Tolerances are normalized MSEs (ggml's test-backend-ops measure).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "cpu_test_util.h"
#include "backend/cpu/amx.h"
#include "backend/cpu/panels.h"
#include "backend/hadamard.h"
#include "gguf/quants.h"

namespace onebit {
namespace {

using namespace cpu_test;

struct TypeCase {
  GgmlType type;
  int64_t block;      // elements per block: k must be a multiple
  double max_nmse;    // against the float reference
};

// Quantized types see Q8 / Q8_K activation rounding (relative error ~1/254 per element, nmse
// ~1e-5 on a dot of random data); ggml allows 5e-4 for quantized mul_mat. Float weights differ
// from the double-accumulating reference only by float summation order.
const TypeCase kTypes[] = {
    {GgmlType::kF32, 1, 1e-10},   {GgmlType::kF16, 1, 1e-10},   {GgmlType::kBF16, 1, 1e-10},
    {GgmlType::kQ8_0, 32, 5e-4},  {GgmlType::kQ4_0, 32, 5e-4},  {GgmlType::kQ4_1, 32, 5e-4},
    {GgmlType::kQ5_0, 32, 5e-4},  {GgmlType::kQ5_1, 32, 5e-4},  {GgmlType::kQ4_K, 256, 5e-4},
    {GgmlType::kQ5_K, 256, 5e-4}, {GgmlType::kQ6_K, 256, 5e-4}, {GgmlType::kQ8_K, 256, 1e-10},
};

class CpuMatmulTest : public ::testing::TestWithParam<CpuIsa> {};

// Runs out = x * w^T on the CPU backend (n_threads) and on the reference, returns the nmse; also
// checks the output's guard region. `misalign` shifts the weight bytes (by 2x) and activation rows.
double run_case(CpuIsa isa, int n_threads, const TypeCase& tc, int64_t m, int64_t n, int64_t k,
                int misalign, uint32_t seed, bool panels = true, bool amx = false) {
  auto cpu = make_cpu_backend(n_threads, isa, panels, amx);
  auto ref = make_reference_backend();
  const std::vector<float> wf = random_floats(size_t(m * k), seed);
  const size_t row_bytes = row_size(tc.type, k).value();
  std::vector<uint8_t> storage(row_bytes * m + 64);
  // Weights: shifted by 2 * misalign bytes. Block structs hold uint16 scales, so 2 bytes is the
  // least alignment weights may have (GGUF data is 32-byte aligned); 6 breaks every wider one.
  uint8_t* wbytes = storage.data() + 2 * misalign;
  for (int64_t r = 0; r < m; ++r) quantize_row_reference(tc.type, wf.data() + r * k, wbytes + r * row_bytes, k);
  const std::span<const uint8_t> wspan(wbytes, row_bytes * m);
  Tensor w_cpu = cpu->weight_from_host(tc.type, m, k, wspan).value();
  Tensor w_ref = ref->weight_from_host(tc.type, m, k, wspan).value();

  // Activations: rows of a wider tensor (shifted by `misalign` floats) so rows are not 32-byte
  // aligned; the reference gets the same values packed.
  const std::vector<float> xf = random_floats(size_t(n * k), seed + 1);
  std::vector<float> wide(size_t(n * (k + misalign)), 0.0f);
  for (int64_t r = 0; r < n; ++r) std::memcpy(&wide[size_t(r * (k + misalign) + misalign)], &xf[size_t(r * k)], k * 4);
  Tensor x_wide = upload(*cpu, n, k + misalign, wide);
  Tensor x_cpu = x_wide;
  x_cpu.offset_bytes += size_t(misalign) * 4;
  x_cpu.n_cols = k;
  Tensor x_ref = upload(*ref, n, k, xf);

  Tensor out_cpu = guarded(*cpu, n, m);
  Tensor out_ref = ref->alloc(GgmlType::kF32, n, m).value();
  cpu->matmul(w_cpu, x_cpu, out_cpu);
  ref->matmul(w_ref, x_ref, out_ref);
  EXPECT_TRUE(guard_intact(*cpu, out_cpu)) << "write outside the output, m=" << m << " n=" << n << " k=" << k;
  return nmse(download(*cpu, out_cpu), download(*ref, out_ref));
}

TEST_P(CpuMatmulTest, EveryTypeAndShapeMatchesReference) {
  struct Shape { int64_t m, n, k_blocks, k_extra; };
  // k = k_blocks * block + k_extra (k_extra only for the float types, whose block is 1).
  // m = 16, 40, 24: whole panels of 8 rows for the repacked types.
  const Shape shapes[] = {{1, 1, 1, 0},  {3, 1, 1, 7},  {17, 1, 3, 1},  {33, 2, 2, 15}, {5, 5, 1, 9},
                          {16, 4, 4, 0}, {40, 67, 2, 3}, {19, 130, 1, 1}, {24, 1, 5, 0}, {8, 6, 1, 0}};
  for (const TypeCase& tc : kTypes) {
    for (const Shape& s : shapes) {
      const int64_t k = tc.block == 1 ? s.k_blocks * 32 + s.k_extra : s.k_blocks * tc.block;
      for (int misalign : {0, 3}) {
        for (int threads : {1, 3}) {
          const double e = run_case(GetParam(), threads, tc, s.m, s.n, k, misalign, uint32_t(s.m * 131 + s.n));
          EXPECT_LE(e, tc.max_nmse) << ggml_type_name(uint32_t(tc.type)) << " m=" << s.m << " n=" << s.n
                                    << " k=" << k << " misalign=" << misalign << " threads=" << threads;
        }
      }
    }
  }
}

TEST_P(CpuMatmulTest, LargeMatrixVectorAndMatrixMatrix) {
  for (const TypeCase& tc : kTypes) {
    const int64_t k = tc.block == 1 ? 1000 : 2048;
    for (int64_t m : {300, 304}) {  // 304: panels
      for (int64_t n : {1, 3, 37}) {  // 3: a verification step (one register tile)
        const double e = run_case(GetParam(), 2, tc, m, n, k, 1, 7);
        EXPECT_LE(e, tc.max_nmse) << ggml_type_name(uint32_t(tc.type)) << " m=" << m << " n=" << n;
      }
    }
  }
}

// The same cases with panels off give the row-by-row kernels of the repacked types,
// and both layouts agree with each other far more closely than with the reference.
TEST_P(CpuMatmulTest, PanelsAndRowsAgree) {
  for (const TypeCase& tc : kTypes) {
    if (!cpu::has_panels(tc.type)) continue;
    for (int64_t n : {1, 3, 9}) {
      const double rows = run_case(GetParam(), 2, tc, 64, n, 512, 1, 11, /*panels=*/false);
      const double panels = run_case(GetParam(), 2, tc, 64, n, 512, 1, 11, /*panels=*/true);
      EXPECT_LE(rows, tc.max_nmse) << ggml_type_name(uint32_t(tc.type)) << " n=" << n;
      EXPECT_LE(panels, tc.max_nmse) << ggml_type_name(uint32_t(tc.type)) << " n=" << n;
      // Same integer sums; only the float order of the scale products differs.
      EXPECT_NEAR(rows, panels, 1e-3 * rows + 1e-12) << ggml_type_name(uint32_t(tc.type)) << " n=" << n;
    }
  }
}

// get_rows and read of a repacked weight (a tied embedding) see the rows as given.
TEST_P(CpuMatmulTest, RepackedWeightRowsReadBackAsGiven) {
  auto cpu = make_cpu_backend(2, GetParam(), /*panels=*/true);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const int64_t m = 16, k = type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0 ? 96 : 512;
    const size_t rb = row_size(type, k).value();
    const std::vector<float> wf = random_floats(size_t(m * k), 5);
    std::vector<uint8_t> bytes(rb * m);
    for (int64_t r = 0; r < m; ++r) quantize_row_reference(type, wf.data() + r * k, bytes.data() + r * rb, k);
    Tensor w = cpu->weight_from_host(type, m, k, bytes).value();
    std::vector<uint8_t> back(bytes.size());
    cpu->read(w, back.data());
    EXPECT_EQ(back, bytes) << ggml_type_name(uint32_t(type));
    const std::vector<int32_t> ids = {15, 0, 7};
    Tensor id = cpu->alloc(GgmlType::kI32, 1, 3).value();
    cpu->write(id, ids.data());
    Tensor out = cpu->alloc(GgmlType::kF32, 3, k).value();
    cpu->get_rows(w, id, out);
    const std::vector<float> got = download(*cpu, out);
    std::vector<float> want(static_cast<size_t>(k), 0.0f);
    for (size_t i = 0; i < ids.size(); ++i) {
      dequantize_row(type, bytes.data() + ids[i] * rb, want.data(), k);
      EXPECT_EQ(std::vector<float>(got.begin() + i * k, got.begin() + (i + 1) * k), want);
    }
  }
}

// A row's outputs carry the same bits alone (decode's matrix-vector kernels) as inside a product
// of several rows (the tiles: on AVX-512 VNNI pairs of panels in 512-bit registers, with one odd
// panel left for the 256-bit kernel; AMX tiles from 16 rows where the CPU has them), with the
// paired kernels on or off (ONEBIT_CPU_DUAL_PANELS):
// what lets a verification step or a batch of streams reproduce single-stream greedy output.
TEST_P(CpuMatmulTest, RowsAloneEqualRowsInProductsOfSeveralRows) {
  const int64_t m = 40, k = 512;  // 5 panels: two pairs and one left over
  for (const TypeCase& tc : kTypes) {
    if (!cpu::has_panels(tc.type)) continue;
    const size_t rb = row_size(tc.type, k).value();
    const std::vector<float> wf = random_floats(size_t(m * k), 21);
    std::vector<uint8_t> bytes(rb * m);
    for (int64_t r = 0; r < m; ++r) quantize_row_reference(tc.type, wf.data() + r * k, bytes.data() + r * rb, k);
    for (const char* dual : {"1", "0"}) {
      setenv("ONEBIT_CPU_DUAL_PANELS", dual, 1);
      auto cpu = make_cpu_backend(2, GetParam(), /*panels=*/true);
      unsetenv("ONEBIT_CPU_DUAL_PANELS");
      Tensor w = cpu->weight_from_host(tc.type, m, k, bytes).value();
      for (int64_t n : {2, 3, 4, 5, 8, 9, 16, 17, 70}) {
        const std::vector<float> xf = random_floats(size_t(n * k), uint32_t(n));
        Tensor x = upload(*cpu, n, k, xf);
        Tensor out = cpu->alloc(GgmlType::kF32, n, m).value();
        cpu->matmul(w, x, out);
        const std::vector<float> all = download(*cpu, out);
        for (int64_t r : {int64_t(0), n / 2, n - 1}) {
          Tensor one = cpu->alloc(GgmlType::kF32, 1, m).value();
          cpu->matmul(w, x.rows(r, 1), one);
          const std::vector<float> alone = download(*cpu, one);
          EXPECT_EQ(0, std::memcmp(alone.data(), all.data() + r * m, size_t(m) * sizeof(float)))
              << ggml_type_name(uint32_t(tc.type)) << " n=" << n << " row " << r << " dual " << dual;
        }
      }
    }
  }
}

TEST_P(CpuMatmulTest, EmptyShapesDoNothing) {
  auto cpu = make_cpu_backend(2, GetParam());
  std::vector<uint8_t> bytes(row_size(GgmlType::kQ4_0, 64).value() * 4);
  Tensor w = cpu->weight_from_host(GgmlType::kQ4_0, 4, 64, bytes).value();
  Tensor x = cpu->alloc(GgmlType::kF32, 0, 64).value();
  Tensor out = cpu->alloc(GgmlType::kF32, 0, 4).value();
  cpu->matmul(w, x, out);  // n == 0
  Tensor w0 = cpu->weight_from_host(GgmlType::kQ4_0, 0, 64, {}).value();
  Tensor x1 = guarded(*cpu, 1, 64);
  Tensor out0 = guarded(*cpu, 1, 0);
  cpu->matmul(w0, x1, out0);  // m == 0
  EXPECT_TRUE(guard_intact(*cpu, out0));
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuMatmulTest, ::testing::ValuesIn(supported_isas()), isa_param_name);

// AMX tiles (prompt products of the 32-element panel types, 16 rows or more) against the
// reference, and against the panel kernels on the same activation codes, whose outputs (so whose
// error) they must equal bit for bit. Weight tiles of one panel (m = 8, 24), activation row counts
// that are not a multiple of 16, misaligned activation rows, several threads.
TEST(CpuAmx, PromptTilesMatchReferenceAndPanelKernels) {
  if (!cpu::amx_ready()) {
    GTEST_SKIP() << "no AMX-INT8 here (or Linux refused this process the tile state): the AMX path "
                    "runs on Sapphire Rapids and later Xeons";
  }
  for (const TypeCase& tc : kTypes) {
    if (!cpu::amx_supports(tc.type)) continue;
    for (int64_t m : {8, 24, 304}) {
      for (int64_t n : {16, 17, 100}) {
        for (int64_t k : {32, 2048}) {
          const uint32_t seed = uint32_t(m * 7 + n * 13 + k);
          const double amx = run_case(CpuIsa::kAvx512Vnni, 3, tc, m, n, k, 1, seed, true, true);
          const double panels = run_case(CpuIsa::kAvx512Vnni, 3, tc, m, n, k, 1, seed, true, false);
          EXPECT_LE(amx, tc.max_nmse) << ggml_type_name(uint32_t(tc.type)) << " m=" << m << " n=" << n << " k=" << k;
          EXPECT_EQ(amx, panels)
              << ggml_type_name(uint32_t(tc.type)) << " m=" << m << " n=" << n << " k=" << k;
        }
      }
    }
  }
}

// W4A4 (ONEBIT_W4A4=1): a Hadamard-rotated Q4_0 product of 16 or more rows takes its activations
// rotated and rounded to the 4-bit grid (per 32: q = round(x * 7 / max|x|) in -7..7), so it must
// equal the reference product of the Q4_0 weight and x rotated and rounded that way (float
// rounding only), on every ISA and with AMX where present; 15 rows keep the Q8 activations, far
// from that grid.
TEST(CpuW4A4, RotatedQ4_0PromptsUseTheFourBitGrid) {
  const int64_t m = 40, k = 256;
  const auto wf = random_floats(size_t(m * k), 61);
  std::vector<uint8_t> wq(size_t(row_size(GgmlType::kQ4_0, k).value() * m));
  for (int64_t r = 0; r < m; ++r)
    quantize_row_reference(GgmlType::kQ4_0, wf.data() + r * k, wq.data() + r * row_size(GgmlType::kQ4_0, k).value(), k);
  std::vector<float> wd(size_t(m * k));  // the weight as its Q4_0 values
  for (int64_t r = 0; r < m; ++r)
    dequantize_row(GgmlType::kQ4_0, wq.data() + r * row_size(GgmlType::kQ4_0, k).value(), wd.data() + r * k, k);
  setenv("ONEBIT_W4A4", "1", 1);
  for (int64_t n : {15, 16, 40}) {
    const auto x = random_floats(size_t(n * k), 62);
    std::vector<float> xg(x);  // rotated, then on the 4-bit grid
    for (int64_t r = 0; r < n; ++r) {
      float* row = xg.data() + r * k;
      hadamard_rotate(row, k, 32);
      for (int64_t b = 0; b < k; b += 32) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(row[b + i]));
        const float inv = amax != 0 ? 7.0f / amax : 0.0f, d = amax / 7.0f;
        for (int i = 0; i < 32; ++i) row[b + i] = std::nearbyint(row[b + i] * inv) * d;
      }
    }
    std::vector<float> want(size_t(n * m));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < m; ++j) {
        double acc = 0;
        for (int64_t i = 0; i < k; ++i) acc += double(xg[r * k + i]) * wd[j * k + i];
        want[r * m + j] = float(acc);
      }
    for (CpuIsa isa : supported_isas()) {
      for (bool amx : {false, true}) {
        if (amx && !(isa == CpuIsa::kAvx512Vnni && cpu::amx_ready())) continue;
        auto cpu = make_cpu_backend(2, isa, true, amx);
        Tensor w = cpu->weight_from_host(GgmlType::kQ4_0, m, k, wq).value();
        w.in_rotation = 32;
        Tensor out = cpu->alloc(GgmlType::kF32, n, m).value();
        cpu->matmul(w, upload(*cpu, n, k, x), out);
        const double e = nmse(download(*cpu, out), want);
        const std::string what = std::string(cpu_isa_name(isa)) + (amx ? "+amx" : "") + " n=" + std::to_string(n);
        if (n >= 16) {
          EXPECT_LE(e, 1e-10) << what;
        } else {
          EXPECT_GE(e, 1e-4) << what << ": 15 rows must keep Q8 activations";
        }
      }
    }
  }
  unsetenv("ONEBIT_W4A4");
}

}  // namespace
}  // namespace onebit
