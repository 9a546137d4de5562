#include "base/large_alloc.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace onebit {

void* large_alloc(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  bytes = std::max<size_t>(bytes, 1);
  if (bytes < kHuge) return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  static const bool advise = [] {
    const char* v = std::getenv("ONEBIT_HUGE_PAGES");
    return v == nullptr || std::string_view(v) != "0";
  }();
  if (p != nullptr && advise) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure changes nothing
#endif
  return p;
}

}  // namespace onebit
