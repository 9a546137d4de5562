// Block geometry of ggml types, from ggml's type_traits table (ggml/src/ggml.c).
#include "gguf/ggml_type.h"

#include <array>
#include <cctype>
#include <string>

namespace onebit {
namespace {

struct Entry {
  uint32_t id;
  GgmlTypeTraits traits;
};

// block_bytes for the K-quants assume QK_K = 256 (ggml's default build).
constexpr std::array<Entry, 31> kTypes = {{
    {0, {"f32", 1, 4, true}},
    {1, {"f16", 1, 2, true}},
    {2, {"q4_0", 32, 18, true}},
    {3, {"q4_1", 32, 20, true}},
    {6, {"q5_0", 32, 22, true}},
    {7, {"q5_1", 32, 24, true}},
    {8, {"q8_0", 32, 34, true}},
    {9, {"q8_1", 32, 36, true}},
    {10, {"q2_K", 256, 84, false}},
    {11, {"q3_K", 256, 110, false}},
    {12, {"q4_K", 256, 144, true}},
    {13, {"q5_K", 256, 176, true}},
    {14, {"q6_K", 256, 210, true}},
    {15, {"q8_K", 256, 292, true}},
    {16, {"iq2_xxs", 256, 66, false}},
    {17, {"iq2_xs", 256, 74, false}},
    {18, {"iq3_xxs", 256, 98, false}},
    {19, {"iq1_s", 256, 50, false}},
    {20, {"iq4_nl", 32, 18, false}},
    {21, {"iq3_s", 256, 110, false}},
    {22, {"iq2_s", 256, 82, false}},
    {23, {"iq4_xs", 256, 136, false}},
    {24, {"i8", 1, 1, false}},
    {25, {"i16", 1, 2, false}},
    {26, {"i32", 1, 4, false}},
    {27, {"i64", 1, 8, false}},
    {28, {"f64", 1, 8, false}},
    {29, {"iq1_m", 256, 56, false}},
    {30, {"bf16", 1, 2, true}},
    {34, {"tq1_0", 256, 54, false}},
    {35, {"tq2_0", 256, 66, false}},
}};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t raw_type) {
  for (const auto& e : kTypes)
    if (e.id == raw_type) return e.traits;
  return std::nullopt;
}

std::string ggml_type_name(uint32_t raw_type) {
  auto t = ggml_type_traits(raw_type);
  return t ? std::string(t->name) : "type" + std::to_string(raw_type);
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  auto lower = [](std::string_view s) {
    std::string r(s);
    for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return r;
  };
  const std::string want = lower(name);
  for (const auto& e : kTypes)
    if (lower(e.traits.name) == want) return static_cast<GgmlType>(e.id);
  return std::nullopt;
}

}  // namespace onebit
