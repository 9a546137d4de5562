// Decode matrix-vector on the CUDA backend (not a test): time per product and weight bytes per
// second for the 8B shape's matrices, on the panel kernels and on the row kernels
// (ONEBIT_CUDA_PANELS=0), against the device copy bandwidth measured in the same run.
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
  std::printf("| type | matrix | MB | panels us | panels GB/s | of copy | rows us | rows GB/s | panels / rows |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
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
      double us[2] = {0, 0};
      for (int panels = 1; panels >= 0; --panels) {
        setenv("ONEBIT_CUDA_PANELS", panels ? "1" : "0", 1);
        auto be = make_cuda_backend(device, &why);
        if (be == nullptr) return std::fprintf(stderr, "%s\n", why.c_str()), 1;
        Tensor wt = be->weight_from_host(type, sh.m, sh.k, w).value();
        Tensor x = be->alloc(GgmlType::kF32, 1, sh.k).value();
        Tensor out = be->alloc(GgmlType::kF32, 1, sh.m).value();
        std::vector<float> xv(size_t(sh.k), 0.5f);
        be->write(x, xv.data());
        be->synchronize();
        double best = 1e30;
        for (int r = 0; r < reps + 2; ++r) {
          const double t0 = now_s();
          for (int i = 0; i < n_per_step; ++i) be->matmul(wt, x, out);
          be->synchronize();
          if (r >= 2) best = std::min(best, (now_s() - t0) / n_per_step);
        }
        us[panels] = best * 1e6;
      }
      unsetenv("ONEBIT_CUDA_PANELS");
      const double mb = bytes / 1e6, gbs_panels = mb / us[1] * 1e3, gbs_rows = mb / us[0] * 1e3;
      std::printf("| %s | %s | %.1f | %.2f | %.0f | %.0f%% | %.2f | %.0f | %.2fx |\n",
                  ggml_type_name(uint32_t(type)).c_str(), sh.name, mb, us[1], gbs_panels, 100 * gbs_panels / copy_gbs,
                  us[0], gbs_rows, us[0] / us[1]);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace onebit

int main(int argc, char** argv) { return onebit::run(argc, argv); }
