// Logprobs, penalties and logit_bias through the official `openai` npm client, checked against the
// scalar reference backend: the server (CPU backend, F32 K/V) answers; this test runs the same
// model on the reference backend, token by token, and computes what each reply must be: the
// logprobs as the log-softmax of the logits (after temperature and top-k for sampled replies,
// to 1e-4), and the greedy texts under a ban, OpenAI's frequency/presence penalties and
// llama.cpp's repeat penalty, with the formulas written out here. n and batch prompts are checked
// by the client script (tests/e2e/openai_client.mjs, mode "sampling").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "base/utf8.h"
#include "backend/backend.h"
#include "e2e_util.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"
#include "run_command.h"
#include "tokenizer/tokenizer.h"

namespace onebit::e2e {
namespace {

namespace fs = std::filesystem;
constexpr int kTokens = 24;

// stories260K on the reference backend, one sequence at a time.
class Reference {
 public:
  bool load() {
    auto file = GgufFile::open(stories_model());
    if (!file.ok()) return false;
    file_ = std::make_unique<GgufFile>(std::move(*file));
    backend_ = make_reference_backend();
    auto model = Model::load(*file_, *backend_);
    auto tok = Tokenizer::from_gguf(*file_);
    if (!model.ok() || !tok.ok()) return false;
    model_ = std::move(*model);
    tokenizer_ = std::make_unique<Tokenizer>(std::move(*tok));
    return true;
  }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

  // Logits after each of `steps` (the prompt, then each reply token): [reply tokens + 1][vocab].
  // `choose` picks the next token from the logits (changed in place) and the context so far.
  using Chooser = std::function<TokenId(std::vector<float>& logits, const std::vector<TokenId>& context)>;
  std::vector<TokenId> generate(const std::vector<TokenId>& prompt, int n, const Chooser& choose,
                                std::vector<std::vector<float>>* all_logits = nullptr) {
    auto kv = model_->new_kv_cache(256);
    EXPECT_TRUE(kv.ok());
    std::vector<TokenId> context = prompt;
    std::vector<float> logits;
    EXPECT_TRUE(model_->forward(*kv, prompt, false, logits).ok());
    std::vector<TokenId> out;
    for (int i = 0; i < n; ++i) {
      if (all_logits) all_logits->push_back(logits);
      const TokenId t = choose(logits, context);
      out.push_back(t);
      if (tokenizer_->is_end_of_generation(t)) break;
      context.push_back(t);
      const std::vector<TokenId> one = {t};
      EXPECT_TRUE(model_->forward(*kv, one, false, logits).ok());
    }
    model_->free_kv_cache(*kv);
    return out;
  }
  // The reply text of `ids` as the server builds it: pieces up to an end token.
  std::string text(const std::vector<TokenId>& ids) const {
    std::string raw;
    for (TokenId t : ids) {
      if (tokenizer_->is_end_of_generation(t)) break;
      raw += tokenizer_->token_to_piece(t);
    }
    return utf8_sanitize(raw);
  }

 private:
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TokenId argmax_of(const std::vector<float>& z) { return TokenId(std::max_element(z.begin(), z.end()) - z.begin()); }

// log-softmax of z / temp over `keep` (every id when empty), in long double.
std::map<TokenId, double> log_softmax(const std::vector<float>& z, double temp, const std::vector<TokenId>& keep = {}) {
  std::vector<TokenId> ids = keep;
  if (ids.empty()) {
    for (size_t i = 0; i < z.size(); ++i) ids.push_back(TokenId(i));
  }
  long double top = -INFINITY, sum = 0;
  for (TokenId id : ids) top = std::max<long double>(top, z[id] / temp);
  for (TokenId id : ids) sum += std::exp(z[id] / temp - top);
  std::map<TokenId, double> out;
  for (TokenId id : ids) out[id] = double(z[id] / temp - top - std::log(sum));
  return out;
}

// The k largest values of a distribution, descending.
std::vector<double> top_values(const std::map<TokenId, double>& lp, size_t k) {
  std::vector<double> v;
  for (const auto& [id, x] : lp) v.push_back(x);
  std::sort(v.rbegin(), v.rend());
  v.resize(std::min(k, v.size()));
  return v;
}

class SamplingE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
    ASSERT_TRUE(ref_.load());
    server_.start(stories_model(), {"-c", "256", "--parallel", "4", "--cache-type", "f32"});
  }
  // The reply's completions logprobs against the reference distributions of its tokens. The ids
  // are recovered from the token texts: of the ids whose piece shows as that text, the one whose
  // reference logprob is nearest (texts are unique but for byte tokens).
  void check_logprobs(const json& reply, const std::vector<TokenId>& prompt, double temp, const std::vector<int>& top_k) {
    const json& lp = reply["choices"][0]["logprobs"];
    ASSERT_TRUE(lp.is_object()) << reply.dump();
    const size_t n = lp["tokens"].size();
    ASSERT_GT(n, 0u);
    size_t step = 0;
    double worst = 0.0;
    std::vector<std::vector<float>> logits;
    ref_.generate(prompt, int(n), [&](std::vector<float>& z, const std::vector<TokenId>&) {
      const int k = top_k.empty() ? 0 : top_k[0];
      std::vector<TokenId> keep;
      if (temp > 0 && k > 0) {
        keep.resize(z.size());
        for (size_t i = 0; i < z.size(); ++i) keep[i] = TokenId(i);
        std::stable_sort(keep.begin(), keep.end(), [&](TokenId a, TokenId b) { return z[a] > z[b]; });
        keep.resize(size_t(k));
      }
      const auto want = log_softmax(z, temp > 0 ? temp : 1.0, keep);
      const std::string shown = lp["tokens"][step];
      const double got = lp["token_logprobs"][step];
      TokenId best = -1;
      for (const auto& [id, x] : want) {
        if (ref_.text({id}) != shown) continue;
        if (best < 0 || std::abs(x - got) < std::abs(want.at(best) - got)) best = id;
      }
      EXPECT_GE(best, 0) << "step " << step << ": no token shows as '" << shown << "'";
      if (best < 0) return argmax_of(z);
      worst = std::max(worst, std::abs(want.at(best) - got));
      // The listed alternatives: the most likely of the same distribution.
      std::vector<double> listed;
      for (const auto& [tok, x] : lp["top_logprobs"][step].items()) listed.push_back(x.get<double>());
      std::sort(listed.rbegin(), listed.rend());
      const std::vector<double> expect = top_values(want, 5);
      // Two tokens showing as the same text share one key: the object then holds fewer.
      EXPECT_LE(listed.size(), expect.size());
      for (size_t i = 0; i < listed.size(); ++i) {
        EXPECT_TRUE(std::any_of(expect.begin(), expect.end(), [&](double e) { return std::abs(e - listed[i]) < 1e-4; }))
            << "step " << step << " alternative " << listed[i];
      }
      ++step;
      return best;
    }, &logits);
    EXPECT_EQ(step, n);
    EXPECT_LT(worst, 1e-4) << "largest logprob difference";
    std::printf("logprobs (temperature %g, top_k %d): %zu tokens, largest difference %.2e\n", temp,
                top_k.empty() ? 0 : top_k[0], n, worst);
  }
  Reference ref_;
  Server server_;
};

TEST_F(SamplingE2e, OpenAiClientLogprobsPenaltiesBiasMatchTheReference) {
  const std::vector<TokenId> prompt = ref_.tokenizer().encode("Once upon a time, there was a", {.add_bos = true});
  auto greedy = [](std::vector<float>& z, const std::vector<TokenId>&) { return argmax_of(z); };
  const std::vector<TokenId> plain = ref_.generate(prompt, kTokens, greedy);
  // Ban the reply's most frequent token.
  std::map<TokenId, int> count;
  for (TokenId t : plain) ++count[t];
  const TokenId banned = std::max_element(count.begin(), count.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;

  const fs::path out = fs::temp_directory_path() / ("onebit_sampling_" + std::to_string(::getpid()) + ".json");
  const std::string ids = json(prompt).dump();
  auto r = testing::run_command(testing::source_path("tests/e2e/run_openai_client.sh") + " " + server_.base_url() +
                                " sampling " + out.string() + " '" + ids + "' " + std::to_string(banned));
  if (r.exit_code == 77) GTEST_SKIP() << "node or the openai npm package is unavailable";
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(out);
  const json replies = json::parse(in);
  fs::remove(out);

  EXPECT_EQ(replies["greedy"]["choices"][0]["text"], ref_.text(plain));
  check_logprobs(replies["greedy"], prompt, 0.0, {});
  check_logprobs(replies["sampled"], prompt, 0.8, {});
  check_logprobs(replies["top3"], prompt, 1.3, {3});

  // A ban: the greedy reply never holds the token, and is the reference's greedy reply without it.
  const std::vector<TokenId> without = ref_.generate(prompt, kTokens, [&](std::vector<float>& z, const std::vector<TokenId>&) {
    z[banned] = -INFINITY;
    return argmax_of(z);
  });
  EXPECT_EQ(std::count(without.begin(), without.end(), banned), 0);
  EXPECT_EQ(replies["banned"]["choices"][0]["text"], ref_.text(without));
  // OpenAI's penalties over the reply: logit -= count * 1.5 + 0.5 for every token in it so far.
  const size_t n_prompt = prompt.size();
  const std::vector<TokenId> penalized = ref_.generate(prompt, kTokens, [&](std::vector<float>& z, const std::vector<TokenId>& ctx) {
    std::map<TokenId, int> seen;
    for (size_t i = n_prompt; i < ctx.size(); ++i) ++seen[ctx[i]];
    for (auto [t, c] : seen) z[t] -= 1.5f * float(c) + 0.5f;
    return argmax_of(z);
  });
  EXPECT_EQ(replies["penalized"]["choices"][0]["text"], ref_.text(penalized));
  // llama.cpp's repeat penalty over the last 16 tokens of the context, prompt included.
  const std::vector<TokenId> repeat = ref_.generate(prompt, kTokens, [&](std::vector<float>& z, const std::vector<TokenId>& ctx) {
    std::map<TokenId, int> seen;
    for (size_t i = ctx.size() > 16 ? ctx.size() - 16 : 0; i < ctx.size(); ++i) seen[ctx[i]] = 1;
    for (auto [t, c] : seen) z[t] = z[t] <= 0 ? z[t] * 1.5f : z[t] / 1.5f;
    return argmax_of(z);
  });
  EXPECT_EQ(replies["repeat"]["choices"][0]["text"], ref_.text(repeat));
  EXPECT_NE(ref_.text(penalized), ref_.text(plain));
  EXPECT_NE(ref_.text(repeat), ref_.text(plain));
}

// A ban on every token: the choice fails with an error that says why, and the server goes on.
TEST_F(SamplingE2e, BanningEveryTokenIsAnError) {
  json bias = json::object();
  for (TokenId id = 0; id < ref_.tokenizer().vocab_size(); ++id) bias[std::to_string(id)] = -100;
  auto r = server_.post("/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 4}, {"logit_bias", bias}});
  EXPECT_EQ(r.status, 500) << r.raw;
  EXPECT_NE(r.raw.find("logit_bias bans every token"), std::string::npos) << r.raw;
  auto ok = server_.post("/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 4}});
  EXPECT_EQ(ok.status, 200) << ok.raw;
}

// n choices of one prompt share its K/V: the later ones take it from the prefix cache.
TEST_F(SamplingE2e, ChoicesShareThePromptsCachedPrefix) {
  const std::string prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.";
  auto r = server_.post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 4}, {"n", 3}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(r.body["choices"].size(), 3u);
  const int n_prompt = r.body["usage"]["prompt_tokens"];
  // The first choice computes the prompt; the two others get its full blocks.
  EXPECT_EQ(metric(server_, "onebit_prefix_cache_hit_tokens_total"), 2 * cached_of_repeat(n_prompt));
  for (int i = 1; i < 3; ++i) EXPECT_EQ(r.body["choices"][i]["text"], r.body["choices"][0]["text"]);
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 12);
}

}  // namespace
}  // namespace onebit::e2e
