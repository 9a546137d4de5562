// Shared helpers of the CPU backend tests: random data, tensors on a backend, the normalized MSE
// of ggml's test-backend-ops, and the ISA targets this machine can run.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/cpu_features.h"

namespace onebit::cpu_test {

// Every target this CPU supports (so each dispatch target is tested where it can run).
inline std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvxVnni, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni}) {
    if (cpu_isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// sum((a - b)^2) / sum(b^2), as ggml's test-backend-ops nmse (b the reference).
inline double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return ref == 0 ? err : err / ref;
}

inline Tensor upload(Backend& be, int64_t rows, int64_t cols, const std::vector<float>& values) {
  Tensor t = be.alloc(GgmlType::kF32, rows, cols).value();
  be.write(t, values.data());
  return t;
}

inline Tensor upload_i32(Backend& be, const std::vector<int32_t>& values) {
  const auto n = static_cast<int64_t>(values.size());
  Tensor t = be.alloc(GgmlType::kI32, 1, n).value();
  be.write(t, values.data());
  return t;
}

inline std::vector<float> download(Backend& be, const Tensor& t) {
  std::vector<float> out(size_t(t.n_rows * t.n_cols));
  be.read(t, out.data());
  be.synchronize();
  return out;
}

// An F32 tensor [rows, cols] whose rows are kGuard floats wider than needed, the slack filled with
// a sentinel: guard_intact() then tells whether an op wrote outside the view.
inline constexpr int64_t kGuard = 5;
inline constexpr float kSentinel = -12345.5f;

inline Tensor guarded(Backend& be, int64_t rows, int64_t cols) {
  Tensor big = be.alloc(GgmlType::kF32, rows + 2, cols + kGuard).value();
  std::vector<float> fill(size_t((rows + 2) * (cols + kGuard)), kSentinel);
  be.write(big, fill.data());
  Tensor t = big.rows(1, rows);
  t.n_cols = cols;  // same row stride: the last kGuard floats of each row are guards
  return t;
}

inline bool guard_intact(Backend& be, const Tensor& t) {
  Tensor big = t;
  big.offset_bytes -= t.row_stride_bytes;
  big.n_rows += 2;
  big.n_cols = int64_t(t.row_stride_bytes / sizeof(float));
  std::vector<float> all(size_t(big.n_rows * big.n_cols));
  be.read(big, all.data());
  be.synchronize();
  for (int64_t r = 0; r < big.n_rows; ++r) {
    for (int64_t c = 0; c < big.n_cols; ++c) {
      const bool inside = r >= 1 && r <= t.n_rows && c < t.n_cols;
      if (!inside && all[size_t(r * big.n_cols + c)] != kSentinel) return false;
    }
  }
  return true;
}

inline std::string isa_param_name(const ::testing::TestParamInfo<CpuIsa>& info) {
  return std::string(cpu_isa_name(info.param));
}

}  // namespace onebit::cpu_test
