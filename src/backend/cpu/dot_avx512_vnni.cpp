// Dot kernels for AVX-512 VNNI (EVEX vpdpbusd, 256-bit) for the 32-element block types.
// Every header is included before the target pragma so that no shared inline code is compiled for it.
#include <type_traits>

#include "backend/cpu/cpu_kernels.h"

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
#define ONEBIT_DOT_NS avx512_vnni
#define ONEBIT_DOT_VNNI 2
#include "backend/cpu/dot_kernels_impl.h"

namespace onebit::cpu {

const DotTable& dot_table_avx512_vnni() {
  static const DotTable kTable = avx512_vnni::make_table(CpuIsa::kAvx512Vnni);
  return kTable;
}

}  // namespace onebit::cpu
