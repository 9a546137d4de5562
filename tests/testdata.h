// Where tests find ../shared/testdata and the built binary; tests skip when data is absent.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace onebit::testing {

inline std::string testdata_path(const std::string& rel) {
  return std::string(ONEBIT_TESTDATA_DIR) + "/" + rel;
}

inline std::string source_path(const std::string& rel) {
  return std::string(ONEBIT_SOURCE_DIR) + "/" + rel;
}

inline std::string binary_path() { return ONEBIT_BINARY; }

}  // namespace onebit::testing

// Skips the current test with a clear message when a shared test file is missing.
#define ONEBIT_REQUIRE_TESTDATA(rel)                                                         \
  do {                                                                                        \
    if (!std::filesystem::exists(::onebit::testing::testdata_path(rel)))                      \
      GTEST_SKIP() << "test data missing: " << ::onebit::testing::testdata_path(rel)         \
                   << " (clone the shared testdata beside the project as ../shared)";         \
  } while (0)
