// Dot kernels for AVX-VNNI (VEX vpdpbusd on 256-bit vectors) for the 32-element block types.
// Every header is included before the target pragma so that no shared inline code is compiled for it.
#include <type_traits>

#include "backend/cpu/cpu_kernels.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

// GCC takes the target for the rest of the file; clang 14 needs it as an attribute of each
// function (its `#pragma GCC target` misses the VNNI feature pairs), popped after the kernels.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avxvnni"))), apply_to = function)
#else
#pragma GCC target("avxvnni")
#endif
#define ONEBIT_DOT_NS avx_vnni
#define ONEBIT_DOT_VNNI 1
#include "backend/cpu/dot_kernels_impl.h"
#if defined(__clang__)
#pragma clang attribute pop
#endif

namespace onebit::cpu {

const DotTable& dot_table_avx_vnni() {
  static const DotTable kTable = avx_vnni::make_table(CpuIsa::kAvxVnni);
  return kTable;
}

}  // namespace onebit::cpu
