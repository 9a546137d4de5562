// Backends by name (backend_factory.h).
#include "backend/backend_factory.h"

#include <cstdlib>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"

namespace onebit {

Result<std::unique_ptr<Backend>> make_backend(const std::string& device, int n_threads) {
  if (device == "cpu") {
    if (n_threads < 1) return make_error("cpu backend: --threads must be at least 1, got " + std::to_string(n_threads));
    return make_cpu_backend(n_threads);
  }
  if (device == "reference") return make_reference_backend();
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (device.size() > 5) {
      char* end = nullptr;
      const long v = std::strtol(device.c_str() + 5, &end, 10);
      if (end == device.c_str() + 5 || *end != '\0' || v < 0 || v > 1024) {
        return make_error("device '" + device + "': expected cuda or cuda:N with N a GPU index");
      }
      index = int(v);
    }
    std::string why;
    auto be = make_cuda_backend(index, &why);
    if (be == nullptr) return make_error("the CUDA backend is not usable: " + why);
    return be;
  }
  return make_error("unknown device '" + device + "'; use cpu, cuda, cuda:N or reference");
}

}  // namespace onebit
