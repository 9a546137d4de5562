// CPUID leaves 1 and 7 (subleaves 0 and 1) and XGETBV, as the Intel SDM vol. 2A describes them (AMX: vol. 1, ch. 18).
#include "base/cpu_features.h"

#include <cpuid.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace onebit {
namespace {

bool bit(unsigned reg, int b) { return (reg >> b) & 1u; }

unsigned long long xgetbv0() {
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = bit(c, 27);
  const bool avx = bit(c, 28);
  f.fma = bit(c, 12);
  f.f16c = bit(c, 29);
  // The OS must save YMM (XCR0 bits 1-2) for AVX and opmask/ZMM (bits 5-7) for AVX-512.
  const unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm_ok = (xcr0 & 0x6) == 0x6;
  const bool zmm_ok = (xcr0 & 0xe6) == 0xe6;
  if (!(avx && ymm_ok)) f.fma = f.f16c = false;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = avx && ymm_ok && bit(b, 5);
  f.avx512f = zmm_ok && bit(b, 16);
  f.avx512bw = f.avx512f && bit(b, 30);
  f.avx512vl = f.avx512f && bit(b, 31);
  f.avx512vnni = f.avx512f && bit(c, 11);
  f.amx_int8 = bit(d, 24) && bit(d, 25) && ((xcr0 >> 17) & 3) == 3;  // AMX-TILE, AMX-INT8; XTILECFG, XTILEDATA
  __cpuid_count(7, 1, a, b, c, d);
  f.avx_vnni = f.avx2 && bit(a, 4);
  f.avx512bf16 = f.avx512f && bit(a, 5);
  return f;
}

CpuIsa best_supported() {
  for (CpuIsa isa : {CpuIsa::kAvx512Vnni, CpuIsa::kAvx512, CpuIsa::kAvxVnni}) {
    if (cpu_isa_supported(isa)) return isa;
  }
  return CpuIsa::kAvx2;
}

CpuIsa resolve() {
  const CpuIsa best = best_supported();
  const char* env = std::getenv("ONEBIT_ISA");
  if (env == nullptr || env[0] == '\0') return best;
  const auto forced = cpu_isa_from_name(env);
  if (!forced || !cpu_isa_supported(*forced)) {
    std::fprintf(stderr, "1bit: ONEBIT_ISA=%s is not a supported target here (avx2, avx_vnni, "
                 "avx512, avx512_vnni as the CPU allows); using %s\n", env,
                 std::string(cpu_isa_name(best)).c_str());
    return best;
  }
  return *forced;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures kFeatures = detect();
  return kFeatures;
}

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvxVnni: return "avx_vnni";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Vnni: return "avx512_vnni";
  }
  return "?";
}

std::optional<CpuIsa> cpu_isa_from_name(std::string_view name) {
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvxVnni, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni}) {
    if (cpu_isa_name(isa) == name) return isa;
  }
  return std::nullopt;
}

bool cpu_isa_supported(CpuIsa isa) {
  const CpuFeatures& f = cpu_features();
  const bool base = f.avx2 && f.fma && f.f16c;
  const bool avx512 = base && f.avx512f && f.avx512bw && f.avx512vl;
  switch (isa) {
    case CpuIsa::kAvx2: return base;
    case CpuIsa::kAvxVnni: return base && f.avx_vnni;
    case CpuIsa::kAvx512: return avx512;
    case CpuIsa::kAvx512Vnni: return avx512 && f.avx512vnni;
  }
  return false;
}

CpuIsa cpu_isa() {
  static const CpuIsa kIsa = resolve();
  return kIsa;
}

}  // namespace onebit
