// The ggml tensor types that GGUF files name, with their block sizes in elements and bytes.
// Layouts follow ggml (ggml/src/ggml-common.h); see docs/gguf.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace onebit {

// Numeric values are ggml's `enum ggml_type`; they are what a GGUF file stores.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
};

// Block geometry of a type: `block_elems` values are stored in `block_bytes` bytes.
struct GgmlTypeTraits {
  std::string_view name;  // ggml's name, e.g. "q4_K"
  uint32_t block_elems;
  uint32_t block_bytes;
  bool can_dequantize;    // 1bit can turn it into floats (gguf/quants.h)
};

// Traits of a raw type value from a file, or nullopt when 1bit does not know the type.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t raw_type);

// ggml's name for a known type, or "type<N>" for an unknown one.
std::string ggml_type_name(uint32_t raw_type);

// Parses a type name as `1bit quantize` takes it ("q4_0", "Q4_K", "f16"); case-insensitive.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

}  // namespace onebit
