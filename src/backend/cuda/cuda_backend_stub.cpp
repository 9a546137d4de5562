// make_cuda_backend for builds without CUDA (no nvcc at configure time, or -DONEBIT_CUDA=OFF).
#include "backend/cuda/cuda_backend.h"

#ifndef ONEBIT_HAVE_CUDA
namespace onebit {

std::unique_ptr<Backend> make_cuda_backend(int /*device*/, std::string* why_not) {
  if (why_not != nullptr) {
    *why_not = "this build has no CUDA backend (configure with nvcc present, -DONEBIT_CUDA=ON)";
  }
  return nullptr;
}

uint64_t cuda_program_ops(const Backend& /*b*/) { return 0; }

double cuda_copy_bandwidth_gbs(int /*device*/, size_t /*n_bytes*/, int /*reps*/, std::string* why_not) {
  if (why_not != nullptr) *why_not = "this build has no CUDA backend";
  return 0;
}

}  // namespace onebit
#endif
