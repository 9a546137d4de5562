// The CUDA backend (backend/cuda/): device memory on one GPU, every Backend op as our own kernels
// (no cuBLAS) on one stream. Implements backend/backend.h; knows nothing of models.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace onebit {

// A backend on CUDA device `device`, or nullptr with *why_not (when given) set to the reason:
// this build has no CUDA backend (configured without nvcc or with -DONEBIT_CUDA=OFF), no CUDA
// device or driver is usable, `device` is out of range, or the GPU cannot run this build's kernels.
// Index, position and slot inputs live on the device, so their range checks (get_rows ids,
// store_kv slots, paged_attention block tables and sequence ids) run in the kernels: a bad value
// is skipped there and reported as a CHECK failure at the next synchronize().
std::unique_ptr<Backend> make_cuda_backend(int device, std::string* why_not);

// How many ops backend `b` ran inside step programs so far (step_program.cuh: a step's runs of
// ops as one persistent kernel; counted where a program is launched op by op or captured, not at
// graph replays); 0 for any other backend. For tests.
uint64_t cuda_program_ops(const Backend& b);

// Device-to-device copy bandwidth of GPU `device` in GB/s (1e9 bytes/s), counting the bytes read
// plus the bytes written (a D2D copy of n_bytes moves 2 * n_bytes): cudaMemcpyAsync between two
// buffers of n_bytes, timed with events, the best of `reps` after one warm-up. The memory roofline
// of the benchmarks (bench/e2e_bench.cpp). 0 with *why_not set when no CUDA device is usable.
double cuda_copy_bandwidth_gbs(int device, size_t n_bytes, int reps, std::string* why_not);

}  // namespace onebit
