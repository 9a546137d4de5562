// Decode matrix-vector on the CUDA backend (not a test): time per product and weight bytes per
// second for the 8B shape's matrices, on the panel kernels (the default), the panels' integer
// path for Q4_0 / Q8_0 / Q4_K (ONEBIT_CUDA_DP4A=1; other types: the same kernel as the default)
// and the row kernels (ONEBIT_CUDA_PANELS=0), against the device copy bandwidth of the same run.
// Weights are random bytes (timing only: the values do not change the work). Each timed step is
// N products then synchronize(), repeated, so after the first two steps it runs from a CUDA graph.
// Usage: cuda_matvec_bench [--device N] [--reps 20] [--n 20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "gguf/ggml_type.h"

namespace onebit {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Shape {
  const char* name;
  int64_t m, k;
};

int run(int argc, char** argv) {
  int device = 0, reps = 20, n_per_step = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--device") device = std::atoi(argv[i + 1]);
    else if (k == "--reps") reps = std::atoi(argv[i + 1]);
    else if (k == "--n") n_per_step = std::atoi(argv[i + 1]);
  }
  std::string why;
  const double copy_gbs = cuda_copy_bandwidth_gbs(device, size_t(1) << 30, 5, &why);
  if (copy_gbs <= 0) return std::fprintf(stderr, "%s\n", why.c_str()), 1;
  const Shape shapes[] = {{"ffn_up 14336x4096", 14336, 4096},
                          {"ffn_down 4096x14336", 4096, 14336},
                          {"attn_q 4096x4096", 4096, 4096},
                          {"attn_k 1024x4096", 1024, 4096},
                          {"output 128256x4096", 128256, 4096}};
  const GgmlType types[] = {GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K};
  std::printf("copy bandwidth %.1f GB/s (read + write)\n", copy_gbs);
  std::printf("| type | matrix | MB | panels us | panels GB/s | of copy | dp4a panels us | dp4a GB/s | rows us | rows GB/s | panels / rows |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (GgmlType type : types) {
    for (const Shape& sh : shapes) {
      const auto tr = ggml_type_traits(uint32_t(type));
      const size_t bytes = size_t(sh.m) * size_t(sh.k / tr->block_elems) * tr->block_bytes;
      std::vector<uint8_t> w(bytes);
      uint64_t st = 0x9E3779B97F4A7C15ull ^ uint64_t(sh.m * 31 + sh.k);
      for (size_t i = 0; i < bytes; i += 8) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        for (size_t j = 0; j < 8 && i + j < bytes; ++j) w[i + j] = uint8_t(st >> (8 * j));
      }
      // Half scales of random bits may be NaN or huge: fine for timing, the work is the same.
      // variant 0: panels (default, float path), 1: panels, integer (dp4a) path, 2: row kernels
      double us[3] = {0, 0, 0};
      for (int v = 0; v < 3; ++v) {
        setenv("ONEBIT_CUDA_PANELS", v == 2 ? "0" : "1", 1);
        setenv("ONEBIT_CUDA_DP4A", v == 1 ? "1" : "0", 1);
        auto be = make_cuda_backend(device, &why);
        if (be == nullptr) return std::fprintf(stderr, "%s\n", why.c_str()), 1;
        Tensor wt = be->weight_from_host(type, sh.m, sh.k, w).value();
        Tensor x = be->alloc(GgmlType::kF32, 1, sh.k).value();
        Tensor out = be->alloc(GgmlType::kF32, 1, sh.m).value();
        std::vector<float> xv(size_t(sh.k));
        for (size_t i = 0; i < xv.size(); ++i) xv[i] = float(int(i % 17) - 8) * 0.125f;
        be->write(x, xv.data());
        be->synchronize();
        double best = 1e30;
        for (int r = 0; r < reps + 2; ++r) {
          const double t0 = now_s();
          for (int i = 0; i < n_per_step; ++i) be->matmul(wt, x, out);
          be->synchronize();
          if (r >= 2) best = std::min(best, (now_s() - t0) / n_per_step);
        }
        us[v] = best * 1e6;
      }
      unsetenv("ONEBIT_CUDA_PANELS");
      unsetenv("ONEBIT_CUDA_DP4A");
      const double mb = bytes / 1e6;
      auto gbs = [&](double t) { return mb / t * 1e3; };
      std::printf("| %s | %s | %.1f | %.2f | %.0f | %.0f%% | %.2f | %.0f | %.2f | %.0f | %.2fx |\n",
                  ggml_type_name(uint32_t(type)).c_str(), sh.name, mb, us[0], gbs(us[0]), 100 * gbs(us[0]) / copy_gbs,
                  us[1], gbs(us[1]), us[2], gbs(us[2]), us[2] / us[0]);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace onebit

int main(int argc, char** argv) { return onebit::run(argc, argv); }
