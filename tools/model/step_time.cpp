// Step time of Model::forward against the tokens of the step: one sequence at position 200 (or POS), n
// tokens (all with logits), best of 30, for n = 1 .. 64. Shows how far a verification step of
// n tokens costs more than a single-token step on a backend (docs/bench.md, speculative decoding).
// Not part of the CMake build; after building the libraries (e.g. bench/gpu.sh's build-gpu):
//   g++ -O2 -std=c++20 -Isrc -IBUILD/src -IBUILD tools/model/step_time.cpp -o step_time \
//     BUILD/libonebit_model.a BUILD/libonebit_backend.a BUILD/libonebit_gguf.a BUILD/libonebit_base.a \
//     -lpthread [-L/usr/local/cuda/lib64 -lcudart]
//   ./step_time models/onebit-20m-q8_0.gguf cuda|cpu [threads] [N,N,..] [reps] [POS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"

using namespace onebit;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: step_time MODEL.gguf DEVICE [THREADS]\n");
    return 2;
  }
  auto f = GgufFile::open(argv[1]);
  if (!f.ok()) return std::fprintf(stderr, "%s\n", f.message().c_str()), 1;
  auto be = make_backend(argv[2], argc > 3 ? std::atoi(argv[3]) : 2);
  if (!be.ok()) return std::fprintf(stderr, "%s\n", be.message().c_str()), 1;
  auto m = Model::load(*f, **be);
  if (!m.ok()) return std::fprintf(stderr, "%s\n", m.message().c_str()), 1;
  Model& model = **m;
  const int pos = argc > 6 ? std::atoi(argv[6]) : 200;
  auto kv = model.new_kv_cache(pos + 128);
  std::vector<float> logits;
  const std::vector<TokenId> prompt(size_t(pos), 100);
  if (!model.forward(*kv, prompt, false, logits).ok()) return 1;
  std::vector<int> ns = {1, 2, 3, 4, 6, 8, 12, 16, 32, 64};
  if (argc > 4) {
    ns.clear();
    std::stringstream list(argv[4]);
    for (std::string item; std::getline(list, item, ',');) ns.push_back(std::atoi(item.c_str()));
  }
  const int reps = argc > 5 ? std::atoi(argv[5]) : 30;
  for (int n : ns) {
    double best = 1e9;
    for (int rep = 0; rep < reps; ++rep) {
      kv->n_past = pos;
      const std::vector<TokenId> t(size_t(n), 200);
      const auto t0 = std::chrono::steady_clock::now();
      if (!model.forward(*kv, t, true, logits).ok()) return 1;
      best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%s n=%2d  %.3f ms  %.3f ms/token\n", argv[2], n, best, best / n);
  }
}
