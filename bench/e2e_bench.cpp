// End-to-end benchmark (not a test): prompt processing (pp) and decode (tg) tokens/s of a GGUF
// model on the CPU backend (--device cpu, the default) or a CUDA GPU (--device cuda / cuda:N), next
// to the memory bandwidth measured right before each decode run, with decode as a fraction of the
// bandwidth roofline (bandwidth / weight bytes read per token), per repetition, then best and
// median. The bandwidth is a streaming read on the CPU's threads, or on a GPU the device-to-device
// copy bandwidth (bytes read + written, cudaMemcpy of 1 GiB, best of 5). As llama-bench:
// pp = one batch of N prompt tokens into an empty cache (--pp 0 skips it), tg = N single-token
// steps from empty, the tokens fixed (not sampled: no argmax over the logits is timed; the
// logits still come back to the host every step, as Model::forward gives them).
// Usage: e2e_bench MODEL.gguf [--device cpu|cuda|cuda:N] [--threads N] [--pp 512] [--tg 128]
//                  [--reps 3] [--bw-mib 2048]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "base/cpu_features.h"
#include "read_bandwidth.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"

namespace onebit {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Bytes of weights one decode token reads: every tensor but the token embedding (one row of it)
// and, in a mixture of experts, of each stacked *_exps tensor the expert_used_count of its
// expert_count experts (the active experts' bytes).
uint64_t weight_bytes_per_token(const GgufFile& f) {
  uint64_t sum = 0;
  const bool tied = f.find_tensor("output.weight") == nullptr;
  const auto arch = f.get_string("general.architecture");
  const auto key = [&](const char* k) -> uint64_t {
    if (!arch.ok() || !f.find(*arch + k)) return 0;
    const auto v = f.get_uint(*arch + k);
    return v.ok() ? *v : 0;
  };
  const uint64_t n_exp = key(".expert_count"), n_used = key(".expert_used_count");
  for (const GgufTensorInfo& t : f.tensors()) {
    if (n_exp > 0 && t.n_dims == 3 && t.name.find("_exps.") != std::string::npos) {
      sum += t.n_bytes / n_exp * n_used;
    } else if (t.name == "token_embd.weight" && !tied) {
      sum += t.n_bytes / t.ne[1];
    } else {
      sum += t.n_bytes;
    }
  }
  return sum;
}

struct Stats {
  double best = 0, median = 0;
};
Stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.back(), v[(v.size() - 1) / 2]};  // the lower median for an even count
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: e2e_bench MODEL.gguf [--device cpu|cuda|cuda:N] [--threads N] [--pp 512] [--tg 128] "
                         "[--reps 3] [--bw-mib 2048]\n");
    return 2;
  }
  int threads = 1, pp = 512, tg = 128, reps = 3, bw_mib = 2048;
  std::string device = "cpu";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--device") device = argv[i + 1];
    else if (k == "--threads") threads = v;
    else if (k == "--pp") pp = v;
    else if (k == "--tg") tg = v;
    else if (k == "--reps") reps = v;
    else if (k == "--bw-mib") bw_mib = v;
  }
  auto file = GgufFile::open(argv[1]);
  if (!file.ok()) return std::fprintf(stderr, "%s\n", file.message().c_str()), 1;
  auto made = make_backend(device, threads);
  if (!made.ok()) return std::fprintf(stderr, "%s\n", made.message().c_str()), 1;
  std::unique_ptr<Backend> backend = std::move(*made);
  const bool gpu = device.rfind("cuda", 0) == 0;
  const int gpu_index = device.size() > 5 ? std::atoi(device.c_str() + 5) : 0;
  auto model = Model::load(*file, *backend);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.message().c_str()), 1;
  auto kv = (*model)->new_kv_cache(std::max({pp, tg, 1}) + 1);
  if (!kv.ok()) return std::fprintf(stderr, "%s\n", kv.message().c_str()), 1;
  const int32_t vocab = (*model)->config().vocab_size;
  std::vector<float> logits;
  auto token_at = [&](int i) { return TokenId((int64_t(i) * 7919 + 13) % vocab); };
  std::vector<TokenId> prompt(static_cast<size_t>(pp));
  for (int i = 0; i < pp; ++i) prompt[size_t(i)] = token_at(i);

  // Warm-up: a few short passes map the weights in and load the kernels (not what we measure).
  for (int i = 0; i < 3; ++i) {
    const TokenId t = token_at(i);
    if (!(*model)->forward(*kv, std::span<const TokenId>(&t, 1), false, logits).ok()) return 1;
  }

  // Each repetition measures the bandwidth right before its decode run and divides by it, so a
  // busy minute on the shared machine lowers both (the fraction is per repetition).
  std::unique_ptr<ReadBandwidth> cpu_bw;
  if (!gpu) cpu_bw = std::make_unique<ReadBandwidth>(size_t(bw_mib) << 20);
  auto measure_bw = [&]() -> double {
    if (!gpu) return cpu_bw->measure(threads, 2);
    std::string why;
    const double gbs = cuda_copy_bandwidth_gbs(gpu_index, size_t(1) << 30, 5, &why);
    if (gbs <= 0) std::fprintf(stderr, "copy bandwidth: %s\n", why.c_str());
    return gbs;
  };
  const double gb_per_token = weight_bytes_per_token(*file) / 1e9;
  std::vector<double> pp_rates, tg_rates, bw_rates, fractions;
  for (int r = 0; r < reps; ++r) {
    if (pp > 0) {
      kv->n_past = 0;
      const double t0 = now_s();
      if (!(*model)->forward(*kv, prompt, false, logits).ok()) return 1;
      pp_rates.push_back(pp / (now_s() - t0));
    } else {
      pp_rates.push_back(0);
    }

    kv->n_past = 0;
    bw_rates.push_back(measure_bw());
    const double t1 = now_s();
    for (int i = 0; i < tg; ++i) {
      const TokenId tok = token_at(1000 + i);
      if (!(*model)->forward(*kv, std::span<const TokenId>(&tok, 1), false, logits).ok()) return 1;
    }
    tg_rates.push_back(tg / (now_s() - t1));
    fractions.push_back(tg_rates.back() * gb_per_token / bw_rates.back());
  }
  const Stats p = summarize(pp_rates), d = summarize(tg_rates), bw = summarize(bw_rates);
  const Stats f = summarize(fractions);
  const std::string threads_col = gpu ? "-" : std::to_string(threads);
  std::printf("| %s | %s | %s | %.1f / %.1f | %.2f / %.2f | %.3f | %.1f / %.1f | %.2f | %.0f%% / %.0f%% |\n",
              argv[1], std::string(backend->name()).c_str(), threads_col.c_str(), p.best, p.median, d.best, d.median,
              gb_per_token, bw.best, bw.median, bw.median / gb_per_token, 100 * f.best, 100 * f.median);
  return 0;
}

}  // namespace
}  // namespace onebit

int main(int argc, char** argv) { return onebit::run(argc, argv); }
