// Dot kernels for AVX-VNNI (VEX vpdpbusd on 256-bit vectors) for the 32-element block types.
// Every header is included before the target pragma so that no shared inline code is compiled for it.
#include <type_traits>

#include "backend/cpu/cpu_kernels.h"

#pragma GCC target("avxvnni")
#define ONEBIT_DOT_NS avx_vnni
#define ONEBIT_DOT_VNNI 1
#include "backend/cpu/dot_kernels_impl.h"

namespace onebit::cpu {

const DotTable& dot_table_avx_vnni() {
  static const DotTable kTable = avx_vnni::make_table(CpuIsa::kAvxVnni);
  return kTable;
}

}  // namespace onebit::cpu
