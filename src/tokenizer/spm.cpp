// SentencePiece-style BPE over scores, as llama.cpp's llm_tokenizer_spm: merge the adjacent pair
// whose joined text is the highest-scoring token (leftmost on ties); leftovers fall back to bytes.
#include <algorithm>
#include <queue>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace onebit {

void TokenizerImpl::encode_spm(std::string_view text, std::vector<TokenId>& out) const {
  struct Symbol {
    size_t start;
    size_t n_bytes;  // 0 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> syms;
  syms.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    // The length the lead byte announces, well-formed or not, as llama.cpp cuts SPM symbols.
    const size_t announced = std::max<size_t>(1, utf8_sequence_length(static_cast<uint8_t>(text[pos])));
    const size_t len = std::min(announced, text.size() - pos);
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({pos, len, n - 1, n + 1});
    pos += len;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    size_t n_bytes;
    bool operator<(const Bigram& o) const { return score != o.score ? score < o.score : left > o.left; }
  };
  std::vector<Bigram> heap;  // every first pair and two a merge at most: grown once, not doubled
  heap.reserve(3 * syms.size());
  std::priority_queue<Bigram> queue(std::less<Bigram>(), std::move(heap));
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t n = syms[left].n_bytes + syms[right].n_bytes;
    const TokenId id = find(text.substr(syms[left].start, n));
    if (id < 0) return;
    queue.push({v_.scores[id], left, right, n});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) consider(i - 1, i);
  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& left = syms[top.left];
    Symbol& right = syms[top.right];
    if (left.n_bytes == 0 || right.n_bytes == 0 || left.n_bytes + right.n_bytes != top.n_bytes) continue;
    left.n_bytes += right.n_bytes;
    right.n_bytes = 0;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = top.left;
    consider(left.prev, top.left);
    consider(top.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    const std::string_view piece = text.substr(syms[i].start, syms[i].n_bytes);
    if (TokenId id = find(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    // Byte fallback (<0xXX>); the unknown token only when the vocabulary has no byte tokens.
    for (unsigned char b : piece) {
      const TokenId id = byte_token_[b] >= 0 ? byte_token_[b] : v_.unk_id;
      if (id >= 0) out.push_back(id);
    }
  }
}

}  // namespace onebit
