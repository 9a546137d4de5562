// Byte-level BPE: GPT-2's byte <-> code point map, pre-tokenization, and the ranked-merge loop
// of Hugging Face tokenizers' `Word::merge_all` (lowest rank first, then leftmost).
#include <algorithm>
#include <queue>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace onebit {

const std::array<uint32_t, 256>& byte_to_unicode() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(uint32_t cp) {
  static const std::vector<int> inverse = [] {
    std::vector<int> inv(512, -1);
    const auto& fwd = byte_to_unicode();
    for (int b = 0; b < 256; ++b) inv[fwd[b]] = b;
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

void TokenizerImpl::encode_bpe_text(std::string_view text, std::vector<TokenId>& out) const {
  const std::string normalized = v_.nfc ? nfc_utf8(text) : std::string(text);
  const std::vector<uint32_t> cps = utf8_to_code_points(normalized);
  // Words repeat a lot in real text; remember short ones for this call.
  std::unordered_map<std::string, std::pair<size_t, size_t>> cache;
  std::string piece;
  for (const PieceSpan& span : pre_tokenize(pre_, cps)) {
    piece.clear();
    for (size_t i = span.begin; i < span.end; ++i) append_code_point(cps[i], piece);
    if (piece.size() > 32) {
      encode_bpe_piece(piece, out);
      continue;
    }
    auto it = cache.find(piece);
    if (it != cache.end()) {
      out.insert(out.end(), out.begin() + it->second.first, out.begin() + it->second.first + it->second.second);
      continue;
    }
    const size_t start = out.size();
    encode_bpe_piece(piece, out);
    cache.emplace(piece, std::make_pair(start, out.size() - start));
  }
}

void TokenizerImpl::encode_bpe_piece(std::string_view piece, std::vector<TokenId>& out) const {
  if (v_.ignore_merges) {
    std::string mapped;
    for (unsigned char b : piece) append_code_point(byte_to_unicode()[b], mapped);
    if (TokenId id = find(mapped); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<TokenId> ids;
  ids.reserve(piece.size());
  for (unsigned char b : piece) {
    // HF's BPE without an unknown token drops characters missing from the vocabulary.
    if (byte_token_[b] >= 0) ids.push_back(byte_token_[b]);
  }
  merge_ranked(ids, out);
}

// HF BPE over characters with byte_fallback and a fused unknown token (SentencePiece-style
// tokenizer.json files such as TinyStories'): initial symbols, then the ranked merges.
void TokenizerImpl::encode_spm_ranked(std::string_view text, std::vector<TokenId>& out) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size());
  bool last_unknown = false;
  for (size_t pos = 0; pos < text.size();) {
    // The length the lead byte announces, well-formed or not, as encode_spm cuts symbols.
    const size_t announced = std::max<size_t>(1, utf8_sequence_length(static_cast<uint8_t>(text[pos])));
    const size_t len = std::min(announced, text.size() - pos);
    const std::string_view ch = text.substr(pos, len);
    pos += len;
    if (TokenId id = find(ch); id >= 0) {
      ids.push_back(id);
      last_unknown = false;
      continue;
    }
    // byte_fallback only when every byte of the character has a <0xXX> token.
    bool all_bytes = true;
    for (unsigned char b : ch) all_bytes = all_bytes && byte_token_[b] >= 0;
    if (all_bytes) {
      for (unsigned char b : ch) ids.push_back(byte_token_[b]);
      last_unknown = false;
      continue;
    }
    if (v_.unk_id >= 0 && !last_unknown) ids.push_back(v_.unk_id);
    last_unknown = v_.unk_id >= 0;
  }
  merge_ranked(ids, out);
}

// HF tokenizers' Word::merge_all: lowest rank first, then leftmost; an entry whose pair no longer
// yields the same token is stale and skipped.
void TokenizerImpl::merge_ranked(const std::vector<TokenId>& ids, std::vector<TokenId>& out) const {
  if (ids.empty()) return;
  struct Symbol {
    TokenId id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> syms;
  syms.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    syms.push_back({ids[i], static_cast<int32_t>(i) - 1, static_cast<int32_t>(i) + 1});
  }
  syms.back().next = -1;
  struct Candidate {
    int32_t rank;
    int32_t pos;
    TokenId merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t pos) {
    if (pos < 0 || syms[pos].next < 0) return;
    auto it = merges_.find(merge_key(syms[pos].id, syms[syms[pos].next].id));
    if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i);
  std::vector<bool> dead(syms.size(), false);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = syms[top.pos];
    if (dead[top.pos] || left.next < 0) continue;
    auto it = merges_.find(merge_key(left.id, syms[left.next].id));
    if (it == merges_.end() || it->second.second != top.merged) continue;
    const int32_t right = left.next;
    left.id = top.merged;
    left.next = syms[right].next;
    dead[right] = true;
    if (left.next >= 0) syms[left.next].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace onebit
