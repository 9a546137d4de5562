// x86 CPU feature detection (CPUID + XGETBV) and the SIMD target the kernels dispatch to. Knows
// nothing of kernels; backend/cpu picks its kernel table from cpu_isa().
#pragma once

#include <optional>
#include <string_view>

namespace onebit {

// What CPUID and the OS (XCR0: AVX / AVX-512 state saved) allow. Detected once, thread-safe.
struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx_vnni = false;  // the VEX (256-bit) encoding of VPDPBUSD, Alder Lake / Sapphire Rapids
  bool amx_int8 = false;  // AMX-TILE and AMX-INT8 with the tile state saved by the OS (XCR0 bits 17-18);
                          // Linux still has to grant the process the tile data (backend/cpu/amx.h)
};

// The machine's features (cached after the first call).
const CpuFeatures& cpu_features();

// SIMD targets the CPU kernels are compiled for, lowest first. kAvx2 is the build's baseline
// (x86-64-v3: AVX2, FMA, F16C); the others are compiled per file and used only when CPUID says so.
enum class CpuIsa { kAvx2 = 0, kAvxVnni = 1, kAvx512 = 2, kAvx512Vnni = 3 };

// "avx2", "avx_vnni", "avx512", "avx512_vnni".
std::string_view cpu_isa_name(CpuIsa isa);
// Parses a name as cpu_isa_name prints it; nullopt for anything else.
std::optional<CpuIsa> cpu_isa_from_name(std::string_view name);
// True when this machine can run kernels of `isa`.
bool cpu_isa_supported(CpuIsa isa);
// The best target this machine supports, lowered to $ONEBIT_ISA when it is set to a supported
// target name (for tests and benchmarks); an unknown or unsupported $ONEBIT_ISA is reported once on
// stderr and ignored. Cached after the first call.
CpuIsa cpu_isa();

}  // namespace onebit
