// Dot kernels for AVX-512 F/BW/VL: the AVX2 kernels with EVEX encodings and 32 vector registers.
// Every header is included before the target pragma so that no shared inline code is compiled for it.
#include <type_traits>

#include "backend/cpu/cpu_kernels.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

// GCC takes the target for the rest of the file; clang 14 needs it as an attribute of each
// function (its `#pragma GCC target` misses the VNNI feature pairs), popped after the kernels.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl")
#endif
#define ONEBIT_DOT_NS avx512
#define ONEBIT_DOT_VNNI 0
#include "backend/cpu/dot_kernels_impl.h"
#include "backend/cpu/attention_kernels_impl.h"
#if defined(__clang__)
#pragma clang attribute pop
#endif

namespace onebit::cpu {

const DotTable& dot_table_avx512() {
  static const DotTable kTable = [] {
    DotTable t = avx512::make_table(CpuIsa::kAvx512);
    t.attn_sum = avx512::attn_sum;
    return t;
  }();
  return kTable;
}

}  // namespace onebit::cpu
