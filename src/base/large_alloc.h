// Allocation for large, long-lived, streamed buffers (repacked weights, KV caches): 64-byte
// aligned, and from 2 MiB up aligned to 2 MiB and advised for transparent huge pages
// (madvise(MADV_HUGEPAGE) on Linux), which lets the kernel back them with 2 MiB pages: fewer TLB
// misses and page walks while streaming (decode measured in docs/kernels.md, "Huge pages").
// ONEBIT_HUGE_PAGES=0 in the environment leaves out the advice. Free with std::free. Returns
// nullptr when out of memory.
#pragma once

#include <cstddef>

namespace onebit {

void* large_alloc(size_t bytes);

}  // namespace onebit
