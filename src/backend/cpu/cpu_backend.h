// The optimized CPU backend: host memory, SIMD kernels chosen at run time by CPUID (AVX2, AVX-VNNI,
// AVX-512, AVX-512 VNNI), a thread pool. Implements backend/backend.h; knows nothing of models.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "base/cpu_features.h"

namespace onebit {

// A CPU backend running its ops on n_threads threads (>= 1; the caller's thread is one of them)
// with the kernels of cpu_isa() (the best this CPU has, or $ONEBIT_ISA).
std::unique_ptr<Backend> make_cpu_backend(int n_threads);
// The same with the kernels of `isa` forced (tests, benchmarks); CHECKs cpu_isa_supported(isa).
// Weights of the panel types are repacked into panels (cpu/panels.h) unless $ONEBIT_CPU_PANELS is 0.
std::unique_ptr<Backend> make_cpu_backend(int n_threads, CpuIsa isa);
// The same with panel repacking chosen explicitly (tests and benchmarks compare both layouts).
// Prompt products run on AMX tiles (cpu/amx.h) when the ISA is avx512_vnni and cpu::amx_ready(),
// unless $ONEBIT_AMX is 0.
std::unique_ptr<Backend> make_cpu_backend(int n_threads, CpuIsa isa, bool panels);
// The same with AMX chosen explicitly; CHECKs that it can run (panels, avx512_vnni, amx_ready()).
std::unique_ptr<Backend> make_cpu_backend(int n_threads, CpuIsa isa, bool panels, bool amx);

}  // namespace onebit
