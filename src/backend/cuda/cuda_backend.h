// The CUDA backend (backend/cuda/): device memory on one GPU, every Backend op as our own kernels
// (no cuBLAS) on one stream. Implements backend/backend.h; knows nothing of models.
#pragma once

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

}  // namespace onebit
