// Hand-written matchers for the pre-tokenizer regexes of llama.cpp's llama-vocab.cpp and the
// Hugging Face tokenizer.json files. Each matcher returns the length of the match Oniguruma
// would find at a position (leftmost match, first alternative that succeeds), 0 for none.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "tokenizer/unicode.h"

namespace onebit {
namespace {

// [begin, end) of the piece being matched and the text.
struct Cursor {
  const uint32_t* cps;
  size_t end;
};

using Matcher = size_t (*)(const Cursor& c, size_t i);

bool is_other(uint32_t cp) { return !is_whitespace(cp) && !is_letter(cp) && !is_number(cp); }
bool is_newline(uint32_t cp) { return cp == '\r' || cp == '\n'; }
uint32_t lower_ascii(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

template <typename Pred>
size_t run_length(const Cursor& c, size_t i, Pred pred) {
  size_t j = i;
  while (j < c.end && pred(c.cps[j])) ++j;
  return j - i;
}

// 's|'t|'re|'ve|'m|'ll|'d (case-insensitive when `fold` is set).
size_t match_contraction(const Cursor& c, size_t i, bool fold) {
  if (c.cps[i] != '\'' || i + 1 >= c.end) return 0;
  auto at = [&](size_t k) { return k < c.end ? (fold ? lower_ascii(c.cps[k]) : c.cps[k]) : 0u; };
  const uint32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = at(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at a whitespace position: the run, less its last character when a non-space
// follows and the run is longer than one.
size_t match_whitespace_tail(const Cursor& c, size_t i) {
  const size_t n = run_length(c, i, is_whitespace);
  if (n == 0) return 0;
  if (i + n == c.end || n == 1) return n;
  return n - 1;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const Cursor& c, size_t i) {
  if (size_t n = match_contraction(c, i, /*fold=*/false)) return n;
  const size_t j = (c.cps[i] == ' ' && i + 1 < c.end) ? i + 1 : i;
  for (auto pred : {is_letter, is_number, is_other}) {
    if (pred(c.cps[j])) return (j - i) + run_length(c, j, pred);
  }
  return match_whitespace_tail(c, i);
}

// Llama 3 / Qwen2: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t match_llama3_like(const Cursor& c, size_t i, size_t max_digits) {
  if (size_t n = match_contraction(c, i, /*fold=*/true)) return n;
  const uint32_t cp = c.cps[i];
  if (!is_newline(cp) && !is_letter(cp) && !is_number(cp) && i + 1 < c.end && is_letter(c.cps[i + 1])) {
    return 1 + run_length(c, i + 1, is_letter);
  }
  if (is_letter(cp)) return run_length(c, i, is_letter);
  if (is_number(cp)) return std::min(max_digits, run_length(c, i, is_number));
  const size_t j = (cp == ' ' && i + 1 < c.end && is_other(c.cps[i + 1])) ? i + 1 : i;
  if (is_other(c.cps[j])) {
    size_t k = j + run_length(c, j, is_other);
    return k + run_length(c, k, is_newline) - i;
  }
  // \s*[\r\n]+: through the last newline of the whitespace run.
  const size_t n = run_length(c, i, is_whitespace);
  for (size_t k = i + n; k > i; --k) {
    if (is_newline(c.cps[k - 1])) return k - i;
  }
  return match_whitespace_tail(c, i);
}

size_t match_llama3(const Cursor& c, size_t i) { return match_llama3_like(c, i, 3); }
size_t match_qwen2(const Cursor& c, size_t i) { return match_llama3_like(c, i, 1); }

// One character of \p{N} (HF's Digits pre-tokenizer with individual_digits, Rust is_numeric).
size_t match_one_number(const Cursor& c, size_t i) { return is_number(c.cps[i]) ? 1 : 0; }
size_t match_numbers(const Cursor& c, size_t i) { return run_length(c, i, is_number); }

using Range = std::pair<uint32_t, uint32_t>;

bool in_ranges(const Range* ranges, size_t n, uint32_t cp) {
  for (size_t k = 0; k < n; ++k) {
    if (cp >= ranges[k].first && cp <= ranges[k].second) return true;
  }
  return false;
}

// The character classes of deepseek-llm's tokenizer.json (llama.cpp LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM).
constexpr Range kDeepseekLetters[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA},
    {0x1BC, 0x1BF}, {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377},
    {0x37B, 0x37D}, {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C},
    {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556},
    {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF},
    {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
    {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC},
    {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113},
    {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
    {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE},
    {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787},
    {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
constexpr Range kDeepseekPunct[] = {{0x21, 0x2F}, {0x3A, 0x7E}, {0xFF01, 0xFF0F},
                                    {0xFF1A, 0xFF5E}, {0x2018, 0x201F}, {0x3000, 0x3002}};
constexpr Range kDeepseekCjk[] = {{0x4E00, 0x9FA5}, {0x800, 0x4E00}, {0xAC00, 0xD7FF}};

template <const Range* R, size_t N>
bool in_class(uint32_t cp) { return in_ranges(R, N, cp); }

// \s?[CLASS]+
template <const Range* R, size_t N>
size_t match_space_then_class(const Cursor& c, size_t i) {
  const size_t j = (is_whitespace(c.cps[i]) && i + 1 < c.end && in_class<R, N>(c.cps[i + 1])) ? i + 1 : i;
  if (!in_class<R, N>(c.cps[j])) return 0;
  return (j - i) + run_length(c, j, in_class<R, N>);
}

size_t match_newline_char(const Cursor& c, size_t i) { return is_newline(c.cps[i]) ? 1 : 0; }

// [CLASS]+
template <const Range* R, size_t N>
size_t match_class_run(const Cursor& c, size_t i) { return run_length(c, i, in_class<R, N>); }

// Split(behavior=Isolated) of each piece: every match is a piece, and so is each gap between.
std::vector<PieceSpan> split_isolated(const std::vector<PieceSpan>& pieces, const uint32_t* cps, Matcher m) {
  std::vector<PieceSpan> out;
  out.reserve(pieces.size() * 2);
  for (const auto& p : pieces) {
    const Cursor c{cps, p.end};
    size_t gap = p.begin;
    for (size_t i = p.begin; i < p.end;) {
      const size_t n = m(c, i);
      if (n == 0) {
        ++i;
        continue;
      }
      if (gap < i) out.push_back({gap, i});
      out.push_back({i, i + n});
      i += n;
      gap = i;
    }
    if (gap < p.end) out.push_back({gap, p.end});
  }
  return out;
}

// \s+$ : the trailing whitespace of each piece (pieces hold no '\n' except alone, so Ruby's
// end-of-line `$` is the end of the piece).
std::vector<PieceSpan> split_trailing_whitespace(const std::vector<PieceSpan>& pieces, const uint32_t* cps) {
  std::vector<PieceSpan> out;
  out.reserve(pieces.size());
  for (const auto& p : pieces) {
    size_t t = p.end;
    while (t > p.begin && is_whitespace(cps[t - 1])) --t;
    if (t > p.begin) out.push_back({p.begin, t});
    if (t < p.end) out.push_back({t, p.end});
  }
  return out;
}

}  // namespace

Result<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name) {
  static const std::pair<std::string_view, PreTokenizerKind> kNames[] = {
      {"gpt-2", PreTokenizerKind::kGpt2},          {"gpt2", PreTokenizerKind::kGpt2},
      {"llama-bpe", PreTokenizerKind::kLlama3},    {"llama3", PreTokenizerKind::kLlama3},
      {"llama-v3", PreTokenizerKind::kLlama3},     {"qwen2", PreTokenizerKind::kQwen2},
      {"deepseek-r1-qwen", PreTokenizerKind::kQwen2}, {"deepseek-llm", PreTokenizerKind::kDeepseekLlm},
      {"starcoder", PreTokenizerKind::kStarcoder},
  };
  for (const auto& [n, kind] : kNames) {
    if (n == name) return kind;
  }
  return make_error("tokenizer.ggml.pre = '" + std::string(name) +
                    "' is not a supported byte-level BPE pre-tokenizer; supported: " +
                    supported_pre_tokenizer_names() +
                    " (convert the model with a tokenizer of one of these families)");
}

std::string supported_pre_tokenizer_names() {
  return "gpt-2, llama-bpe, qwen2, deepseek-llm, starcoder (aliases: gpt2, llama3, llama-v3, "
         "deepseek-r1-qwen)";
}

std::vector<PieceSpan> pre_tokenize(PreTokenizerKind kind, const std::vector<uint32_t>& cps) {
  std::vector<PieceSpan> pieces;
  if (cps.empty()) return pieces;
  pieces.push_back({0, cps.size()});
  const uint32_t* p = cps.data();
  constexpr size_t kL = std::size(kDeepseekLetters), kP = std::size(kDeepseekPunct), kC = std::size(kDeepseekCjk);
  switch (kind) {
    case PreTokenizerKind::kGpt2:
      return split_isolated(pieces, p, match_gpt2);
    case PreTokenizerKind::kLlama3:
      return split_isolated(pieces, p, match_llama3);
    case PreTokenizerKind::kQwen2:
      return split_isolated(pieces, p, match_qwen2);
    case PreTokenizerKind::kStarcoder:
      return split_isolated(split_isolated(pieces, p, match_one_number), p, match_gpt2);
    case PreTokenizerKind::kDeepseekLlm:
      pieces = split_isolated(pieces, p, match_newline_char);
      pieces = split_isolated(pieces, p, match_space_then_class<kDeepseekLetters, kL>);
      pieces = split_isolated(pieces, p, match_space_then_class<kDeepseekPunct, kP>);
      pieces = split_trailing_whitespace(pieces, p);
      pieces = split_isolated(pieces, p, match_class_run<kDeepseekCjk, kC>);
      return split_isolated(pieces, p, match_numbers);
  }
  return pieces;
}

}  // namespace onebit
