// The CUDA backend: device buffers, one non-blocking stream, and our own kernels for every op.
// Weights stay in their GGUF block layout on the device and are dequantized on the fly
// (dequant.cuh: deq<T>(row, e) as gguf/quants.cpp decodes it, bit for bit).
// Matrix-vector (n == 1): on the weight's panel copy (F16 / Q4_0 / Q8_0 / Q4_K / Q6_K, made at
// upload; panel_matvec_kernel below), else 8 warps per block, each warp a weight row at a time
// (lane l takes element 32c + l of every 32-element chunk c), the activation row in shared
// memory. One-row Q4_0 / Q8_0 products multiply on integers (dp4a) against activations held to
// 15 bits per block of 32 (stage_panel_x15). Ops are recorded and run at synchronize(), a
// repeated step from a CUDA graph (the backend's "deferred steps" section). 2 <= n <= 4 (decode
// batches, speculative verification; panel_rows_max_): the same, each weight element used for
// every activation row. More rows: tensor cores (mma_matmul.cuh: fp16 tiles, fp32 sums) for
// every weight type but F32 / BF16, which take 64 x 64 float tiles (32-wide k steps dequantized
// into shared memory, 4 x 4 outputs per thread).
// Attention: one block of 8 warps per (query row, head), each warp an online softmax over every
// 8th key, merged at the end. RoPE angles in double in the kernel, as RopeAngles computes them.
// Mixture of experts: the router a warp per token (float softmax, top-k by repeated argmax);
// moe_matmul reads the expert ids on the device (no host sync: it stays inside a step's graph):
// few pairs (decode) a matvec per routed pair, more pairs grouped by expert in the kernel (a block
// per row chunk and expert collects its pairs from the ids), each on the stack's panel copy when
// the expert's rows are whole 32-row panel groups, else on the rows (row dequant: much slower).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <unordered_map>
#include <numbers>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/flash_attn.cuh"
#include "backend/cuda/gemm_f16.cuh"
#include "backend/cuda/gemm_wgmma.cuh"
#include "backend/cuda/gemm_wgmma_ws.cuh"
#include "backend/cuda/kernel_args.cuh"
#include "backend/cuda/mma_matmul.cuh"
#include "base/check.h"

namespace onebit {
namespace {

using namespace cuda_detail;

#define CUDA_OK(expr)                                                                          \
  do {                                                                                         \
    const cudaError_t cuda_err_ = (expr);                                                           \
    if (cuda_err_ != cudaSuccess) {                                                            \
      std::string m_ = std::string(#expr) + ": " + cudaGetErrorString(cuda_err_);              \
      ONEBIT_CHECK_MSG(cuda_err_ == cudaSuccess, m_.c_str());                                  \
    }                                                                                          \
  } while (0)
// After a kernel launch, in the backend's members: errors checked, and the stream's last op is a
// kernel (launch_panel may then overlap the next panel product with it).
#define CUDA_LAUNCHED()          \
  do {                           \
    CUDA_OK(cudaGetLastError()); \
    kernel_tail_ = true;         \
  } while (0)
// A copy or memset on the stream, in the backend's members: the stream's last op is no kernel.
#define CUDA_COPY(expr)   \
  do {                    \
    CUDA_OK(expr);        \
    kernel_tail_ = false; \
  } while (0)

// A comparison switch of the backend (docs/cuda.md): on unless the variable is set to "0".
bool env_on(const char* name) {
  const char* e = std::getenv(name);
  return e == nullptr || std::string(e) != "0";
}

bool cuda_supports(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1: case GgmlType::kQ8_0:
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

// Runs BODY with a constexpr int T naming the weight type.
#define ONEBIT_CUDA_TYPE_CASE(ty, ...) \
  case ty: {                           \
    constexpr int T = ty;              \
    __VA_ARGS__;                       \
  } break;
#define ONEBIT_CUDA_TYPE_SWITCH(type, ...)                                          \
  switch (int(type)) {                                                              \
    ONEBIT_CUDA_TYPE_CASE(kF32, __VA_ARGS__)                                        \
    ONEBIT_CUDA_TYPE_CASE(kF16, __VA_ARGS__)                                        \
    ONEBIT_CUDA_TYPE_CASE(kBF16, __VA_ARGS__)                                       \
    ONEBIT_CUDA_TYPE_CASE(kQ4_0, __VA_ARGS__)                                       \
    ONEBIT_CUDA_TYPE_CASE(kQ4_1, __VA_ARGS__)                                       \
    ONEBIT_CUDA_TYPE_CASE(kQ5_0, __VA_ARGS__)                                       \
    ONEBIT_CUDA_TYPE_CASE(kQ5_1, __VA_ARGS__)                                       \
    ONEBIT_CUDA_TYPE_CASE(kQ8_0, __VA_ARGS__)                                       \
    ONEBIT_CUDA_TYPE_CASE(kQ4_K, __VA_ARGS__)                                       \
    ONEBIT_CUDA_TYPE_CASE(kQ5_K, __VA_ARGS__)                                       \
    ONEBIT_CUDA_TYPE_CASE(kQ6_K, __VA_ARGS__)                                       \
    default:                                                                        \
      ONEBIT_CHECK_MSG(false, "cuda backend: weight type not supported");           \
  }

// ---- kernels ----

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Programmatic dependent launch (sm_90): every step kernel lets the next kernel in the stream
// start at once (pdl_trigger, first thing), and may be launched with the attribute that allows it
// to start before the kernel before it ends (CudaBackend::launch_overlapping: by default the panel
// products only); so before it reads or writes anything that earlier kernels touch, it waits for
// them (pdl_wait: every earlier kernel done and its writes visible). pdl_start is both, for
// kernels with nothing to do before; the panel products issue their first weight loads (constant
// during a step) in between. No-ops without the launch attribute and on older GPUs.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_start() {
  pdl_trigger();
  pdl_wait();
}

template <int T>
__global__ void get_rows_kernel(const uint8_t* __restrict__ table, size_t t_stride, int64_t t_rows,
                                const int32_t* __restrict__ ids, float* out, size_t o_stride, int64_t n, int64_t d,
                                int* err) {
  pdl_start();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * d) return;
  const int64_t i = idx / d, c = idx % d;
  const int32_t id = ids[i];
  if (id < 0 || id >= t_rows) {
    if (c == 0) atomicOr(err, kErrIds);
    return;
  }
  out[i * o_stride + c] = deq<T>(table + size_t(id) * t_stride, c);
}

constexpr int kMatvecThreads = 256, kMatvecRowsPerBlock = 32;

// out[r] = sum_k w[r, k] x[k] for rows [r_begin, r_end) (at most kMatvecRowsPerBlock): warp w takes
// rows r_begin + w, r_begin + w + 8, ...; lane l elements 32c + l. x in shared or global memory.
template <int T>
__device__ __forceinline__ void matvec_rows(const uint8_t* __restrict__ w, size_t w_stride, const float* xv,
                                            float* __restrict__ out, int64_t r_begin, int64_t r_end, int64_t k) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n_chunks = (k + 31) / 32;
  for (int64_t r = r_begin + warp; r < r_end; r += kMatvecThreads / 32) {
    const uint8_t* wr = w + size_t(r) * w_stride;
    float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
    int64_t c = 0;
    if (k % 32 == 0) {
      for (; c + 4 <= n_chunks; c += 4) {
        const int64_t e = c * 32 + lane;
        const float w0 = deq<T>(wr, e), w1 = deq<T>(wr, e + 32), w2 = deq<T>(wr, e + 64), w3 = deq<T>(wr, e + 96);
        acc0 += w0 * xv[e];
        acc1 += w1 * xv[e + 32];
        acc2 += w2 * xv[e + 64];
        acc3 += w3 * xv[e + 96];
      }
    }
    for (; c < n_chunks; ++c) {
      const int64_t e = c * 32 + lane;
      if (e < k) acc0 += deq<T>(wr, e) * xv[e];
    }
    const float s = warp_sum((acc0 + acc1) + (acc2 + acc3));
    if (lane == 0) out[r] = s;
  }
}

// out[m] = sum_k w[m, k] x[k]. x is staged in shared memory when `smem` (k floats).
template <int T>
__global__ void __launch_bounds__(kMatvecThreads) matvec_kernel(const uint8_t* __restrict__ w, size_t w_stride,
                                                                const float* __restrict__ x, float* __restrict__ out,
                                                                int64_t m, int64_t k, bool smem) {
  pdl_start();
  extern __shared__ float xs[];
  const float* xv = x;
  if (smem) {
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) xs[i] = x[i];
    __syncthreads();
    xv = xs;
  }
  const int64_t row_end = min(m, int64_t(blockIdx.x + 1) * kMatvecRowsPerBlock);
  matvec_rows<T>(w, w_stride, xv, out, int64_t(blockIdx.x) * kMatvecRowsPerBlock, row_end, k);
}

constexpr int kMultiRows = 8;  // activation rows of one matvec_multi_kernel at most

// out[j, m] = sum_k w[m, k] x[j, k] for j < n <= kMultiRows (decode batches, speculative
// verification): each weight element is dequantized once and used for every activation row, so a
// step of a few tokens streams the weights once, as a single-token step does. x is staged in shared
// memory ([n, k] floats).
template <int T>
__global__ void __launch_bounds__(kMatvecThreads) matvec_multi_kernel(const uint8_t* __restrict__ w, size_t w_stride,
                                                                      const float* __restrict__ x, size_t x_stride,
                                                                      float* __restrict__ out, size_t o_stride,
                                                                      int64_t m, int n, int64_t k) {
  pdl_start();
  extern __shared__ float xs[];
  for (int j = 0; j < n; ++j)
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) xs[j * k + i] = x[size_t(j) * x_stride + i];
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row_end = min(m, int64_t(blockIdx.x + 1) * kMatvecRowsPerBlock);
  for (int64_t r = int64_t(blockIdx.x) * kMatvecRowsPerBlock + warp; r < row_end; r += kMatvecThreads / 32) {
    const uint8_t* wr = w + size_t(r) * w_stride;
    float acc[kMultiRows] = {};
    for (int64_t e = lane; e < k; e += 32) {
      const float wv = deq<T>(wr, e);
#pragma unroll
      for (int j = 0; j < kMultiRows; ++j)
        if (j < n) acc[j] += wv * xs[j * k + e];
    }
#pragma unroll
    for (int j = 0; j < kMultiRows; ++j) {
      if (j >= n) break;
      const float s = warp_sum(acc[j]);
      if (lane == 0) out[size_t(j) * o_stride + r] = s;
    }
  }
}

constexpr int kTileM = 64, kTileN = 64, kTileK = 32;

// out[n, m] = x[n, :] . w[m, :] for a 64 x 64 tile per block (256 threads, 4 x 4 outputs each).
template <int T>
__global__ void __launch_bounds__(256) matmul_tiled_kernel(const uint8_t* __restrict__ w, size_t w_stride,
                                                           const float* __restrict__ x, size_t x_stride,
                                                           float* __restrict__ out, size_t o_stride, int64_t m,
                                                           int64_t n, int64_t k) {
  pdl_start();
  __shared__ float ws[kTileK][kTileM + 1];
  __shared__ float xs[kTileK][kTileN + 1];
  const int tid = threadIdx.x, lane = tid % 32, wid = tid / 32;
  const int tx = tid % 16, ty = tid / 16;
  const int64_t m0 = int64_t(blockIdx.x) * kTileM, n0 = int64_t(blockIdx.y) * kTileN;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    const int64_t e = k0 + lane;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const int r = wid + 8 * s;
      ws[lane][r] = (m0 + r < m && e < k) ? deq<T>(w + size_t(m0 + r) * w_stride, e) : 0.f;
      xs[lane][r] = (n0 + r < n && e < k) ? x[size_t(n0 + r) * x_stride + e] : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = ws[kk][tx + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = xs[kk][ty + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t mm = m0 + tx + 16 * i, nn = n0 + ty + 16 * j;
      if (mm < m && nn < n) out[size_t(nn) * o_stride + mm] = acc[i][j];
    }
}

constexpr int kRowThreads = 256;

__device__ double block_sum_double(double v, double* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  double t = 0.0;
  for (int i = 0; i < int(blockDim.x / 32); ++i) t += sh[i];
  return t;
}

__device__ float block_max_float(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  float t = -INFINITY;
  for (int i = 0; i < int(blockDim.x / 32); ++i) t = fmaxf(t, sh[i]);
  return t;
}

__global__ void rms_norm_kernel(const float* x, size_t x_stride, const float* __restrict__ w, float eps, float* out,
                                size_t o_stride, int64_t d) {
  pdl_start();
  __shared__ double sh[32];
  const float* xr = x + size_t(blockIdx.x) * x_stride;
  float* o = out + size_t(blockIdx.x) * o_stride;
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) s += double(xr[c]) * xr[c];
  s = block_sum_double(s, sh);
  const double inv = 1.0 / sqrt(s / double(d) + double(eps));
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) o[c] = __fmul_rn(float(double(xr[c]) * inv), w[c]);
}

__global__ void softmax_kernel(const float* x, size_t x_stride, float* out, size_t o_stride, int64_t d) {
  pdl_start();
  __shared__ double sh[32];
  __shared__ float shf[32];
  const float* xr = x + size_t(blockIdx.x) * x_stride;
  float* o = out + size_t(blockIdx.x) * o_stride;
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) mx = fmaxf(mx, xr[c]);
  mx = block_max_float(mx, shf);
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) s += exp(double(xr[c]) - double(mx));
  s = block_sum_double(s, sh);
  __syncthreads();  // every read of x done before any write (out may alias x)
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) o[c] = float(exp(double(xr[c]) - double(mx)) / s);
}

__global__ void add_kernel(const float* a, size_t a_stride, const float* b, size_t b_stride, bool bcast, float* out,
                           size_t o_stride, int64_t n, int64_t d) {
  pdl_start();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * d) return;
  const int64_t r = idx / d, c = idx % d;
  out[r * o_stride + c] = a[r * a_stride + c] + b[(bcast ? 0 : r) * b_stride + c];
}

__global__ void swiglu_kernel(const float* g, size_t g_stride, const float* u, size_t u_stride, float* out,
                              size_t o_stride, int64_t n, int64_t d) {
  pdl_start();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * d) return;
  const int64_t r = idx / d, c = idx % d;
  const float gv = g[r * g_stride + c];
  const double silu = gv / (1.0 + exp(-double(gv)));
  out[r * o_stride + c] = float(silu * u[r * u_stride + c]);
}

__global__ void store_kv_kernel(const float* __restrict__ src, size_t s_stride, const int32_t* __restrict__ slots,
                                uint8_t* dst, size_t d_stride, int64_t d_rows, bool f16, int64_t n, int64_t d,
                                int* err) {
  pdl_start();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * d) return;
  const int64_t i = idx / d, c = idx % d;
  const int32_t slot = slots[i];
  if (slot < 0 || slot >= d_rows) {
    if (c == 0) atomicOr(err, kErrSlots);
    return;
  }
  const float v = src[i * s_stride + c];
  uint8_t* row = dst + size_t(slot) * d_stride;
  if (f16) {
    reinterpret_cast<__half*>(row)[c] = __float2half_rn(v);
  } else {
    reinterpret_cast<float*>(row)[c] = v;
  }
}

constexpr int kAttnMaxDimQkv = 256;  // qk_rope_store's largest head_dim

struct RopeArgs {
  int32_t n_heads, head_dim, n_rot;
  bool neox;
  double freq_base, freq_scale, ext_factor, corr_low, corr_high, mscale;
  const float* freq_factors;  // nullptr when absent
};

// Rotates the pair i (of n_rot / 2) of one head at position pos (head: the head's first element).
__device__ __forceinline__ void rope_pair(float* head, int i, int32_t pos, const RopeArgs& a) {
  const int half = a.n_rot / 2;
  double theta_extrap = pos * pow(a.freq_base, -2.0 * i / a.n_rot);
  if (a.freq_factors != nullptr) theta_extrap /= a.freq_factors[i];
  double theta = a.freq_scale * theta_extrap;
  if (a.ext_factor != 0.0) {
    const double y = (i - a.corr_low) / fmax(0.001, a.corr_high - a.corr_low);
    const double ramp = (1.0 - fmin(1.0, fmax(0.0, y))) * a.ext_factor;
    theta = theta * (1.0 - ramp) + theta_extrap * ramp;
  }
  double s, c;
  sincos(theta, &s, &c);
  c *= a.mscale;
  s *= a.mscale;
  const int ia = a.neox ? i : 2 * i, ib = a.neox ? i + half : 2 * i + 1;
  const double x0 = head[ia], x1 = head[ib];
  head[ia] = float(x0 * c - x1 * s);
  head[ib] = float(x0 * s + x1 * c);
}

__global__ void rope_kernel(float* x, size_t x_stride, const int32_t* __restrict__ positions, int64_t n, RopeArgs a) {
  pdl_start();
  const int half = a.n_rot / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * a.n_heads * half) return;
  const int i = int(idx % half);
  const int64_t rh = idx / half;
  const int h = int(rh % a.n_heads);
  const int64_t r = rh / a.n_heads;
  rope_pair(x + r * x_stride + int64_t(h) * a.head_dim, i, positions[r], a);
}

// x = a + b (into sum, which may alias a), out = rms_norm(x) * w: one block per row, the sum of
// squares and the scaling as rms_norm_kernel's (each thread re-reads only what it wrote).
__global__ void add_rms_norm_kernel(const float* a, size_t a_stride, const float* b, size_t b_stride, float* sum,
                                    size_t s_stride, const float* __restrict__ w, float eps, float* out,
                                    size_t o_stride, int64_t d) {
  pdl_start();
  __shared__ double sh[32];
  const float* ar = a + size_t(blockIdx.x) * a_stride;
  const float* br = b + size_t(blockIdx.x) * b_stride;
  float* sr = sum + size_t(blockIdx.x) * s_stride;
  float* o = out + size_t(blockIdx.x) * o_stride;
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float v = ar[c] + br[c];
    sr[c] = v;
    s += double(v) * v;
  }
  s = block_sum_double(s, sh);
  const double inv = 1.0 / sqrt(s / double(d) + double(eps));
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) o[c] = __fmul_rn(float(double(sr[c]) * inv), w[c]);
}

// add_rms_norm_kernel on float4s (rows 16-byte aligned, d % 4 == 0): each thread holds up to V
// float4 of the row in registers (no re-read of the sum), and loads its part of the norm weight
// before waiting for the kernel before (a weight: constant during a step). One block per row.
template <int V>
__global__ void __launch_bounds__(1024) add_rms_norm_vec_kernel(const float4* a, size_t a_stride, const float4* b, size_t b_stride,
                                        float4* sum, size_t s_stride, const float4* __restrict__ w, float eps,
                                        float4* out, size_t o_stride, int64_t d4) {
  pdl_trigger();
  __shared__ double sh[32];
  float4 wv[V], v[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int64_t c = threadIdx.x + int64_t(i) * blockDim.x;
    if (c < d4) wv[i] = w[c];
  }
  pdl_wait();
  const size_t r = blockIdx.x;
  double s = 0.0;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int64_t c = threadIdx.x + int64_t(i) * blockDim.x;
    if (c < d4) {
      const float4 x = a[r * a_stride + c], y = b[r * b_stride + c];
      v[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
      sum[r * s_stride + c] = v[i];
      s += double(v[i].x) * v[i].x + double(v[i].y) * v[i].y + double(v[i].z) * v[i].z + double(v[i].w) * v[i].w;
    }
  }
  s = block_sum_double(s, sh);
  const double inv = 1.0 / sqrt(s / double(4 * d4) + double(eps));
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int64_t c = threadIdx.x + int64_t(i) * blockDim.x;
    if (c < d4) {
      out[r * o_stride + c] = make_float4(__fmul_rn(float(double(v[i].x) * inv), wv[i].x),
                                          __fmul_rn(float(double(v[i].y) * inv), wv[i].y),
                                          __fmul_rn(float(double(v[i].z) * inv), wv[i].z),
                                          __fmul_rn(float(double(v[i].w) * inv), wv[i].w));
    }
  }
}

// qk_rope_store: one warp per (row, head) of q's heads, then k's, then v's (blockIdx.y * kQkvWarps
// + warp); the head in shared memory: RMS norm (q / k, when given), RoPE (q / k), written back,
// and k / v stored at the row's slot in the pools.
constexpr int kQkvWarps = 4;
struct QkvArgs {
  float* q;
  size_t q_stride;
  float* k;
  size_t k_stride;
  const float* v;
  size_t v_stride;
  const float* q_norm;  // nullptr: none
  const float* k_norm;
  float eps;
  const int32_t* positions;
  const int32_t* slots;
  uint8_t* k_pool;
  uint8_t* v_pool;
  size_t kp_stride, vp_stride;  // bytes
  int64_t pool_rows;
  bool f16;
  int32_t n_q_heads, n_kv_heads, head_dim;  // n_q_heads 0: no q
  RopeArgs rope;
  int* err;
};

// One warp's (row r, head hh) of qk_rope_store (hh: q's heads, then k's, then v's); head: the
// warp's kAttnMaxDimQkv floats of shared memory. Activations read through L2 (__ldcg: a step
// program writes q / k / v in the phase before).
__device__ __forceinline__ void qkv_head(const QkvArgs& a, int64_t r, int hh, float* head) {
  const int lane = threadIdx.x % 32;
  const int D = a.head_dim;
  const bool is_q = hh < a.n_q_heads, is_k = !is_q && hh < a.n_q_heads + a.n_kv_heads;
  const int h = is_q ? hh : is_k ? hh - a.n_q_heads : hh - a.n_q_heads - a.n_kv_heads;
  const float* src = is_q ? a.q + r * a.q_stride : is_k ? a.k + r * a.k_stride : a.v + r * a.v_stride;
  src += size_t(h) * D;
  for (int c = lane; c < D; c += 32) head[c] = __ldcg(src + c);
  const float* norm = is_q ? a.q_norm : is_k ? a.k_norm : nullptr;
  if (norm != nullptr) {
    double s = 0.0;
    for (int c = lane; c < D; c += 32) s += double(head[c]) * head[c];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    const double inv = 1.0 / sqrt(s / double(D) + double(a.eps));
    for (int c = lane; c < D; c += 32) head[c] = __fmul_rn(float(double(head[c]) * inv), norm[c]);
  }
  __syncwarp();
  if (is_q || is_k) {
    for (int i = lane; i < a.rope.n_rot / 2; i += 32) rope_pair(head, i, a.positions[r], a.rope);
    __syncwarp();
    float* dst = (is_q ? a.q + r * a.q_stride : a.k + r * a.k_stride) + size_t(h) * D;
    for (int c = lane; c < D; c += 32) dst[c] = head[c];
  }
  if (is_q) return;
  const int32_t slot = a.slots[r];
  if (slot < 0 || slot >= a.pool_rows) {
    if (lane == 0) atomicOr(a.err, kErrSlots);
    return;
  }
  uint8_t* row = is_k ? a.k_pool + size_t(slot) * a.kp_stride : a.v_pool + size_t(slot) * a.vp_stride;
  for (int c = lane; c < D; c += 32) {
    const int64_t col = int64_t(h) * D + c;
    if (a.f16) {
      reinterpret_cast<__half*>(row)[col] = __float2half_rn(head[c]);
    } else {
      reinterpret_cast<float*>(row)[col] = head[c];
    }
  }
}

__global__ void __launch_bounds__(kQkvWarps * 32) qk_rope_store_kernel(QkvArgs a) {
  pdl_start();
  __shared__ float sh[kQkvWarps][kAttnMaxDimQkv];
  const int warp = threadIdx.x / 32;
  const int hh = int(blockIdx.y) * kQkvWarps + warp;
  if (hh >= a.n_q_heads + 2 * a.n_kv_heads) return;
  qkv_head(a, blockIdx.x, hh, sh[warp]);
}

constexpr int kAttnWarps = 8, kAttnMaxDim = 256, kAttnPerLane = kAttnMaxDim / 32;

// K / V read through L2 (__ldcg: a step program stores the row in the phase before).
template <bool F16>
__device__ __forceinline__ float kv_at(const uint8_t* base, size_t stride, int64_t row, int64_t col) {
  const uint8_t* p = base + size_t(row) * stride;
  if constexpr (F16) return __half2float(__ushort_as_half(__ldcg(reinterpret_cast<const unsigned short*>(p) + col)));
  return __ldcg(reinterpret_cast<const float*>(p) + col);
}

// Attention of query row i, head h, by a group of kAttnWarps warps (tid: 0 .. kAttnWarps * 32 - 1;
// sync: the group's barrier): online softmax over the row's keys, warp w taking keys w, w +
// kAttnWarps, ...; the warps' partial results merged through the group's shared sh_m, sh_l,
// sh_acc. The block of attention_kernel, or half of a step program's block.
template <bool PAGED, bool F16, class Sync>
__device__ __forceinline__ void attention_item(const AttnArgs& a, int h, int64_t i, int tid, Sync sync, float* sh_m,
                                               float* sh_l, float (*sh_acc)[kAttnMaxDim]) {
  const int warp = tid / 32, lane = tid % 32;
  int64_t n_keys;
  int32_t seq = 0;
  if constexpr (PAGED) {
    if (a.skip_flash_tiles && flash_tile_uniform(a.seq_ids, a.positions, a.n_rows, i / kFlashRows * kFlashRows,
                                                 a.n_seqs, a.max_blocks, a.block_size)) {
      return;
    }
    seq = a.seq_ids[i];
    const int32_t pos = a.positions[i];
    if (seq < 0 || seq >= a.n_seqs || pos < 0 || pos / a.block_size >= a.max_blocks) {
      if (tid == 0 && h == 0) atomicOr(a.err, kErrSeq);
      return;
    }
    n_keys = int64_t(pos) + 1;
  } else {
    n_keys = int64_t(a.first_pos) + i + 1;
  }
  const int hd = a.head_dim;
  const int64_t kv_off = int64_t(h / a.group) * hd;
  const float* qh = a.q + size_t(i) * a.q_stride + int64_t(h) * hd;
  float qv[kAttnPerLane], acc[kAttnPerLane];
#pragma unroll
  for (int t = 0; t < kAttnPerLane; ++t) {
    const int d = lane + 32 * t;
    qv[t] = d < hd ? __ldcg(qh + d) : 0.f;
    acc[t] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int64_t j = warp; j < n_keys; j += kAttnWarps) {
    int64_t row = j;
    if constexpr (PAGED) {
      const int32_t block = a.tables[size_t(seq) * a.table_stride + j / a.block_size];
      if (block < 0 || (int64_t(block) + 1) * a.block_size > a.n_pool_rows) {
        if (lane == 0) atomicOr(a.err, kErrBlockTable);
        continue;
      }
      row = int64_t(block) * a.block_size + j % a.block_size;
    }
    float dot = 0.f;
#pragma unroll
    for (int t = 0; t < kAttnPerLane; ++t) {
      const int d = lane + 32 * t;
      if (d < hd) dot += qv[t] * kv_at<F16>(a.k, a.kv_stride, row, kv_off + d);
    }
    const float s = warp_sum(dot) * a.scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int t = 0; t < kAttnPerLane; ++t) {
      const int d = lane + 32 * t;
      if (d < hd) acc[t] = acc[t] * corr + p * kv_at<F16>(a.v, a.kv_stride, row, kv_off + d);
    }
    m = m_new;
  }
  if (lane == 0) {
    sh_m[warp] = m;
    sh_l[warp] = l;
  }
#pragma unroll
  for (int t = 0; t < kAttnPerLane; ++t) {
    const int d = lane + 32 * t;
    if (d < hd) sh_acc[warp][d] = acc[t];
  }
  sync();
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, sh_m[w]);
  float L = 0.f, f[kAttnWarps];
  for (int w = 0; w < kAttnWarps; ++w) {
    f[w] = sh_m[w] == -INFINITY ? 0.f : expf(sh_m[w] - M);
    L += sh_l[w] * f[w];
  }
  float* oh = a.out + size_t(i) * a.o_stride + int64_t(h) * hd;
  for (int d = tid; d < hd; d += kAttnWarps * 32) {
    float s = 0.f;
    for (int w = 0; w < kAttnWarps; ++w) s += sh_acc[w][d] * f[w];
    oh[d] = s / L;
  }
  sync();  // the shared arrays free for the group's next item
}

// One block (kAttnWarps warps) per (head, query row).
template <bool PAGED, bool F16>
__global__ void __launch_bounds__(kAttnWarps * 32) attention_kernel(AttnArgs a) {
  pdl_start();
  __shared__ float sh_m[kAttnWarps], sh_l[kAttnWarps];
  __shared__ float sh_acc[kAttnWarps][kAttnMaxDim];
  attention_item<PAGED, F16>(a, blockIdx.x, blockIdx.y, threadIdx.x, [] { __syncthreads(); }, sh_m, sh_l, sh_acc);
}

// ---- decode matrix-vector on repacked panels ----
//
// At upload, F16 / Q4_0 / Q8_0 / Q4_K / Q6_K weights also get a copy in "panels": 32 rows (one per
// lane) interleaved per unit of E elements (one block of the type; 8 elements for F16), the unit's
// bytes cut into 16-byte pieces so that piece c of lanes 0..31 is 512 contiguous bytes (one
// coalesced 128-bit load per lane), a 2-byte field (the block scale) after them for 64 bytes.
// The decode kernel (n == 1) gives each block a panel of 32 rows and each of its 8 warps a slice
// of the units (k); lane l accumulates row 32g + l, reading the activation from shared memory by
// broadcast, and the 8 partial sums are added in a fixed order (deterministic). Quant values become
// floats through the exponent trick: (bits & mask) | 0x4B000000 is the float 2^23 + c * q exactly
// (c the power of two of the nibble's position), so no integer-to-float conversion runs; the scale
// of a block is applied once to its float sum (the reference rounds each element's product: the
// results differ by float rounding, far inside the 1e-9 nmse budget).
// P: units per buffer of the pipelined decode loop (two buffers: the next P units load while
// these are multiplied).
template <int T>
struct PanelFmt;  // E: elements per unit, CH: 16-byte pieces per lane, TAIL: 2-byte field, U: units in flight
template <> struct PanelFmt<kF16> { static constexpr int E = 8, CH = 1, TAIL = 0, U = 8, P = 4, BB = 16; };
template <> struct PanelFmt<kQ4_0> { static constexpr int E = 32, CH = 1, TAIL = 1, U = 8, P = 4, BB = 18; };
template <> struct PanelFmt<kQ8_0> { static constexpr int E = 32, CH = 2, TAIL = 1, U = 4, P = 2, BB = 34; };
template <> struct PanelFmt<kQ4_K> { static constexpr int E = 256, CH = 9, TAIL = 0, U = 1, P = 1, BB = 144; };
template <> struct PanelFmt<kQ6_K> { static constexpr int E = 256, CH = 13, TAIL = 1, U = 1, P = 1, BB = 210; };

template <int T>
__host__ __device__ constexpr size_t panel_unit_bytes() {
  return size_t(PanelFmt<T>::CH) * 512 + (PanelFmt<T>::TAIL ? 64 : 0);
}
// Byte offset in a block of piece c, and of the 2-byte tail.
template <int T>
__device__ __forceinline__ int panel_piece_src(int c) {
  if constexpr (T == kQ4_0) return 2;
  else if constexpr (T == kQ8_0) return 2 + 16 * c;
  else return 16 * c;  // F16 (one piece), Q4_K (d, dmin, scales, then qs), Q6_K (ql, qh, scales)
}
template <int T>
__device__ __forceinline__ int panel_tail_src() {
  return T == kQ6_K ? 208 : 0;
}

constexpr int kPanelWarps = 8, kPanelThreads = kPanelWarps * 32;
// Elements of x a lane loads before storing any while staging a panel product's x: one load's
// latency per 8 instead of per element (x was just written by the kernel before: an L2 round trip
// each).
constexpr int kStageBatch = 8;
// One-row panel products of at most one block per multiprocessor run 16 warps a block (twice the
// loads in flight: ffn_down of the 8B shape has 128 blocks, 8 warps an SM with 8 a block).
constexpr int kPanelWarpsWide = 16, kPanelThreadsMax = kPanelWarpsWide * 32;

// One thread per (row, unit, piece): copies the piece's bytes from the GGUF rows into the panel
// (zeroed beforehand: pad rows and, for F16, the columns past k stay zero).
template <int T>
__global__ void panel_pack_kernel(const uint8_t* __restrict__ w, size_t w_stride, int64_t m, int64_t k,
                                  int64_t n_units, uint8_t* __restrict__ panel) {
  using F = PanelFmt<T>;
  constexpr int P = F::CH + F::TAIL;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= m * n_units * P) return;
  const int piece = int(idx % P);
  const int64_t u = (idx / P) % n_units, r = idx / P / n_units;
  const int64_t g = r / 32;
  const int lane = int(r % 32);
  uint8_t* unit = panel + (size_t(g) * n_units + u) * panel_unit_bytes<T>();
  const uint8_t* row = w + size_t(r) * w_stride;
  if (piece < F::CH) {
    uint8_t* dst = unit + 512 * piece + 16 * lane;
    if constexpr (T == kF16) {
      const int64_t row_bytes = 2 * k;
      for (int j = 0; j < 16; ++j) dst[j] = 16 * u + j < row_bytes ? row[16 * u + j] : 0;
    } else {
      const uint8_t* src = row + size_t(u) * F::BB + panel_piece_src<T>(piece);
      for (int j = 0; j < 16; ++j) dst[j] = src[j];
    }
  } else {
    uint8_t* dst = unit + 512 * F::CH + 2 * lane;
    const uint8_t* src = row + size_t(u) * F::BB + panel_tail_src<T>();
    dst[0] = src[0];
    dst[1] = src[1];
  }
}

constexpr float kMagic = 8388608.f;  // 2^23: (q | 0x4B000000) reads as 2^23 + q
constexpr uint32_t kMagicBits = 0x4B000000u;
__device__ __forceinline__ float magic(uint32_t bits) { return __uint_as_float(bits | kMagicBits); }
__device__ __forceinline__ float h2f_bits(uint32_t bits16) { return __half2float(__ushort_as_half(uint16_t(bits16))); }
__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
// Byte t of w (unsigned, as 0..255 in the low byte) as the float 2^23 + byte.
__device__ __forceinline__ float magic_byte(uint32_t w, int t) {
  return __uint_as_float(__byte_perm(w, kMagicBits, 0x7440 | t));
}

// sum over the unit's E elements of w[e] * x[e] for this lane's row.
template <int T>
__device__ __forceinline__ float panel_unit_dot(const uint4 (&q)[PanelFmt<T>::CH], uint32_t tail,
                                                const float* __restrict__ xs, const float* __restrict__ xsum) {
  const float4* x4 = reinterpret_cast<const float4*>(xs);
  if constexpr (T == kF16) {
    const float4 xa = x4[0], xb = x4[1];
    const float2 w0 = __half22float2(*reinterpret_cast<const __half2*>(&q[0].x));
    const float2 w1 = __half22float2(*reinterpret_cast<const __half2*>(&q[0].y));
    const float2 w2 = __half22float2(*reinterpret_cast<const __half2*>(&q[0].z));
    const float2 w3 = __half22float2(*reinterpret_cast<const __half2*>(&q[0].w));
    float a = w0.x * xa.x;
    a = fmaf(w0.y, xa.y, a);
    a = fmaf(w1.x, xa.z, a);
    a = fmaf(w1.y, xa.w, a);
    float b = w2.x * xb.x;
    b = fmaf(w2.y, xb.y, b);
    b = fmaf(w3.x, xb.z, b);
    b = fmaf(w3.y, xb.w, b);
    return a + b;
  } else if constexpr (T == kQ4_0) {
    // byte j: low nibble element j, high nibble element 16 + j; word i holds bytes 4i..4i+3.
    float a1 = 0.f, a16 = 0.f, a256 = 0.f, a4096 = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 xl = x4[i], xh = x4[4 + i];
      uint32_t v = word_of(q[0], i);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float l0 = half ? xl.z : xl.x, l1 = half ? xl.w : xl.y;
        const float h0 = half ? xh.z : xh.x, h1 = half ? xh.w : xh.y;
        a1 = fmaf(magic(v & 0xFu) - (kMagic + 8.f), l0, a1);
        a16 = fmaf(magic(v & 0xF0u) - (kMagic + 128.f), h0, a16);
        a256 = fmaf(magic(v & 0xF00u) - (kMagic + 2048.f), l1, a256);
        a4096 = fmaf(magic(v & 0xF000u) - (kMagic + 32768.f), h1, a4096);
        v >>= 16;
      }
    }
    return h2f_bits(tail) * ((a1 + a16 * 0.0625f) + (a256 * 0.00390625f + a4096 * 0.000244140625f));
  } else if constexpr (T == kQ8_0) {
    float a = 0.f, b = 0.f;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 xv = x4[4 * c + i];
        const uint32_t u = word_of(q[c], i) ^ 0x80808080u;  // offset binary: byte = q + 128
        a = fmaf(magic_byte(u, 0) - (kMagic + 128.f), xv.x, a);
        b = fmaf(magic_byte(u, 1) - (kMagic + 128.f), xv.y, b);
        a = fmaf(magic_byte(u, 2) - (kMagic + 128.f), xv.z, a);
        b = fmaf(magic_byte(u, 3) - (kMagic + 128.f), xv.w, b);
      }
    }
    return h2f_bits(tail) * (a + b);
  } else if constexpr (T == kQ4_K) {
    // piece 0: d, dmin, scales[12]; pieces 1..8: qs (pair p = 32 bytes: low nibbles sub-block 2p,
    // high nibbles sub-block 2p + 1, element l at byte l).
    const float d = h2f_bits(q[0].x & 0xFFFFu), dmin = h2f_bits(q[0].x >> 16);
    uint32_t sb[12];
#pragma unroll
    for (int j = 0; j < 12; ++j) sb[j] = (word_of(q[0], 1 + j / 4) >> (8 * (j % 4))) & 0xFFu;
    float sum = 0.f;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      float lo1 = 0.f, lo256 = 0.f, hi16 = 0.f, hi4096 = 0.f;
#pragma unroll
      for (int hc = 0; hc < 2; ++hc) {
        const uint4 c = q[1 + 2 * p + hc];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float4 xl = x4[(64 * p + 16 * hc + 4 * i) / 4], xh = x4[(64 * p + 32 + 16 * hc + 4 * i) / 4];
          uint32_t v = word_of(c, i);
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const float l0 = half ? xl.z : xl.x, l1 = half ? xl.w : xl.y;
            const float h0 = half ? xh.z : xh.x, h1 = half ? xh.w : xh.y;
            lo1 = fmaf(magic(v & 0xFu) - kMagic, l0, lo1);
            hi16 = fmaf(magic(v & 0xF0u) - kMagic, h0, hi16);
            lo256 = fmaf(magic(v & 0xF00u) - kMagic, l1, lo256);
            hi4096 = fmaf(magic(v & 0xF000u) - kMagic, h1, hi4096);
            v >>= 16;
          }
        }
      }
      int sc0, m0, sc1, m1;
      const int j0 = 2 * p, j1 = 2 * p + 1;
      // scale_min_k4 on the register copy of scales[12]
      if (j0 < 4) { sc0 = sb[j0] & 63; m0 = sb[j0 + 4] & 63; }
      else { sc0 = (sb[j0 + 4] & 0xF) | ((sb[j0 - 4] >> 6) << 4); m0 = (sb[j0 + 4] >> 4) | ((sb[j0] >> 6) << 4); }
      if (j1 < 4) { sc1 = sb[j1] & 63; m1 = sb[j1 + 4] & 63; }
      else { sc1 = (sb[j1 + 4] & 0xF) | ((sb[j1 - 4] >> 6) << 4); m1 = (sb[j1 + 4] >> 4) | ((sb[j1] >> 6) << 4); }
      const float s_lo = lo1 + lo256 * 0.00390625f, s_hi = hi16 * 0.0625f + hi4096 * 0.000244140625f;
      sum = fmaf(d * float(sc0), s_lo, sum);
      sum = fmaf(d * float(sc1), s_hi, sum);
      sum = fmaf(-(dmin * float(m0)), xsum[j0], sum);
      sum = fmaf(-(dmin * float(m1)), xsum[j1], sum);
    }
    return sum;
  } else if constexpr (T == kQ6_K) {
    // pieces 0..7: ql[128], 8..11: qh[64], 12: scales[16] (int8); tail: d.
    float sum = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int lq = 0; lq < 2; ++lq) {
        const uint4 qa = q[4 * h + lq], qb = q[4 * h + 2 + lq], qhc = q[8 + 2 * h + lq];
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint32_t a = word_of(qa, i), b = word_of(qb, i), hq = word_of(qhc, i);
          const uint32_t v[4] = {(a & 0x0F0F0F0Fu) | ((hq << 4) & 0x30303030u),
                                 (b & 0x0F0F0F0Fu) | ((hq << 2) & 0x30303030u),
                                 ((a >> 4) & 0x0F0F0F0Fu) | (hq & 0x30303030u),
                                 ((b >> 4) & 0x0F0F0F0Fu) | ((hq >> 2) & 0x30303030u)};
#pragma unroll
          for (int s = 0; s < 4; ++s) {
            const float4 xv = x4[(128 * h + 32 * s + 16 * lq + 4 * i) / 4];
            acc[s] = fmaf(magic_byte(v[s], 0) - (kMagic + 32.f), xv.x, acc[s]);
            acc[s] = fmaf(magic_byte(v[s], 1) - (kMagic + 32.f), xv.y, acc[s]);
            acc[s] = fmaf(magic_byte(v[s], 2) - (kMagic + 32.f), xv.z, acc[s]);
            acc[s] = fmaf(magic_byte(v[s], 3) - (kMagic + 32.f), xv.w, acc[s]);
          }
        }
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          const int si = 8 * h + lq + 2 * s;
          const int sc = int(int8_t(uint8_t(word_of(q[12], si / 4) >> (8 * (si % 4)))));
          sum = fmaf(float(sc), acc[s], sum);
        }
      }
    }
    return h2f_bits(tail) * sum;
  } else {
    static_assert(T < 0, "no panel format");
    return 0.f;
  }
}

// A warp's part of the activation of a panel product, units [u0, u1): x into shared xs (zero past
// k), and for Q4_K each 32-element chunk's sum into xsum (rows are whole super-blocks there). x is
// read through L2 (__ldcg): a step program (step_program.cuh) rewrites it between its phases.
template <int T>
__device__ __forceinline__ void stage_panel_x(const float* __restrict__ x, int64_t k, int64_t u0, int64_t u1, float* xs,
                                              float* xsum) {
  using F = PanelFmt<T>;
  const int lane = threadIdx.x % 32;
  if constexpr (T == kQ4_K) {
    for (int64_t c = u0 * 8; c < u1 * 8; ++c) {
      const int64_t e = c * 32 + lane;
      const float v = __ldcg(x + e);
      xs[e] = v;
      const float s = warp_sum(v);
      if (lane == 0) xsum[c] = s;
    }
  } else {
    constexpr int B = kStageBatch;
    for (int64_t e0 = u0 * F::E + lane; e0 < u1 * F::E; e0 += 32 * B) {
      float v[B];
#pragma unroll
      for (int i = 0; i < B; ++i) {
        const int64_t e = e0 + 32 * i;
        v[i] = e < u1 * F::E && e < k ? __ldcg(x + e) : 0.f;  // B loads in flight
      }
#pragma unroll
      for (int i = 0; i < B; ++i) {
        if (e0 + 32 * i < u1 * F::E) xs[e0 + 32 * i] = v[i];
      }
    }
  }
}

// A lane's units u .. u + U - 1 (those below u1) of a panel group: `base` is the group's first unit
// plus 16 * lane; per unit F::CH 16-byte pieces and, where the format has one, its 2-byte tail.
template <int T, int N = PanelFmt<T>::U>
__device__ __forceinline__ void load_panel_units(const uint8_t* __restrict__ base, int64_t u, int64_t u1,
                                                 uint4 (&q)[N][PanelFmt<T>::CH], uint32_t (&tail)[N]) {
  using F = PanelFmt<T>;
  constexpr size_t UB = panel_unit_bytes<T>();
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (u + i < u1) {
      const uint8_t* ub = base + size_t(u + i) * UB;
#pragma unroll
      for (int c = 0; c < F::CH; ++c) q[i][c] = __ldg(reinterpret_cast<const uint4*>(ub + 512 * c));
      if constexpr (F::TAIL) {
        tail[i] = __ldg(reinterpret_cast<const uint16_t*>(ub - 16 * lane + 512 * F::CH + 2 * lane));
      } else {
        tail[i] = 0;
      }
    }
  }
}

// ---- Q4_0 / Q8_0 decode on integer dot products, activations held to 15 bits ----
// Each 32-element block of x (the block of its weights) becomes X = round(x * 2^(13 - E)), E the
// exponent of the block's largest |x| (so |X| < 2^14, clamped to 16383), kept as two bytes per
// element: hi = X >> 7 (signed) and lo = X & 127, with d = 2^(E - 13) and, for Q4_0, -8 * sum(X)
// (the weights' offset of 8). A unit's integer dot (exact in int32, and for Q4_0 exact as a float)
// is 128 * dp4a(w, hi) + dp4a(w, lo): two dp4a per 4 weights against ~3 float ops per weight on
// the float path. x's error is at most 2^-14 of its block's max (nmse ~1e-9 on random data; the
// float path ~1e-13, the tensor cores ~1e-7).
struct X15 {
  const int8_t* hi;  // n_units * 32
  const int8_t* lo;
  const float2* d;   // per unit: (d, -8 * sum(X) as int bits)
};
__device__ __forceinline__ X15 x15_layout(float* xs, int64_t n_units) {
  int8_t* b = reinterpret_cast<int8_t*>(xs);
  return {b, b + n_units * 32, reinterpret_cast<const float2*>(b + n_units * 64)};
}
// The warp's units [u0, u1) of x (k a multiple of 32: whole blocks of Q4_0 / Q8_0 rows).
__device__ __forceinline__ void stage_panel_x15(const float* __restrict__ x, int64_t u0, int64_t u1, float* xs,
                                                int64_t n_units) {
  const int lane = threadIdx.x % 32;
  int8_t* hi = reinterpret_cast<int8_t*>(xs);
  int8_t* lo = hi + n_units * 32;
  float2* d = reinterpret_cast<float2*>(hi + n_units * 64);
  constexpr int B = kStageBatch;
  for (int64_t u = u0; u < u1; u += B) {
    float v[B];
#pragma unroll
    for (int i = 0; i < B; ++i) v[i] = u + i < u1 ? __ldcg(x + (u + i) * 32 + lane) : 0.f;  // B loads in flight
#pragma unroll
    for (int i = 0; i < B; ++i) {
      if (u + i >= u1) break;
      const int64_t e = (u + i) * 32 + lane;
      const uint32_t m = __reduce_max_sync(0xffffffffu, __float_as_uint(v[i]) & 0x7FFFFFFFu);
      const uint32_t me = max(m & 0x7F800000u, 20u << 23);  // E + 127, at least 20
      const int X = min(max(__float2int_rn(v[i] * __uint_as_float((267u << 23) - me)), -16383), 16383);
      hi[e] = int8_t(X >> 7);
      lo[e] = int8_t(X & 127);
      const int sum = __reduce_add_sync(0xffffffffu, X);
      if (lane == 0) d[u + i] = make_float2(__uint_as_float(me - (13u << 23)), __int_as_float(-8 * sum));
    }
  }
}
template <int T>
__device__ __forceinline__ float panel_unit_dot15(const uint4 (&q)[PanelFmt<T>::CH], uint32_t tail, const X15& x,
                                                  int64_t u) {
  const int4* h = reinterpret_cast<const int4*>(x.hi + u * 32);
  const int4* l = reinterpret_cast<const int4*>(x.lo + u * 32);
  const float2 xd = x.d[u];
  const int4 h0 = h[0], h1 = h[1], l0 = l[0], l1 = l[1];
  const int hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
  const int lw[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
  int acc = 0;
  if constexpr (T == kQ4_0) {
    // byte j: low nibble element j, high nibble element 16 + j (weights 0..15, offset 8 in xd.y)
    int wl[4], wh[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = word_of(q[0], i);
      wl[i] = int(v & 0x0F0F0F0Fu);
      wh[i] = int((v >> 4) & 0x0F0F0F0Fu);
    }
    int lo = __float_as_int(xd.y);  // two chains: the high digits' and the low digits'
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc = __dp4a(wh[i], hw[4 + i], __dp4a(wl[i], hw[i], acc));
      lo = __dp4a(wh[i], lw[4 + i], __dp4a(wl[i], lw[i], lo));
    }
    acc = acc * 128 + lo;
  } else {
    static_assert(T == kQ8_0, "x15: Q4_0 and Q8_0");
    int lo = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      acc = __dp4a(int(word_of(q[i / 4], i % 4)), hw[i], acc);
      lo = __dp4a(int(word_of(q[i / 4], i % 4)), lw[i], lo);
    }
    acc = acc * 128 + lo;
  }
  return h2f_bits(tail) * xd.x * float(acc);
}

// out[r] = sum_k w[r, k] x[k] on panels: block g = rows 32g..32g+31, warp w the units
// [n_units * w / 8, n_units * (w + 1) / 8). Shared memory: x (n_units * E floats, zero past k),
// for Q4_K the sums of each 32 elements of x, then the warps' partial sums. This is the body for
// one panel group: `group` its first unit, `out` its first row, `rows` of them valid.
// The dot products of a warp's units [u0, u1) for its lanes' rows, P units at a time from two
// buffers: the next P units' loads are issued before these P are multiplied, so the weight stream
// does not stop while the warp computes. qa holds units u0 .. u0 + P - 1, loaded by the caller.
// dot(q, tail, u): unit u's dot product for this lane's row.
template <int T, class Dot>
__device__ __forceinline__ float panel_dots_pipelined(const uint8_t* __restrict__ base, int64_t u0, int64_t u1,
                                                      uint4 (&qa)[PanelFmt<T>::P][PanelFmt<T>::CH],
                                                      uint32_t (&ta)[PanelFmt<T>::P], Dot dot) {
  using F = PanelFmt<T>;
  constexpr int P = F::P;
  uint4 qb[P][F::CH];
  uint32_t tb[P];
  float acc = 0.f;
  auto dots = [&](const uint4 (&q)[P][F::CH], const uint32_t (&t)[P], int64_t u) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (u + i < u1) acc += dot(q[i], t[i], u + i);
    }
  };
  for (int64_t u = u0; u < u1; u += 2 * P) {
    if (u + P < u1) load_panel_units<T, P>(base, u + P, u1, qb, tb);
    dots(qa, ta, u);
    if (u + P >= u1) break;
    if (u + 2 * P < u1) load_panel_units<T, P>(base, u + 2 * P, u1, qa, ta);
    dots(qb, tb, u + P);
  }
  return acc;
}

template <int T>
__device__ __forceinline__ void panel_matvec_group(const uint8_t* __restrict__ group, const float* __restrict__ x,
                                                   float* __restrict__ out, int64_t rows, int64_t k,
                                                   int64_t n_units, bool pipe = false, bool x15 = false) {
  using F = PanelFmt<T>;
  extern __shared__ float4 panel_smem[];
  float* xs = reinterpret_cast<float*>(panel_smem);
  float* xsum = xs + n_units * F::E;                         // Q4_K: n_units * 8 floats
  float* red = xsum + (T == kQ4_K ? n_units * 8 : 0);        // nw * 32 floats
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = int(blockDim.x / 32);
  const int64_t u0 = n_units * warp / nw, u1 = n_units * (warp + 1) / nw;
  const uint8_t* base = group + 16 * lane;
  float acc = 0.f;
  constexpr bool kX15 = T == kQ4_0 || T == kQ8_0;
  if (kX15 && x15) {  // integer dots (and the pipelined loop)
    if constexpr (kX15) {
      uint4 q[F::P][F::CH];
      uint32_t tail[F::P];
      if (u0 < u1) load_panel_units<T, F::P>(base, u0, u1, q, tail);
      pdl_wait();
      stage_panel_x15(x, u0, u1, xs, n_units);
      __syncwarp();
      const X15 xq = x15_layout(xs, n_units);
      acc = panel_dots_pipelined<T>(base, u0, u1, q, tail, [&](const uint4 (&qu)[F::CH], uint32_t t, int64_t u) {
        return panel_unit_dot15<T>(qu, t, xq, u);
      });
    }
  } else if (F::P > 1 && pipe) {  // the K-quants keep one buffer (two of a super-block's pieces cost occupancy)
    uint4 q[F::P][F::CH];
    uint32_t tail[F::P];
    if (u0 < u1) load_panel_units<T, F::P>(base, u0, u1, q, tail);  // in flight while x is staged
    pdl_wait();                                                       // x is the kernel before's output
    stage_panel_x<T>(x, k, u0, u1, xs, xsum);
    __syncwarp();
    acc = panel_dots_pipelined<T>(base, u0, u1, q, tail, [&](const uint4 (&qu)[F::CH], uint32_t t, int64_t u) {
      return panel_unit_dot<T>(qu, t, xs + u * F::E, xsum + u * 8);
    });
  } else {
    uint4 q[F::U][F::CH];
    uint32_t tail[F::U];
    if (u0 < u1) load_panel_units<T>(base, u0, u1, q, tail);  // in flight while x is staged
    pdl_wait();                                               // x is the kernel before's output
    stage_panel_x<T>(x, k, u0, u1, xs, xsum);
    __syncwarp();
    for (int64_t u = u0; u < u1; u += F::U) {
      if (u != u0) load_panel_units<T>(base, u, u1, q, tail);
#pragma unroll
      for (int i = 0; i < F::U; ++i) {
        if (u + i < u1) acc += panel_unit_dot<T>(q[i], tail[i], xs + (u + i) * F::E, xsum + (u + i) * 8);
      }
    }
  }
  red[warp * 32 + lane] = acc;
  __syncthreads();
  if (warp == 0) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < nw; ++w) s += red[w * 32 + lane];
    if (lane < rows) out[lane] = s;
  }
}

template <int T>
__global__ void __launch_bounds__(kPanelThreadsMax) panel_matvec_kernel(const uint8_t* __restrict__ panel,
                                                                     const float* __restrict__ x,
                                                                     float* __restrict__ out, int64_t m, int64_t k,
                                                                     int64_t n_units, bool pipe, bool x15) {
  pdl_trigger();
  const int64_t r0 = int64_t(blockIdx.x) * 32;
  panel_matvec_group<T>(panel + size_t(blockIdx.x) * size_t(n_units) * panel_unit_bytes<T>(), x, out + r0, m - r0, k,
                        n_units, pipe, x15);
}

// Up to Products::kMax matrices of one type and width, multiplied by the same x in one launch:
// block b is group b - first[s] of matrix s (first[s] <= b < first[s + 1]).
struct PanelSegs {
  const uint8_t* panel[Products::kMax];
  float* out[Products::kMax];
  size_t o_stride[Products::kMax];  // floats (several rows of x)
  int64_t m[Products::kMax];
  unsigned first[Products::kMax + 1];
  int n;
};

template <int T>
__global__ void __launch_bounds__(kPanelThreadsMax) panel_matvec_segs_kernel(PanelSegs s, const float* __restrict__ x,
                                                                          int64_t k, int64_t n_units, bool pipe,
                                                                          bool x15) {
  pdl_trigger();
  int seg = 0;
  while (seg + 1 < s.n && blockIdx.x >= s.first[seg + 1]) ++seg;
  const int64_t g = int64_t(blockIdx.x) - s.first[seg];
  panel_matvec_group<T>(s.panel[seg] + size_t(g) * size_t(n_units) * panel_unit_bytes<T>(), x, s.out[seg] + g * 32,
                        s.m[seg] - g * 32, k, n_units, pipe, x15);
}

#include "backend/cuda/panel_mma.cuh"  // uses the panel formats and PanelSegs above
#include "backend/cuda/step_program.cuh"  // uses the panel, norm, q/k/v and attention bodies above

// stage_panel_x for NB rows: rows j < nb of x (row j at x + j * x_stride into xs + j * xlen, its
// Q4_K sums at xsum + j * slen), zeros for the rest; each element's loads for all rows issued
// before their stores.
template <int T, int NB>
__device__ __forceinline__ void stage_panel_rows(const float* __restrict__ x, size_t x_stride, int nb, int64_t k,
                                                 int64_t u0, int64_t u1, float* xs, int64_t xlen, float* xsum,
                                                 int64_t slen) {
  using F = PanelFmt<T>;
  const int lane = threadIdx.x % 32;
  for (int64_t e = u0 * F::E + lane; e < u1 * F::E; e += 32) {
    float v[NB];
#pragma unroll
    for (int j = 0; j < NB; ++j) v[j] = j < nb && e < k ? x[j * x_stride + e] : 0.f;
#pragma unroll
    for (int j = 0; j < NB; ++j) xs[j * xlen + e] = v[j];
    if constexpr (T == kQ4_K) {  // rows are whole super-blocks: e < k, and 32 lanes make a chunk
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        const float t = warp_sum(v[j]);
        if (lane == 0) xsum[j * slen + e / 32] = t;
      }
    }
  }
}

// The same for nb <= NB rows of x (a verification step's few tokens): each warp stages its units'
// part of every row (NB rows, zeros past nb: no branch in the products, so a unit is decoded once
// for all rows), loads each unit of its 32 weight rows once and dots it with the NB rows.
// Shared memory: x (NB * n_units * E floats), for Q4_K the 32-element sums (NB * n_units * 8), the
// warps' partial sums (kPanelWarps * NB * 32).
template <int T, int NB>
__global__ void __launch_bounds__(kPanelThreads) panel_rows_segs_kernel(PanelSegs s, const float* __restrict__ x,
                                                                        size_t x_stride, int nb, int64_t k,
                                                                        int64_t n_units) {
  pdl_trigger();
  using F = PanelFmt<T>;
  extern __shared__ float4 panel_smem[];
  int seg = 0;
  while (seg + 1 < s.n && blockIdx.x >= s.first[seg + 1]) ++seg;
  const int64_t g = int64_t(blockIdx.x) - s.first[seg];
  const int64_t xlen = n_units * F::E, slen = T == kQ4_K ? n_units * 8 : 0;
  float* xs = reinterpret_cast<float*>(panel_smem);
  float* xsum = xs + NB * xlen;
  float* red = xsum + NB * slen;
  constexpr bool kDecodeOnce = T == kF16 || T == kQ4_0 || T == kQ8_0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t u0 = n_units * warp / kPanelWarps, u1 = n_units * (warp + 1) / kPanelWarps;
  const uint8_t* base = s.panel[seg] + size_t(g) * size_t(n_units) * panel_unit_bytes<T>() + 16 * lane;
  uint4 q[F::U][F::CH];
  uint32_t tail[F::U];
  if (u0 < u1) load_panel_units<T>(base, u0, u1, q, tail);  // in flight while x is staged
  pdl_wait();
  stage_panel_rows<T, NB>(x, x_stride, nb, k, u0, u1, xs, xlen, xsum, slen);
  __syncwarp();
  float acc[NB];
#pragma unroll
  for (int j = 0; j < NB; ++j) acc[j] = 0.f;
  for (int64_t u = u0; u < u1; u += F::U) {
    if (u != u0) load_panel_units<T>(base, u, u1, q, tail);
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      // The K-quants' decoded units do not fit beside NB rows' sums (they spill): those decode per
      // row, and skip the zero rows.
      if (!kDecodeOnce && j >= nb) continue;
      if constexpr (T == kQ6_K) {  // decode per row (hoisted for all rows, the values spill)
#pragma unroll
        for (int c = 0; c < F::CH; ++c) {
          asm volatile("" : "+r"(q[0][c].x), "+r"(q[0][c].y), "+r"(q[0][c].z), "+r"(q[0][c].w));
        }
      }
#pragma unroll
      for (int i = 0; i < F::U; ++i) {
        if (u + i < u1) acc[j] += panel_unit_dot<T>(q[i], tail[i], xs + j * xlen + (u + i) * F::E, xsum + j * slen + (u + i) * 8);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < NB; ++j) red[(warp * NB + j) * 32 + lane] = acc[j];
  __syncthreads();
  if (warp == 0) {
    const int64_t rows = s.m[seg] - g * 32;
    for (int j = 0; j < nb; ++j) {
      float t = 0.f;
#pragma unroll
      for (int w = 0; w < kPanelWarps; ++w) t += red[(w * NB + j) * 32 + lane];
      if (lane < rows) s.out[seg][j * s.o_stride[seg] + g * 32 + lane] = t;
    }
  }
}
constexpr int kPanelRowsMax = 16;  // panel_rows_segs_kernel's largest NB

// The NB of panel_rows_segs_kernel for nb rows: 2, 4, 8 or 16.
constexpr int panel_rows_nb(int nb) { return nb <= 2 ? 2 : nb <= 4 ? 4 : nb <= 8 ? 8 : kPanelRowsMax; }

template <int T>
size_t panel_rows_smem_bytes(int64_t n_units, int NB) {
  return (size_t(NB) * size_t(n_units) * (PanelFmt<T>::E + (T == kQ4_K ? 8 : 0)) + size_t(kPanelWarps) * NB * 32) *
         sizeof(float);
}

template <int T>
size_t panel_smem_bytes(int64_t n_units) {
  return (size_t(n_units) * PanelFmt<T>::E + (T == kQ4_K ? size_t(n_units) * 8 : 0) + kPanelThreadsMax) * sizeof(float);
}

bool has_panel_format(GgmlType t) {
  return t == GgmlType::kF16 || t == GgmlType::kQ4_0 || t == GgmlType::kQ8_0 || t == GgmlType::kQ4_K ||
         t == GgmlType::kQ6_K;
}

// Runs BODY with constexpr int T for the panel types.
#define ONEBIT_CUDA_PANEL_SWITCH(type, ...)      \
  switch (int(type)) {                           \
    ONEBIT_CUDA_TYPE_CASE(kF16, __VA_ARGS__)     \
    ONEBIT_CUDA_TYPE_CASE(kQ4_0, __VA_ARGS__)    \
    ONEBIT_CUDA_TYPE_CASE(kQ8_0, __VA_ARGS__)    \
    ONEBIT_CUDA_TYPE_CASE(kQ4_K, __VA_ARGS__)    \
    ONEBIT_CUDA_TYPE_CASE(kQ6_K, __VA_ARGS__)    \
    default:                                     \
      ONEBIT_CHECK_MSG(false, "cuda backend: no panel format for this type"); \
  }

// ---- mixture of experts ----

// Router: one warp per token row (kRouteWarps rows per block). Float softmax into shared memory,
// then top_k rounds of a warp argmax (the lower index wins ties; a chosen expert becomes -inf),
// the weights renormalized by their float sum (in order) when asked.
constexpr int kRouteWarps = 4;

__global__ void __launch_bounds__(kRouteWarps * 32) moe_route_kernel(const float* __restrict__ logits, size_t l_stride,
                                                                     int64_t n, int n_exp, int top_k, bool normalize,
                                                                     int32_t* __restrict__ ids, size_t i_stride,
                                                                     float* __restrict__ weights, size_t w_stride) {
  pdl_start();
  extern __shared__ float route_p[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = int64_t(blockIdx.x) * kRouteWarps + warp;
  if (i >= n) return;  // no block-wide barrier below
  float* p = route_p + warp * n_exp;
  const float* l = logits + size_t(i) * l_stride;
  float mx = -INFINITY;
  for (int c = lane; c < n_exp; c += 32) mx = fmaxf(mx, l[c]);
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float s = 0.f;
  for (int c = lane; c < n_exp; c += 32) {
    const float v = expf(l[c] - mx);
    p[c] = v;
    s += v;
  }
  s = warp_sum(s);
  for (int c = lane; c < n_exp; c += 32) p[c] = p[c] / s;  // each lane its own entries
  __syncwarp();
  int32_t* id = ids + size_t(i) * i_stride;
  float* wt = weights + size_t(i) * w_stride;
  float sum = 0.f;
  for (int j = 0; j < top_k; ++j) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int c = lane; c < n_exp; c += 32) {
      const float v = p[c];
      if (v > bv || (v == bv && c < bi)) {
        bv = v;
        bi = c;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (bi >= n_exp) bi = 0;  // only when every p is NaN: an id in range all the same
    if (lane == 0) {
      id[j] = bi;
      wt[j] = bv;
      sum += bv;
    }
    if (lane == (bi & 31)) p[bi] = -INFINITY;
    __syncwarp();
  }
  if (normalize && lane == 0) {
    for (int j = 0; j < top_k; ++j) wt[j] = wt[j] / sum;
  }
}

struct MoeArgs {
  const uint8_t* w;  // the stack: expert e's rows start at w + e * m * w_stride
  size_t w_stride;
  int64_t m, k;
  int32_t n_experts;
  const float* x;
  size_t x_stride;  // floats
  bool shared_x;    // x row of pair p: p / top_k when shared, else p
  const int32_t* ids;
  size_t ids_stride;  // ints
  int32_t top_k;
  int64_t pairs;
  float* out;
  size_t o_stride;  // floats
  int batch;        // grouped kernel: pairs per pass (<= kMoeBatch)
  bool smem_x;      // x rows staged in shared memory
  int* err;
};

__device__ __forceinline__ int32_t moe_id(const MoeArgs& a, int64_t p) {
  return a.ids[size_t(p / a.top_k) * a.ids_stride + size_t(p % a.top_k)];
}
__device__ __forceinline__ const float* moe_x(const MoeArgs& a, int64_t p) {
  return a.x + size_t(a.shared_x ? p / a.top_k : p) * a.x_stride;
}

// A pair whose id is outside the stack: its rows [r0, r1) of out become 0 and the error bit is set
// (reported as a CHECK failure at synchronize).
__device__ __forceinline__ void moe_bad_pair(const MoeArgs& a, int64_t p, int64_t r0, int64_t r1, bool flag) {
  if (flag) atomicOr(a.err, kErrExperts);
  for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) a.out[size_t(p) * a.o_stride + r] = 0.f;
}

// Decode: one block per (32-row chunk, pair), the matvec of the pair's expert rows (row dequant).
template <int T>
__global__ void __launch_bounds__(kMatvecThreads) moe_matvec_kernel(MoeArgs a) {
  pdl_start();
  extern __shared__ float moe_xs[];
  const int64_t p = blockIdx.y;
  const int64_t r0 = int64_t(blockIdx.x) * kMatvecRowsPerBlock, r1 = min(a.m, r0 + kMatvecRowsPerBlock);
  const int32_t e = moe_id(a, p);
  if (e < 0 || e >= a.n_experts) return moe_bad_pair(a, p, r0, r1, blockIdx.x == 0 && threadIdx.x == 0);
  const float* x = moe_x(a, p);
  const float* xv = x;
  if (a.smem_x) {
    for (int64_t i = threadIdx.x; i < a.k; i += blockDim.x) moe_xs[i] = x[i];
    __syncthreads();
    xv = moe_xs;
  }
  matvec_rows<T>(a.w + size_t(e) * size_t(a.m) * a.w_stride, a.w_stride, xv, a.out + size_t(p) * a.o_stride, r0, r1,
                 a.k);
}

// Decode on the stack's panel copy (m a multiple of 32, so expert e's rows are the panel groups
// e * m / 32 ..): one block per (panel group of the expert, pair).
template <int T>
__global__ void __launch_bounds__(kPanelThreads) moe_panel_matvec_kernel(const uint8_t* __restrict__ panel,
                                                                         int64_t n_units, MoeArgs a) {
  pdl_start();
  const int64_t p = blockIdx.y, g = blockIdx.x, r0 = g * 32;
  const int32_t e = moe_id(a, p);
  if (e < 0 || e >= a.n_experts) return moe_bad_pair(a, p, r0, r0 + 32, g == 0 && threadIdx.x == 0);
  const int64_t group = int64_t(e) * (a.m / 32) + g;
  panel_matvec_group<T>(panel + size_t(group) * size_t(n_units) * panel_unit_bytes<T>(), moe_x(a, p),
                        a.out + size_t(p) * a.o_stride + r0, 32, a.k, n_units);
}

constexpr int kMoeBatch = kMultiRows;  // pairs of one expert per pass of the grouped kernel

// One pass of the grouped kernel: the nb (<= kMoeBatch) pairs `list` of this block's expert, rows
// [r0, r1) of its weights `we`, each weight element dequantized once for all nb pairs.
template <int T>
__device__ __forceinline__ void moe_batch(const MoeArgs& a, const uint8_t* __restrict__ we, const int32_t* list,
                                          int nb, float* xs, int64_t r0, int64_t r1) {
  __syncthreads();  // the previous pass is done with xs
  int32_t pr[kMoeBatch];
  const float* xp[kMoeBatch];
#pragma unroll
  for (int j = 0; j < kMoeBatch; ++j) {
    pr[j] = j < nb ? list[j] : list[0];
    xp[j] = moe_x(a, pr[j]);
  }
  if (a.smem_x) {
#pragma unroll
    for (int j = 0; j < kMoeBatch; ++j) {
      if (j < nb) {
        for (int64_t i = threadIdx.x; i < a.k; i += blockDim.x) xs[j * a.k + i] = xp[j][i];
      }
      xp[j] = xs + j * a.k;
    }
    __syncthreads();
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t r = r0 + warp; r < r1; r += kMatvecThreads / 32) {
    const uint8_t* wr = we + size_t(r) * a.w_stride;
    float acc[kMoeBatch] = {};
    for (int64_t e = lane; e < a.k; e += 32) {
      const float wv = deq<T>(wr, e);
#pragma unroll
      for (int j = 0; j < kMoeBatch; ++j)
        if (j < nb) acc[j] += wv * xp[j][e];
    }
#pragma unroll
    for (int j = 0; j < kMoeBatch; ++j) {
      if (j >= nb) break;
      const float s = warp_sum(acc[j]);
      if (lane == 0) a.out[size_t(pr[j]) * a.o_stride + r] = s;
    }
  }
}

// The grouped kernels' scan. A block of expert e reads the ids in order, collects e's pairs (a
// ballot compaction into shared memory `list`, kMoeBatch + kMatvecThreads entries) and calls
// run(pairs, nb) on them a.batch at a time, the rest (fewer) at the end; experts with no pairs
// exit after the scan. Blocks of expert 0 also zero the rows [r0, r1) of pairs whose id is out of
// range and set the error bit.
template <class Run>
__device__ __forceinline__ void moe_scan(const MoeArgs& a, int32_t e, int64_t r0, int64_t r1, int32_t* list,
                                         int* warp_n, Run&& run) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int count = 0;  // pairs waiting in list (the same value in every thread)
  for (int64_t base = 0; base < a.pairs; base += kMatvecThreads) {
    const int64_t p = base + threadIdx.x;
    bool match = false;
    if (p < a.pairs) {
      const int32_t id = moe_id(a, p);
      match = id == e;
      if (e == 0 && (id < 0 || id >= a.n_experts)) {
        if (blockIdx.x == 0) atomicOr(a.err, kErrExperts);
        for (int64_t r = r0; r < r1; ++r) a.out[size_t(p) * a.o_stride + r] = 0.f;
      }
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, match);
    if (lane == 0) warp_n[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
#pragma unroll
    for (int w = 0; w < kMatvecThreads / 32; ++w) {
      before += w < warp ? warp_n[w] : 0;
      total += warp_n[w];
    }
    if (match) list[count + before + __popc(ballot & ((1u << lane) - 1u))] = int32_t(p);
    count += total;
    __syncthreads();
    int head = 0;
    for (; count - head >= a.batch; head += a.batch) run(list + head, a.batch);
    if (head > 0) {  // move the rest (fewer than batch) to the front
      const int rest = count - head;
      const int32_t v = threadIdx.x < rest ? list[head + threadIdx.x] : 0;
      __syncthreads();
      if (threadIdx.x < rest) list[threadIdx.x] = v;
      __syncthreads();
      count = rest;
    }
  }
  if (count > 0) run(list, count);
}

// Grouped by expert (several tokens), on the rows: one block per (32-row chunk, expert), each
// pass (moe_batch) dequantizing the expert's rows once for up to kMoeBatch pairs; the rows come
// from device memory about once per call (the later passes find them in cache).
template <int T>
__global__ void __launch_bounds__(kMatvecThreads) moe_grouped_kernel(MoeArgs a) {
  pdl_start();
  extern __shared__ float moe_xs[];  // batch * k floats when a.smem_x
  __shared__ int32_t list[kMoeBatch + kMatvecThreads];
  __shared__ int warp_n[kMatvecThreads / 32];
  const int32_t e = int32_t(blockIdx.y);
  const int64_t r0 = int64_t(blockIdx.x) * kMatvecRowsPerBlock, r1 = min(a.m, r0 + kMatvecRowsPerBlock);
  const uint8_t* we = a.w + size_t(e) * size_t(a.m) * a.w_stride;
  moe_scan(a, e, r0, r1, list, warp_n,
           [&](const int32_t* pairs, int nb) { moe_batch<T>(a, we, pairs, nb, moe_xs, r0, r1); });
}

// Grouped by expert on the stack's panel copy (m whole 32-row groups): one block per (panel group
// of an expert, expert). A pass takes up to a.batch (<= kMoeBatch) pairs: each warp stages its
// units' part of their x rows (as panel_matvec_group does for one), loads each unit of its 32 rows
// once and dots it with every pair's x, accumulating into the shared partial sums.
// Shared memory: x (a.batch * n_units * E floats), for Q4_K the 32-element sums (a.batch *
// n_units * 8), the partial sums (kPanelWarps * kMoeBatch * 32).
template <int T>
__global__ void __launch_bounds__(kPanelThreads) moe_panel_grouped_kernel(const uint8_t* __restrict__ panel,
                                                                          int64_t n_units, MoeArgs a) {
  pdl_start();
  using F = PanelFmt<T>;
  constexpr size_t UB = panel_unit_bytes<T>();
  extern __shared__ float4 moe_panel_smem[];
  __shared__ int32_t list[kMoeBatch + kMatvecThreads];
  __shared__ int warp_n[kMatvecThreads / 32];
  static_assert(kPanelThreads == kMatvecThreads, "one scan for both grouped kernels");
  const int32_t e = int32_t(blockIdx.y);
  const int64_t g = blockIdx.x, r0 = g * 32;
  const int64_t xlen = n_units * F::E, slen = T == kQ4_K ? n_units * 8 : 0;
  float* xs = reinterpret_cast<float*>(moe_panel_smem);
  float* xsum = xs + a.batch * xlen;
  float* red = xsum + a.batch * slen;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t u0 = n_units * warp / kPanelWarps, u1 = n_units * (warp + 1) / kPanelWarps;
  const uint8_t* base = panel + size_t(int64_t(e) * (a.m / 32) + g) * size_t(n_units) * UB + 16 * lane;
  moe_scan(a, e, r0, r0 + 32, list, warp_n, [&](const int32_t* pairs, int nb) {
    __syncthreads();  // the previous pass is done with xs and red
    for (int j = 0; j < nb; ++j) {
      const float* x = moe_x(a, pairs[j]);
      float* xj = xs + j * xlen;
      stage_panel_x<T>(x, a.k, u0, u1, xj, xsum + j * slen);
      red[(warp * kMoeBatch + j) * 32 + lane] = 0.f;
    }
    __syncwarp();
    for (int64_t u = u0; u < u1; u += F::U) {
      uint4 q[F::U][F::CH];
      uint32_t tail[F::U];
      load_panel_units<T>(base, u, u1, q, tail);
#pragma unroll 1
      for (int j = 0; j < nb; ++j) {
        if constexpr (T == kQ6_K) {
          // Keeps the compiler from decoding the unit once for all pairs (hoisted out of this
          // loop, the decoded values spill: 255 registers).
#pragma unroll
          for (int c = 0; c < F::CH; ++c) {
            asm volatile("" : "+r"(q[0][c].x), "+r"(q[0][c].y), "+r"(q[0][c].z), "+r"(q[0][c].w));
          }
        }
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < F::U; ++i) {
          if (u + i < u1) {
            acc += panel_unit_dot<T>(q[i], tail[i], xs + j * xlen + (u + i) * F::E, xsum + j * slen + (u + i) * 8);
          }
        }
        red[(warp * kMoeBatch + j) * 32 + lane] += acc;
      }
    }
    __syncthreads();
    if (warp == 0) {
      for (int j = 0; j < nb; ++j) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < kPanelWarps; ++w) s += red[(w * kMoeBatch + j) * 32 + lane];
        a.out[size_t(pairs[j]) * a.o_stride + r0 + lane] = s;
      }
    }
  });
}

// out[i, :] = sum_j weights[i, j] * y[i * top_k + j, :], j in order.
__global__ void moe_combine_kernel(const float* __restrict__ y, size_t y_stride, const float* __restrict__ w,
                                   size_t w_stride, int top_k, float* __restrict__ out, size_t o_stride, int64_t n,
                                   int64_t d) {
  pdl_start();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * d) return;
  const int64_t i = idx / d, c = idx % d;
  const float* wi = w + size_t(i) * w_stride;
  const float* yi = y + size_t(i) * top_k * y_stride + c;
  float acc = wi[0] * yi[0];
  for (int j = 1; j < top_k; ++j) acc += wi[j] * yi[size_t(j) * y_stride];
  out[size_t(i) * o_stride + c] = acc;
}

// out = x * sigmoid(g); g one value per row when row_gate. out may alias x (each element read,
// then written, by one thread).
// The Hadamard rotation of rows per block of 32 (Tensor::in_rotation, backend/hadamard.h): a warp
// per block, the butterflies through shuffles (the lower lane of a pair takes a + b, the upper
// a - b), then 1 / sqrt(32).
__global__ void hadamard32_kernel(const float* __restrict__ x, size_t xs, float* __restrict__ out, size_t os,
                                  int64_t n, int64_t k) {
  pdl_start();
  const int64_t per_row = k / 32;
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= n * per_row) return;  // whole warps leave together
  const int64_t r = warp / per_row, c = (warp % per_row) * 32 + lane;
  float v = x[size_t(r) * xs + c];
#pragma unroll
  for (int len = 1; len < 32; len *= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, len);
    v = (lane & len) ? o - v : v + o;
  }
  out[size_t(r) * os + c] = v * 0.17677669529663687f;
}

__global__ void sigmoid_mul_kernel(const float* x, size_t x_stride, const float* __restrict__ g, size_t g_stride,
                                   bool row_gate, float* out, size_t o_stride, int64_t n, int64_t d) {
  pdl_start();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * d) return;
  const int64_t r = idx / d, c = idx % d;
  const float gv = g[size_t(r) * g_stride + (row_gate ? 0 : c)];
  out[size_t(r) * o_stride + c] = x[size_t(r) * x_stride + c] / (1.0f + expf(-gv));
}

// argmax_rows: a block per row; each thread the best of its strided columns, then the warps', then
// the block's. "Better" orders NaN below every number, then larger values, then lower columns: a
// strict order, so the result does not depend on the reduction's order, and it is the scan's of
// onebit::argmax except for a row whose first value is NaN (0 there), fixed at the end.
constexpr int kArgmaxThreads = 256;
__device__ __forceinline__ bool argmax_better(float v, int c, float bv, int bc) {
  if (isnan(bv)) return !isnan(v) || c < bc;
  return v > bv || (v == bv && c < bc);
}
__global__ void __launch_bounds__(kArgmaxThreads) argmax_rows_kernel(const float* __restrict__ x, size_t x_stride,
                                                                    int64_t d, int32_t* __restrict__ ids) {
  pdl_start();
  __shared__ float s_v[kArgmaxThreads / 32];
  __shared__ int s_c[kArgmaxThreads / 32];
  const float* r = x + size_t(blockIdx.x) * x_stride;
  float bv = NAN;
  int bc = INT_MAX;
  for (int64_t c = threadIdx.x; c < d; c += kArgmaxThreads) {
    const float v = r[c];
    if (argmax_better(v, int(c), bv, bc)) bv = v, bc = int(c);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oc = __shfl_xor_sync(0xffffffffu, bc, o);
    if (argmax_better(ov, oc, bv, bc)) bv = ov, bc = oc;
  }
  const int warp = int(threadIdx.x) / 32;
  if (threadIdx.x % 32 == 0) s_v[warp] = bv, s_c[warp] = bc;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kArgmaxThreads / 32; ++w)
    if (argmax_better(s_v[w], s_c[w], bv, bc)) bv = s_v[w], bc = s_c[w];
  if (isnan(r[0])) bc = 0, bv = r[0];
  ids[blockIdx.x] = bv == -INFINITY ? -1 : bc;
}

// ---- recurrent layers: a sequence's tokens in order, each sequence on its own threads ----

// The state row of sequence s, or -1 (and the error flag) when s's state row is outside the states.
__device__ int state_row(const int32_t* rows, int s, int64_t n_rows, int* err) {
  const int r = rows[s];
  if (r < 0 || r >= n_rows) {
    atomicOr(err, kErrStates);
    return -1;
  }
  return r;
}

constexpr int kMaxConvWidth = 8;

// ssm_conv: a thread per (channel, sequence) scans the step's rows for its sequence's, in order,
// with the window of the last K - 1 inputs in registers. Rows naming no sequence of the step are
// flagged by the block of sequence 0.
__global__ void ssm_conv_kernel(const float* __restrict__ x, size_t xs, const float* __restrict__ w, size_t ws,
                                const int32_t* __restrict__ seq, const int32_t* __restrict__ rows,
                                const int32_t* __restrict__ ckpt, int n_seqs, float* states, size_t ss,
                                int64_t n_state_rows, bool silu, float* out, size_t os, int64_t n, int64_t C, int K,
                                int* err) {
  pdl_start();
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int s = blockIdx.y;
  if (c >= C) return;
  if (s == 0 && c == 0) {
    for (int64_t t = 0; t < n; ++t) {
      if (seq[t] < 0 || seq[t] >= n_seqs) atomicOr(err, kErrStates);
    }
  }
  const int row = state_row(rows, s, n_state_rows, err);
  if (row < 0) return;
  float* st = states + size_t(row) * ss;
  float win[kMaxConvWidth - 1];
  for (int j = 0; j < K - 1; ++j) win[j] = st[int64_t(j) * C + c];
  const float* wc = w + size_t(c) * ws;
  for (int64_t t = 0; t < n; ++t) {
    if (seq[t] != s) continue;
    const float xt = x[size_t(t) * xs + c];
    float acc = wc[K - 1] * xt;
    for (int j = 0; j < K - 1; ++j) acc += wc[j] * win[j];
    out[size_t(t) * os + c] = silu ? acc / (1.0f + expf(-acc)) : acc;
    for (int j = 0; j + 1 < K - 1; ++j) win[j] = win[j + 1];
    win[K - 2] = xt;
    if (ckpt != nullptr && ckpt[t] >= 0) {  // the state after row t, kept (checkpoint)
      const int r = state_row(ckpt, int(t), n_state_rows, err);
      if (r >= 0) {
        for (int j = 0; j < K - 1; ++j) states[size_t(r) * ss + size_t(j) * C + c] = win[j];
      }
    }
  }
  for (int j = 0; j < K - 1; ++j) st[int64_t(j) * C + c] = win[j];
}

struct DeltaArgs {
  const float *q, *k, *v, *a, *b, *A, *dt;
  size_t qs, ks, vs, as, bs;
  const int32_t* seq;
  const int32_t* rows;
  const int32_t* ckpt;  // [n] checkpoint state row after each row (-1: none); nullptr: none
  float* states;
  size_t ss;
  int64_t n_state_rows;
  float* out;
  size_t os;
  int64_t n;
  int dk, dv, n_k_heads, group;  // group: value heads per key head; 0 = tiled (key head h % n_k_heads)
  int* err;
};

// gated_delta_rule, token by token: a block per (head, sequence), a thread per state column j (of
// dv) holding S[:, j] in shared memory; q and k of the token staged in shared memory.
__global__ void gated_delta_kernel(DeltaArgs a) {
  pdl_start();
  extern __shared__ float sm[];
  float* S = sm;                     // [dk][dv]
  float* qk = sm + a.dk * a.dv;      // [2 * dk]: q, then k
  const int h = blockIdx.x, s = blockIdx.y, j = threadIdx.x;
  const int kh = a.group == 0 ? h % a.n_k_heads : h / a.group;
  const int row = state_row(a.rows, s, a.n_state_rows, a.err);
  if (row < 0) return;
  float* st = a.states + size_t(row) * a.ss + size_t(h) * a.dk * a.dv;
  for (int i = 0; i < a.dk; ++i) S[i * a.dv + j] = st[i * a.dv + j];
  const float A = a.A[h], dt = a.dt[h];
  for (int64_t t = 0; t < a.n; ++t) {
    if (a.seq[t] != s) continue;
    __syncthreads();  // the previous token's q and k are read
    for (int i = j; i < a.dk; i += blockDim.x) {
      qk[i] = a.q[size_t(t) * a.qs + size_t(kh) * a.dk + i];
      qk[a.dk + i] = a.k[size_t(t) * a.ks + size_t(kh) * a.dk + i];
    }
    __syncthreads();
    const float x = a.a[size_t(t) * a.as + h] + dt;
    const float decay = expf(A * (x > 20.0f ? x : log1pf(expf(x))));
    const float beta = 1.0f / (1.0f + expf(-a.b[size_t(t) * a.bs + h]));
    float kv = 0.0f;
    for (int i = 0; i < a.dk; ++i) {
      const float v = S[i * a.dv + j] * decay;
      S[i * a.dv + j] = v;
      kv += v * qk[a.dk + i];
    }
    const float delta = beta * (a.v[size_t(t) * a.vs + size_t(h) * a.dv + j] - kv);
    float o = 0.0f;
    for (int i = 0; i < a.dk; ++i) {
      const float v = S[i * a.dv + j] + qk[a.dk + i] * delta;
      S[i * a.dv + j] = v;
      o += v * qk[i];
    }
    a.out[size_t(t) * a.os + size_t(h) * a.dv + j] = o;
    if (a.ckpt != nullptr && a.ckpt[t] >= 0) {  // the state after row t, kept (checkpoint)
      const int r = state_row(a.ckpt, int(t), a.n_state_rows, a.err);
      float* ck = r < 0 ? nullptr : a.states + size_t(r) * a.ss + size_t(h) * a.dk * a.dv;
      if (ck != nullptr) {
        for (int i = 0; i < a.dk; ++i) ck[i * a.dv + j] = S[i * a.dv + j];
      }
    }
  }
  for (int i = 0; i < a.dk; ++i) st[i * a.dv + j] = S[i * a.dv + j];
}

__global__ void probe_kernel(int* p) {
  if (threadIdx.x == 0) *p = 0;
}

// ---- the backend ----

class CudaBuffer final : public BackendBuffer {
 public:
  CudaBuffer(uint8_t* p, size_t bytes) : ptr(p), bytes(bytes) {}
  ~CudaBuffer() override {
    cudaFree(ptr);
    if (panel != nullptr) cudaFree(panel);
  }
  uint8_t* ptr;
  size_t bytes;
  // A weight's repacked copy for the decode matrix-vector (panel_matvec_kernel), or nullptr.
  uint8_t* panel = nullptr;
  int64_t panel_rows = 0, panel_cols = 0;
};

inline uint8_t* dptr(const Tensor& t, int64_t row = 0) {
  return static_cast<CudaBuffer*>(t.buffer)->ptr + t.offset_bytes + size_t(row) * t.row_stride_bytes;
}
inline float* fptr(const Tensor& t) {
  ONEBIT_CHECK(t.type == GgmlType::kF32);
  return reinterpret_cast<float*>(dptr(t));
}
inline const int32_t* iptr(const Tensor& t) {
  ONEBIT_CHECK(t.type == GgmlType::kI32);
  return reinterpret_cast<const int32_t*>(dptr(t));
}
inline size_t fstride(const Tensor& t) { return t.row_stride_bytes / sizeof(float); }
inline void same_shape(const Tensor& a, const Tensor& b) { ONEBIT_CHECK(a.n_rows == b.n_rows && a.n_cols == b.n_cols); }
inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

double yarn_corr_dim(int n_rot, int original_context, double n_turns, double base) {
  return n_rot * std::log(original_context / (n_turns * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

constexpr size_t kMatvecSmemLimit = 160 * 1024;

// Whether this build's device code for the current device has gemm_wgmma_kernel (sm_90a).
bool wgmma_built() {
  int* d = nullptr;
  int has = 0;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int)));
  wgmma_probe_kernel<<<1, 1>>>(d);
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) CUDA_OK(cudaMemcpy(&has, d, sizeof(int), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d));
  return e == cudaSuccess && has == 1;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, cudaStream_t stream, int* err, int* host_err)
      : device_(device), stream_(stream), err_(err), host_err_(host_err), name_("cuda:" + std::to_string(device)) {
    allow_large_smem();
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&zero_ids_), kMultiRows * sizeof(int32_t)));
    CUDA_OK(cudaMemset(zero_ids_, 0, kMultiRows * sizeof(int32_t)));
    int major = 0;
    CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major < 9) pdl_ = 0;
    CUDA_OK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device));
    if (wgmma_) wgmma_ = major == 9 && wgmma_built();
    if (pg_) init_programs();
  }
  // The step programs' grid: as many blocks as fit at once with the largest shared memory.
  void init_programs() {
    int coop = 0;
    CUDA_OK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device_));
    if (coop == 0) {
      pg_ = false;
      return;
    }
    int per_sm = INT_MAX;
    for (const void* fn : {reinterpret_cast<const void*>(&step_program_kernel<kF16>),
                           reinterpret_cast<const void*>(&step_program_kernel<kQ4_0>),
                           reinterpret_cast<const void*>(&step_program_kernel<kQ8_0>),
                           reinterpret_cast<const void*>(&step_program_kernel<kQ4_K>),
                           reinterpret_cast<const void*>(&step_program_kernel<kQ6_K>)}) {
      CUDA_OK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
      int n = 0;
      CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, kPgThreads, kMatvecSmemLimit));
      per_sm = std::min(per_sm, n);
    }
    pg_grid_ = per_sm * sms_;
    if (pg_grid_ <= 0) pg_ = false;
  }
  ~CudaBackend() override {
    flush(false);
    cudaStreamSynchronize(stream_);
    if (const char* e = std::getenv("ONEBIT_CUDA_GRAPH_STATS"); e != nullptr && std::string(e) == "1") {
      std::fprintf(stderr,
                   "cuda graphs: %llu steps: %llu replayed, %llu captured, %llu first seen (op by op), %llu not "
                   "graphable; %llu shapes evicted, all dropped %llu times\n",
                   (unsigned long long)stats_.steps, (unsigned long long)stats_.replays,
                   (unsigned long long)stats_.captures, (unsigned long long)stats_.first_seen,
                   (unsigned long long)stats_.broken, (unsigned long long)stats_.evictions,
                   (unsigned long long)stats_.drops);
      std::fprintf(stderr, "cuda step programs: %llu launched or captured, %llu ops in them\n",
                   (unsigned long long)stats_.programs, (unsigned long long)stats_.program_ops);
      std::fprintf(stderr,
                   "cuda steps: recording %.1f ms, launching %.1f ms, waiting %.1f ms (host time, all steps)\n",
                   stats_.record_ms, stats_.launch_ms, stats_.wait_ms);
    }
    drop_graphs();  // folds the programs' traces
    if (pg_trace_) {
      static const char* names[8] = {"?", "norm", "matvec", "qkv", "attention", "swiglu", "add", "?"};
      for (int k = 1; k < 7; ++k) {
        const double* r = pg_traced_[k];
        if (r[1] == 0) continue;
        std::fprintf(stderr, "cuda step program trace: %-9s %5.0f instructions, %8.0f runs, wait %.2f us, time %.2f us\n",
                     names[k], r[0], r[1], r[2] / r[1] / 1e3, r[3] / r[1] / 1e3);
      }
    }
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    buffers_.clear();
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (row_scales_ != nullptr) cudaFree(row_scales_);
    if (mma_part_ != nullptr) cudaFree(mma_part_);
    if (gemm_x_ != nullptr) cudaFree(gemm_x_);
    if (gemm_w_ != nullptr) cudaFree(gemm_w_);
    cudaFree(zero_ids_);

    cudaFree(err_);
    cudaFreeHost(host_err_);
    cudaStreamDestroy(stream_);
  }
  std::string_view name() const override { return name_; }

  Result<Tensor> weight_from_host(GgmlType type, int64_t n_rows, int64_t n_cols,
                                  std::span<const uint8_t> bytes) override {
    if (!cuda_supports(type)) {
      return make_error("cuda backend: weight type " + ggml_type_name(uint32_t(type)) +
                        " is not supported; use f32, f16, bf16, q4_0..q8_0 or q4_K..q6_K");
    }
    Tensor t{nullptr, 0, type, n_rows, n_cols, 0};
    t.row_stride_bytes = t.row_bytes();
    if (bytes.size() != t.row_stride_bytes * size_t(n_rows)) {
      return make_error("cuda backend: weight of " + std::to_string(n_rows) + " x " + std::to_string(n_cols) +
                        " needs " + std::to_string(t.row_stride_bytes * n_rows) + " bytes, got " +
                        std::to_string(bytes.size()));
    }
    flush(false);
    auto buf = new_buffer(bytes.size());
    if (!buf.ok()) return buf.error();
    CUDA_COPY(cudaMemcpyAsync((*buf)->ptr, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_));
    t.buffer = *buf;
    if (panels_ && has_panel_format(type) && n_rows > 0 && n_cols > 0) make_panel(t, **buf);
    CUDA_OK(cudaStreamSynchronize(stream_));  // the bytes need not outlive this call on a device backend
    return t;
  }

  Result<Tensor> alloc(GgmlType type, int64_t n_rows, int64_t n_cols) override {
    ONEBIT_CHECK(type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kI32);
    ONEBIT_CHECK(n_rows >= 0 && n_cols >= 0);
    const size_t elem = type == GgmlType::kF16 ? 2 : 4;
    const size_t n_bytes = size_t(n_rows) * size_t(n_cols) * elem;
    flush(false);
    auto buf = new_buffer(n_bytes);
    if (!buf.ok()) return buf.error();
    CUDA_COPY(cudaMemsetAsync((*buf)->ptr, 0, std::max<size_t>(n_bytes, 1), stream_));
    return Tensor{*buf, 0, type, n_rows, n_cols, size_t(n_cols) * elem};
  }

  void free(const Tensor& t) override {
    const auto it = std::find_if(buffers_.begin(), buffers_.end(), [&](const auto& b) { return b.get() == t.buffer; });
    ONEBIT_CHECK_MSG(it != buffers_.end(), "free of a tensor this backend does not own");
    flush(false);
    CUDA_OK(cudaStreamSynchronize(stream_));
    drop_graphs();  // they may name the buffer's device memory
    buffers_.erase(it);
  }

  void write(const Tensor& dst, const void* src) override {
    const size_t rb = dst.row_bytes();
    if (dst.n_rows == 0 || rb == 0) return;
    const size_t n = rb * size_t(dst.n_rows);
    const size_t off = graphs_ ? stage(n) : kNoStage;
    if (off == kNoStage) {  // eager, from the caller's (pageable) memory
      flush(false);
      CUDA_COPY(cudaMemcpy2DAsync(dptr(dst), pitch(dst), src, rb, rb, size_t(dst.n_rows),
                                  cudaMemcpyHostToDevice, stream_));
      return;
    }
    std::memcpy(pinned_ + off, src, n);
    sig_.add(kOpWrite, dst, off, n);
    uint8_t* from = pinned_ + off;
    defer([=, this] {
      CUDA_COPY(cudaMemcpy2DAsync(dptr(dst), pitch(dst), from, rb, rb, size_t(dst.n_rows),
                                  cudaMemcpyHostToDevice, stream_));
    });
  }

  void read(const Tensor& src, void* dst) override {
    const size_t rb = src.row_bytes();
    if (src.n_rows == 0 || rb == 0) return;
    const size_t n = rb * size_t(src.n_rows);
    const size_t off = graphs_ ? stage(n) : kNoStage;
    if (off == kNoStage) {
      flush(false);
      CUDA_COPY(cudaMemcpy2DAsync(dst, rb, dptr(src), pitch(src), rb, size_t(src.n_rows),
                                  cudaMemcpyDeviceToHost, stream_));
      return;
    }
    sig_.add(kOpRead, src, off, n);
    uint8_t* to = pinned_ + off;
    reads_.push_back(HostRead{dst, to, n});
    defer([=, this] {
      CUDA_COPY(cudaMemcpy2DAsync(to, rb, dptr(src), pitch(src), rb, size_t(src.n_rows),
                                  cudaMemcpyDeviceToHost, stream_));
    });
  }

  // A step kernel's launch (one that starts with pdl_start, or pdl_trigger and a pdl_wait before
  // its first use of an earlier kernel's memory): with programmatic dependent launch when the
  // stream's last op is a kernel, so its blocks start while that kernel runs (a panel product's
  // first weights are loaded by the time it ends); as a plain launch otherwise.
  template <class... P, class... A>
  void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
    launch_overlapping(pdl_ >= 2, kernel, grid, block, smem, std::forward<A>(args)...);
  }
  template <class... P, class... A>
  void launch_overlapping(bool overlap, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream_;
    if (overlap && kernel_tail_) {
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
    }
    CUDA_OK(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
    kernel_tail_ = true;
  }

  // Ops are deferred to here (when graphs are on): the step's ops run from a CUDA graph captured
  // the second time the same sequence of ops (same kernels, tensors and parameters) is seen, so
  // a repeated decode step is one launch; a new sequence runs op by op.
  void get_rows(const Tensor& table, const Tensor& ids, const Tensor& out) override {
    op(kOpGetRows, [=, this] { get_rows_now(table, ids, out); }, table, ids, out);
  }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
    op_pg(pg_norm(x, nullptr, weight, eps, nullptr, out), kOpRmsNorm, [=, this] { rms_norm_now(x, weight, eps, out); },
          x, weight, eps, out);
  }
  bool rotates_inputs() const override { return true; }
  void matmul(const Tensor& w, const Tensor& x, const Tensor& out) override {
    if (w.in_rotation > 0) return matmul(unrotated(w), rotated(x, w.in_rotation), out);
    Products one;
    one.add(w, out);
    if (panel_mma_apply(x, one)) {  // not while capturing
      panel_mma_grow(x, one);
    } else if (gemm_applies(w, x.n_rows)) {  // not while capturing
      gemm_grow(x, one);
    } else if (mma_ && mma_matmul_applies(int(w.type), x.n_rows, mma_rows_min_)) {  // not while capturing
      grow_array(row_scales_, row_scales_n_, size_t(x.n_rows));
      const int split = mma_split(w.n_rows, x.n_rows, w.n_cols);
      if (split > 1) grow_array(mma_part_, mma_part_n_, size_t(split) * size_t(x.n_rows * w.n_rows));
    }
    op_pg(pg_matvec(x, one), kOpMatmul, [=, this] { matmul_now(w, x, out); }, w, x, out);
  }
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    op_pg(pg_elementwise(kPgAdd, a, b, out), kOpAdd, [=, this] { add_now(a, b, out); }, a, b, out);
  }
  void swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) override {
    op_pg(pg_elementwise(kPgSwiglu, gate, up, out), kOpSwiglu, [=, this] { swiglu_now(gate, up, out); }, gate, up,
          out);
  }
  void softmax(const Tensor& x, const Tensor& out) override {
    op(kOpSoftmax, [=, this] { softmax_now(x, out); }, x, out);
  }
  void copy(const Tensor& src, const Tensor& dst) override {
    // An overlapping copy goes through scratch: grow it now (it synchronizes), not while capturing.
    if (src.buffer == dst.buffer && src.n_rows > 0) scratch(src.row_bytes() * size_t(src.n_rows));
    op(kOpCopy, [=, this] { copy_now(src, dst); }, src, dst);
  }
  void store_kv(const Tensor& src, const Tensor& slots, const Tensor& dst) override {
    op(kOpStoreKv, [=, this] { store_kv_now(src, slots, dst); }, src, slots, dst);
  }
  void rope(const Tensor& x, const Tensor& positions, const RopeParams& p) override {
    op(kOpRope, [=, this] { rope_now(x, positions, p); }, x, positions, p);
  }
  void matmuls(const Tensor& x, const Products& p) override {
    if (panel_segs_apply(x, p)) return op_pg(pg_matvec(x, p), kOpMatmuls, [=, this] { panel_segs_now(x, p); }, x, p);
    if (panel_mma_apply(x, p)) {
      panel_mma_grow(x, p);  // not while capturing
      return op(kOpMatmuls, [=, this] { panel_mma_now(x, p); }, x, p);
    }
    if (gemm_group_applies(x, p)) {
      gemm_grow(x, p);  // not while capturing
      return op(kOpMatmuls, [=, this] { gemm_now(x, p); }, x, p);
    }
    Backend::matmuls(x, p);
  }
  void add_rms_norm(const Tensor& a, const Tensor& b, const Tensor& weight, float eps, const Tensor& sum,
                    const Tensor& out) override {
    op_pg(pg_norm(a, &b, weight, eps, &sum, out), kOpAddRmsNorm,
          [=, this] { add_rms_norm_now(a, b, weight, eps, sum, out); }, a, b, weight, eps, sum, out);
  }
  void qk_rope_store(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm,
                     float eps, const Tensor& positions, const RopeParams& rope, int32_t n_kv_heads,
                     const Tensor& slots, const Tensor& k_pool, const Tensor& v_pool) override {
    op_pg(pg_qkv(q, k, v, q_norm, k_norm, eps, positions, rope, n_kv_heads, slots, k_pool, v_pool), kOpQkRopeStore,
          [=, this] { qk_rope_store_now(q, k, v, q_norm, k_norm, eps, positions, rope, n_kv_heads, slots, k_pool, v_pool); },
          q, k, v, q_norm, k_norm, eps, positions, rope, n_kv_heads, slots, k_pool, v_pool);
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const AttentionParams& p) override {
    op(kOpAttention, [=, this] { attention_now(q, k, v, out, p); }, q, k, v, out, p);
  }
  void paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const Tensor& positions,
                       const Tensor& seq_ids, const Tensor& block_tables, const Tensor& out,
                       const PagedAttentionParams& p) override {
    op_pg(pg_attention(q, k_pool, v_pool, positions, seq_ids, block_tables, out, p), kOpPagedAttention,
          [=, this] { paged_attention_now(q, k_pool, v_pool, positions, seq_ids, block_tables, out, p); }, q, k_pool,
          v_pool, positions, seq_ids, block_tables, out, p);
  }

  void moe_route(const Tensor& logits, bool normalize, const Tensor& ids, const Tensor& weights) override {
    check_moe_route(logits, ids, weights);
    op(kOpMoeRoute, [=, this] { moe_route_now(logits, normalize, ids, weights); }, logits, int(normalize), ids,
       weights);
  }
  void moe_matmul(const Tensor& w, int32_t n_experts, const Tensor& x, const Tensor& ids, const Tensor& out) override {
    check_moe_matmul(w, n_experts, x, ids, out);
    if (w.in_rotation > 0) return moe_matmul(unrotated(w), n_experts, rotated(x, w.in_rotation), ids, out);
    op(kOpMoeMatmul, [=, this] { moe_matmul_now(w, n_experts, x, ids, out); }, w, int(n_experts), x, ids, out);
  }
  void moe_combine(const Tensor& y, const Tensor& weights, const Tensor& out) override {
    check_moe_combine(y, weights, out);
    op(kOpMoeCombine, [=, this] { moe_combine_now(y, weights, out); }, y, weights, out);
  }
  void sigmoid_mul(const Tensor& x, const Tensor& g, const Tensor& out) override {
    check_sigmoid_mul(x, g, out);
    op(kOpSigmoidMul, [=, this] { sigmoid_mul_now(x, g, out); }, x, g, out);
  }
  void argmax_rows(const Tensor& x, const Tensor& ids) override {
    check_argmax_rows(x, ids);
    op(kOpArgmaxRows, [=, this] { argmax_rows_now(x, ids); }, x, ids);
  }
  void ssm_conv(const Tensor& x, const Tensor& w, const Tensor& seq_ids, const Tensor& state_rows,
                const Tensor& ckpt_rows, const Tensor& states, bool silu, const Tensor& out) override {
    const int64_t K = check_ssm_conv(x, w, seq_ids, state_rows, ckpt_rows, states, out);
    ONEBIT_CHECK(K <= kMaxConvWidth);
    op(kOpSsmConv, [=, this] { ssm_conv_now(x, w, seq_ids, state_rows, ckpt_rows, states, silu, out); }, x, w,
       seq_ids, state_rows, ckpt_rows, states, int(silu), out);
  }
  void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                        const Tensor& A, const Tensor& dt_bias, const Tensor& seq_ids, const Tensor& state_rows,
                        const Tensor& ckpt_rows, const Tensor& states, const Tensor& out,
                        const DeltaParams& p) override {
    const DeltaDims d =
        check_gated_delta_rule(q, k, v, a, b, A, dt_bias, seq_ids, state_rows, ckpt_rows, states, out, p);
    ONEBIT_CHECK(d.dv <= 1024 && (d.dk * d.dv + 2 * d.dk) * sizeof(float) <= kMatvecSmemLimit);
    op(kOpGatedDelta,
       [=, this] { gated_delta_now(q, k, v, a, b, A, dt_bias, seq_ids, state_rows, ckpt_rows, states, out, d); }, q,
       k, v, a, b, A, dt_bias, seq_ids, state_rows, ckpt_rows, states, out, int(d.n_k_heads), int(d.tiled));
  }

  // ---- step-program instructions (step_program.cuh): an op's, where a body there computes it for
  // these shapes (rows up to kPgRowsMax), else none and the op runs as its own kernel ----
  static constexpr int64_t kPgRowsMax = 16;
  bool pg_rows(int64_t n) const { return pg_ && graphs_ && n >= 1 && n <= kPgRowsMax; }
  static bool f32(const Tensor& t) { return t.valid() && t.type == GgmlType::kF32; }
  static bool shaped(const Tensor& t, const Tensor& like) {
    return f32(t) && t.n_rows == like.n_rows && t.n_cols == like.n_cols;
  }
  // rms_norm (b nullptr) or add_rms_norm.
  std::optional<PgInstr> pg_norm(const Tensor& a, const Tensor* b, const Tensor& w, float eps, const Tensor* sum,
                                 const Tensor& out) const {
    if (!pg_rows(a.n_rows) || !f32(a) || a.n_cols < 1 || !shaped(out, a) || !f32(w) || w.n_rows != 1 ||
        w.n_cols != a.n_cols || (b != nullptr && (!shaped(*b, a) || !shaped(*sum, a)))) {
      return std::nullopt;
    }
    PgInstr in{};
    in.op = kPgNorm;
    in.units = in.work = unsigned(a.n_rows);
    in.norm = PgNorm{fptr(a),  b != nullptr ? fptr(*b) : nullptr, b != nullptr ? fptr(*sum) : nullptr,
                     fptr(w),  fptr(out), fstride(a), b != nullptr ? fstride(*b) : 0,
                     b != nullptr ? fstride(*sum) : 0, fstride(out), eps, a.n_cols};
    return in;
  }
  // One activation row times p's weights, every one with its whole panel copy.
  std::optional<PgInstr> pg_matvec(const Tensor& x, const Products& p) const {
    if (!pg_rows(x.n_rows) || x.n_rows != 1 || !f32(x) || !whole_panels(x, p)) return std::nullopt;
    for (int32_t i = 0; i < p.n; ++i) {
      if (!f32(p.out[i])) return std::nullopt;
    }
    PgInstr in{};
    in.op = kPgMatvec;
    in.mv.s = panel_segs_of(p, 32);
    in.units = in.mv.s.first[p.n];
    // 16 warps a group where every group has a block, else 8 or 4 (one round of items if it can)
    in.mv.per_item = in.units <= unsigned(pg_grid_) ? 1 : in.units <= 2 * unsigned(pg_grid_) ? 2 : 4;
    in.work = (in.units + unsigned(in.mv.per_item) - 1) / unsigned(in.mv.per_item);
    in.mv.x = fptr(x);
    in.mv.k = x.n_cols;
    in.mv.type = int(p.w[0].type);
    in.mv.x15 = x15_;
    bool fits = false;
    ONEBIT_CUDA_PANEL_SWITCH(p.w[0].type, {
      in.mv.n_units = (x.n_cols + PanelFmt<T>::E - 1) / PanelFmt<T>::E;
      fits = panel_smem_bytes<T>(in.mv.n_units) <= kMatvecSmemLimit;
    });
    if (!fits) return std::nullopt;
    return in;
  }
  std::optional<PgInstr> pg_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                                const Tensor& k_norm, float eps, const Tensor& positions, const RopeParams& rope,
                                int32_t n_kv_heads, const Tensor& slots, const Tensor& k_pool,
                                const Tensor& v_pool) const {
    if (!pg_rows(k.n_rows)) return std::nullopt;
    PgInstr in{};
    in.op = kPgQkv;
    in.qkv = qkv_args(q, k, v, q_norm, k_norm, eps, positions, rope, n_kv_heads, slots, k_pool, v_pool);
    in.units = unsigned(k.n_rows * (in.qkv.n_q_heads + 2 * n_kv_heads));
    in.work = (in.units + kPgWarps - 1) / kPgWarps;
    return in;
  }
  // Paged decode attention (fewer rows than a flash tile: attention_kernel's rows).
  std::optional<PgInstr> pg_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                                      const Tensor& positions, const Tensor& seq_ids, const Tensor& block_tables,
                                      const Tensor& out, const PagedAttentionParams& p) const {
    if (!pg_rows(q.n_rows) || q.n_rows >= 16) return std::nullopt;  // 16+: flash_attention's tiles may take rows
    PgInstr in{};
    in.op = kPgAttn;
    in.attn.a = paged_args(q, k_pool, v_pool, positions, seq_ids, block_tables, out, p);
    in.attn.a.skip_flash_tiles = false;
    in.attn.f16 = k_pool.type == GgmlType::kF16;
    in.units = unsigned(int64_t(p.n_heads) * q.n_rows);
    in.work = (in.units + 1) / 2;
    return in;
  }
  // swiglu (out = silu(a) * b) or add (b of a's rows or one row).
  std::optional<PgInstr> pg_elementwise(PgOp op, const Tensor& a, const Tensor& b, const Tensor& out) const {
    if (!pg_rows(a.n_rows) || !f32(a) || a.n_cols < 1 || !shaped(out, a) || !f32(b) || b.n_cols != a.n_cols ||
        (b.n_rows != a.n_rows && !(op == kPgAdd && b.n_rows == 1))) {
      return std::nullopt;
    }
    PgInstr in{};
    in.op = op;
    in.units = unsigned(a.n_rows * a.n_cols);
    in.work = (in.units + kPgThreads - 1) / kPgThreads;
    in.elt = PgElt{fptr(a), fptr(b), fptr(out), fstride(a), fstride(b), fstride(out), a.n_rows, a.n_cols,
                   b.n_rows == 1 && a.n_rows != 1};
    return in;
  }

  void synchronize() override {
    run_step();
    CUDA_COPY(cudaMemcpyAsync(host_err_, err_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
    const double wait_start = host_ms();
    CUDA_OK(cudaStreamSynchronize(stream_));
    stats_.wait_ms += host_ms() - wait_start;
    if (*host_err_ != 0) {
      const int e = *host_err_;
      std::string msg = "cuda backend: an op got out-of-range input:";
      if (e & kErrIds) msg += " get_rows id outside the table;";
      if (e & kErrSlots) msg += " store_kv slot outside the pool;";
      if (e & kErrBlockTable) msg += " paged_attention block outside the pool;";
      if (e & kErrSeq) msg += " paged_attention sequence id or position outside the block tables;";
      if (e & kErrExperts) msg += " moe_matmul expert id outside the stack;";
      if (e & kErrStates) msg += " ssm_conv / gated_delta_rule sequence or state row out of range;";
      ONEBIT_CHECK_MSG(e == 0, msg.c_str());
    }
    for (const HostRead& r : reads_) std::memcpy(r.dst, r.from, r.n);
    reads_.clear();
    staged_ = 0;
  }

  // A rotated weight as plain (its input is rotated already).
  static Tensor unrotated(Tensor w) {
    w.in_rotation = 0;
    return w;
  }
  // x's rows rotated per block of 32 into the rotation scratch (grown on demand: a step that grows
  // it is not captured as a graph; successive products reuse it in stream order).
  Tensor rotated(const Tensor& x, int32_t block) {
    ONEBIT_CHECK(block == 32 && x.type == GgmlType::kF32 && x.n_cols % 32 == 0);
    const Tensor xr = scratch_rows(*this, rot_, x.n_rows * x.n_cols, x.n_rows, x.n_cols);
    op(kOpHadamard, [=, this] { hadamard_now(x, xr); }, x, xr);
    return xr;
  }
  void hadamard_now(const Tensor& x, const Tensor& out) {
    const int64_t n = x.n_rows, k = x.n_cols;
    if (n * k == 0) return;
    launch(&hadamard32_kernel, dim3(blocks_for(n * k, 256)), dim3(256), 0, fptr(x), fstride(x), fptr(out),
           fstride(out), n, k);
    CUDA_LAUNCHED();
  }

  void get_rows_now(const Tensor& table, const Tensor& ids, const Tensor& out) {
    ONEBIT_CHECK(ids.n_rows == 1 && ids.n_cols == out.n_rows && table.n_cols == out.n_cols);
    const int64_t n = out.n_rows, d = out.n_cols;
    if (n == 0 || d == 0) return;
    float* o = fptr(out);
    const int32_t* id = iptr(ids);
    const unsigned grid = blocks_for(n * d, 256);
    ONEBIT_CUDA_TYPE_SWITCH(
        table.type, launch(&get_rows_kernel<T>, dim3(grid), dim3(256), 0, dptr(table), table.row_stride_bytes,
                           table.n_rows, id, o, fstride(out), n, d, err_));
    CUDA_LAUNCHED();
  }

  void rms_norm_now(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
    same_shape(x, out);
    ONEBIT_CHECK(weight.n_rows == 1 && weight.n_cols == x.n_cols);
    if (x.n_rows == 0) return;
    // Wide rows get a thread per 4 elements (one block per row: the decode step's norms run alone).
    const int threads = x.n_cols <= 128 ? 64 : int(std::min<int64_t>(1024, std::max<int64_t>(kRowThreads, (x.n_cols / 4 + 31) / 32 * 32)));
    launch(&rms_norm_kernel, dim3(unsigned(x.n_rows)), dim3(threads), 0, fptr(x), fstride(x), fptr(weight),
           eps, fptr(out), fstride(out), x.n_cols);
    CUDA_LAUNCHED();
  }

  void matmul_now(const Tensor& w, const Tensor& x, const Tensor& out) {
    ONEBIT_CHECK(w.n_cols == x.n_cols && out.n_rows == x.n_rows && out.n_cols == w.n_rows);
    const int64_t m = w.n_rows, n = x.n_rows, k = w.n_cols;
    if (m == 0 || n == 0) return;
    const float* xp = fptr(x);
    float* op = fptr(out);
    if (n == 1 && panel_matvec(w, xp, op)) return;
    if (n == 1) {
      const bool smem = size_t(k) * sizeof(float) <= kMatvecSmemLimit;
      const size_t shm = smem ? size_t(k) * sizeof(float) : 0;
      const unsigned grid = blocks_for(m, kMatvecRowsPerBlock);
      ONEBIT_CUDA_TYPE_SWITCH(w.type, {
        if (shm > 48 * 1024) ensure_smem_attr(int(w.type), reinterpret_cast<const void*>(&matvec_kernel<T>));
        launch(&matvec_kernel<T>, dim3(grid), dim3(kMatvecThreads), shm, dptr(w), w.row_stride_bytes, xp, op,
               m, k, smem);
      });
      CUDA_LAUNCHED();
      return;
    }
    if (Products one; n > 1 && (one.add(w, out), panel_segs_apply(x, one))) return panel_segs_now(x, one);
    if (Products one; n > 1 && (one.add(w, out), panel_mma_apply(x, one))) return panel_mma_now(x, one);
    if (Products one; gemm_applies(w, n)) return one.add(w, out), gemm_now(x, one);
    const bool mma_rows = mma_ && mma_matmul_applies(int(w.type), n, mma_rows_min_);
    if (n <= kMultiRows && !mma_rows && panel_rows(w, x, out)) return;
    if (n <= kMultiRows && !mma_rows && size_t(n * k) * sizeof(float) <= kMatvecSmemLimit) {
      const size_t shm = size_t(n * k) * sizeof(float);
      const unsigned grid = blocks_for(m, kMatvecRowsPerBlock);
      ONEBIT_CUDA_TYPE_SWITCH(w.type, {
        if (shm > 48 * 1024 && !multi_smem_set_[int(w.type) & 31]) {
          CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&matvec_multi_kernel<T>),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
          multi_smem_set_[int(w.type) & 31] = true;
        }
        launch(&matvec_multi_kernel<T>, dim3(grid), dim3(kMatvecThreads), shm, dptr(w), w.row_stride_bytes,
               xp, fstride(x), op, fstride(out), m, int(n), k);
      });
      CUDA_LAUNCHED();
      return;
    }
    if (mma_rows) {
      const dim3 grid(blocks_for(m, kMmaM), blocks_for(n, kMmaN));
      const bool x_vec = reinterpret_cast<uintptr_t>(xp) % 16 == 0 && fstride(x) % 4 == 0 && k % 16 == 0;
      ONEBIT_CHECK(row_scales_ != nullptr && size_t(n) <= row_scales_n_);
      mma_row_scale_kernel<<<unsigned(n), 256, 0, stream_>>>(xp, fstride(x), k, row_scales_);
      const int split = mma_split(m, n, k);
      ONEBIT_CHECK(split == 1 || (mma_part_ != nullptr && size_t(split) * size_t(n * m) <= mma_part_n_));
      float* part = split > 1 ? mma_part_ : nullptr;
      ONEBIT_CUDA_TYPE_SWITCH(w.type, matmul_mma_kernel<T><<<dim3(grid.x, grid.y, unsigned(split)), kMmaThreads, 0,
                                                            stream_>>>(dptr(w), w.row_stride_bytes, xp, fstride(x),
                                                                       op, fstride(out), m, n, k, x_vec,
                                                                       row_scales_, part));
      CUDA_LAUNCHED();
      if (split > 1) {
        mma_split_sum_kernel<<<blocks_for(n * m, 256), 256, 0, stream_>>>(part, split, n, m, row_scales_, op,
                                                                          fstride(out));
        CUDA_LAUNCHED();
      }
      return;
    }
    const dim3 grid(blocks_for(m, kTileM), blocks_for(n, kTileN));
    ONEBIT_CUDA_TYPE_SWITCH(w.type, launch(&matmul_tiled_kernel<T>, dim3(grid), dim3(256), 0, dptr(w),
                                           w.row_stride_bytes, xp, fstride(x), op, fstride(out), m, n, k));
    CUDA_LAUNCHED();
  }

  void add_now(const Tensor& a, const Tensor& b, const Tensor& out) {
    same_shape(a, out);
    ONEBIT_CHECK(b.n_cols == a.n_cols && (b.n_rows == a.n_rows || b.n_rows == 1));
    const int64_t n = a.n_rows, d = a.n_cols;
    if (n * d == 0) return;
    launch(&add_kernel, dim3(blocks_for(n * d, 256)), dim3(256), 0, fptr(a), fstride(a), fptr(b), fstride(b),
           b.n_rows == 1, fptr(out), fstride(out), n, d);
    CUDA_LAUNCHED();
  }

  void swiglu_now(const Tensor& gate, const Tensor& up, const Tensor& out) {
    same_shape(gate, up);
    same_shape(gate, out);
    const int64_t n = gate.n_rows, d = gate.n_cols;
    if (n * d == 0) return;
    launch(&swiglu_kernel, dim3(blocks_for(n * d, 256)), dim3(256), 0, fptr(gate), fstride(gate), fptr(up),
           fstride(up), fptr(out), fstride(out), n, d);
    CUDA_LAUNCHED();
  }

  void softmax_now(const Tensor& x, const Tensor& out) {
    same_shape(x, out);
    if (x.n_rows == 0 || x.n_cols == 0) return;
    launch(&softmax_kernel, dim3(unsigned(x.n_rows)), dim3(kRowThreads), 0, fptr(x), fstride(x), fptr(out),
           fstride(out), x.n_cols);
    CUDA_LAUNCHED();
  }

  void copy_now(const Tensor& src, const Tensor& dst) {
    same_shape(src, dst);
    ONEBIT_CHECK(src.type == dst.type);
    const size_t rb = src.row_bytes();
    const size_t rows = size_t(src.n_rows);
    if (rows == 0 || rb == 0) return;
    // Overlapping views of one buffer go through scratch (a 2-D device copy must not overlap).
    const size_t s0 = src.offset_bytes, s1 = s0 + (rows - 1) * src.row_stride_bytes + rb;
    const size_t d0 = dst.offset_bytes, d1 = d0 + (rows - 1) * dst.row_stride_bytes + rb;
    if (src.buffer == dst.buffer && s0 < d1 && d0 < s1) {
      uint8_t* tmp = scratch(rb * rows);
      CUDA_COPY(
          cudaMemcpy2DAsync(tmp, rb, dptr(src), pitch(src), rb, rows, cudaMemcpyDeviceToDevice, stream_));
      CUDA_COPY(
          cudaMemcpy2DAsync(dptr(dst), pitch(dst), tmp, rb, rb, rows, cudaMemcpyDeviceToDevice, stream_));
      return;
    }
    CUDA_COPY(cudaMemcpy2DAsync(dptr(dst), pitch(dst), dptr(src), pitch(src), rb, rows,
                                cudaMemcpyDeviceToDevice, stream_));
  }

  void store_kv_now(const Tensor& src, const Tensor& slots, const Tensor& dst) {
    ONEBIT_CHECK(src.type == GgmlType::kF32 && (dst.type == GgmlType::kF32 || dst.type == GgmlType::kF16));
    ONEBIT_CHECK(slots.type == GgmlType::kI32 && slots.n_rows == 1 && slots.n_cols == src.n_rows);
    ONEBIT_CHECK(src.n_cols == dst.n_cols);
    const int64_t n = src.n_rows, d = src.n_cols;
    if (n * d == 0) return;
    launch(&store_kv_kernel, dim3(blocks_for(n * d, 256)), dim3(256), 0, fptr(src), fstride(src), iptr(slots),
           dptr(dst), dst.row_stride_bytes, dst.n_rows, dst.type == GgmlType::kF16, n, d, err_);
    CUDA_LAUNCHED();
  }

  RopeArgs rope_args(const RopeParams& p) const {
    ONEBIT_CHECK(p.n_rot > 0 && p.n_rot <= p.head_dim && p.n_rot % 2 == 0);
    RopeArgs a{};
    a.n_heads = p.n_heads;
    a.head_dim = p.head_dim;
    a.n_rot = p.n_rot;
    a.neox = p.ordering == RopeOrdering::kNeox;
    a.freq_base = p.freq_base;
    a.freq_scale = p.scaling == RopeScaling::kNone ? 1.0 : 1.0 / p.scaling_factor;
    a.mscale = p.yarn_attn_factor;
    if (p.scaling == RopeScaling::kYarn && p.yarn_ext_factor != 0.0) {
      a.ext_factor = p.yarn_ext_factor;
      a.corr_low = std::max(0.0, std::floor(yarn_corr_dim(p.n_rot, p.original_context, p.yarn_beta_fast, p.freq_base)));
      a.corr_high = std::min(double(p.n_rot - 1),
                             std::ceil(yarn_corr_dim(p.n_rot, p.original_context, p.yarn_beta_slow, p.freq_base)));
      a.mscale *= 1.0 + 0.1 * std::log(1.0 / a.freq_scale);
    }
    if (p.freq_factors.valid()) {
      ONEBIT_CHECK(p.freq_factors.n_cols == p.n_rot / 2);
      a.freq_factors = fptr(p.freq_factors);
    }
    return a;
  }

  void rope_now(const Tensor& x, const Tensor& positions, const RopeParams& p) {
    ONEBIT_CHECK(x.n_cols == int64_t(p.n_heads) * p.head_dim);
    ONEBIT_CHECK(positions.type == GgmlType::kI32 && positions.n_rows == 1 && positions.n_cols == x.n_rows);
    const RopeArgs a = rope_args(p);
    const int64_t total = x.n_rows * p.n_heads * (p.n_rot / 2);
    if (total == 0) return;
    launch(&rope_kernel, dim3(blocks_for(total, 128)), dim3(128), 0, fptr(x), fstride(x), iptr(positions),
           x.n_rows, a);
    CUDA_LAUNCHED();
  }

  void add_rms_norm_now(const Tensor& a, const Tensor& b, const Tensor& weight, float eps, const Tensor& sum,
                        const Tensor& out) {
    same_shape(a, b);
    same_shape(a, sum);
    same_shape(a, out);
    ONEBIT_CHECK(weight.n_rows == 1 && weight.n_cols == a.n_cols);
    if (a.n_rows == 0) return;
    const int64_t d = a.n_cols, d4 = d / 4;
    auto aligned = [&](const Tensor& t) {
      return reinterpret_cast<uintptr_t>(fptr(t)) % 16 == 0 && (t.n_rows == 1 || fstride(t) % 4 == 0);
    };
    const int vthreads = int(std::min<int64_t>(1024, (d4 + 31) / 32 * 32));
    const int64_t per = vthreads > 0 ? (d4 + vthreads - 1) / vthreads : 0;  // float4 per thread
    if (d % 4 == 0 && d4 > 0 && per <= 4 && aligned(a) && aligned(b) && aligned(sum) && aligned(out) &&
        aligned(weight)) {
      auto go = [&](auto kernel) {
        launch(kernel, dim3(unsigned(a.n_rows)), dim3(vthreads), 0, reinterpret_cast<const float4*>(fptr(a)),
               fstride(a) / 4, reinterpret_cast<const float4*>(fptr(b)), fstride(b) / 4,
               reinterpret_cast<float4*>(fptr(sum)), fstride(sum) / 4,
               reinterpret_cast<const float4*>(fptr(weight)), eps, reinterpret_cast<float4*>(fptr(out)),
               fstride(out) / 4, d4);
      };
      if (per == 1) go(&add_rms_norm_vec_kernel<1>);
      else if (per == 2) go(&add_rms_norm_vec_kernel<2>);
      else go(&add_rms_norm_vec_kernel<4>);
    } else {
      const int threads = d <= 128 ? 64 : int(std::min<int64_t>(1024, std::max<int64_t>(kRowThreads, (d / 4 + 31) / 32 * 32)));
      launch(&add_rms_norm_kernel, dim3(unsigned(a.n_rows)), dim3(threads), 0, fptr(a), fstride(a), fptr(b),
             fstride(b), fptr(sum), fstride(sum), fptr(weight), eps, fptr(out), fstride(out), d);
    }
    CUDA_LAUNCHED();
  }

  void qk_rope_store_now(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                         const Tensor& k_norm, float eps, const Tensor& positions, const RopeParams& rope,
                         int32_t n_kv_heads, const Tensor& slots, const Tensor& k_pool, const Tensor& v_pool) {
    const QkvArgs a = qkv_args(q, k, v, q_norm, k_norm, eps, positions, rope, n_kv_heads, slots, k_pool, v_pool);
    const int64_t n = k.n_rows;
    if (n == 0) return;
    const int heads = a.n_q_heads + 2 * n_kv_heads;
    launch(&qk_rope_store_kernel, dim3(unsigned(n), unsigned((heads + kQkvWarps - 1) / kQkvWarps)),
           dim3(kQkvWarps * 32), 0, a);
    CUDA_LAUNCHED();
  }
  // qk_rope_store's kernel arguments (its shapes checked).
  QkvArgs qkv_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm,
                   float eps, const Tensor& positions, const RopeParams& rope, int32_t n_kv_heads, const Tensor& slots,
                   const Tensor& k_pool, const Tensor& v_pool) const {
    const int64_t n = k.n_rows, D = rope.head_dim, kv_cols = int64_t(n_kv_heads) * D;
    ONEBIT_CHECK(D > 0 && D <= kAttnMaxDimQkv && n_kv_heads > 0);
    ONEBIT_CHECK(k.type == GgmlType::kF32 && k.n_cols == kv_cols && v.type == GgmlType::kF32);
    ONEBIT_CHECK(v.n_rows == n && v.n_cols == kv_cols);
    ONEBIT_CHECK(!q.valid() || (q.type == GgmlType::kF32 && q.n_rows == n && q.n_cols == int64_t(rope.n_heads) * D));
    ONEBIT_CHECK(!q_norm.valid() || (q_norm.n_rows == 1 && q_norm.n_cols == D));
    ONEBIT_CHECK(!k_norm.valid() || (k_norm.n_rows == 1 && k_norm.n_cols == D));
    ONEBIT_CHECK(positions.type == GgmlType::kI32 && positions.n_rows == 1 && positions.n_cols == n);
    ONEBIT_CHECK(slots.type == GgmlType::kI32 && slots.n_rows == 1 && slots.n_cols == n);
    ONEBIT_CHECK(k_pool.type == v_pool.type && (k_pool.type == GgmlType::kF32 || k_pool.type == GgmlType::kF16));
    ONEBIT_CHECK(k_pool.n_cols == kv_cols && v_pool.n_cols == kv_cols && k_pool.n_rows == v_pool.n_rows);
    QkvArgs a{};
    a.q = q.valid() ? fptr(q) : nullptr, a.q_stride = q.valid() ? fstride(q) : 0;
    a.k = fptr(k), a.k_stride = fstride(k), a.v = fptr(v), a.v_stride = fstride(v);
    a.q_norm = q.valid() && q_norm.valid() ? fptr(q_norm) : nullptr;
    a.k_norm = k_norm.valid() ? fptr(k_norm) : nullptr;
    a.eps = eps;
    a.positions = iptr(positions), a.slots = iptr(slots);
    a.k_pool = dptr(k_pool), a.v_pool = dptr(v_pool);
    a.kp_stride = k_pool.row_stride_bytes, a.vp_stride = v_pool.row_stride_bytes, a.pool_rows = k_pool.n_rows;
    a.f16 = k_pool.type == GgmlType::kF16;
    a.n_q_heads = q.valid() ? rope.n_heads : 0, a.n_kv_heads = n_kv_heads;
    a.head_dim = int32_t(rope.head_dim);
    a.rope = rope_args(rope);
    a.err = err_;
    return a;
  }

  void attention_now(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const AttentionParams& p) {
    ONEBIT_CHECK(q.type == GgmlType::kF32 && k.type == GgmlType::kF32 && v.type == GgmlType::kF32);
    ONEBIT_CHECK(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0);
    ONEBIT_CHECK(q.n_cols == int64_t(p.n_heads) * p.head_dim);
    ONEBIT_CHECK(k.n_cols == int64_t(p.n_kv_heads) * p.head_dim && v.n_cols == k.n_cols);
    ONEBIT_CHECK(k.n_rows == v.n_rows && k.n_rows >= p.first_pos + q.n_rows);
    ONEBIT_CHECK(k.row_stride_bytes == v.row_stride_bytes);
    ONEBIT_CHECK_MSG(p.head_dim <= kAttnMaxDim, "cuda backend: head_dim above 256");
    same_shape(q, out);
    if (q.n_rows == 0) return;
    AttnArgs a{};
    a.q = fptr(q), a.q_stride = fstride(q), a.k = dptr(k), a.v = dptr(v), a.kv_stride = k.row_stride_bytes;
    a.out = fptr(out), a.o_stride = fstride(out);
    a.n_heads = p.n_heads, a.group = p.n_heads / p.n_kv_heads, a.head_dim = p.head_dim, a.scale = p.scale;
    a.first_pos = p.first_pos, a.err = err_;
    const dim3 grid(unsigned(p.n_heads), unsigned(q.n_rows));
    launch(&attention_kernel<false, false>, dim3(grid), dim3(kAttnWarps * 32), 0, a);
    CUDA_LAUNCHED();
  }

  void paged_attention_now(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const Tensor& positions,
                       const Tensor& seq_ids, const Tensor& block_tables, const Tensor& out,
                       const PagedAttentionParams& p) {
    if (q.n_rows == 0) return (void)paged_args(q, k_pool, v_pool, positions, seq_ids, block_tables, out, p);
    AttnArgs a = paged_args(q, k_pool, v_pool, positions, seq_ids, block_tables, out, p);
    a.skip_flash_tiles = flash_attention(a, p.head_dim, k_pool.type == GgmlType::kF16);
    const dim3 grid(unsigned(p.n_heads), unsigned(q.n_rows));
    if (k_pool.type == GgmlType::kF16) {
      launch(&attention_kernel<true, true>, dim3(grid), dim3(kAttnWarps * 32), 0, a);
    } else {
      launch(&attention_kernel<true, false>, dim3(grid), dim3(kAttnWarps * 32), 0, a);
    }
    CUDA_LAUNCHED();
  }
  // paged_attention's kernel arguments (its shapes checked; no flash tiles).
  AttnArgs paged_args(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const Tensor& positions,
                      const Tensor& seq_ids, const Tensor& block_tables, const Tensor& out,
                      const PagedAttentionParams& p) const {
    ONEBIT_CHECK(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 && p.head_dim > 0 && p.block_size > 0);
    ONEBIT_CHECK(q.type == GgmlType::kF32 && out.type == GgmlType::kF32);
    ONEBIT_CHECK(q.n_cols == int64_t(p.n_heads) * p.head_dim);
    same_shape(q, out);
    ONEBIT_CHECK(k_pool.type == GgmlType::kF32 || k_pool.type == GgmlType::kF16);
    ONEBIT_CHECK(v_pool.type == k_pool.type);
    ONEBIT_CHECK(k_pool.n_cols == int64_t(p.n_kv_heads) * p.head_dim);
    same_shape(k_pool, v_pool);
    ONEBIT_CHECK(k_pool.row_stride_bytes == v_pool.row_stride_bytes);
    ONEBIT_CHECK(positions.type == GgmlType::kI32 && positions.n_rows == 1 && positions.n_cols == q.n_rows);
    ONEBIT_CHECK(seq_ids.type == GgmlType::kI32 && seq_ids.n_rows == 1 && seq_ids.n_cols == q.n_rows);
    ONEBIT_CHECK(block_tables.type == GgmlType::kI32);
    ONEBIT_CHECK_MSG(p.head_dim <= kAttnMaxDim, "cuda backend: head_dim above 256");
    AttnArgs a{};
    a.q = fptr(q), a.q_stride = fstride(q), a.k = dptr(k_pool), a.v = dptr(v_pool);
    a.kv_stride = k_pool.row_stride_bytes;
    a.out = fptr(out), a.o_stride = fstride(out);
    a.n_heads = p.n_heads, a.group = p.n_heads / p.n_kv_heads, a.head_dim = p.head_dim, a.scale = p.scale;
    a.positions = iptr(positions), a.seq_ids = iptr(seq_ids), a.tables = iptr(block_tables);
    a.table_stride = block_tables.row_stride_bytes / sizeof(int32_t);
    a.n_seqs = block_tables.n_rows, a.max_blocks = block_tables.n_cols, a.n_pool_rows = k_pool.n_rows;
    a.block_size = p.block_size, a.err = err_, a.n_rows = q.n_rows;
    return a;
  }

  // The tiles of prompt rows on tensor cores (flash_attn.cuh) when the shapes allow: 16+ rows, head_dim
  // 64 or 128, 16-byte aligned pool rows; ONEBIT_CUDA_FLASH=0 off.
  // Whether it launched (attention_kernel then skips those tiles).
  bool flash_attention(const AttnArgs& a, int head_dim, bool f16) {
    const bool aligned = reinterpret_cast<uintptr_t>(a.k) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v) % 16 == 0 &&
                         a.kv_stride % 16 == 0;
    if (!flash_ || a.n_rows < 16 || (head_dim != 64 && head_dim != 128) || !aligned) return false;
    const dim3 grid(unsigned(a.n_heads), unsigned((a.n_rows + kFlashRows - 1) / kFlashRows));
    auto kernel = head_dim == 64 ? (f16 ? &flash_attn_kernel<64, true> : &flash_attn_kernel<64, false>)
                                 : (f16 ? &flash_attn_kernel<128, true> : &flash_attn_kernel<128, false>);
    kernel<<<grid, kFlashWarps * 32, 0, stream_>>>(a);  // no early start (it reads the step's q)
    CUDA_LAUNCHED();
    return true;
  }

  void moe_route_now(const Tensor& logits, bool normalize, const Tensor& ids, const Tensor& weights) {
    const int64_t n = logits.n_rows;
    const int n_exp = int(logits.n_cols), top_k = int(ids.n_cols);
    if (n == 0) return;
    const size_t shm = size_t(kRouteWarps) * size_t(n_exp) * sizeof(float);
    ONEBIT_CHECK_MSG(shm <= 48 * 1024, "cuda backend: moe_route over more than 3072 experts");
    launch(&moe_route_kernel, dim3(blocks_for(n, kRouteWarps)), dim3(kRouteWarps * 32), shm, fptr(logits),
           fstride(logits), n, n_exp, top_k, normalize, reinterpret_cast<int32_t*>(dptr(ids)),
           ids.row_stride_bytes / sizeof(int32_t), fptr(weights), fstride(weights));
    CUDA_LAUNCHED();
  }

  // On the stack's panel copy when it has one and m is whole 32-row groups, else on the rows. Few
  // pairs (at most one per two experts: decode): a matvec per pair. More: grouped by expert on the
  // device (one block per row chunk and expert), each expert's weights loaded once per 8 of its
  // pairs (from device memory about once per call).
  void moe_matmul_now(const Tensor& w, int32_t n_experts, const Tensor& x, const Tensor& ids, const Tensor& out) {
    const int64_t m = w.n_rows / n_experts, k = w.n_cols, top_k = ids.n_cols, pairs = ids.n_rows * top_k;
    if (pairs == 0 || m == 0) return;
    MoeArgs a{};
    a.w = dptr(w), a.w_stride = w.row_stride_bytes, a.m = m, a.k = k, a.n_experts = n_experts;
    a.x = fptr(x), a.x_stride = fstride(x), a.shared_x = x.n_rows == ids.n_rows;
    a.ids = iptr(ids), a.ids_stride = ids.row_stride_bytes / sizeof(int32_t), a.top_k = int32_t(top_k);
    a.pairs = pairs, a.out = fptr(out), a.o_stride = fstride(out), a.err = err_;
    const size_t x_bytes = size_t(std::max<int64_t>(k, 1)) * sizeof(float);
    const CudaBuffer* b = static_cast<const CudaBuffer*>(w.buffer);
    if (b->panel != nullptr && w.offset_bytes == 0 && w.n_rows == b->panel_rows && w.n_cols == b->panel_cols &&
        m % 32 == 0) {
      ONEBIT_CUDA_PANEL_SWITCH(w.type, {
        using F = PanelFmt<T>;
        const int64_t n_units = (k + F::E - 1) / F::E;
        const size_t pair_bytes = size_t(n_units) * (F::E + (T == kQ4_K ? 8 : 0)) * sizeof(float);
        const size_t red_bytes = size_t(kPanelWarps) * kMoeBatch * 32 * sizeof(float);
        const size_t fit = kMatvecSmemLimit > red_bytes ? (kMatvecSmemLimit - red_bytes) / pair_bytes : 0;
        if (pairs * 2 > n_experts && fit >= 1) {
          a.batch = int(std::min<size_t>(kMoeBatch, fit));
          const dim3 grid(unsigned(m / 32), unsigned(n_experts));
          launch(&moe_panel_grouped_kernel<T>, dim3(grid), dim3(kPanelThreads),
                 size_t(a.batch) * pair_bytes + red_bytes, b->panel, n_units, a);
        } else {
          ONEBIT_CHECK(pairs <= 65535);
          launch(&moe_panel_matvec_kernel<T>, dim3(unsigned(m / 32), unsigned(pairs)), dim3(kPanelThreads),
                 panel_smem_bytes<T>(n_units), b->panel, n_units, a);
        }
      });
      CUDA_LAUNCHED();
      return;
    }
    if (pairs * 2 <= n_experts) {
      ONEBIT_CHECK(pairs <= 65535);
      a.smem_x = x_bytes <= kMatvecSmemLimit;
      const dim3 grid(blocks_for(m, kMatvecRowsPerBlock), unsigned(pairs));
      ONEBIT_CUDA_TYPE_SWITCH(
          w.type, launch(&moe_matvec_kernel<T>, dim3(grid), dim3(kMatvecThreads), a.smem_x ? x_bytes : 0, a));
      CUDA_LAUNCHED();
      return;
    }
    ONEBIT_CHECK(n_experts <= 65535);
    a.batch = int(std::min<size_t>(kMoeBatch, kMatvecSmemLimit / x_bytes));
    a.smem_x = a.batch >= 1;
    if (!a.smem_x) a.batch = kMoeBatch;  // rows too long for shared memory: x read from global memory
    const size_t shm = a.smem_x ? size_t(a.batch) * x_bytes : 0;
    const dim3 grid(blocks_for(m, kMatvecRowsPerBlock), unsigned(n_experts));
    ONEBIT_CUDA_TYPE_SWITCH(w.type, launch(&moe_grouped_kernel<T>, dim3(grid), dim3(kMatvecThreads), shm, a));
    CUDA_LAUNCHED();
  }

  void moe_combine_now(const Tensor& y, const Tensor& weights, const Tensor& out) {
    const int64_t n = out.n_rows, d = out.n_cols;
    if (n * d == 0) return;
    launch(&moe_combine_kernel, dim3(blocks_for(n * d, 256)), dim3(256), 0, fptr(y), fstride(y),
           fptr(weights), fstride(weights), int(weights.n_cols), fptr(out), fstride(out), n, d);
    CUDA_LAUNCHED();
  }

  void ssm_conv_now(const Tensor& x, const Tensor& w, const Tensor& seq_ids, const Tensor& state_rows,
                    const Tensor& ckpt_rows, const Tensor& states, bool silu, const Tensor& out) {
    const int64_t n = x.n_rows, C = x.n_cols, n_seqs = state_rows.n_cols;
    if (n == 0 || C == 0 || n_seqs == 0) return;
    const dim3 grid(blocks_for(C, 128), unsigned(n_seqs));
    launch(&ssm_conv_kernel, dim3(grid), dim3(128), 0, fptr(x), fstride(x), fptr(w), fstride(w),
           iptr(seq_ids), iptr(state_rows), ckpt_rows.valid() ? iptr(ckpt_rows) : nullptr, int(n_seqs),
           fptr(states), fstride(states), states.n_rows, silu, fptr(out), fstride(out), n, C, int(w.n_cols),
           err_);
    CUDA_LAUNCHED();
  }

  void gated_delta_now(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                       const Tensor& A, const Tensor& dt_bias, const Tensor& seq_ids, const Tensor& state_rows,
                       const Tensor& ckpt_rows, const Tensor& states, const Tensor& out, DeltaDims d) {
    const int64_t n_seqs = state_rows.n_cols;
    if (q.n_rows == 0 || n_seqs == 0) return;
    const size_t shm = size_t(d.dk * d.dv + 2 * d.dk) * sizeof(float);
    if (shm > 48 * 1024 && !delta_smem_set_) {
      CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&gated_delta_kernel),
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
      delta_smem_set_ = true;
    }
    DeltaArgs args{fptr(q), fptr(k), fptr(v), fptr(a), fptr(b), fptr(A), fptr(dt_bias), fstride(q), fstride(k),
                   fstride(v), fstride(a), fstride(b), iptr(seq_ids), iptr(state_rows),
                   ckpt_rows.valid() ? iptr(ckpt_rows) : nullptr, fptr(states),
                   fstride(states), states.n_rows, fptr(out), fstride(out), q.n_rows, int(d.dk), int(d.dv),
                   int(d.n_k_heads), d.tiled ? 0 : int(d.n_heads / d.n_k_heads), err_};
    launch(&gated_delta_kernel, dim3(unsigned(d.n_heads), unsigned(n_seqs)), dim3(unsigned(d.dv)), shm, args);
    CUDA_LAUNCHED();
  }

  void argmax_rows_now(const Tensor& x, const Tensor& ids) {
    if (x.n_rows == 0) return;
    launch(&argmax_rows_kernel, dim3(unsigned(x.n_rows)), dim3(kArgmaxThreads), 0, fptr(x), fstride(x), x.n_cols,
           reinterpret_cast<int32_t*>(dptr(ids)));
    CUDA_LAUNCHED();
  }

  void sigmoid_mul_now(const Tensor& x, const Tensor& g, const Tensor& out) {
    const int64_t n = x.n_rows, d = x.n_cols;
    if (n * d == 0) return;
    launch(&sigmoid_mul_kernel, dim3(blocks_for(n * d, 256)), dim3(256), 0, fptr(x), fstride(x), fptr(g),
           fstride(g), g.n_cols == 1 && d != 1, fptr(out), fstride(out), n, d);
    CUDA_LAUNCHED();
  }

 private:
  // ---- deferred steps and CUDA graphs ----
  enum OpTag : uint64_t {
    kOpWrite = 1, kOpRead, kOpGetRows, kOpRmsNorm, kOpMatmul, kOpAdd, kOpSwiglu, kOpSoftmax, kOpCopy, kOpStoreKv,
    kOpRope, kOpAttention, kOpPagedAttention, kOpMoeRoute, kOpMoeMatmul, kOpMoeCombine, kOpSigmoidMul,
    kOpSsmConv, kOpGatedDelta, kOpHadamard, kOpAddRmsNorm, kOpQkRopeStore, kOpMatmuls, kOpArgmaxRows
  };
  static constexpr size_t kNoStage = ~size_t(0);
  static constexpr size_t kPinnedBytes = size_t(32) << 20;  // staging of one step's writes and reads
  static constexpr size_t kMaxGraphs = 64;

  // Two 64-bit hashes of everything that reaches a launch: the key of a step's graph.
  struct StepKey {
    uint64_t a = 1469598103934665603ull, b = 0x6a09e667f3bcc909ull;
    bool operator==(const StepKey&) const = default;
    void u64(uint64_t v) {
      a = (a ^ v) * 1099511628211ull;
      b ^= v + 0x9e3779b97f4a7c15ull + (b << 6) + (b >> 2);
    }
    void one(uint64_t v) { u64(v); }
    void one(int v) { u64(uint64_t(int64_t(v))); }
    void one(float v) { u64(__builtin_bit_cast(uint32_t, v)); }
    void one(const Tensor& t) {
      u64(t.buffer == nullptr ? 0 : reinterpret_cast<uintptr_t>(dptr(t)));
      const CudaBuffer* cb = static_cast<const CudaBuffer*>(t.buffer);
      u64(cb == nullptr || cb->panel == nullptr ? 0 : reinterpret_cast<uintptr_t>(cb->panel));
      u64(uint64_t(t.type));
      u64(uint64_t(t.n_rows));
      u64(uint64_t(t.n_cols));
      u64(t.row_stride_bytes);
    }
    void one(const RopeParams& p) {
      add(p.n_heads, p.head_dim, p.n_rot, int(p.ordering), p.freq_base, int(p.scaling), p.scaling_factor,
          p.original_context, p.yarn_beta_fast, p.yarn_beta_slow, p.yarn_ext_factor, p.yarn_attn_factor);
      if (p.freq_factors.valid()) one(p.freq_factors);
    }
    void one(const Products& p) {
      one(p.n);
      for (int32_t i = 0; i < p.n; ++i) add(p.w[i], p.out[i]);
    }
    void one(const AttentionParams& p) { add(p.n_heads, p.n_kv_heads, p.head_dim, p.scale, p.first_pos); }
    void one(const PagedAttentionParams& p) { add(p.n_heads, p.n_kv_heads, p.head_dim, p.scale, p.block_size); }
    template <class... A>
    void add(const A&... args) {
      (one(args), ...);
    }
  };
  struct StepKeyHash {
    size_t operator()(const StepKey& k) const { return size_t(k.a ^ (k.b * 31)); }
  };
  // A step's program instructions on the device and their counters (step_program_kernel's done,
  // kPgPad apart, and fin, one of each per instruction), in one allocation at instrs.
  struct PgDev {
    PgInstr* instrs = nullptr;
    unsigned* done = nullptr;
    unsigned* fin = nullptr;
    unsigned long long* trace = nullptr;  // ONEBIT_CUDA_PROGRAM_TRACE=1
    std::vector<int> ops;                 // with a trace: the instructions' ops
  };
  struct Graph {
    cudaGraphExec_t exec = nullptr;  // nullptr: seen once, not captured yet
    uint64_t last_use = 0;           // graph_clock_ at its last step
    PgDev prog;                      // its step programs' instructions (device), or none
  };
  // What the steps did (printed at exit with ONEBIT_CUDA_GRAPH_STATS=1).
  struct GraphStats {
    uint64_t steps = 0, replays = 0, captures = 0, first_seen = 0, broken = 0, evictions = 0, drops = 0;
    uint64_t programs = 0, program_ops = 0;  // step programs launched (op by op or captured), their ops
    double record_ms = 0, launch_ms = 0, wait_ms = 0;  // first op to run_step; run_step; the stream's wait
  };
  struct HostRead {
    void* dst;
    const uint8_t* from;
    size_t n;
  };

  template <class F, class... A>
  void op(OpTag tag, F&& f, const A&... args) {
    op_pg(std::nullopt, tag, std::forward<F>(f), args...);
  }
  // op with its step-program instruction (none: the op has no body there, or not for these shapes).
  template <class F, class... A>
  void op_pg(const std::optional<PgInstr>& ins, OpTag tag, F&& f, const A&... args) {
    if (!graphs_) return f();
    sig_.add(uint64_t(tag), args...);
    defer(std::forward<F>(f));
    if (ins.has_value() && pg_) {
      pending_pg_.back() = int(pg_instrs_.size());
      pg_instrs_.push_back(*ins);
    }
  }
  template <class F>
  void defer(F&& f) {
    if (pending_.empty()) step_open_ = host_ms();
    pending_.emplace_back(std::forward<F>(f));
    pending_pg_.push_back(-1);
  }
  static double host_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  // A piece of pinned staging of n bytes (16-byte aligned) for this step, or kNoStage.
  size_t stage(size_t n) {
    if (pinned_ == nullptr) {
      if (cudaMallocHost(reinterpret_cast<void**>(&pinned_), kPinnedBytes) != cudaSuccess) {
        cudaGetLastError();
        pinned_ = nullptr;
        graphs_ = false;
        return kNoStage;
      }
    }
    const size_t off = (staged_ + 15) / 16 * 16;
    if (off + n > kPinnedBytes) return kNoStage;
    staged_ = off + n;
    return off;
  }
  // Runs the deferred ops one by one; `graphable` false marks the step as not a graph's (a
  // memory call or an unstaged copy came in the middle of it).
  void flush(bool graphable) {
    if (pending_.empty()) return;
    kernel_tail_ = false;  // the stream's last op is unknown here (a step's boundary): no overlap
    for (auto& f : pending_) f();
    clear_pending();
    if (!graphable) broken_ = true;
  }
  void clear_pending() {
    pending_.clear();
    pending_pg_.clear();
    pg_instrs_.clear();
  }
  // Runs the deferred ops, each run of two or more with instructions (and panel products of one
  // type) as one step program (prog: the step's instructions on the device, in pg_instrs_' order).
  void run_pending(const PgDev& prog) {
    for (size_t i = 0; i < pending_.size();) {
      size_t j = i;
      int type = -1;
      for (; prog.instrs != nullptr && j < pending_.size() && pending_pg_[j] >= 0; ++j) {
        const PgInstr& in = pg_instrs_[size_t(pending_pg_[j])];
        if (in.op != kPgMatvec) continue;
        if (type >= 0 && in.mv.type != type) break;
        type = in.mv.type;
      }
      if (j - i >= 2) {
        const size_t at = size_t(pending_pg_[i]);
        launch_program(type, prog.instrs + at, int(j - i), prog.done + at * kPgPad, prog.fin + at,
                       prog.trace != nullptr ? prog.trace + at * kPgTrace : nullptr);
        i = j;
      } else {
        pending_[i++]();
      }
    }
    clear_pending();
  }
  // A cooperative launch: every block resident at once or none (two programs of two backends on one
  // GPU then cannot each hold part of it waiting for the rest).
  void launch_program(int type, const PgInstr* prog, int n, unsigned* done, unsigned* fin,
                      unsigned long long* trace) {
    auto go = [&](auto kernel) {
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeCooperative;
      attr.val.cooperative = 1;
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(unsigned(pg_grid_));
      cfg.blockDim = dim3(kPgThreads);
      cfg.dynamicSmemBytes = kMatvecSmemLimit;
      cfg.stream = stream_;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      CUDA_OK(cudaLaunchKernelEx(&cfg, kernel, prog, n, done, fin, trace));
    };
    switch (type) {
      case kF16: go(&step_program_kernel<kF16>); break;
      case kQ8_0: go(&step_program_kernel<kQ8_0>); break;
      case kQ4_K: go(&step_program_kernel<kQ4_K>); break;
      case kQ6_K: go(&step_program_kernel<kQ6_K>); break;
      default: go(&step_program_kernel<kQ4_0>); break;  // Q4_0, or no product in the run
    }
    CUDA_LAUNCHED();
    ++stats_.programs;
    stats_.program_ops += uint64_t(n);
  }

 public:
  uint64_t program_ops() const { return stats_.program_ops; }

 private:
  // The step's instructions copied to the device with their zeroed counters (the step's graph
  // keeps them), or none where it has no run of two.
  PgDev upload_program() {
    int run = 0, best = 0;
    for (int k : pending_pg_) best = std::max(best, run = k >= 0 ? run + 1 : 0);
    if (best < 2) return {};
    const size_t n = pg_instrs_.size(), bytes = n * sizeof(PgInstr);
    const size_t counters = (n + 1) * kPgPad + n;  // done (one a line, a line's offset), then fin
    uint8_t* d = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d), bytes + 128 + counters * sizeof(unsigned)));
    CUDA_OK(cudaMemcpy(d, pg_instrs_.data(), bytes, cudaMemcpyHostToDevice));
    unsigned* c = reinterpret_cast<unsigned*>(d + (bytes + 127) / 128 * 128);
    CUDA_OK(cudaMemset(c, 0, counters * sizeof(unsigned)));
    PgDev out{reinterpret_cast<PgInstr*>(d), c, c + (n + 1) * kPgPad};
    if (pg_trace_) {
      std::vector<unsigned long long> t(n * kPgTrace, 0);
      for (size_t i = 0; i < n; ++i) t[i * kPgTrace] = ~0ull;
      CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&out.trace), t.size() * sizeof(unsigned long long)));
      CUDA_OK(cudaMemcpy(out.trace, t.data(), t.size() * sizeof(unsigned long long), cudaMemcpyHostToDevice));
      for (const PgInstr& in : pg_instrs_) out.ops.push_back(in.op);
    }
    return out;
  }
  // The trace of a program's instructions (ONEBIT_CUDA_PROGRAM_TRACE=1) added to pg_traced_ by
  // op kind: instructions, launches, the wait before them and their time (ns, summed).
  void fold_trace(const PgDev& p) {
    if (p.trace == nullptr) return;
    std::vector<unsigned long long> t(p.ops.size() * kPgTrace);
    CUDA_OK(cudaMemcpy(t.data(), p.trace, t.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < p.ops.size(); ++i) {
      auto& row = pg_traced_[p.ops[i] & 7];
      row[0] += 1;
      row[1] += double(t[i * kPgTrace + 4]);
      row[2] += double(static_cast<long long>(t[i * kPgTrace + 2]));
      row[3] += double(t[i * kPgTrace + 3]);
    }
  }
  void free_program(PgDev& p) {
    fold_trace(p);
    if (p.instrs != nullptr) cudaFree(p.instrs);
    if (p.trace != nullptr) cudaFree(p.trace);
    p = PgDev{};
  }
  void run_step() {
    if (pending_.empty()) {
      sig_ = StepKey{};
      broken_ = false;
      return;
    }
    const double start = host_ms();
    stats_.record_ms += start - step_open_;
    struct Launched {  // the time from here to the return counts as launching
      double start, &into;
      ~Launched() { into += host_ms() - start; }
    } launched{start, stats_.launch_ms};
    const StepKey key = sig_;
    const bool whole = !broken_;
    sig_ = StepKey{};
    broken_ = false;
    ++stats_.steps;
    if (!whole) {
      ++stats_.broken;
      return flush(true);
    }
    auto it = graphs_of_.find(key);
    if (it == graphs_of_.end()) {  // first time: op by op (and its step programs), remembered
      if (graphs_of_.size() >= kMaxGraphs) evict_graph();
      const PgDev prog = upload_program();
      graphs_of_.emplace(key, Graph{nullptr, ++graph_clock_, prog});
      ++stats_.first_seen;
      kernel_tail_ = false;
      return run_pending(prog);
    }
    it->second.last_use = ++graph_clock_;
    if (it->second.exec == nullptr) {  // second time: capture, then replay from now on
      cudaGraph_t g = nullptr;
      CUDA_OK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      kernel_tail_ = false;  // the graph's first node follows nothing
      run_pending(it->second.prog);
      CUDA_OK(cudaStreamEndCapture(stream_, &g));
      CUDA_OK(cudaGraphInstantiate(&it->second.exec, g, 0));
      CUDA_OK(cudaGraphDestroy(g));
      ++stats_.captures;
    } else {
      ++stats_.replays;
    }
    clear_pending();
    CUDA_OK(cudaGraphLaunch(it->second.exec, stream_));
  }
  // Forgets the least recently used step shape (a server's mix of batch sizes and draft lengths
  // can outgrow kMaxGraphs; dropping them all made every shape pay its capture again).
  void evict_graph() {
    auto lru = graphs_of_.begin();
    for (auto it = graphs_of_.begin(); it != graphs_of_.end(); ++it) {
      if (it->second.last_use < lru->second.last_use) lru = it;
    }
    if (lru->second.exec != nullptr) cudaGraphExecDestroy(lru->second.exec);
    free_program(lru->second.prog);
    graphs_of_.erase(lru);
    ++stats_.evictions;
  }
  void drop_graphs() {
    if (!graphs_of_.empty()) ++stats_.drops;
    for (auto& [k, g] : graphs_of_) {
      if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
      free_program(g.prog);
    }
    graphs_of_.clear();
  }
  // Every kernel that may take more than 48 KiB of dynamic shared memory is allowed it once here
  // (not at launch: a launch may be under stream capture).
  void allow_large_smem() {
    for (int t : {kF32, kF16, kBF16, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ4_K, kQ5_K, kQ6_K}) {
      ONEBIT_CUDA_TYPE_SWITCH(t, {
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&matvec_kernel<T>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&matvec_multi_kernel<T>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&moe_matvec_kernel<T>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
        // the grouped kernel's static shared memory (the pair list) comes on top of x
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&moe_grouped_kernel<T>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
      });
      smem_attr_set_[t & 31] = multi_smem_set_[t & 31] = true;
    }
    for (int t : {kF16, kQ4_0, kQ8_0, kQ4_K, kQ6_K}) {
      ONEBIT_CUDA_PANEL_SWITCH(t, {
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&panel_matvec_kernel<T>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&moe_panel_matvec_kernel<T>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&panel_matvec_segs_kernel<T>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&panel_rows_segs_kernel<T, 2>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&panel_rows_segs_kernel<T, 4>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&panel_rows_segs_kernel<T, 8>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&panel_rows_segs_kernel<T, kPanelRowsMax>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&moe_panel_grouped_kernel<T>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
      });
      panel_smem_set_[t & 31] = true;
    }
  }

  static size_t pitch(const Tensor& t) { return t.n_rows <= 1 ? std::max(t.row_bytes(), t.row_stride_bytes) : t.row_stride_bytes; }

  Result<CudaBuffer*> new_buffer(size_t n_bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(n_bytes, 256));
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error state of a failed allocation
      return make_error("cuda backend: out of device memory allocating " + std::to_string(n_bytes) +
                        " bytes (" + cudaGetErrorString(e) + "); use a smaller context (--ctx-size) or model");
    }
    buffers_.push_back(std::make_unique<CudaBuffer>(static_cast<uint8_t*>(p), n_bytes));
    return buffers_.back().get();
  }

  // A device array (buf, cap elements) grown to n or more, at least doubling: at record time, when
  // no graph is being captured; the graphs captured with the old array are dropped.
  template <class E>
  void grow_array(E*& buf, size_t& cap, size_t n) {
    if (n <= cap) return;
    const size_t want = std::max(n, 2 * cap);
    CUDA_OK(cudaStreamSynchronize(stream_));
    drop_graphs();
    if (buf != nullptr) CUDA_OK(cudaFree(buf));
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), want * sizeof(E)));
    cap = want;
  }

  // Products of many activation rows as one fp16 GEMM (gemm_f16.cuh): a type the tensor cores take,
  // rows of whole 32-blocks, and n rows at least: 128 for F16 (read in place), 384 for the types
  // it dequantizes first (measured on an H100: pp512 1.06-1.8x matmul_mma_kernel's, a 256-stream
  // TinyLlama Q4_0 decode step 0.92x), or ONEBIT_CUDA_GEMM_ROWS for all (0: off).
  bool gemm_applies(const Tensor& w, int64_t n) const {
    const int64_t rows = gemm_rows_min_ >= 0 ? gemm_rows_min_ : w.type == GgmlType::kF16 ? 128 : 384;
    return mma_ && rows > 0 && n >= rows && mma_matmul_applies(int(w.type), n, 1) && w.n_cols % kGemmK == 0;
  }
  // F16 weights whose rows the GEMM reads in place (16-byte aligned); the others go through gemm_w_.
  bool gemm_direct(const Tensor& w) const {
    return w.type == GgmlType::kF16 && w.row_stride_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(dptr(w)) % 16 == 0;
  }
  // Weight rows dequantized at a time: gemm_slab_bytes_ of fp16, whole 128-row tiles, 128 at least.
  int64_t gemm_slab_rows(const Tensor& w) const {
    const int64_t fit = int64_t(gemm_slab_bytes_ / (2 * size_t(w.n_cols))) / kGemmM * kGemmM;
    return std::min(std::max<int64_t>(kGemmM, fit), (w.n_rows + kGemmM - 1) / kGemmM * kGemmM);
  }
  // Whether the products of p (two or three, one input) run as one GEMM launch: each on the GEMM.
  bool gemm_group_applies(const Tensor& x, const Products& p) const {
    if (p.n < 2) return false;
    for (int i = 0; i < p.n; ++i) {
      const Tensor &w = p.w[i], &o = p.out[i];
      if (w.in_rotation > 0 || w.n_cols != x.n_cols || !gemm_applies(w, x.n_rows)) return false;
      if (o.type != GgmlType::kF32 || o.n_rows != x.n_rows || o.n_cols != w.n_rows) return false;
    }
    return true;
  }
  // Halves of p's weights the mma.sync GEMM dequantizes (the F16 ones it reads in place: none).
  size_t gemm_group_halves(const Products& p) const {
    size_t h = 0;
    for (int i = 0; i < p.n; ++i)
      if (!gemm_direct(p.w[i])) h += size_t(p.w[i].n_rows) * size_t(p.w[i].n_cols);
    return h;
  }
  // Whether all of them fit the slab (gemm_slab_bytes_) at once: one launch for p's products; else
  // each product goes in slabs of gemm_slab_rows.
  bool gemm_together(const Products& p) const { return 2 * gemm_group_halves(p) <= gemm_slab_bytes_; }
  // The buffers gemm_now(x, p) uses, grown (synchronizes: not while capturing).
  void gemm_grow(const Tensor& x, const Products& p) {
    grow_array(row_scales_, row_scales_n_, size_t(x.n_rows));
    grow_array(gemm_x_, gemm_x_n_, size_t(x.n_rows * x.n_cols));
    size_t w = gemm_together(p) ? gemm_group_halves(p) : 0;
    for (int i = 0; i < p.n; ++i)
      if (!gemm_direct(p.w[i])) w = std::max(w, size_t(gemm_slab_rows(p.w[i]) * p.w[i].n_cols));
    if (w > 0 && !wgmma_) grow_array(gemm_w_, gemm_w_n_, w);  // wgmma dequantizes in the GEMM
  }
  // gemm_now on wgmma (gemm_wgmma.cuh): F16 weights read in place by gemm_wgmma_kernel, the others
  // dequantized in the GEMM (gemm_wgmma_deq_kernel<T>); one launch for products of one kind (in
  // place, or one weight type), else one each.
  template <class Add>
  void gemm_wgmma_now(const Products& p, int64_t n, int64_t k, GemmSegs& sg, Add add) {
    const unsigned x_tiles = blocks_for(n, kWgRows);
    int kind = -2;  // of the products in sg: -1 in place, else the weight type
    auto run = [&] {
      if (sg.n == 0) return;
      ONEBIT_CHECK_MSG(sg.tile0[sg.n] <= 65535, "cuda backend: a grouped GEMM grid past 65,535 weight tiles in y");
      const dim3 grid(x_tiles, unsigned(sg.tile0[sg.n]));
      // Tensor maps of the activations and (F16 in place) each product's weight rows; where the
      // driver refuses one, the block-synchronous kernels below.
      WsMaps maps;
      bool mapped = ws_for(kind) && ws_encode_map(&maps.x, gemm_x_, n, k, k);
      for (int i = 0; mapped && kind == -1 && i < sg.n; ++i) mapped = ws_encode_map(&maps.w[i], sg.b[i], sg.m[i], k, sg.ldb[i]);
      if (mapped) {
        if (kind == -1) {
          gemm_wgmma_ws_kernel<kWsF16><<<grid, kWsThreads, ws_smem_bytes<kWsF16>(), stream_>>>(sg, maps, n, k, row_scales_);
        } else {
          ONEBIT_CUDA_TYPE_SWITCH(kind, gemm_wgmma_ws_kernel<T><<<grid, kWsThreads, ws_smem_bytes<T>(), stream_>>>(
                                            sg, maps, n, k, row_scales_));
        }
      } else if (kind == -1 && wg_in_flight_) {
        gemm_wgmma_kernel<1><<<grid, kWgThreads, kWgSmemBytes, stream_>>>(sg, gemm_x_, k, n, k, row_scales_);
      } else if (kind == -1) {
        gemm_wgmma_kernel<0><<<grid, kWgThreads, kWgSmemBytes, stream_>>>(sg, gemm_x_, k, n, k, row_scales_);
      } else {
        ONEBIT_CUDA_TYPE_SWITCH(kind, gemm_wgmma_deq_kernel<T><<<grid, kWgThreads, wg_deq_smem_bytes<T>(), stream_>>>(
                                          sg, gemm_x_, k, n, k, row_scales_));
      }
      CUDA_LAUNCHED();
      sg.n = 0;
    };
    for (int i = 0; i < p.n; ++i) {
      const Tensor& w = p.w[i];
      const bool direct = gemm_direct(w);
      const int this_kind = direct ? -1 : int(w.type);
      if (this_kind != kind) run();
      kind = this_kind;
      add(direct ? reinterpret_cast<const __half*>(dptr(w)) : nullptr, int64_t(w.row_stride_bytes / 2), w.n_rows,
          p.out[i], 0);
      sg.w[sg.n - 1] = dptr(w), sg.w_stride[sg.n - 1] = w.row_stride_bytes;
    }
    run();
  }

  // out_i = x . w_i^T for the products of p through gemm_f16.cuh's three steps: x to fp16 once; F16
  // weights read in place, the others dequantized into gemm_w_: all of them, then one launch for
  // every product, when they fit (gemm_together), else each in slabs of gemm_slab_rows rows.
  void gemm_now(const Tensor& x, const Products& p) {
    const int64_t n = x.n_rows, k = x.n_cols;
    ONEBIT_CHECK(row_scales_ != nullptr && size_t(n) <= row_scales_n_ && size_t(n * k) <= gemm_x_n_);
    for (int i = 0; i < p.n; ++i) {
      ONEBIT_CHECK(p.w[i].n_cols == k);
      ONEBIT_CHECK(p.out[i].type == GgmlType::kF32 && p.out[i].n_rows == n && p.out[i].n_cols == p.w[i].n_rows);
      ONEBIT_CHECK_MSG((p.w[i].n_rows + kGemmM - 1) / kGemmM <= 65535 && (n + kGemmN - 1) / kGemmN <= 65535,
                       "cuda backend: a GEMM grid past 65,535 blocks in y");
    }
    gemm_prep_x_kernel<<<unsigned(n), 256, 0, stream_>>>(fptr(x), fstride(x), k, gemm_x_, k, row_scales_);
    CUDA_LAUNCHED();
    if (!gemm_smem_set_) {
      CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&gemm_f16_kernel),
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, int(kGemmSmemBytes)));
      if (wgmma_) {
        for (const void* fn : {reinterpret_cast<const void*>(&gemm_wgmma_kernel<0>),
                               reinterpret_cast<const void*>(&gemm_wgmma_kernel<1>)}) {
          CUDA_OK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kWgSmemBytes)));
        }
        for (GgmlType t : {GgmlType::kF16, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                           GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
          ONEBIT_CUDA_TYPE_SWITCH(t, CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&gemm_wgmma_deq_kernel<T>),
                                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                                  int(wg_deq_smem_bytes<T>())));
                                  if (ws_for(int(t))) CUDA_OK(cudaFuncSetAttribute(
                                      reinterpret_cast<const void*>(&gemm_wgmma_ws_kernel<T>),
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, int(ws_smem_bytes<T>()))));
        }
        if (ws_for(-1)) {
          CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&gemm_wgmma_ws_kernel<kWsF16>),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, int(ws_smem_bytes<kWsF16>())));
        }
      }
      gemm_smem_set_ = true;
    }
    GemmSegs sg;
    sg.tile0[0] = 0;
    auto add = [&](const __half* b, int64_t ldb, int64_t rows, const Tensor& out, int64_t r0) {
      sg.b[sg.n] = b, sg.ldb[sg.n] = ldb, sg.m[sg.n] = rows;
      sg.out[sg.n] = fptr(out) + r0, sg.o_stride[sg.n] = fstride(out);
      sg.tile0[sg.n + 1] = sg.tile0[sg.n] + int32_t((rows + kGemmM - 1) / kGemmM);
      ++sg.n;
    };
    if (wgmma_) return gemm_wgmma_now(p, n, k, sg, add);
    auto run = [&] {
      if (sg.n == 0) return;
      gemm_f16_kernel<<<dim3(unsigned(sg.tile0[sg.n]), blocks_for(n, kGemmN)), kGemmThreads, kGemmSmemBytes,
                        stream_>>>(sg, gemm_x_, k, n, k, row_scales_);
      CUDA_LAUNCHED();
      sg.n = 0;
    };
    auto dequant = [&](const Tensor& w, int64_t r0, int64_t rows, __half* dst) {
      ONEBIT_CUDA_TYPE_SWITCH(w.type, dequant_f16_kernel<T><<<blocks_for(rows * (k / 32), 256), 256, 0, stream_>>>(
                                          dptr(w) + size_t(r0) * w.row_stride_bytes, w.row_stride_bytes, rows, k,
                                          dst, k));
      CUDA_LAUNCHED();
    };
    const bool together = gemm_together(p);
    size_t used = 0;  // halves of gemm_w_ taken by this launch's products
    for (int i = 0; i < p.n; ++i) {
      const Tensor& w = p.w[i];
      const int64_t m = w.n_rows;
      if (gemm_direct(w)) {
        add(reinterpret_cast<const __half*>(dptr(w)), int64_t(w.row_stride_bytes / 2), m, p.out[i], 0);
      } else if (together) {
        ONEBIT_CHECK(used + size_t(m * k) <= gemm_w_n_);
        dequant(w, 0, m, gemm_w_ + used);
        add(gemm_w_ + used, k, m, p.out[i], 0);
        used += size_t(m * k);
      } else {
        run();
        const int64_t slab = gemm_slab_rows(w);
        ONEBIT_CHECK(size_t(slab * k) <= gemm_w_n_);
        for (int64_t r0 = 0; r0 < m; r0 += slab) {
          const int64_t rows = std::min(slab, m - r0);
          dequant(w, r0, rows, gemm_w_);
          add(gemm_w_, k, rows, p.out[i], r0);
          run();
        }
      }
      if (!together) run();
    }
    run();
  }

  // The cut along k of a tensor-core product (matmul_mma_kernel): enough blocks for two per
  // multiprocessor, each slice four k-steps or more, the slices' sums within kMmaPartMax floats.
  int mma_split(int64_t m, int64_t n, int64_t k) const {
    if (!mma_split_on_) return 1;
    const int64_t tiles = ((m + kMmaM - 1) / kMmaM) * ((n + kMmaN - 1) / kMmaN), steps = (k + kMmaK - 1) / kMmaK;
    int64_t split = std::min<int64_t>({(2 * int64_t(sms_) + tiles - 1) / tiles, steps / 4, 16});
    split = std::min<int64_t>(split, int64_t(kMmaPartMax / size_t(std::max<int64_t>(1, n * m))));
    return int(std::max<int64_t>(1, split));
  }

  uint8_t* scratch(size_t n) {
    if (n > scratch_bytes_) {
      CUDA_OK(cudaStreamSynchronize(stream_));
      if (scratch_ != nullptr) CUDA_OK(cudaFree(scratch_));
      CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&scratch_), n));
      scratch_bytes_ = n;
    }
    return scratch_;
  }

  // The panel copy of weight t (panel_pack_kernel), when device memory allows (else none: the
  // row kernels serve it).
  void make_panel(const Tensor& t, CudaBuffer& buf) {
    ONEBIT_CUDA_PANEL_SWITCH(t.type, {
      using F = PanelFmt<T>;
      const int64_t n_units = (t.n_cols + F::E - 1) / F::E;
      const int64_t groups = (t.n_rows + 31) / 32;
      const size_t bytes = size_t(groups) * size_t(n_units) * panel_unit_bytes<T>();
      if (panel_smem_bytes<T>(n_units) > kMatvecSmemLimit) return;
      void* p = nullptr;
      if (cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return;
      }
      CUDA_COPY(cudaMemsetAsync(p, 0, bytes, stream_));
      const int64_t total = t.n_rows * n_units * (F::CH + F::TAIL);
      panel_pack_kernel<T><<<blocks_for(total, 256), 256, 0, stream_>>>(buf.ptr, t.row_stride_bytes, t.n_rows,
                                                                        t.n_cols, n_units, static_cast<uint8_t*>(p));
      CUDA_LAUNCHED();
      buf.panel = static_cast<uint8_t*>(p);
      buf.panel_rows = t.n_rows;
      buf.panel_cols = t.n_cols;
    });
  }

  // out = w x for one activation row on w's panel copy; false when w has none (or is a view).
  bool panel_matvec(const Tensor& w, const float* x, float* out) {
    const CudaBuffer* b = static_cast<const CudaBuffer*>(w.buffer);
    if (b->panel == nullptr || w.offset_bytes != 0 || w.n_rows != b->panel_rows || w.n_cols != b->panel_cols) {
      return false;
    }
    ONEBIT_CUDA_PANEL_SWITCH(w.type, {
      const int64_t n_units = (w.n_cols + PanelFmt<T>::E - 1) / PanelFmt<T>::E;
      const size_t shm = panel_smem_bytes<T>(n_units);
      if (shm > 48 * 1024 && !panel_smem_set_[int(w.type) & 31]) {
        CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&panel_matvec_kernel<T>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
        panel_smem_set_[int(w.type) & 31] = true;
      }
      const unsigned blocks = blocks_for(w.n_rows, 32);
      const int threads = panel_threads(blocks);
      launch_panel(&panel_matvec_kernel<T>, blocks, shm, threads, b->panel, x, out, w.n_rows, w.n_cols, n_units,
                   pipe_, x15_);
    });
    return true;
  }

  // A panel product's launch (`threads` per block).
  template <class... P, class... A>
  void launch_panel(void (*kernel)(P...), unsigned blocks, size_t smem, int threads, A&&... args) {
    launch_overlapping(pdl_ >= 1, kernel, dim3(blocks), dim3(unsigned(threads)), smem, std::forward<A>(args)...);
  }
  // Threads per block of a one-row panel product of `blocks` blocks: 16 warps where every block
  // has a multiprocessor to itself (more loads in flight), else 8 (three blocks an SM by registers).
  int panel_threads(unsigned blocks) const {
    return panel_wide_ && blocks <= unsigned(sms_) ? kPanelThreadsMax : kPanelThreads;
  }

  // Whether matmuls(x, p) runs as one panel launch: 1 to kPanelRowsMax rows of x (two or more
  // products for one row: one goes to panel_matvec), every weight with its whole panel copy, of one
  // type and width (no rotation, float path).
  bool panel_segs_apply(const Tensor& x, const Products& p) const {
    if (x.n_rows < 1 || x.n_rows > panel_rows_max_ || p.n < 1 || (x.n_rows == 1 && p.n < 2)) return false;
    if (!whole_panels(x, p)) return false;
    bool fits = false;  // every weight has a panel copy: its type has a panel format
    ONEBIT_CUDA_PANEL_SWITCH(p.w[0].type, {
      const int64_t n_units = (x.n_cols + PanelFmt<T>::E - 1) / PanelFmt<T>::E;
      fits = panel_rows_smem_bytes<T>(n_units, panel_rows_nb(int(x.n_rows))) <= kMatvecSmemLimit;
    });
    return fits;
  }
  // Whether every weight of p has its whole panel copy, all of one type and x's width, with
  // outputs of x's rows (no rotation).
  bool whole_panels(const Tensor& x, const Products& p) const {
    if (p.n < 1) return false;
    for (int32_t i = 0; i < p.n; ++i) {
      const Tensor& w = p.w[i];
      const CudaBuffer* b = static_cast<const CudaBuffer*>(w.buffer);
      if (w.in_rotation > 0 || b == nullptr || b->panel == nullptr || w.offset_bytes != 0 ||
          w.n_rows != b->panel_rows || w.n_cols != b->panel_cols || w.type != p.w[0].type ||
          w.n_cols != x.n_cols || p.out[i].n_rows != x.n_rows || p.out[i].n_cols != w.n_rows) {
        return false;
      }
    }
    return true;
  }

  // Whether matmuls(x, p) runs on panel_mma_kernel (panel_mma.cuh): the tensor cores' rows
  // (mma_rows_min_) up to 64, F16 / Q4_0 / Q8_0 weights with whole panel copies, k % 32 == 0.
  bool panel_mma_apply(const Tensor& x, const Products& p) const {
    if (!panel_mma_ || !mma_ || x.n_rows < mma_rows_min_ || x.n_rows > kTcRowsMax || x.n_cols % 32 != 0 || p.n < 1) {
      return false;
    }
    const GgmlType t = p.w[0].type;
    return (t == GgmlType::kF16 || t == GgmlType::kQ4_0 || t == GgmlType::kQ8_0) && whole_panels(x, p);
  }
  // The slices along k of a panel_mma_kernel launch: enough blocks for two per multiprocessor,
  // each slice 8 chunks of 32 or more, the slices' sums within kMmaPartMax.
  int panel_mma_split(const Products& p, int64_t n, int64_t k) const {
    int64_t blocks = 0, m_sum = 0;
    for (int i = 0; i < p.n; ++i) {
      blocks += blocks_for(p.w[i].n_rows, 32 * kTcWarps);
      m_sum += p.w[i].n_rows;
    }
    if (blocks == 0) return 1;
    int64_t z = std::min<int64_t>((2 * int64_t(sms_) + blocks - 1) / blocks, k / 32 / 8);
    z = std::min<int64_t>(z, int64_t(kMmaPartMax / size_t(std::max<int64_t>(1, n * m_sum))));
    return int(std::max<int64_t>(1, z));
  }
  // Its buffers (synchronizes: not while capturing): the row scales, x as fp16, the slices' sums.
  void panel_mma_grow(const Tensor& x, const Products& p) {
    const int64_t n = x.n_rows, k = x.n_cols;
    grow_array(row_scales_, row_scales_n_, size_t(n));
    grow_array(gemm_x_, gemm_x_n_, size_t(n * k));
    const int z = panel_mma_split(p, n, k);
    size_t m_sum = 0;
    for (int i = 0; i < p.n; ++i) m_sum += size_t(p.w[i].n_rows);
    if (z > 1) grow_array(mma_part_, mma_part_n_, size_t(z) * size_t(n) * m_sum);
  }
  void panel_mma_now(const Tensor& x, const Products& p) {
    const int64_t n = x.n_rows, k = x.n_cols;
    ONEBIT_CHECK(row_scales_ != nullptr && size_t(n) <= row_scales_n_ && size_t(n * k) <= gemm_x_n_);
    gemm_prep_x_kernel<<<unsigned(n), 256, 0, stream_>>>(fptr(x), fstride(x), k, gemm_x_, k, row_scales_);
    CUDA_LAUNCHED();
    const int z = panel_mma_split(p, n, k);
    const PanelSegs sg = panel_segs_of(p, 32 * kTcWarps);
    const unsigned blocks = sg.first[p.n];
    PartOffsets po{};
    size_t off = 0;
    for (int32_t i = 0; i < p.n; ++i) {
      po.off[i] = off;
      off += size_t(z) * size_t(n) * size_t(p.w[i].n_rows);
    }
    ONEBIT_CHECK(z == 1 || (mma_part_ != nullptr && off <= mma_part_n_));
    float* part = z > 1 ? mma_part_ : nullptr;
    auto run = [&]<int T, int NT>() {
      constexpr size_t smem = panel_mma_smem_bytes<NT>();
      const void* fn = reinterpret_cast<const void*>(&panel_mma_kernel<T, NT>);
      if (!tc_smem_set_[int(T) & 31][NT / 4]) {
        CUDA_OK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        tc_smem_set_[int(T) & 31][NT / 4] = true;
      }
      const int64_t n_units = (k + PanelFmt<T>::E - 1) / PanelFmt<T>::E;
      panel_mma_kernel<T, NT><<<dim3(blocks, unsigned(z)), kTcThreads, smem, stream_>>>(sg, gemm_x_, int(n), k, n_units,
                                                                                      row_scales_, part, po);
    };
    auto by_rows = [&]<int T>() {
      if (n <= 16) run.template operator()<T, 2>();
      else if (n <= 32) run.template operator()<T, 4>();
      else run.template operator()<T, 8>();
    };
    switch (p.w[0].type) {
      case GgmlType::kF16: by_rows.template operator()<kF16>(); break;
      case GgmlType::kQ4_0: by_rows.template operator()<kQ4_0>(); break;
      default: by_rows.template operator()<kQ8_0>(); break;
    }
    CUDA_LAUNCHED();
    if (z > 1) {
      for (int32_t i = 0; i < p.n; ++i) {
        mma_split_sum_kernel<<<blocks_for(n * sg.m[i], 256), 256, 0, stream_>>>(part + po.off[i], z, n, sg.m[i],
                                                                                 row_scales_, sg.out[i], sg.o_stride[i]);
        CUDA_LAUNCHED();
      }
    }
  }

  // The panels of p's weights as one launch's segments, `rows` weight rows a block.
  static PanelSegs panel_segs_of(const Products& p, int rows) {
    PanelSegs sg{};
    sg.n = p.n;
    unsigned blocks = 0;
    for (int32_t i = 0; i < p.n; ++i) {
      sg.panel[i] = static_cast<const CudaBuffer*>(p.w[i].buffer)->panel;
      sg.out[i] = fptr(p.out[i]);
      sg.o_stride[i] = fstride(p.out[i]);
      sg.m[i] = p.w[i].n_rows;
      sg.first[i] = blocks;
      blocks += blocks_for(p.w[i].n_rows, rows);
    }
    sg.first[p.n] = blocks;
    return sg;
  }

  void panel_segs_now(const Tensor& x, const Products& p) {
    const PanelSegs sg = panel_segs_of(p, 32);
    const unsigned blocks = sg.first[p.n];
    const int64_t k = x.n_cols;
    const int nb = int(x.n_rows);
    ONEBIT_CUDA_PANEL_SWITCH(p.w[0].type, {
      const int64_t n_units = (k + PanelFmt<T>::E - 1) / PanelFmt<T>::E;
      if (nb == 1) {
        const int threads = panel_threads(blocks);
        const size_t shm = panel_smem_bytes<T>(n_units);
        launch_panel(&panel_matvec_segs_kernel<T>, blocks, shm, threads, sg, fptr(x), k, n_units, pipe_, x15_);
      } else {
        auto launch = [&]<int NB>() {
          launch_panel(&panel_rows_segs_kernel<T, NB>, blocks, panel_rows_smem_bytes<T>(n_units, NB),
                       kPanelThreads, sg, fptr(x), fstride(x), nb, k, n_units);
        };
        switch (panel_rows_nb(nb)) {
          case 2: launch.template operator()<2>(); break;
          case 4: launch.template operator()<4>(); break;
          case 8: launch.template operator()<8>(); break;
          default: launch.template operator()<kPanelRowsMax>(); break;
        }
      }
    });
  }

  // 2..8 activation rows on a weight's panel copy (whole 32-row groups): the grouped MoE kernel
  // with one expert and every row routed to it, so each panel unit is loaded once for all rows
  // (matvec_multi_kernel, the row path, dequantizes element by element: slower than one row on
  // the panels). False where the weight has no such copy.
  bool panel_rows(const Tensor& w, const Tensor& x, const Tensor& out) {
    const CudaBuffer* b = static_cast<const CudaBuffer*>(w.buffer);
    const int64_t m = w.n_rows, n = x.n_rows, k = w.n_cols;
    if (b->panel == nullptr || w.offset_bytes != 0 || m != b->panel_rows || k != b->panel_cols || m % 32 != 0 ||
        n > kMultiRows) {
      return false;
    }
    MoeArgs a{};
    a.w = dptr(w), a.w_stride = w.row_stride_bytes, a.m = m, a.k = k, a.n_experts = 1;
    a.x = fptr(x), a.x_stride = fstride(x), a.shared_x = true;
    a.ids = zero_ids_, a.ids_stride = 1, a.top_k = 1, a.pairs = n;
    a.out = fptr(out), a.o_stride = fstride(out), a.err = err_;
    bool done = false;
    ONEBIT_CUDA_PANEL_SWITCH(w.type, {
      using F = PanelFmt<T>;
      const int64_t n_units = (k + F::E - 1) / F::E;
      const size_t row_bytes = size_t(n_units) * (F::E + (T == kQ4_K ? 8 : 0)) * sizeof(float);
      const size_t red_bytes = size_t(kPanelWarps) * kMoeBatch * 32 * sizeof(float);
      const size_t fit = kMatvecSmemLimit > red_bytes ? (kMatvecSmemLimit - red_bytes) / row_bytes : 0;
      if (fit >= 1) {
        a.batch = int(std::min<size_t>({size_t(kMoeBatch), fit, size_t(n)}));
        launch(&moe_panel_grouped_kernel<T>, dim3(unsigned(m / 32), 1), dim3(kPanelThreads),
               size_t(a.batch) * row_bytes + red_bytes, b->panel, n_units, a);
        done = true;
      }
    });
    if (done) CUDA_LAUNCHED();
    return done;
  }

  bool delta_smem_set_ = false;  // gated_delta_kernel's shared memory limit raised
  Tensor rot_;                   // the rotated input of a Hadamard-rotated weight (rotated())
  void ensure_smem_attr(int type, const void* fn) {
    if (smem_attr_set_[type & 31]) return;
    CUDA_OK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMatvecSmemLimit)));
    smem_attr_set_[type & 31] = true;
  }

  // Deferred steps (ONEBIT_CUDA_GRAPHS=0 runs every op at its call, as before graphs).
  bool graphs_ = env_on("ONEBIT_CUDA_GRAPHS");
  std::vector<std::function<void()>> pending_;
  std::vector<int> pending_pg_;     // per pending op: its instruction in pg_instrs_, or -1
  std::vector<PgInstr> pg_instrs_;  // this step's step-program instructions
  // Step programs (step_program.cuh): a step's runs of ops with a body there as one persistent
  // kernel of pg_grid_ blocks (all resident at once). Off unless ONEBIT_CUDA_PROGRAM=1: measured
  // slower than the step's graph of kernels so far (docs/cuda.md, "Step programs").
  bool pg_ = [] {
    const char* e = std::getenv("ONEBIT_CUDA_PROGRAM");
    return e != nullptr && std::string(e) == "1";
  }();
  int pg_grid_ = 0;
  bool pg_trace_ = std::getenv("ONEBIT_CUDA_PROGRAM_TRACE") != nullptr;
  double pg_traced_[8][4] = {};  // by op: instructions, launches, wait ns, time ns
  StepKey sig_;
  bool broken_ = false;
  std::unordered_map<StepKey, Graph, StepKeyHash> graphs_of_;
  uint64_t graph_clock_ = 0;
  double step_open_ = 0.0;  // host_ms() at the step's first deferred op
  GraphStats stats_;
  uint8_t* pinned_ = nullptr;
  size_t staged_ = 0;
  std::vector<HostRead> reads_;
  bool panel_smem_set_[32] = {};  // panel_matvec_kernel<type> allowed more than 48 KiB
  // Panel copies of F16 / Q4_0 / Q8_0 / Q4_K / Q6_K weights (ONEBIT_CUDA_PANELS=0 turns them off,
  // for comparisons: decode then runs on the row kernels).
  bool panels_ = env_on("ONEBIT_CUDA_PANELS");
  // Prompt-sized products on tensor cores (mma_matmul.cuh; ONEBIT_CUDA_MMA=0 keeps the float
  // tiles, for comparisons).
  bool mma_ = env_on("ONEBIT_CUDA_MMA");
  // Programmatic dependent launch: 1 (the default) for the panel products (launch_panel), 2 for
  // every step kernel (launch), 0 off (ONEBIT_CUDA_PDL). Measured on an H100 (docs/cuda.md), 2 is
  // slower than 1 (8B Q4_0 tg128 222 against 266 tok/s): so 1. Off before compute capability 9.0.
  int pdl_ = [] {
    const char* e = std::getenv("ONEBIT_CUDA_PDL");
    return e == nullptr ? 1 : std::atoi(e);
  }();
  // One-row Q4_0 / Q8_0 products on integer dots with activations to 15 bits (stage_panel_x15);
  // ONEBIT_CUDA_X15=0: the float path.
  bool x15_ = env_on("ONEBIT_CUDA_X15");
  // The decode products' pipelined loop (panel_dots_pipelined; ONEBIT_CUDA_PIPE=0: the loop of
  // U units loaded, then multiplied).
  bool pipe_ = env_on("ONEBIT_CUDA_PIPE");
  // Prompt tiles of paged attention on tensor cores (flash_attention; ONEBIT_CUDA_FLASH=0: the float
  // kernel for every row).
  bool flash_ = env_on("ONEBIT_CUDA_FLASH");
  bool kernel_tail_ = false;      // the last op put on the stream is a kernel (CUDA_LAUNCHED / CUDA_COPY)
  bool multi_smem_set_[32] = {};  // matvec_multi_kernel<type> allowed more than 48 KiB of shared memory
  int device_;
  cudaStream_t stream_;
  int* err_;       // device flag (kErr* bits)
  int* host_err_;  // pinned copy read at synchronize
  std::string name_;
  std::vector<std::unique_ptr<CudaBuffer>> buffers_;
  uint8_t* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  // The tensor-core path's per-row activation scales and its slices' sums when cut along k
  // (mma_matmul.cuh; grow_floats).
  float* row_scales_ = nullptr;
  float* mma_part_ = nullptr;
  size_t mma_part_n_ = 0;
  static constexpr size_t kMmaPartMax = size_t(8) << 20;
  // The cut along k of tensor-core products of few tiles (mma_split; ONEBIT_CUDA_MMA_SPLIT=0 off,
  // for comparisons).
  bool mma_split_on_ = env_on("ONEBIT_CUDA_MMA_SPLIT");
  // Products of 5..64 rows on the panel copies' tensor-core kernel (panel_mma.cuh);
  // ONEBIT_CUDA_PANEL_MMA=0: matmul_mma_kernel, for comparisons.
  bool panel_mma_ = env_on("ONEBIT_CUDA_PANEL_MMA");
  bool tc_smem_set_[32][3] = {};  // panel_mma_kernel<type, NT> allowed its shared memory (NT / 4: 0, 1, 2)
  int sms_ = 1;  // multiprocessors
  // panel_threads' 16-warp blocks; ONEBIT_CUDA_PANEL_WIDE=0: always 8 warps.
  bool panel_wide_ = env_on("ONEBIT_CUDA_PANEL_WIDE");
  // The most activation rows a product takes on the panels (panel_segs_apply; past it, the tensor
  // cores): 4 (measured on an H100, TinyLlama Q4_0, ms per step of n tokens: n = 5-8 4.9-5.6 on
  // the 8-row panels, 4.1 on the tensor cores cut along k; n = 3-4 2.8-3.0 on the panels, 4.0 on
  // the tensor cores; n = 9-16 9.2-9.6 on the 16-row panels, 4.1-4.4 on the tensor cores);
  // ONEBIT_CUDA_PANEL_ROWS=N (1..16) for comparisons (16: the first rule, 8: the one before 4).
  // mma_rows_min_: the fewest rows on the tensor cores.
  int panel_rows_max_ = [] {
    const char* e = std::getenv("ONEBIT_CUDA_PANEL_ROWS");
    const int n = e != nullptr ? std::atoi(e) : 0;
    return n >= 1 && n <= kPanelRowsMax ? n : 4;
  }();
  int64_t mma_rows_min_ = std::max(2, std::min(panel_rows_max_, kMultiRows) + 1);
  int32_t* zero_ids_ = nullptr;   // kMultiRows zeros: panel_rows' routing (every row to "expert" 0)
  size_t row_scales_n_ = 0;
  // The fp16 GEMM (gemm_f16.cuh; gemm_applies): ONEBIT_CUDA_GEMM_ROWS (-1: by type), the
  // activations as fp16 (gemm_x_, halves) and a slab of dequantized weight rows (gemm_w_, at most
  // ONEBIT_CUDA_GEMM_SLAB_MB, default 128 MiB; 0: one 128-row tile at a time).
  int64_t gemm_rows_min_ = [] {
    const char* e = std::getenv("ONEBIT_CUDA_GEMM_ROWS");
    return e != nullptr ? std::max<int64_t>(0, std::atoll(e)) : int64_t(-1);
  }();
  size_t gemm_slab_bytes_ = [] {
    const char* e = std::getenv("ONEBIT_CUDA_GEMM_SLAB_MB");
    return (e != nullptr ? size_t(std::max<long long>(0, std::atoll(e))) : size_t(128)) << 20;
  }();
  // The GEMM on wgmma (gemm_wgmma.cuh) where the device is sm_90 and the build has the kernel
  // (sm_90a); ONEBIT_CUDA_WGMMA=0: gemm_f16_kernel (mma.sync) everywhere.
  bool wgmma_ = env_on("ONEBIT_CUDA_WGMMA");
  // The F16 wgmma GEMM with one wgmma group left in flight across its barrier (gemm_wgmma.cuh);
  // ONEBIT_CUDA_WG_INFLIGHT=0: each step's group waited for before the next barrier.
  bool wg_in_flight_ = env_on("ONEBIT_CUDA_WG_INFLIGHT");
  // The warp-specialized wgmma GEMM (gemm_wgmma_ws.cuh: a producer warpgroup, bulk tensor copies,
  // mbarriers, no block barrier in the loop): for F16 weights in place by default (1.06-1.10x
  // gemm_wgmma_kernel on the 8B products, H100), the dequantizing types stay on
  // gemm_wgmma_deq_kernel (1.06-1.23x faster than its 128 decoding threads). ONEBIT_CUDA_WG_WS=0:
  // never; =1: every wgmma product.
  int wg_ws_ = [] {
    const char* e = std::getenv("ONEBIT_CUDA_WG_WS");
    return e == nullptr ? 2 : std::atoi(e) == 1 ? 1 : 0;
  }();
  bool ws_for(int kind) const { return wg_ws_ == 1 || (wg_ws_ == 2 && kind == -1); }
  __half* gemm_x_ = nullptr;
  size_t gemm_x_n_ = 0;
  __half* gemm_w_ = nullptr;
  size_t gemm_w_n_ = 0;
  bool gemm_smem_set_ = false;
  bool smem_attr_set_[32] = {};
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, std::string* why_not) {
  auto fail = [&](std::string why) -> std::unique_ptr<Backend> {
    if (why_not != nullptr) *why_not = std::move(why);
    cudaGetLastError();
    return nullptr;
  };
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return fail(std::string("no usable CUDA driver or device: ") + cudaGetErrorString(e));
  if (count == 0) return fail("no CUDA device is present");
  if (device < 0 || device >= count) {
    return fail("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) + " present)");
  }
  if ((e = cudaSetDevice(device)) != cudaSuccess) return fail(std::string("cudaSetDevice: ") + cudaGetErrorString(e));
  cudaStream_t stream = nullptr;
  if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) {
    return fail(std::string("cudaStreamCreate: ") + cudaGetErrorString(e));
  }
  int* err = nullptr;
  int* host_err = nullptr;
  if ((e = cudaMalloc(&err, sizeof(int))) != cudaSuccess || (e = cudaMallocHost(&host_err, sizeof(int))) != cudaSuccess) {
    return fail(std::string("cuda backend setup: ") + cudaGetErrorString(e));
  }
  // A probe launch: fails when the GPU cannot run this build's machine code (another architecture).
  probe_kernel<<<1, 32, 0, stream>>>(err);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    return fail("the CUDA kernels of this build do not run on " + std::string(prop.name) + " (compute capability " +
                std::to_string(prop.major) + "." + std::to_string(prop.minor) + "): " + cudaGetErrorString(e) +
                "; rebuild with CMAKE_CUDA_ARCHITECTURES naming it");
  }
  *host_err = 0;
  return std::make_unique<CudaBackend>(device, stream, err, host_err);
}

uint64_t cuda_program_ops(const Backend& b) {
  const auto* c = dynamic_cast<const CudaBackend*>(&b);
  return c != nullptr ? c->program_ops() : 0;
}

double cuda_copy_bandwidth_gbs(int device, size_t n_bytes, int reps, std::string* why_not) {
  auto fail = [&](const char* what, cudaError_t e) {
    if (why_not != nullptr) *why_not = std::string(what) + ": " + cudaGetErrorString(e);
    cudaGetLastError();
    return 0.0;
  };
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return fail("cudaSetDevice", e);
  void *a = nullptr, *b = nullptr;
  if ((e = cudaMalloc(&a, n_bytes)) != cudaSuccess) return fail("cudaMalloc", e);
  if ((e = cudaMalloc(&b, n_bytes)) != cudaSuccess) {
    cudaFree(a);
    return fail("cudaMalloc", e);
  }
  cudaStream_t s = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  CUDA_OK(cudaMemsetAsync(a, 1, n_bytes, s));
  CUDA_OK(cudaMemcpyAsync(b, a, n_bytes, cudaMemcpyDeviceToDevice, s));  // warm-up
  float best_ms = 1e30f;
  for (int r = 0; r < std::max(reps, 1); ++r) {
    CUDA_OK(cudaEventRecord(e0, s));
    CUDA_OK(cudaMemcpyAsync(r % 2 ? a : b, r % 2 ? b : a, n_bytes, cudaMemcpyDeviceToDevice, s));
    CUDA_OK(cudaEventRecord(e1, s));
    CUDA_OK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    best_ms = std::min(best_ms, ms);
  }
  CUDA_OK(cudaEventDestroy(e0));
  CUDA_OK(cudaEventDestroy(e1));
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaFree(a));
  CUDA_OK(cudaFree(b));
  return 2.0 * double(n_bytes) / (double(best_ms) * 1e-3) / 1e9;
}

}  // namespace onebit
