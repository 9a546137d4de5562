// The MTP head and DFlash drafters on the shipped onebit-20m models (models/), driven as the engine
// drives them (observe what the target computed, propose at each anchor), against drafts from
// PyTorch (tools/model/make_drafter_goldens.py: tools/train/model.py in fp32 on the dequantised
// Q8_0 weights). The native engine runs Q8_0 activations, so a few near-ties may differ: >= 97%
// of draft tokens must agree. Also: mismatched files are refused, and greedy engine output with a
// drafter equals the output without one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <unistd.h>
#include <fstream>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/head_drafters.h"
#include "gguf/gguf_reader.h"
#include "model/convert_hf.h"
#include "model/model.h"
#include "model/random_model.h"
#include "testdata.h"

namespace onebit {
namespace {

using nlohmann::json;

const std::string kDir = testing::source_path("models/");
const std::string kTarget = kDir + "onebit-20m-q8_0.gguf";
const std::string kMtp = kDir + "onebit-20m-mtp-q8_0.gguf";
const std::string kDflash = kDir + "onebit-20m-dflash-q8_0.gguf";
const std::string kGoldens = testing::source_path("tests/golden/model/onebit-20m/drafts.json");

#define REQUIRE_MODELS()                                                                           \
  do {                                                                                             \
    for (const std::string& p : {kTarget, kMtp, kDflash, kGoldens})                                \
      if (!std::filesystem::exists(p)) GTEST_SKIP() << "missing " << p << " (models/ not checked out?)"; \
  } while (0)

struct Loaded {
  std::unique_ptr<GgufFile> target_file, mtp_file, dflash_file;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};

std::unique_ptr<GgufFile> open(const std::string& path) {
  auto f = GgufFile::open(path);
  EXPECT_TRUE(f.ok()) << f.message();
  return f.ok() ? std::make_unique<GgufFile>(std::move(*f)) : nullptr;
}

Loaded load() {
  Loaded l;
  l.target_file = open(kTarget);
  l.mtp_file = open(kMtp);
  l.dflash_file = open(kDflash);
  l.backend = make_cpu_backend(2);
  auto m = Model::load(*l.target_file, *l.backend);
  EXPECT_TRUE(m.ok()) << m.message();
  l.model = std::move(*m);
  return l;
}

json goldens() {
  std::ifstream in(kGoldens);
  return json::parse(in);
}

// The target's outputs of `layers` for every token of `tokens` (one prefill step).
std::vector<float> capture(Model& model, const std::vector<TokenId>& tokens, const std::vector<int32_t>& layers,
                           int32_t bs) {
  const int32_t n = int32_t(tokens.size()), nb = (n + bs - 1) / bs;
  EXPECT_TRUE(model.reserve(StepLimits{n, 1, nb, 1, true, layers}).ok());
  const bool recurrent = !model.config().recurrent.empty();
  auto pool = model.new_kv_pool(nb, bs, GgmlType::kF32, recurrent ? 1 : 0);
  EXPECT_TRUE(pool.ok());
  StepBatch b;
  if (recurrent) b.state_rows = {0};
  b.max_blocks = nb;
  for (int32_t i = 0; i < nb; ++i) b.block_tables.push_back(i);
  for (int32_t p = 0; p < n; ++p) {
    b.tokens.push_back(tokens[p]);
    b.positions.push_back(p);
    b.slots.push_back(p);
    b.seq_ids.push_back(0);
  }
  b.out_rows = {n - 1};
  std::vector<float> logits, captured;
  Status st = model.forward(b, *pool, logits, nullptr, &captured);
  EXPECT_TRUE(st.ok()) << st.message();
  model.free_kv_pool(*pool);
  return captured;
}

// Drives `d` over one prompt as the engine would: observe [0, first_chunk), then one position at
// a time, proposing `max` tokens at every anchor a >= first_chunk; returns {anchor: draft}.
std::map<int32_t, std::vector<TokenId>> drive(Drafter& d, Model& model, const std::vector<TokenId>& tokens,
                                              int32_t max, int32_t first_chunk) {
  const int32_t bs = 16, n = int32_t(tokens.size()), nb = (n + max + bs) / bs + 1;
  const std::vector<int32_t> layers = d.target_layers();
  const std::vector<float> rows = capture(model, tokens, layers, bs);
  const size_t width = layers.size() * size_t(model.config().hidden_size);
  DrafterLayout l;
  l.n_blocks = nb;
  l.block_size = bs;
  l.max_blocks = nb;
  l.max_seqs = 1;
  l.max_tokens = n;
  l.max_draft = max;
  l.cache_type = GgmlType::kF32;
  EXPECT_TRUE(d.start(l).ok());
  std::vector<int32_t> table;
  for (int32_t i = 0; i < nb; ++i) table.push_back(i);
  std::map<int32_t, std::vector<TokenId>> out;
  int32_t done = 0;
  for (int32_t a = first_chunk; a < n; ++a) {
    const int32_t first = done, cnt = a - done;
    DraftObservation ob{DraftSequence{7, std::span<const TokenId>(tokens.data(), size_t(a + 1)), table, a}, first, cnt,
                        std::span<const float>(rows).subspan(size_t(first) * width, size_t(cnt) * width)};
    d.observe(std::span<const DraftObservation>(&ob, 1));
    done = a;
    std::vector<TokenId> draft;
    DraftAsk ask{DraftSequence{7, std::span<const TokenId>(tokens.data(), size_t(a + 1)), table, a}, max, &draft};
    d.propose(std::span<const DraftAsk>(&ask, 1));
    out[a] = draft;
  }
  d.forget(7);
  return out;
}

// Share of golden draft tokens (key "mtp" or "dflash") the drafter reproduced, over all prompts.
double agreement(const json& g, const char* key, Model& model, Drafter& d_proto, int32_t max, int32_t first_chunk,
                 const std::function<std::shared_ptr<Drafter>()>& make) {
  (void)d_proto;
  int64_t same = 0, total = 0;
  for (const json& p : g["prompts"]) {
    const std::vector<TokenId> tokens = p["tokens"].get<std::vector<TokenId>>();
    auto d = make();
    const auto got = drive(*d, model, tokens, max, first_chunk);
    for (const json& row : p[key]) {
      const int32_t a = row[0].get<int32_t>();
      auto it = got.find(a);
      if (it == got.end()) continue;  // anchor before first_chunk
      for (int32_t k = 0; k < max; ++k) {
        ++total;
        same += size_t(k) < it->second.size() && it->second[size_t(k)] == row[size_t(k) + 1].get<TokenId>();
      }
    }
  }
  EXPECT_GT(total, 100);
  return total ? double(same) / double(total) : 0.0;
}

TEST(HeadDrafters, MtpDraftsEqualPytorch) {
  REQUIRE_MODELS();
  Loaded l = load();
  const json g = goldens();
  auto make = [&] {
    auto d = make_mtp_drafter(*l.mtp_file, *l.model, 0.0f);
    EXPECT_TRUE(d.ok()) << d.message();
    return *d;
  };
  auto proto = make();
  for (int32_t chunk : {1, 40}) {
    const double agree = agreement(g, "mtp", *l.model, *proto, 3, chunk, make);
    std::printf("MTP head: %.2f%% of draft tokens equal PyTorch's (first observation of %d positions)\n",
                100.0 * agree, chunk);
    EXPECT_GE(agree, 0.97);
  }
}

TEST(HeadDrafters, DflashDraftsEqualPytorch) {
  REQUIRE_MODELS();
  Loaded l = load();
  const json g = goldens();
  auto make = [&] {
    auto d = make_dflash_drafter(*l.dflash_file, *l.model, 0.0f);
    EXPECT_TRUE(d.ok()) << d.message();
    return *d;
  };
  auto proto = make();
  for (int32_t chunk : {1, 40}) {
    const double agree = agreement(g, "dflash", *l.model, *proto, 7, chunk, make);
    std::printf("DFlash: %.2f%% of draft tokens equal PyTorch's (first observation of %d positions)\n",
                100.0 * agree, chunk);
    EXPECT_GE(agree, 0.97);
  }
}

TEST(HeadDrafters, PminShortensDrafts) {
  REQUIRE_MODELS();
  Loaded l = load();
  const json g = goldens();
  const std::vector<TokenId> tokens = g["prompts"][0]["tokens"].get<std::vector<TokenId>>();
  auto all = make_dflash_drafter(*l.dflash_file, *l.model, 0.0f);
  auto some = make_dflash_drafter(*l.dflash_file, *l.model, 0.5f);
  ASSERT_TRUE(all.ok() && some.ok());
  const auto full = drive(**all, *l.model, tokens, 7, 1);
  const auto cut = drive(**some, *l.model, tokens, 7, 1);
  size_t n_full = 0, n_cut = 0;
  for (const auto& [a, d] : full) {
    n_full += d.size();
    const auto& c = cut.at(a);
    n_cut += c.size();
    ASSERT_LE(c.size(), d.size());
    EXPECT_TRUE(std::equal(c.begin(), c.end(), d.begin())) << "a p_min draft is a prefix of the full one";
  }
  EXPECT_EQ(n_full, full.size() * 7);
  EXPECT_LT(n_cut, n_full);
}

TEST(HeadDrafters, MismatchedFilesAreRefused) {
  REQUIRE_MODELS();
  Loaded l = load();
  auto wrong = make_mtp_drafter(*l.dflash_file, *l.model, 0.0f);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("qwen3_mtp"), std::string::npos) << wrong.message();
  auto wrong2 = make_dflash_drafter(*l.mtp_file, *l.model, 0.0f);
  ASSERT_FALSE(wrong2.ok());
  EXPECT_NE(wrong2.message().find("qwen3_dflash"), std::string::npos) << wrong2.message();
  auto target_as_head = make_mtp_drafter(*l.target_file, *l.model, 0.0f);
  ASSERT_FALSE(target_as_head.ok());

  // A qwen3 target of another hidden size (random weights, the same tokenizer).
  const auto dir = std::filesystem::temp_directory_path() / ("onebit_head_drafters_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "config.json") << R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
      "vocab_size": 8192, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "rms_norm_eps": 1e-6,
      "rope_theta": 10000.0, "max_position_embeddings": 256, "tie_word_embeddings": true})";
  }
  RandomModelOptions o;
  o.config_path = (dir / "config.json").string();
  o.tokenizer_path = kTarget;
  o.out_path = (dir / "small.gguf").string();
  o.out_type = GgmlType::kF32;
  ASSERT_TRUE(write_random_model(o).ok());
  auto small_file = open(o.out_path);
  auto small = Model::load(*small_file, *l.backend);
  ASSERT_TRUE(small.ok()) << small.message();
  auto m = make_mtp_drafter(*l.mtp_file, **small, 0.0f);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("embedding_length is 384; the target has 256"), std::string::npos) << m.message();
  auto d = make_dflash_drafter(*l.dflash_file, **small, 0.0f);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.message().find("embedding_length"), std::string::npos) << d.message();
  (*small).reset();
  small_file.reset();
  std::filesystem::remove_all(dir);
}

// Greedy engine output with a drafter equals the output without one; prints tokens per step.
TEST(HeadDrafters, EngineGreedyOutputUnchanged) {
  REQUIRE_MODELS();
  Loaded l = load();
  const json g = goldens();
  auto run = [&](std::shared_ptr<Drafter> d, int32_t max, const std::vector<TokenId>& prompt, double* per_step) {
    EngineOptions o;
    o.n_ctx = 512;
    o.cache_type = GgmlType::kF32;
    o.drafter = std::move(d);
    o.draft_max = max;
    o.draft_when_it_pays = false;
    auto engine = Engine::start(*l.model, o);
    EXPECT_TRUE(engine.ok()) << engine.message();
    SamplerParams greedy;
    greedy.temperature = 0.0f;
    auto h = (*engine)->submit({prompt, 64, greedy, true});
    EXPECT_TRUE(h.ok());
    std::vector<TokenId> out;
    for (;;) {
      SequenceEvents ev = (*h)->wait(1000);
      out.insert(out.end(), ev.tokens.begin(), ev.tokens.end());
      if (ev.finished) break;
    }
    if (per_step) {
      const EngineState st = (*engine)->state();
      *per_step = st.steps > 0 ? double(out.size()) / double(st.steps) : 0.0;
    }
    return out;
  };
  for (const json& p : g["prompts"]) {
    const std::vector<TokenId> prompt = p["tokens"].get<std::vector<TokenId>>();
    double plain_steps = 0, mtp_steps = 0, dflash_steps = 0;
    const auto plain = run(nullptr, 3, prompt, &plain_steps);
    const auto mtp = run(*make_mtp_drafter(*l.mtp_file, *l.model, 0.0f), 3, prompt, &mtp_steps);
    const auto dflash = run(*make_dflash_drafter(*l.dflash_file, *l.model, 0.0f), 7, prompt, &dflash_steps);
    EXPECT_EQ(mtp, plain);
    EXPECT_EQ(dflash, plain);
    std::printf("prompt of %zu tokens: tokens per step: none %.2f, MTP (3) %.2f, DFlash (7) %.2f\n", prompt.size(),
                plain_steps, mtp_steps, dflash_steps);
  }
}

// The hybrid models' own MTP layer (tests/golden/model/tiny-qwen3next, tiny-qwen3_5,
// tiny-qwen3_5moe, converted to F32 here) against PyTorch running transformers' decoder layer as
// vLLM runs the MTP layer (tools/model/make_mtp_goldens.py, mtp.json): chained drafts of 3 tokens
// at every anchor.
TEST(HeadDrafters, HybridMtpLayerDraftsEqualPytorch) {
  for (const std::string name : {"tiny-qwen3next", "tiny-qwen3_5", "tiny-qwen3_5moe"}) {
    const std::string dir = testing::source_path("tests/golden/model/" + name);
    if (!std::filesystem::exists(dir + "/mtp.json")) {
      GTEST_SKIP() << dir << "/mtp.json is missing: make it on the GPU machine with tools/model/make_mtp_goldens.py";
    }
    const std::filesystem::path tmp =
        std::filesystem::temp_directory_path() / ("onebit_mtp_layer_" + std::to_string(::getpid()) + name);
    std::filesystem::create_directories(tmp);
    ConvertOptions co;
    co.hf_dir = dir;
    co.out_path = (tmp / "model.gguf").string();
    co.out_type = GgmlType::kF32;
    auto report = convert_hf(co);
    ASSERT_TRUE(report.ok()) << report.message();
    auto file = open(co.out_path);
    auto backend = make_cpu_backend(2);
    auto model = Model::load(*file, *backend);
    ASSERT_TRUE(model.ok()) << model.message();
    std::ifstream in(dir + "/mtp.json");
    const json g = json::parse(in);
    auto make = [&] {
      auto d = make_mtp_drafter(*file, **model, 0.0f);
      EXPECT_TRUE(d.ok()) << d.message();
      return *d;
    };
    auto proto = make();
    EXPECT_EQ(proto->target_layers(), std::vector<int32_t>{(*model)->config().n_layers}) << "the final-normed rows";
    for (int32_t chunk : {1, 8}) {
      const double agree = agreement(g, "mtp", **model, *proto, 3, chunk, make);
      std::printf("%s MTP layer: %.2f%% of draft tokens equal PyTorch's (first observation of %d positions)\n",
                  name.c_str(), 100.0 * agree, chunk);
      EXPECT_GE(agree, 0.97) << name;
    }
    model->reset();
    std::filesystem::remove_all(tmp);
  }
}

}  // namespace
}  // namespace onebit
