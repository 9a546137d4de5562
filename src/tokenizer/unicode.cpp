// UTF-8 decoding, character-class lookups and NFC over the generated UCD tables.
// Lookups go through one flat per-code-point table built once on first use.
#include "tokenizer/unicode.h"

#include <algorithm>
#include <memory>

#include "base/utf8.h"

namespace onebit {
namespace {

constexpr uint8_t kWhiteSpaceBit = 0x80;

// [cp] = category | kWhiteSpaceBit; ~1.1 MB, built once (thread-safe static init).
const uint8_t* flat_table() {
  static const std::unique_ptr<uint8_t[]> table = [] {
    auto t = std::make_unique<uint8_t[]>(kMaxCodePoint + 1);
    for (size_t i = 0; i < unicode_data::kCategoryRunCount; ++i) {
      const auto& r = unicode_data::kCategoryRuns[i];
      for (uint32_t c = r.first; c <= r.last; ++c) t[c] = static_cast<uint8_t>(r.category);
    }
    for (size_t i = 0; i < unicode_data::kWhiteSpaceRunCount; ++i) {
      const auto& r = unicode_data::kWhiteSpaceRuns[i];
      for (uint32_t c = r.first; c <= r.last; ++c) t[c] |= kWhiteSpaceBit;
    }
    return t;
  }();
  return table.get();
}

// Hangul syllable constants (Unicode 3.12, "Conjoining Jamo Behavior").
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose_into(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* begin = unicode_data::kDecompositions;
  const auto* end = begin + unicode_data::kDecompositionCount;
  const auto* it = std::lower_bound(begin, end, cp, [](const auto& d, uint32_t v) { return d.code_point < v; });
  if (it == end || it->code_point != cp) {
    out.push_back(cp);
    return;
  }
  decompose_into(it->first, out);
  if (it->second != 0) decompose_into(it->second, out);
}

// The primary composite of (a, b), or 0 when none.
uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* begin = unicode_data::kCompositions;
  const auto* end = begin + unicode_data::kCompositionCount;
  const auto* it = std::lower_bound(begin, end, std::make_pair(a, b), [](const auto& c, const auto& v) {
    return c.first != v.first ? c.first < v.first : c.second < v.second;
  });
  return (it != end && it->first == a && it->second == b) ? it->composed : 0;
}

}  // namespace

uint32_t utf8_next(std::string_view text, size_t& pos) {
  const Utf8Char c = utf8_decode(text, pos);
  if (c.status == Utf8Status::kValid) {
    pos += c.n_bytes;
    return c.cp;
  }
  return kInvalidByteBase + static_cast<uint8_t>(text[pos++]);
}

std::vector<uint32_t> utf8_to_code_points(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) out.push_back(utf8_next(text, pos));
  return out;
}

void append_code_point(uint32_t cp, std::string& out) {
  if (cp >= kInvalidByteBase) out.push_back(static_cast<char>(cp - kInvalidByteBase));
  else utf8_append(cp, out);
}

std::string code_points_to_utf8(const std::vector<uint32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (uint32_t cp : cps) append_code_point(cp, out);
  return out;
}

GeneralCategory general_category(uint32_t cp) {
  if (cp > kMaxCodePoint) return GeneralCategory::kCn;
  return static_cast<GeneralCategory>(flat_table()[cp] & ~kWhiteSpaceBit);
}

bool is_letter(uint32_t cp) {
  const auto c = general_category(cp);
  return c >= GeneralCategory::kLu && c <= GeneralCategory::kLo;
}
bool is_mark(uint32_t cp) {
  const auto c = general_category(cp);
  return c >= GeneralCategory::kMn && c <= GeneralCategory::kMe;
}
bool is_number(uint32_t cp) {
  const auto c = general_category(cp);
  return c >= GeneralCategory::kNd && c <= GeneralCategory::kNo;
}
bool is_punctuation(uint32_t cp) {
  const auto c = general_category(cp);
  return c >= GeneralCategory::kPc && c <= GeneralCategory::kPo;
}
bool is_symbol(uint32_t cp) {
  const auto c = general_category(cp);
  return c >= GeneralCategory::kSm && c <= GeneralCategory::kSo;
}
bool is_whitespace(uint32_t cp) { return cp <= kMaxCodePoint && (flat_table()[cp] & kWhiteSpaceBit) != 0; }

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300 || cp > kMaxCodePoint) return 0;
  const auto* begin = unicode_data::kCombiningClassRuns;
  const auto* end = begin + unicode_data::kCombiningClassRunCount;
  const auto* it = std::upper_bound(begin, end, cp, [](uint32_t v, const auto& r) { return v < r.first; });
  if (it == begin) return 0;
  --it;
  return cp <= it->last ? static_cast<uint8_t>(it->value) : 0;
}

std::vector<uint32_t> nfc(const std::vector<uint32_t>& cps) {
  std::vector<uint32_t> d;
  d.reserve(cps.size());
  for (uint32_t cp : cps) {
    if (cp > kMaxCodePoint) d.push_back(cp);
    else decompose_into(cp, d);
  }
  // Canonical ordering: stable sort of each run of nonzero combining classes.
  for (size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) { ++i; continue; }
    size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j,
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Canonical composition (UAX #15 section 1.3 / Unicode 3.11).
  std::vector<uint32_t> out;
  out.reserve(d.size());
  size_t starter_idx = SIZE_MAX;
  int last_ccc = 0;  // combining class of out.back()
  for (uint32_t cp : d) {
    const int ccc = combining_class(cp);
    if (starter_idx != SIZE_MAX) {
      const bool adjacent = out.size() - 1 == starter_idx;
      const bool blocked = !adjacent && (last_ccc == 0 || last_ccc >= ccc);
      const uint32_t composed = blocked ? 0 : compose_pair(out[starter_idx], cp);
      if (composed != 0) {
        out[starter_idx] = composed;
        continue;
      }
    }
    if (ccc == 0) starter_idx = out.size();
    last_ccc = ccc;
    out.push_back(cp);
  }
  return out;
}

std::string nfc_utf8(std::string_view text) {
  // Below U+0300 nothing decomposes, combines or composes, so such text is already NFC.
  bool plain = true;
  for (size_t pos = 0; pos < text.size() && plain;) plain = utf8_next(text, pos) < 0x300;
  if (plain) return std::string(text);
  return code_points_to_utf8(nfc(utf8_to_code_points(text)));
}

}  // namespace onebit
