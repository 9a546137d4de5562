// Tokenizer: validation of the vocabulary, the special-token split, encode/decode dispatch
// between SentencePiece-style and byte-level BPE, and reading tokenizer.ggml.* from a GGUF.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace onebit {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

std::string escape_spm_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (char c : text) {
    if (c == ' ') out += kSpmSpace;
    else out.push_back(c);
  }
  return out;
}

std::string unescape_spm_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, 3) == kSpmSpace) {
      out.push_back(' ');
      i += 3;
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

bool is_special_kind(TokenKind k) {
  return k == TokenKind::kControl || k == TokenKind::kUserDefined || k == TokenKind::kUnknown;
}

}  // namespace

void apply_pre_tokenizer_defaults(VocabData& vocab) {
  if (vocab.model != VocabModel::kBpe) return;
  auto kind = pre_tokenizer_from_name(vocab.pre);
  if (!kind.ok()) return;
  // llama.cpp sets ignore_merges for LLAMA3 (HF tokenizer.json "ignore_merges": true); Qwen2's
  // tokenizer.json has an NFC normalizer.
  if (*kind == PreTokenizerKind::kLlama3) vocab.ignore_merges = true;
  if (*kind == PreTokenizerKind::kQwen2) vocab.nfc = true;
}

Result<std::unique_ptr<TokenizerImpl>> TokenizerImpl::create(const VocabData& vocab) {
  auto impl = std::unique_ptr<TokenizerImpl>(new TokenizerImpl());
  impl->v_ = vocab;
  ONEBIT_TRY(impl->build());
  return impl;
}

Status TokenizerImpl::build() {
  const size_t n = v_.tokens.size();
  if (n == 0) return make_error("tokenizer.ggml.tokens is empty; the vocabulary needs at least one token");
  if (n > static_cast<size_t>(INT32_MAX)) return make_error("tokenizer.ggml.tokens has too many tokens");
  if (v_.scores.empty()) v_.scores.assign(n, 0.0f);
  if (v_.kinds.empty()) v_.kinds.assign(n, TokenKind::kNormal);
  if (v_.scores.size() != n || v_.kinds.size() != n) {
    return make_error("tokenizer.ggml.scores/token_type have " + std::to_string(v_.scores.size()) + "/" +
                      std::to_string(v_.kinds.size()) + " entries; tokenizer.ggml.tokens has " +
                      std::to_string(n) + "; they must match (re-convert the model)");
  }
  for (TokenId* id : {&v_.bos_id, &v_.eos_id, &v_.unk_id, &v_.eot_id, &v_.eom_id, &v_.pad_id}) {
    if (*id < -1 || *id >= static_cast<TokenId>(n)) {
      return make_error("special token id " + std::to_string(*id) + " is outside the vocabulary [0, " +
                        std::to_string(n) + "); fix the tokenizer.ggml.*_token_id keys");
    }
  }
  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) token_to_id_.emplace(v_.tokens[i], static_cast<TokenId>(i));
  byte_token_.fill(-1);
  if (v_.model == VocabModel::kSpm) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      byte_token_[b] = find(name);
    }
  } else {
    ONEBIT_ASSIGN_OR_RETURN(pre_, pre_tokenizer_from_name(v_.pre));
    for (int b = 0; b < 256; ++b) {
      std::string s;
      append_code_point(byte_to_unicode()[b], s);
      byte_token_[b] = find(s);
    }
  }
  ONEBIT_TRY(build_merges());
  build_specials();
  return ok_status();
}

// Ranked merges: byte-level BPE, and SPM vocabularies converted from an HF BPE tokenizer.json.
Status TokenizerImpl::build_merges() {
  merges_.reserve(v_.merges.size());
  for (size_t rank = 0; rank < v_.merges.size(); ++rank) {
    const std::string& m = v_.merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) {
      return make_error("tokenizer.ggml.merges[" + std::to_string(rank) + "] = '" + m +
                        "' has no space between its two parts; each merge is 'LEFT RIGHT'");
    }
    const std::string_view sv(m);
    const TokenId a = find(sv.substr(0, space)), b = find(sv.substr(space + 1));
    const TokenId merged = find(std::string(sv.substr(0, space)) + std::string(sv.substr(space + 1)));
    // HF refuses such merges at load; they can never apply, so they are skipped here.
    if (a < 0 || b < 0 || merged < 0) continue;
    merges_.emplace(merge_key(a, b), std::make_pair(static_cast<int32_t>(rank), merged));
  }
  return ok_status();
}

// Special tokens by first byte, longest first, for split_special.
void TokenizerImpl::build_specials() {
  const size_t n = v_.tokens.size();
  special_pattern_.assign(n, std::string());
  for (size_t i = 0; i < n; ++i) {
    if (!is_special_kind(v_.kinds[i]) || v_.tokens[i].empty()) continue;
    // HF matches "normalized" added tokens in the normalized text, by their normalized form.
    const bool normalized = v_.model == VocabModel::kSpm && v_.normalized_specials;
    special_pattern_[i] = normalized ? escape_spm_spaces(" " + v_.tokens[i]) : v_.tokens[i];
    specials_by_byte_[static_cast<uint8_t>(special_pattern_[i][0])].push_back(static_cast<TokenId>(i));
  }
  for (auto& list : specials_by_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [&](TokenId a, TokenId b) { return special_pattern_[a].size() > special_pattern_[b].size(); });
  }
}

TokenId TokenizerImpl::find(std::string_view text) const {
  auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? -1 : it->second;
}

// Leftmost-longest match of special tokens, as HF's added-vocabulary split. Control and unknown
// tokens only when `parse_special`; user-defined tokens always (HF non-special added tokens).
std::vector<TokenizerImpl::Fragment> TokenizerImpl::split_special(std::string_view text,
                                                                  bool parse_special) const {
  std::vector<Fragment> out;
  size_t last = 0;
  for (size_t i = 0; i < text.size();) {
    TokenId hit = -1;
    for (TokenId id : specials_by_byte_[static_cast<uint8_t>(text[i])]) {
      if (!parse_special && v_.kinds[id] != TokenKind::kUserDefined) continue;
      if (text.compare(i, special_pattern_[id].size(), special_pattern_[id]) == 0) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (last < i) out.push_back({-1, text.substr(last, i - last)});
    out.push_back({hit, {}});
    i += special_pattern_[hit].size();
    last = i;
  }
  if (last < text.size()) out.push_back({-1, text.substr(last)});
  return out;
}

std::vector<TokenId> TokenizerImpl::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<TokenId> out;
  if (options.add_bos && v_.bos_id >= 0) out.push_back(v_.bos_id);
  if (v_.model == VocabModel::kSpm && v_.normalized_specials) {
    encode_normalized_first(text, options, out);
    if (options.add_eos && v_.eos_id >= 0) out.push_back(v_.eos_id);
    return out;
  }
  // llama.cpp llama_tokenize_impl: SPM text gets a leading space at the start and after each
  // special token (HF's Prepend normalizer runs on each segment between added tokens).
  bool prev_special = true;
  for (const Fragment& f : split_special(text, options.parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    if (v_.model == VocabModel::kSpm) {
      std::string s = (v_.add_space_prefix && prev_special) ? " " : "";
      s += f.text;
      if (merges_.empty()) encode_spm(escape_spm_spaces(s), out);
      else encode_spm_ranked(escape_spm_spaces(s), out);
    } else {
      encode_bpe_text(f.text, out);
    }
    prev_special = false;
  }
  if (options.add_eos && v_.eos_id >= 0) out.push_back(v_.eos_id);
  return out;
}

// SPM vocabularies whose HF added tokens are "normalized": HF normalizes the whole text first
// (one "▁" in front, spaces to "▁") and then splits the added tokens out of the result.
void TokenizerImpl::encode_normalized_first(std::string_view text, const EncodeOptions& options,
                                            std::vector<TokenId>& out) const {
  if (text.empty()) return;
  const std::string normalized = escape_spm_spaces((v_.add_space_prefix ? " " : "") + std::string(text));
  for (const Fragment& f : split_special(normalized, options.parse_special)) {
    if (f.token >= 0) out.push_back(f.token);
    else if (merges_.empty()) encode_spm(f.text, out);
    else encode_spm_ranked(f.text, out);
  }
}

std::string TokenizerImpl::token_to_piece(TokenId id) const {
  if (!valid(id)) return {};
  const std::string& text = v_.tokens[id];
  const TokenKind k = v_.kinds[id];
  if (k == TokenKind::kControl || k == TokenKind::kUnknown || k == TokenKind::kUserDefined) {
    return v_.model == VocabModel::kSpm ? unescape_spm_spaces(text) : text;
  }
  if (v_.model == VocabModel::kSpm) {
    if (k == TokenKind::kByte && text.size() == 6) {
      return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
    }
    return unescape_spm_spaces(text);
  }
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t cp = utf8_next(text, pos);
    const int b = unicode_to_byte(cp);
    if (b >= 0) out.push_back(static_cast<char>(b));
    else append_code_point(cp, out);
  }
  return out;
}

std::string TokenizerImpl::decode(const std::vector<TokenId>& ids, bool skip_special) const {
  std::string out;
  bool at_text_start = true;  // SPM: the space this tokenizer prefixed is removed again
  for (TokenId id : ids) {
    if (!valid(id)) continue;
    const TokenKind k = v_.kinds[id];
    if (k == TokenKind::kControl) {
      if (!skip_special) out += v_.tokens[id];
      // Only the encoder that prefixes every segment after a special token gets a space back;
      // with normalized specials only the first text piece carries the prefix.
      if (!v_.normalized_specials) at_text_start = true;
      continue;
    }
    std::string piece = token_to_piece(id);
    if (v_.model == VocabModel::kSpm && v_.add_space_prefix && at_text_start && !piece.empty() &&
        piece[0] == ' ') {
      piece.erase(0, 1);
    }
    at_text_start = false;
    out += piece;
  }
  return out;
}

// ---- Tokenizer (public API) ----

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::from_vocab(const VocabData& vocab) {
  auto impl = TokenizerImpl::create(vocab);
  if (!impl.ok()) return with_context("vocab", impl.error());
  return Tokenizer(std::move(impl).value());
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  return impl_->encode(text, options);
}
std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool skip_special) const {
  return impl_->decode(ids, skip_special);
}
std::string Tokenizer::token_to_piece(TokenId id) const { return impl_->token_to_piece(id); }
std::string_view Tokenizer::token_text(TokenId id) const {
  return impl_->valid(id) ? std::string_view(impl_->vocab().tokens[id]) : std::string_view();
}
int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->vocab().tokens.size()); }
TokenKind Tokenizer::kind(TokenId id) const { return impl_->valid(id) ? impl_->kind(id) : TokenKind::kUndefined; }
TokenId Tokenizer::bos_id() const { return impl_->vocab().bos_id; }
TokenId Tokenizer::eos_id() const { return impl_->vocab().eos_id; }
bool Tokenizer::adds_bos() const { return impl_->vocab().add_bos; }
bool Tokenizer::adds_eos() const { return impl_->vocab().add_eos; }

bool Tokenizer::is_end_of_generation(TokenId id) const {
  const VocabData& v = impl_->vocab();
  if (!impl_->valid(id)) return false;
  if (id == v.eos_id || id == v.eot_id || id == v.eom_id) return true;
  if (v.kinds[id] != TokenKind::kControl) return false;
  // llama.cpp's special_eog_ids heuristics: the end-of-turn markers of common chat formats.
  static const std::string_view kEndMarkers[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>",
                                                 "<|end_of_text|>", "<|end|>", "<end_of_turn>", "<|return|>"};
  for (auto m : kEndMarkers) {
    if (v.tokens[id] == m) return true;
  }
  return false;
}

std::vector<TokenId> encode_rendered_chat(const Tokenizer& tokenizer, std::string_view rendered) {
  EncodeOptions enc;
  enc.add_bos = tokenizer.adds_bos() && tokenizer.bos_id() >= 0 &&
                !rendered.starts_with(tokenizer.token_text(tokenizer.bos_id()));
  return tokenizer.encode(rendered, enc);
}

}  // namespace onebit
