// TokenizerImpl: the lookup tables built once from a VocabData and the encode/decode steps
// (special-token split, SentencePiece merge, byte-level BPE). Internal to src/tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace onebit {

// Hash for heterogeneous string lookup (find with a string_view, no allocation).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

// GPT-2's reversible byte <-> code point map (bytes that print stay, the rest move to 256+).
const std::array<uint32_t, 256>& byte_to_unicode();
// Inverse of byte_to_unicode; -1 for code points that stand for no byte.
int unicode_to_byte(uint32_t cp);

class TokenizerImpl {
 public:
  static Result<std::unique_ptr<TokenizerImpl>> create(const VocabData& vocab);

  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options) const;
  std::string decode(const std::vector<TokenId>& ids, bool skip_special) const;
  std::string token_to_piece(TokenId id) const;

  const VocabData& vocab() const { return v_; }
  bool valid(TokenId id) const { return id >= 0 && id < static_cast<TokenId>(v_.tokens.size()); }
  TokenKind kind(TokenId id) const { return v_.kinds[id]; }

 private:
  // A run of the input: either text to tokenize or an already-matched special token.
  struct Fragment {
    TokenId token = -1;  // -1 for text
    std::string_view text;
  };
  Status build();
  Status build_merges();
  void build_specials();
  std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;
  void encode_normalized_first(std::string_view text, const EncodeOptions& options, std::vector<TokenId>& out) const;
  void encode_spm(std::string_view text, std::vector<TokenId>& out) const;
  void encode_bpe_text(std::string_view text, std::vector<TokenId>& out) const;
  void encode_bpe_piece(std::string_view piece, std::vector<TokenId>& out) const;
  void encode_spm_ranked(std::string_view text, std::vector<TokenId>& out) const;
  void merge_ranked(const std::vector<TokenId>& ids, std::vector<TokenId>& out) const;
  TokenId find(std::string_view text) const;
  uint64_t merge_key(TokenId a, TokenId b) const { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  VocabData v_;
  TokenMap token_to_id_;
  PreTokenizerKind pre_ = PreTokenizerKind::kGpt2;
  std::array<TokenId, 256> byte_token_{};      // kSpm: <0xXX>; kBpe: the byte's mapped char
  std::unordered_map<uint64_t, std::pair<int32_t, TokenId>> merges_;  // (left, right) -> (rank, merged)
  // Special tokens by first byte, longest first within each list.
  std::array<std::vector<TokenId>, 256> specials_by_byte_;
  std::vector<std::string> special_pattern_;  // [n_vocab] text matched for a special token, or empty
};

}  // namespace onebit
