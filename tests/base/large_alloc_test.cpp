#include "base/large_alloc.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace onebit {
namespace {

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(LargeAlloc, SmallBuffersAre64ByteAligned) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{4097}, (size_t{2} << 20) - 1}) {
    void* p = large_alloc(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(address(p) % 64, 0u) << n;
    std::memset(p, 0xab, n);  // the whole requested size is usable (ASan checks the bounds)
    std::free(p);
  }
}

TEST(LargeAlloc, LargeBuffersStartOnA2MiBBoundary) {
  for (size_t n : {size_t{2} << 20, (size_t{5} << 20) + 3}) {
    auto* p = static_cast<uint8_t*>(large_alloc(n));
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(address(p) % (size_t{2} << 20), 0u) << n;
    std::memset(p, 0xcd, n);
    EXPECT_EQ(p[n - 1], 0xcd);
    std::free(p);
  }
}

}  // namespace
}  // namespace onebit
