// Dot kernels for the baseline build target (x86-64-v3): AVX2 + FMA + F16C, maddubs/madd integer dots.
// Every header is included before the target pragma so that no shared inline code is compiled for it.
#include <type_traits>

#include "backend/cpu/cpu_kernels.h"


#define ONEBIT_DOT_NS avx2
#define ONEBIT_DOT_VNNI 0
#include "backend/cpu/dot_kernels_impl.h"

namespace onebit::cpu {

const DotTable& dot_table_avx2() {
  static const DotTable kTable = avx2::make_table(CpuIsa::kAvx2);
  return kTable;
}

}  // namespace onebit::cpu
