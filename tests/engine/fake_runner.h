// A model runner without a model, for the serving core's tests. Its "K/V pool" stores, per row,
// the token and position written there; every token of a step reads all its keys back through its
// block table, and the next token is a hash of what it read. So a wrong slot, a wrong block table,
// a block reused while still needed, or a bad copy-on-write changes the output (and wrong
// positions are reported as errors); a correct core gives each sequence exactly the tokens of
// fake_continuation() whatever else runs with it.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/model_runner.h"

namespace onebit::testing {

// The next token after `history` (the fake model).
inline TokenId fake_next(std::span<const TokenId> history, int32_t vocab) {
  uint64_t h = 1469598103934665603ull;
  for (TokenId t : history) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return static_cast<TokenId>((h >> 17) % static_cast<uint64_t>(vocab));
}

// The fake model's final-normed row [width] at the last token of `history`: it depends on every
// token and position, so a row of the wrong token, a skipped chunk or a wrong K/V shows.
inline std::vector<float> fake_hidden(std::span<const TokenId> history, int32_t width) {
  uint64_t h = 1469598103934665603ull;
  for (TokenId t : history) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  std::vector<float> row(static_cast<size_t>(width));
  for (float& x : row) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>((h >> 40) % 2001) / 1000.0f - 1.0f;
  }
  return row;
}

// The n tokens the fake model generates after `prompt` alone.
inline std::vector<TokenId> fake_continuation(std::vector<TokenId> prompt, int32_t n, int32_t vocab) {
  std::vector<TokenId> out;
  for (int32_t i = 0; i < n; ++i) {
    out.push_back(fake_next(prompt, vocab));
    prompt.push_back(out.back());
  }
  return out;
}

class FakeRunner final : public ModelRunner {
 public:
  FakeRunner(int32_t n_blocks, int32_t block_size, int32_t vocab)
      : block_size_(block_size), vocab_(vocab), pool_(size_t(n_blocks) * block_size) {}

  int32_t vocab_size() const override { return vocab_; }
  int64_t steps = 0;
  int64_t tokens = 0;
  int32_t max_step_tokens = 0;
  int32_t hidden_width = 0;  // > 0: StepOutput::hidden gets fake_hidden rows [n_out, hidden_width]
  double step_ms = 0.0;      // > 0: every step takes this long, whatever its tokens

  void copy_blocks(std::span<const BlockCopy> copies) override {
    for (const BlockCopy& c : copies) {
      for (int32_t i = 0; i < block_size_; ++i) pool_[size_t(c.dst) * block_size_ + i] = pool_[size_t(c.src) * block_size_ + i];
    }
  }

  Status run(const StepBatch& b, StepOutput& out) override {
    if (step_ms > 0.0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(step_ms));
    ++steps;
    tokens += b.n_tokens();
    max_step_tokens = std::max(max_step_tokens, b.n_tokens());
    const int32_t bs = block_size_;
    for (int32_t i = 0; i < b.n_tokens(); ++i) {
      const int32_t pos = b.positions[i], s = b.seq_ids[i];
      const int32_t block = b.block_tables[size_t(s) * b.max_blocks + pos / bs];
      if (b.slots[i] != block * bs + pos % bs || b.slots[i] < 0 || size_t(b.slots[i]) >= pool_.size()) {
        return make_error("fake runner: token " + std::to_string(i) + " slot disagrees with its block table");
      }
      pool_[b.slots[i]] = Row{b.tokens[i], pos};
    }
    out.logits.assign(b.out_rows.size() * size_t(vocab_), 0.0f);
    out.hidden.clear();
    for (size_t o = 0; o < b.out_rows.size(); ++o) {
      const int32_t i = b.out_rows[o], pos = b.positions[i], s = b.seq_ids[i];
      std::vector<TokenId> history;
      for (int32_t j = 0; j <= pos; ++j) {
        const Row& r = pool_[size_t(b.block_tables[size_t(s) * b.max_blocks + j / bs]) * bs + j % bs];
        if (r.pos != j) return make_error("fake runner: key " + std::to_string(j) + " holds position " + std::to_string(r.pos));
        history.push_back(r.token);
      }
      out.logits[o * vocab_ + fake_next(history, vocab_)] = 1.0f;
      if (hidden_width > 0) {
        const std::vector<float> row = fake_hidden(history, hidden_width);
        out.hidden.insert(out.hidden.end(), row.begin(), row.end());
      }
    }
    return ok_status();
  }

 private:
  struct Row {
    TokenId token = -1;
    int32_t pos = -1;
  };
  int32_t block_size_, vocab_;
  std::vector<Row> pool_;
};

}  // namespace onebit::testing
