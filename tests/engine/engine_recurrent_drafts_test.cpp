// Speculative decoding on the hybrid models (gated delta-net layers keep a recurrent state that a
// rejected draft has already run through): tiny-qwen3next and tiny-qwen3_5 (tests/golden/model,
// converted to F32 here, with their MTP layer) on the CPU backend, and on CUDA where this build and
// machine have it. Four sequences at once through
// engines whose drafters propose the true continuation (every draft accepted), the true
// continuation with every third token wrong (rollbacks to the state checkpoints), and the model's
// own MTP layer: every sequence gets exactly the greedy tokens of an engine without a drafter.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "backend/backend_factory.h"
#include "engine/engine.h"
#include "engine/head_drafters.h"
#include "gguf/gguf_reader.h"
#include "model/convert_hf.h"
#include "model/model.h"
#include "engine_test_util.h"
#include "testdata.h"

namespace onebit {
namespace {

namespace fs = std::filesystem;

using Continuations = std::map<std::vector<TokenId>, std::vector<TokenId>>;  // prompt -> greedy reply

// Proposes each prompt's greedy reply from where the sequence stands (all accepted), or with every
// third token wrong.
class OracleDrafter final : public Drafter {
 public:
  OracleDrafter(const Continuations& replies, bool noisy, int32_t vocab) : replies_(replies), noisy_(noisy), vocab_(vocab) {}
  void propose(std::span<const DraftAsk> asks) override {
    for (const DraftAsk& a : asks) {
      for (const auto& [prompt, reply] : replies_) {
        if (a.seq.tokens.size() <= prompt.size() || !std::equal(prompt.begin(), prompt.end(), a.seq.tokens.begin())) continue;
        const size_t done = a.seq.tokens.size() - prompt.size();
        for (size_t i = done; i < reply.size() && int32_t(a.out->size()) < a.max; ++i) {
          const bool wrong = noisy_ && (prompt.size() + i) % 3 == 0;
          a.out->push_back(wrong ? (reply[i] + 1) % vocab_ : reply[i]);
        }
        break;
      }
    }
  }

 private:
  const Continuations& replies_;
  bool noisy_;
  int32_t vocab_;
};

struct Totals {
  int64_t drafted = 0, accepted = 0;
};

// (checkpoint, device)
class RecurrentDrafts : public ::testing::TestWithParam<std::pair<std::string, std::string>> {
 protected:
  void SetUp() override {
    const auto& [name, device] = GetParam();
    auto be = make_backend(device, 2);
    if (!be.ok()) GTEST_SKIP() << device << ": " << be.message();
    backend_ = std::move(*be);
    dir_ = fs::temp_directory_path() / ("onebit_recurrent_drafts_" + std::to_string(::getpid()) + "_" + name);
    fs::create_directories(dir_);
    ConvertOptions co;
    co.hf_dir = testing::source_path("tests/golden/model/" + name);
    co.out_path = (dir_ / "model.gguf").string();
    co.out_type = GgmlType::kF32;
    auto report = convert_hf(co);
    ASSERT_TRUE(report.ok()) << report.message();
    auto file = GgufFile::open(co.out_path);
    ASSERT_TRUE(file.ok()) << file.message();
    file_ = std::make_unique<GgufFile>(std::move(*file));
    auto model = Model::load(*file_, *backend_);
    ASSERT_TRUE(model.ok()) << model.message();
    model_ = std::move(*model);
    ASSERT_GT(model_->config().n_nextn, 0) << "the golden checkpoint has no MTP layer (tools/model/add_mtp_layer.py)";
    for (int p = 0; p < 6; ++p) {  // prompts of several lengths
      std::vector<TokenId> prompt;
      for (int i = 0; i < 3 + 5 * p; ++i) prompt.push_back(TokenId((37 * p + 11 * i + 5) % model_->config().vocab_size));
      prompts_.push_back(prompt);
    }
  }
  void TearDown() override {
    model_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Every prompt's greedy reply of kReply tokens, the prompts four at a time.
  Continuations run(std::shared_ptr<Drafter> drafter, Totals* totals = nullptr) {
    EngineOptions o;
    o.n_ctx = 128;
    o.pool_slots = {4};
    o.batch_tokens = 64;
    o.block_size = 4;
    o.cache_type = GgmlType::kF32;
    o.drafter = std::move(drafter);
    o.draft_max = 4;
    o.draft_when_it_pays = false;  // draft every step
    auto engine = Engine::start(*model_, o);
    EXPECT_TRUE(engine.ok()) << engine.message();
    Continuations out;
    if (!engine.ok()) return out;
    std::mutex mu;
    std::vector<std::thread> clients;
    for (const auto& prompt : prompts_) {
      clients.emplace_back([&, prompt] {
        SequenceRequest req;
        req.prompt = prompt;
        req.n_predict = kReply;
        req.sampler.temperature = 0.0f;
        SequenceEvents ev;
        const std::vector<TokenId> got = testing::run_to_end(**engine, req, &ev);
        std::lock_guard<std::mutex> lock(mu);
        out[prompt] = got;
        if (totals) {
          totals->drafted += ev.stats.n_draft_tokens;
          totals->accepted += ev.stats.n_draft_accepted;
        }
      });
    }
    for (auto& t : clients) t.join();
    return out;
  }

  static constexpr int32_t kReply = 40;
  fs::path dir_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::vector<std::vector<TokenId>> prompts_;
};

TEST_P(RecurrentDrafts, EveryDrafterKeepsTheGreedyTokens) {
  const Continuations plain = run(nullptr);
  ASSERT_EQ(plain.size(), prompts_.size());
  for (const auto& [prompt, reply] : plain) ASSERT_EQ(reply.size(), size_t(kReply));
  const int32_t vocab = model_->config().vocab_size;

  Totals own;
  EXPECT_EQ(run(std::make_shared<OracleDrafter>(plain, false, vocab), &own), plain) << "drafts all accepted";
  EXPECT_EQ(own.accepted, own.drafted);
  EXPECT_GT(own.drafted, int64_t(prompts_.size()) * kReply / 2);

  Totals noisy;
  EXPECT_EQ(run(std::make_shared<OracleDrafter>(plain, true, vocab), &noisy), plain) << "every third draft token wrong";
  EXPECT_GT(noisy.accepted, 0);
  EXPECT_LT(noisy.accepted, noisy.drafted);

  auto mtp = make_mtp_drafter(*file_, *model_, 0.0f);
  ASSERT_TRUE(mtp.ok()) << mtp.message();
  Totals head;
  EXPECT_EQ(run(*mtp, &head), plain) << "the model's own MTP layer";
  EXPECT_GT(head.drafted, 0);
  std::printf("%s on %s: oracle %lld/%lld accepted, noisy %lld/%lld, mtp layer %lld/%lld\n",
              GetParam().first.c_str(), GetParam().second.c_str(),
              (long long)own.accepted, (long long)own.drafted, (long long)noisy.accepted, (long long)noisy.drafted,
              (long long)head.accepted, (long long)head.drafted);
}

INSTANTIATE_TEST_SUITE_P(Hybrids, RecurrentDrafts,
                         ::testing::Values(std::pair<std::string, std::string>{"tiny-qwen3next", "cpu"},
                                           std::pair<std::string, std::string>{"tiny-qwen3_5", "cpu"},
                                           std::pair<std::string, std::string>{"tiny-qwen3next", "cuda"},
                                           std::pair<std::string, std::string>{"tiny-qwen3_5moe", "cuda"}),
                         [](const auto& info) {
                           std::string n = info.param.first + "_" + info.param.second;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

}  // namespace
}  // namespace onebit
