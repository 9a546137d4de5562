// What one read-only kernel reaches on this GPU (not a test): GB/s of a kernel that reads a buffer
// of 16 MiB, 64 MiB or 1 GiB once, cold (L2 emptied of it by reading another 256 MiB first), best
// of 6 after a warm-up, timed with events (so launch, ramp and drain count, as they do for a
// decode product). Patterns: each warp one contiguous region with 8 or 16 16-byte loads in flight
// a lane; all warps sweeping 2,304-byte chunks together; and the first again after a flush by
// writing (dirty lines to write back first). 16, 32 and 64 warps an SM; cudaMemcpy D2D beside.
// docs/cuda.md, "What a product's kernel can reach". Built outside CMake, on the GPU machine:
//   nvcc -O3 -arch=sm_90 -std=c++17 bench/cuda_read_bench.cu -o /tmp/cuda_read_bench && /tmp/cuda_read_bench
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

__device__ unsigned g_sink;  // keeps the loads (never written in practice)

// This lane's share of the len uint4s at b (lane l: l, l + 32, ...), U loads in flight, folded
// into a value the caller keeps.
template <int U>
__device__ unsigned read_span(const uint4* __restrict__ b, size_t len) {
  unsigned acc = 0;
  for (size_t i = threadIdx.x % 32; i < len; i += 32 * U) {
    uint4 v[U];
#pragma unroll
    for (int j = 0; j < U; ++j) v[j] = i + 32 * j < len ? __ldg(b + i + 32 * j) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < U; ++j) acc ^= v[j].x ^ v[j].w;
  }
  return acc;
}

// Warp w reads uint4s [w * per, (w + 1) * per) of p (those below n).
template <int U>
__global__ void read_regions(const uint4* __restrict__ p, size_t per, size_t n) {
  const size_t w = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32, first = w * per;
  const unsigned acc = first < n ? read_span<U>(p + first, first + per <= n ? per : n - first) : 0;
  if (acc == 0x9e3779b9u) g_sink = acc;
}

// Chunks of `chunk` uint4s: warp w reads chunks w, w + W, ... (all warps sweep the buffer together).
__global__ void read_sweep(const uint4* __restrict__ p, size_t n, size_t chunk) {
  const size_t W = size_t(gridDim.x) * blockDim.x / 32;
  unsigned acc = 0;
  for (size_t c = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; c * chunk < n; c += W) {
    acc ^= read_span<8>(p + c * chunk, c * chunk + chunk <= n ? chunk : n - c * chunk);
  }
  if (acc == 0x9e3779b9u) g_sink = acc;
}

bool ok(cudaError_t e) {
  if (e != cudaSuccess) std::fprintf(stderr, "cuda_read_bench: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess;
}

}  // namespace

int main() {
  int sms = 0;
  if (!ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0))) return 1;
  const size_t flush_bytes = size_t(256) << 20;
  uint4* flush = nullptr;
  if (!ok(cudaMalloc(&flush, flush_bytes)) || !ok(cudaMemset(flush, 3, flush_bytes))) return 1;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (size_t mib : {size_t(16), size_t(64), size_t(1024)}) {
    const size_t bytes = mib << 20, n = bytes / 16;
    uint4 *p = nullptr, *q = nullptr;
    if (!ok(cudaMalloc(&p, bytes)) || !ok(cudaMalloc(&q, bytes)) || !ok(cudaMemset(p, 1, bytes))) return 1;
    // GB/s of launch() over `bytes`, best of 6 after a warm-up; L2 emptied by a read (clean) or a
    // memset (dirty) of the other buffer before each.
    auto time = [&](auto launch, bool clean) {
      float best = 1e30f;
      for (int r = 0; r < 7; ++r) {
        if (clean) {
          read_regions<8><<<sms * 4, 256>>>(flush, flush_bytes / 16 / (size_t(sms) * 32), flush_bytes / 16);
        } else {
          cudaMemsetAsync(flush, r, flush_bytes);
        }
        cudaDeviceSynchronize();
        cudaEventRecord(e0);
        launch();
        cudaEventRecord(e1);
        float ms = 0;
        if (!ok(cudaEventSynchronize(e1)) || !ok(cudaEventElapsedTime(&ms, e0, e1))) return 0.0;
        if (r > 0 && ms < best) best = ms;
      }
      return double(bytes) / (double(best) * 1e-3) / 1e9;
    };
    for (int per_sm : {16, 32, 64}) {
      const int blocks = sms * per_sm / 8;
      const size_t warps = size_t(blocks) * 8, per = (n + warps - 1) / warps;
      const double a = time([&] { read_regions<8><<<blocks, 256>>>(p, per, n); }, true);
      const double b = time([&] { read_regions<16><<<blocks, 256>>>(p, per, n); }, true);
      const double c = time([&] { read_sweep<<<blocks, 256>>>(p, n, 144); }, true);
      const double d = time([&] { read_regions<8><<<blocks, 256>>>(p, per, n); }, false);
      std::printf("%zu MiB, %d warps an SM: regions, 8 loads %.0f GB/s, 16 loads %.0f; sweep of 2304-byte chunks %.0f;"
                  " regions after a flush by writing %.0f\n", mib, per_sm, a, b, c, d);
    }
    const double cp = 2 * time([&] { cudaMemcpyAsync(q, p, bytes, cudaMemcpyDeviceToDevice); }, true);
    std::printf("%zu MiB cudaMemcpy D2D: %.0f GB/s (read + write)\n", mib, cp);
    cudaFree(p);
    cudaFree(q);
  }
  return 0;
}
