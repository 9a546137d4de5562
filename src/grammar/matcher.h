// Constrained decoding: a grammar (grammar.h) run over a model's vocabulary as a token mask.
//
// The matcher is a pushdown recognizer over code points (as llama.cpp's llama-grammar): a state
// is the set of stacks of grammar positions that the text so far can be in, each stack's top a
// character class. Stacks are interned as linked nodes and states as sets of them, so a state is
// an id, a transition (state, code point) -> state is computed once and memoized, and the mask of
// a state (which tokens may come next) is computed once by walking the vocabulary in byte order
// (tokens sharing a prefix share its work) and then cached: inside a string, a number or any
// repeated structure the state recurs and the mask costs one lookup. Tokens whose bytes end inside
// a UTF-8 character carry the partial character into the next token (byte-level vocabularies).
//
// `CompiledGrammar` (a grammar over one vocabulary, its caches) is shared by every sequence that
// uses the same grammar and is thread-safe; `GrammarConstraint` is one sequence's position in it.
// docs/structured.md.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/constraint.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace onebit::grammar {

// A vocabulary as the matcher sees it: each token's bytes, sorted so that tokens sharing a prefix
// are neighbours. Immutable; build once per model.
class TokenTable {
 public:
  enum Flags : uint8_t {
    kText = 1,  // the token stands for text (normal, byte, user-defined): the grammar decides
    kEnd = 2,   // an end-of-generation token: allowed where the grammar may end
  };
  // pieces[id]: the bytes of token id in a text; flags[id]: Flags.
  TokenTable(std::vector<std::string> pieces, std::vector<uint8_t> flags);
  static std::shared_ptr<const TokenTable> from_tokenizer(const Tokenizer& tokenizer);

  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
  uint8_t flags(int32_t id) const { return flags_[size_t(id)]; }
  const std::vector<int32_t>& sorted() const { return sorted_; }            // text token ids in byte order
  const std::vector<uint16_t>& shared_prefix() const { return lcp_; }        // [sorted]: bytes shared with the previous
  // The bytes of sorted()[i], from one contiguous buffer (the mask walk streams through it).
  std::string_view sorted_piece(size_t i) const {
    return std::string_view(sorted_bytes_).substr(sorted_off_[i], sorted_off_[i + 1] - sorted_off_[i]);
  }
  // [sorted]: the first sorted index after i whose piece does not start with the first 1 (2)
  // bytes of piece i: where a walk that died at depth 1 (2) goes on.
  const std::vector<uint32_t>& skip1() const { return skip1_; }
  const std::vector<uint32_t>& skip2() const { return skip2_; }
  const std::vector<int32_t>& end_tokens() const { return end_; }

 private:
  std::vector<uint32_t> skip1_, skip2_;
  std::vector<std::string> pieces_;
  std::vector<uint8_t> flags_;
  std::vector<int32_t> sorted_;
  std::vector<uint16_t> lcp_;
  std::string sorted_bytes_;
  std::vector<uint32_t> sorted_off_;  // [sorted + 1]
  std::vector<int32_t> end_;
};

// A position in the text: the state id and the bytes of a character not yet complete.
struct MatchState {
  int32_t state = 0;
  uint32_t partial = 0;  // 0, or the pending UTF-8 bytes: length in bits 24-25, bytes in 0-23
};

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenTable> table);

  MatchState start() const { return MatchState{0, 0}; }
  // The state after `bytes`, or false when the grammar does not allow them from `from`.
  bool advance(MatchState from, std::string_view bytes, MatchState& to);
  // Bit i of the result is set when token i may come next. Cached per state.
  std::shared_ptr<const std::vector<uint64_t>> mask(MatchState s);
  // Whether the text may end here (the root rule is complete and no character is pending).
  bool can_end(MatchState s);
  // Whether the text must end here: it may end and no character may follow.
  bool must_end(MatchState s);
  // The fewest characters that complete the text from `s` (0 when it may end; a pending
  // character counts one).
  int32_t min_chars_to_end(MatchState s);
  // The tokens allowed at `s`, each with min_chars_to_end after it (0 for an end token), in
  // ascending order of that distance. Cached per state (the masks' byte budget).
  using Closing = std::vector<std::pair<int32_t, int32_t>>;  // (distance after, token)
  std::shared_ptr<const Closing> closing(MatchState s);

  const Grammar& grammar() const { return grammar_; }
  const TokenTable& table() const { return *table_; }

 private:
  static constexpr int32_t kDead = -1;
  static constexpr int32_t kAccept = -1;  // the empty stack: the root rule is complete

  struct Node {
    int32_t pos;     // index into grammar_.elements: a kChars top, or a return position
    int32_t parent;  // node below, -1 for none
  };

  int32_t intern_node(int32_t pos, int32_t parent);
  int32_t intern_state(std::vector<int32_t>& tops);  // sorts, dedups
  // Appends the tops reached from continuing at `pos` with `parent` below.
  void expand(int32_t pos, int32_t parent, std::vector<int32_t>& tops);
  int32_t step(int32_t state, uint32_t cp);  // kDead when no stack takes cp
  bool step_byte(int32_t& state, uint32_t& partial, uint8_t byte);
  bool partial_feasible(int32_t state, uint32_t partial);
  // The mask of `s`; with `closing`, also each allowed token's distance after it (unsorted).
  std::vector<uint64_t> compute_mask(MatchState s, Closing* closing = nullptr);
  std::shared_ptr<const std::vector<uint64_t>> mask_locked(MatchState s);
  int32_t distance(MatchState s);  // min_chars_to_end without the lock, cached per state
  int32_t min_rest(int32_t pos);  // fewest characters from pos to its alternative's end

  Grammar grammar_;
  std::shared_ptr<const TokenTable> table_;
  std::mutex mu_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<std::vector<int32_t>> states_;
  std::unordered_map<std::string, int32_t> state_ids_;
  static constexpr int32_t kUnknown = -2;
  std::vector<int32_t> ascii_steps_;             // [states][128]: state or kDead, kUnknown not yet
  std::unordered_map<uint64_t, int32_t> steps_;  // (state << 21 | cp) -> state or kDead, cp >= 128
  std::unordered_map<uint64_t, std::shared_ptr<const std::vector<uint64_t>>> masks_;
  std::unordered_map<uint64_t, std::shared_ptr<const Closing>> closings_;
  std::vector<int32_t> distances_;  // [states]: min_chars_to_end, -1 not yet
  size_t mask_bytes_ = 0;
  std::vector<int32_t> rule_min_;  // fewest characters each rule matches
  std::vector<int32_t> scratch_;
  int expand_depth_ = 0;
};

// Mask bytes kept per grammar at most; beyond it masks are computed each time (still correct).
inline constexpr size_t kMaxMaskCacheBytes = size_t(32) << 20;

// Within this many tokens of the budget's end, a constraint keeps only the tokens after which
// the text can still be completed in the tokens left (one character per token at worst), so that
// a reply cut by max_tokens is still whole: JSON that parses and validates.
inline constexpr int32_t kClosingZone = 256;

// One sequence's constraint: a MatchState in a shared CompiledGrammar.
class GrammarConstraint final : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<CompiledGrammar> grammar);
  int32_t mask(std::span<float> logits, int32_t budget) override;
  bool accept(int32_t token) override;
  bool finished() const override { return finished_; }

  MatchState state() const { return state_; }

 private:
  std::shared_ptr<CompiledGrammar> grammar_;
  MatchState state_;
  bool finished_ = false;
};

}  // namespace onebit::grammar
