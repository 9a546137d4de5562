#include "grammar/matcher.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <limits>
#include <numeric>

#include "base/check.h"
#include "base/utf8.h"

namespace onebit::grammar {

// --- TokenTable -----------------------------------------------------------------------------

TokenTable::TokenTable(std::vector<std::string> pieces, std::vector<uint8_t> flags)
    : pieces_(std::move(pieces)), flags_(std::move(flags)) {
  ONEBIT_CHECK(pieces_.size() == flags_.size());
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if ((flags_[i] & kText) && !pieces_[i].empty()) sorted_.push_back(static_cast<int32_t>(i));
    if (flags_[i] & kEnd) end_.push_back(static_cast<int32_t>(i));
  }
  std::sort(sorted_.begin(), sorted_.end(),
            [&](int32_t a, int32_t b) { return pieces_[size_t(a)] < pieces_[size_t(b)]; });
  sorted_off_.push_back(0);
  for (int32_t id : sorted_) {
    sorted_bytes_ += pieces_[size_t(id)];
    sorted_off_.push_back(static_cast<uint32_t>(sorted_bytes_.size()));
  }
  lcp_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& a = pieces_[size_t(sorted_[i - 1])];
    const std::string& b = pieces_[size_t(sorted_[i])];
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n] && n < 0xFFFF) ++n;
    lcp_[i] = static_cast<uint16_t>(n);
  }
  // Backwards: token i's block of shared first d bytes ends where the next block does, unless
  // token i+1 leaves it (lcp < d).
  const size_t n = sorted_.size();
  skip1_.assign(n, uint32_t(n));
  skip2_.assign(n, uint32_t(n));
  for (size_t i = n; i-- > 0;) {
    if (i + 1 < n) {
      skip1_[i] = lcp_[i + 1] >= 1 ? skip1_[i + 1] : uint32_t(i + 1);
      skip2_[i] = lcp_[i + 1] >= 2 ? skip2_[i + 1] : uint32_t(i + 1);
    }
  }
}

std::shared_ptr<const TokenTable> TokenTable::from_tokenizer(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::vector<uint8_t> flags(size_t(n), 0);
  for (int32_t id = 0; id < n; ++id) {
    const TokenKind kind = tokenizer.kind(id);
    uint8_t f = 0;
    if (kind == TokenKind::kNormal || kind == TokenKind::kByte || kind == TokenKind::kUserDefined ||
        kind == TokenKind::kUndefined) {
      f |= kText;
      pieces[size_t(id)] = tokenizer.token_to_piece(id);
    }
    if (tokenizer.is_end_of_generation(id)) f = kEnd;  // an end token is never text
    flags[size_t(id)] = f;
  }
  return std::make_shared<const TokenTable>(std::move(pieces), std::move(flags));
}

// --- CompiledGrammar ------------------------------------------------------------------------

namespace {

constexpr size_t kMaxTops = 2048;  // stacks per state at most (an ambiguous grammar is cut here)

uint32_t partial_len(uint32_t p) { return p >> 24; }
uint8_t partial_byte(uint32_t p, uint32_t i) { return uint8_t(p >> (8 * i)); }

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenTable> table)
    : grammar_(std::move(grammar)), table_(std::move(table)) {
  ONEBIT_CHECK(grammar_.root >= 0);
  std::vector<int32_t> tops;
  for (int32_t alt : grammar_.rules[size_t(grammar_.root)].alternatives) expand(alt, -1, tops);
  const int32_t s0 = intern_state(tops);
  ONEBIT_CHECK(s0 == 0);
  // The fewest characters each rule matches (a fixpoint; unreachable ends stay "infinite").
  constexpr int32_t kInf = INT32_MAX / 4;
  rule_min_.assign(grammar_.rules.size(), kInf);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < grammar_.rules.size(); ++r) {
      for (int32_t alt : grammar_.rules[r].alternatives) {
        const int32_t n = min_rest(alt);
        if (n < rule_min_[r]) {
          rule_min_[r] = n;
          changed = true;
        }
      }
    }
  }
}

int32_t CompiledGrammar::min_rest(int32_t pos) {
  constexpr int32_t kInf = INT32_MAX / 4;
  int64_t n = 0;
  for (size_t i = size_t(pos); grammar_.elements[i].kind != Element::kEnd; ++i) {
    const Element& e = grammar_.elements[i];
    n += e.kind == Element::kChars ? 1 : rule_min_[size_t(e.rule)];
  }
  return static_cast<int32_t>(std::min<int64_t>(n, kInf));
}

int32_t CompiledGrammar::intern_node(int32_t pos, int32_t parent) {
  const uint64_t key = (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent + 1);
  auto [it, fresh] = node_ids_.emplace(key, static_cast<int32_t>(nodes_.size()));
  if (fresh) nodes_.push_back(Node{pos, parent});
  return it->second;
}

int32_t CompiledGrammar::intern_state(std::vector<int32_t>& tops) {
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  if (tops.size() > kMaxTops) tops.resize(kMaxTops);
  std::string key(reinterpret_cast<const char*>(tops.data()), tops.size() * sizeof(int32_t));
  auto [it, fresh] = state_ids_.emplace(std::move(key), static_cast<int32_t>(states_.size()));
  if (fresh) {
    states_.push_back(tops);
    ascii_steps_.resize(states_.size() * 128, kUnknown);
  }
  return it->second;
}

void CompiledGrammar::expand(int32_t pos, int32_t parent, std::vector<int32_t>& tops) {
  // Rule chains deeper than this are cut (the grammar allows less, never more): a request's
  // grammar must not exhaust the stack.
  constexpr int kMaxDepth = 2000;
  if (expand_depth_ >= kMaxDepth) return;
  struct Depth {
    int& d;
    explicit Depth(int& x) : d(++x) {}
    ~Depth() { --d; }
  } depth(expand_depth_);
  const Element& e = grammar_.elements[size_t(pos)];
  switch (e.kind) {
    case Element::kChars:
      tops.push_back(intern_node(pos, parent));
      return;
    case Element::kEnd:
      if (parent < 0) {
        tops.push_back(kAccept);
      } else {
        const Node up = nodes_[size_t(parent)];
        expand(up.pos, up.parent, tops);
      }
      return;
    case Element::kRule: {
      // Returning to an alternative's end is returning to the parent: no node (tail call), so
      // right-recursive repetitions keep the stack flat.
      const bool tail = grammar_.elements[size_t(pos) + 1].kind == Element::kEnd;
      const int32_t ret = tail ? parent : intern_node(pos + 1, parent);
      for (int32_t alt : grammar_.rules[size_t(e.rule)].alternatives) {
        if (tops.size() > kMaxTops * 4) return;
        expand(alt, ret, tops);
      }
      return;
    }
  }
}

int32_t CompiledGrammar::step(int32_t state, uint32_t cp) {
  int32_t* ascii = cp < 128 ? &ascii_steps_[size_t(state) * 128 + cp] : nullptr;
  if (ascii && *ascii != kUnknown) return *ascii;
  const uint64_t key = (uint64_t(uint32_t(state)) << 21) | cp;
  if (!ascii) {
    if (auto it = steps_.find(key); it != steps_.end()) return it->second;
  }
  const std::vector<int32_t> tops = states_[size_t(state)];  // a copy: interning may grow states_
  scratch_.clear();
  for (int32_t t : tops) {
    if (t == kAccept) continue;
    const Node n = nodes_[size_t(t)];
    if (grammar_.elements[size_t(n.pos)].matches(cp)) expand(n.pos + 1, n.parent, scratch_);
  }
  const int32_t next = scratch_.empty() ? kDead : intern_state(scratch_);
  if (cp < 128) {
    ascii_steps_[size_t(state) * 128 + cp] = next;  // re-indexed: interning may have grown it
  } else {
    steps_.emplace(key, next);
  }
  return next;
}

bool CompiledGrammar::step_byte(int32_t& state, uint32_t& partial, uint8_t byte) {
  if (partial == 0 && byte < 0x80) {
    state = step(state, byte);
    return state != kDead;
  }
  const uint32_t len = partial_len(partial);
  char buf[4];
  for (uint32_t i = 0; i < len; ++i) buf[i] = char(partial_byte(partial, i));
  buf[len] = char(byte);
  const Utf8Char c = utf8_decode(std::string_view(buf, len + 1), 0);
  if (c.status == Utf8Status::kInvalid) return false;
  if (c.status == Utf8Status::kIncomplete) {
    partial = ((len + 1) << 24) | (partial & 0xFFFFFF) | (uint32_t(byte) << (8 * len));
    return true;
  }
  partial = 0;
  state = step(state, c.cp);
  return state != kDead;
}

// Whether some character that starts with the pending bytes can come next.
bool CompiledGrammar::partial_feasible(int32_t state, uint32_t partial) {
  const uint32_t len = partial_len(partial);
  const uint8_t lead = partial_byte(partial, 0);
  const uint32_t total = utf8_sequence_length(lead);
  uint32_t lo = 0, hi = 0;
  for (uint32_t i = 0; i < total; ++i) {
    const uint32_t b = i < len ? partial_byte(partial, i) : 0;
    const uint32_t bits = i == 0 ? (b & (0xFF >> (total + 1))) : (b & 0x3F);
    lo = (lo << (i == 0 ? 0 : 6)) | (i < len ? bits : 0x00);
    hi = (hi << (i == 0 ? 0 : 6)) | (i < len ? bits : 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  lo = std::max(lo, kMin[total]);
  if (lead == 0xED) hi = std::min<uint32_t>(hi, 0xD7FF);  // no surrogates
  hi = std::min<uint32_t>(hi, kMaxCodePoint);
  if (lo > hi) return false;
  for (int32_t t : states_[size_t(state)]) {
    if (t != kAccept && grammar_.elements[size_t(nodes_[size_t(t)].pos)].matches_any(lo, hi)) return true;
  }
  return false;
}

bool CompiledGrammar::advance(MatchState from, std::string_view bytes, MatchState& to) {
  std::lock_guard<std::mutex> lock(mu_);
  int32_t s = from.state;
  uint32_t p = from.partial;
  for (char c : bytes) {
    if (!step_byte(s, p, uint8_t(c))) return false;
  }
  to = MatchState{s, p};
  return true;
}

std::vector<uint64_t> CompiledGrammar::compute_mask(MatchState s, Closing* closing) {
  const TokenTable& t = *table_;
  std::vector<uint64_t> bits((size_t(t.size()) + 63) / 64, 0);
  const std::vector<int32_t>& sorted = t.sorted();
  const std::vector<uint16_t>& lcp = t.shared_prefix();
  std::vector<int32_t> st(1, s.state);
  std::vector<uint32_t> pt(1, s.partial);
  size_t dead_at = SIZE_MAX;  // st[d] holds for d < dead_at (and up to the last token's length)
  const std::vector<uint32_t>& skip1 = t.skip1();
  const std::vector<uint32_t>& skip2 = t.skip2();
  for (size_t i = 0; i < sorted.size(); ++i) {
    const size_t shared = i == 0 ? 0 : lcp[i];
    if (dead_at <= shared) {  // a prefix this token shares cannot be matched: skip its block
      if (dead_at == 1 && skip1[i] > i + 1) i = skip1[i] - 1;
      if (dead_at == 2 && skip2[i] > i + 1) i = skip2[i] - 1;
      continue;
    }
    const std::string_view piece = t.sorted_piece(i);
    dead_at = SIZE_MAX;
    if (st.size() < piece.size() + 1) {
      st.resize(piece.size() + 1);
      pt.resize(piece.size() + 1);
    }
    bool alive = true;
    for (size_t d = shared; d < piece.size(); ++d) {
      int32_t s2 = st[d];
      uint32_t p2 = pt[d];
      const uint8_t byte = uint8_t(piece[d]);
      if (p2 == 0 && byte < 0x80) {  // the common case, inline: one table lookup
        const int32_t known = ascii_steps_[size_t(s2) * 128 + byte];
        if (known >= 0) {
          st[d + 1] = known;
          pt[d + 1] = 0;
          continue;
        }
      }
      if (!step_byte(s2, p2, byte)) {
        dead_at = d + 1;
        alive = false;
        break;
      }
      st[d + 1] = s2;
      pt[d + 1] = p2;
    }
    if (!alive) continue;
    const size_t n = piece.size();
    if (pt[n] != 0 && !partial_feasible(st[n], pt[n])) continue;
    const size_t id = size_t(sorted[i]);
    bits[id / 64] |= uint64_t(1) << (id % 64);
    if (closing) closing->emplace_back(distance(MatchState{st[n], pt[n]}), int32_t(id));
  }
  if (s.partial == 0 && !states_[size_t(s.state)].empty() && states_[size_t(s.state)][0] == kAccept) {
    for (int32_t id : t.end_tokens()) {
      bits[size_t(id) / 64] |= uint64_t(1) << (size_t(id) % 64);
      if (closing) closing->emplace_back(0, id);
    }
  }
  return bits;
}

std::shared_ptr<const std::vector<uint64_t>> CompiledGrammar::mask(MatchState s) {
  std::lock_guard<std::mutex> lock(mu_);
  return mask_locked(s);
}

std::shared_ptr<const std::vector<uint64_t>> CompiledGrammar::mask_locked(MatchState s) {
  const uint64_t key = (uint64_t(uint32_t(s.state)) << 32) | s.partial;
  if (auto it = masks_.find(key); it != masks_.end()) return it->second;
  auto m = std::make_shared<const std::vector<uint64_t>>(compute_mask(s));
  const size_t bytes = m->size() * sizeof(uint64_t);
  if (mask_bytes_ + bytes <= kMaxMaskCacheBytes) {
    masks_.emplace(key, m);
    mask_bytes_ += bytes;
  }
  return m;
}

bool CompiledGrammar::can_end(MatchState s) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& tops = states_[size_t(s.state)];
  return s.partial == 0 && !tops.empty() && tops[0] == kAccept;
}

bool CompiledGrammar::must_end(MatchState s) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& tops = states_[size_t(s.state)];
  return s.partial == 0 && tops.size() == 1 && tops[0] == kAccept;
}

int32_t CompiledGrammar::min_chars_to_end(MatchState s) {
  std::lock_guard<std::mutex> lock(mu_);
  return distance(s);
}

int32_t CompiledGrammar::distance(MatchState s) {
  if (distances_.size() < states_.size()) distances_.resize(states_.size(), -1);
  int32_t& d = distances_[size_t(s.state)];
  if (d < 0) {
    int64_t best = INT32_MAX / 2;
    for (int32_t t : states_[size_t(s.state)]) {
      if (t == kAccept) {
        best = 0;
        break;
      }
      int64_t n = 0;
      for (int32_t node = t; node >= 0; node = nodes_[size_t(node)].parent) n += min_rest(nodes_[size_t(node)].pos);
      best = std::min(best, n);
    }
    d = static_cast<int32_t>(std::min<int64_t>(best, INT32_MAX / 2));
  }
  return d + (s.partial != 0 ? 1 : 0);
}

std::shared_ptr<const CompiledGrammar::Closing> CompiledGrammar::closing(MatchState s) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t key = (uint64_t(uint32_t(s.state)) << 32) | s.partial;
  if (auto it = closings_.find(key); it != closings_.end()) return it->second;
  auto table = std::make_shared<Closing>();
  compute_mask(s, table.get());  // the same walk as the mask's, keeping each token's distance
  std::sort(table->begin(), table->end());
  const size_t bytes = table->size() * sizeof(Closing::value_type);
  if (mask_bytes_ + bytes <= kMaxMaskCacheBytes) {
    closings_.emplace(key, table);
    mask_bytes_ += bytes;
  }
  return table;
}

// --- GrammarConstraint ----------------------------------------------------------------------

GrammarConstraint::GrammarConstraint(std::shared_ptr<CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), state_(grammar_->start()) {
  finished_ = grammar_->must_end(state_);
}

int32_t GrammarConstraint::mask(std::span<float> logits, int32_t budget) {
  const auto bits = grammar_->mask(state_);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n_table = size_t(grammar_->table().size());
  int32_t allowed = 0;
  for (size_t w = 0; w * 64 < logits.size(); ++w) {
    const uint64_t word = w < bits->size() ? (*bits)[w] : 0;
    const size_t base = w * 64;
    const size_t end = std::min(base + 64, logits.size());
    if (word == ~uint64_t(0) && end - base == 64 && end <= n_table) {
      allowed += 64;
      continue;
    }
    if (word == 0) {  // structure: most words allow nothing
      std::fill(logits.begin() + ptrdiff_t(base), logits.begin() + ptrdiff_t(end), kNegInf);
      continue;
    }
    for (size_t i = base; i < end; ++i) {
      if ((word >> (i - base)) & 1) {
        ++allowed;
      } else {
        logits[i] = kNegInf;
      }
    }
  }
  if (budget > kClosingZone || allowed == 0) return allowed;
  // Near the end of the budget: drop the tokens after which the text cannot be completed in the
  // tokens left (or, when none can, all but the closest).
  const auto table = grammar_->closing(state_);
  if (table->empty()) return allowed;
  const int32_t limit = std::max(budget - 1, table->front().first);
  for (auto it = table->rbegin(); it != table->rend() && it->first > limit; ++it) {
    if (size_t(it->second) < logits.size() && logits[size_t(it->second)] != kNegInf) {
      logits[size_t(it->second)] = kNegInf;
      --allowed;
    }
  }
  return allowed;
}

bool GrammarConstraint::accept(int32_t token) {
  if (finished_ || token < 0 || token >= grammar_->table().size()) return false;
  const uint8_t flags = grammar_->table().flags(token);
  if (flags & TokenTable::kEnd) {
    if (!grammar_->can_end(state_)) return false;
    finished_ = true;
    return true;
  }
  const std::string& piece = grammar_->table().piece(token);
  if (!(flags & TokenTable::kText) || piece.empty()) return false;
  MatchState next;
  if (!grammar_->advance(state_, piece, next)) return false;
  state_ = next;
  finished_ = grammar_->must_end(state_);
  return true;
}

}  // namespace onebit::grammar
