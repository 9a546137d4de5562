// Unicode Character Database tables (generated into unicode_tables.cpp by
// tools/gen_unicode_tables.py). Plain data; lookups live in unicode.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onebit {

// Unicode general categories (UnicodeData.txt field 2). kCn (unassigned) is the default.
enum class GeneralCategory : uint8_t {
  kCn, kLu, kLl, kLt, kLm, kLo, kMn, kMc, kMe, kNd, kNl, kNo, kPc, kPd, kPs,
  kPe, kPi, kPf, kPo, kSm, kSc, kSk, kSo, kZs, kZl, kZp, kCc, kCf, kCs, kCo,
};

namespace unicode_data {

struct CategoryRun {
  uint32_t first;
  uint32_t last;  // inclusive
  GeneralCategory category;
};
struct ValueRun {
  uint32_t first;
  uint32_t last;  // inclusive
  uint32_t value;
};
struct Decomposition {
  uint32_t code_point;
  uint32_t first;
  uint32_t second;  // 0 for a singleton decomposition
};
struct Composition {
  uint32_t first;
  uint32_t second;
  uint32_t composed;
};

extern const CategoryRun kCategoryRuns[];
extern const size_t kCategoryRunCount;
extern const ValueRun kCombiningClassRuns[];
extern const size_t kCombiningClassRunCount;
extern const ValueRun kWhiteSpaceRuns[];
extern const size_t kWhiteSpaceRunCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const Composition kCompositions[];
extern const size_t kCompositionCount;

}  // namespace unicode_data
}  // namespace onebit
