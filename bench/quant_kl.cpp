// Quantization accuracy benchmark (not a test): how far each quantized GGUF's next-token
// distributions are from an F32 reference GGUF of the same model, as llama-perplexity's
// --kl-divergence measures it. The same real text, tokenized with the model's own vocabulary, runs
// through every file on the CPU backend (all positions' logits, one KV cache, chunked prefill).
// Per file: perplexity of the text (exp of the mean negative log-likelihood of each next token),
// mean / 99th-percentile (nearest rank) / max over positions of KL(P_ref || P_q) in nats,
// top-1 agreement (and the widest reference top-1/top-2 logit margin among the positions whose
// top-1 changed: small means only near-ties flipped), and max|diff| / max|logit| over all positions. The header line describes the
// reference distributions (logit std, top-1 probability, entropy) so a flat model is visible.
// --backend reference runs the scalar oracle instead (float activations, no Q8 activation
// quantization: slow, for a few tokens), to tell weight error from kernel or activation error.
// Usage: quant_kl REF.gguf QUANT.gguf... --text FILE [--tokens 512] [--chunk 128] [--threads N]
//        [--backend cpu|reference]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/status.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace onebit {
namespace {

struct Options {
  std::string ref_path, text_path, backend = "cpu";
  std::vector<std::string> quant_paths;
  int tokens = 512, chunk = 128, threads = 0;
};

// Logits of every position [n_tokens, vocab] and the file's size facts.
struct RunOutput {
  std::vector<float> logits;
  int32_t vocab = 0;
  double file_mib = 0, bits_per_weight = 0, seconds = 0;
};

// Per-position log-softmax of one row (double), returning the row's log-sum-exp.
double log_softmax(const float* x, int32_t n, std::vector<double>& out) {
  out.resize(size_t(n));
  double mx = x[0];
  for (int32_t i = 1; i < n; ++i) mx = std::max(mx, double(x[i]));
  double s = 0;
  for (int32_t i = 0; i < n; ++i) s += std::exp(double(x[i]) - mx);
  const double lse = mx + std::log(s);
  for (int32_t i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - lse;
  return lse;
}

int32_t argmax(const float* x, int32_t n) { return int32_t(std::max_element(x, x + n) - x); }

// exp(mean over positions p < n - 1 of -log softmax(logits[p])[tokens[p + 1]]).
double perplexity(const std::vector<float>& logits, int32_t vocab, const std::vector<TokenId>& tokens) {
  std::vector<double> lp;
  double nll = 0;
  for (size_t p = 0; p + 1 < tokens.size(); ++p) {
    log_softmax(logits.data() + p * size_t(vocab), vocab, lp);
    nll -= lp[size_t(tokens[p + 1])];
  }
  return std::exp(nll / double(tokens.size() - 1));
}

// The row's top-1 logit minus its second largest.
double top_gap(const float* x, int32_t n) {
  const int32_t a = argmax(x, n);
  float second = -INFINITY;
  for (int32_t i = 0; i < n; ++i) if (i != a) second = std::max(second, x[i]);
  return double(x[a]) - second;
}

// BOS (when the vocabulary adds one) then the text's first tokens, `n` in all.
Result<std::vector<TokenId>> read_tokens(const GgufFile& file, const std::string& path, int n) {
  ONEBIT_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_gguf(file));
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("--text " + path + ": cannot open (check the path)");
  std::string text(size_t(n) * 16, '\0');  // ~4 bytes per token: plenty, and no whole-file encode
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  EncodeOptions eo;
  eo.add_bos = tok.adds_bos();
  eo.parse_special = false;
  std::vector<TokenId> ids = tok.encode(text, eo);
  if (int(ids.size()) < n) {
    return make_error("--text " + path + " gives only " + std::to_string(ids.size()) + " tokens; need " +
                      std::to_string(n) + " (use a longer file or fewer --tokens)");
  }
  ids.resize(size_t(n));
  return ids;
}

Result<RunOutput> run_model(const std::string& path, const std::vector<TokenId>& tokens, const Options& o) {
  const double t0 = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  ONEBIT_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  RunOutput r;
  uint64_t bytes = 0, elements = 0;
  for (const GgufTensorInfo& t : file.tensors()) bytes += t.n_bytes, elements += t.n_elements;
  r.bits_per_weight = 8.0 * double(bytes) / double(elements);
  r.file_mib = double(std::filesystem::file_size(path)) / (1 << 20);
  auto backend = o.backend == "reference" ? make_reference_backend() : make_cpu_backend(o.threads);
  ONEBIT_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::load(file, *backend));
  r.vocab = model->config().vocab_size;
  ONEBIT_ASSIGN_OR_RETURN(KvCache kv, model->new_kv_cache(int32_t(tokens.size())));
  std::vector<float> chunk_logits;
  for (size_t at = 0; at < tokens.size(); at += size_t(o.chunk)) {
    const size_t n = std::min(tokens.size() - at, size_t(o.chunk));
    ONEBIT_TRY(model->forward(kv, std::span<const TokenId>(tokens.data() + at, n), true, chunk_logits));
    r.logits.insert(r.logits.end(), chunk_logits.begin(), chunk_logits.end());
  }
  model->free_kv_cache(kv);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() - t0;
  return r;
}

// What the reference distributions look like: a random-init model can be nearly uniform.
void print_reference(const RunOutput& ref, int64_t n_pos) {
  const int32_t v = ref.vocab;
  std::vector<double> lp;
  double sum_std = 0, sum_top1 = 0, sum_entropy = 0;
  std::vector<double> gaps;
  for (int64_t p = 0; p < n_pos; ++p) {
    const float* x = ref.logits.data() + p * v;
    log_softmax(x, v, lp);
    double mean = 0, var = 0, h = 0;
    for (int32_t i = 0; i < v; ++i) mean += x[i];
    mean /= v;
    for (int32_t i = 0; i < v; ++i) var += (x[i] - mean) * (x[i] - mean), h -= std::exp(lp[size_t(i)]) * lp[size_t(i)];
    sum_std += std::sqrt(var / v);
    sum_entropy += h;
    sum_top1 += std::exp(lp[size_t(argmax(x, v))]);
    gaps.push_back(top_gap(x, v));
  }
  std::sort(gaps.begin(), gaps.end());
  std::printf("Reference over %lld positions: logit std %.2f, top-1 probability %.4f, entropy %.2f nats "
              "(uniform: %.2f), median top-1/top-2 logit gap %.3f (mean over positions)\n\n",
              static_cast<long long>(n_pos), sum_std / n_pos, sum_top1 / n_pos, sum_entropy / n_pos, std::log(double(v)),
              gaps[gaps.size() / 2]);
}

// One table row: `q` against the reference.
void print_row(const std::string& label, const RunOutput& ref, const RunOutput& q, int64_t n_pos,
               const std::vector<TokenId>& tokens) {
  const int32_t v = ref.vocab;
  std::vector<double> lp, lq, kls;
  int64_t agree = 0;
  double max_diff = 0, max_logit = 0, max_gap_flipped = 0;  // the reference's widest top-1 margin lost
  for (int64_t p = 0; p < n_pos; ++p) {
    const float* x = ref.logits.data() + p * v;
    const float* y = q.logits.data() + p * v;
    log_softmax(x, v, lp);
    log_softmax(y, v, lq);
    double kl = 0;
    for (int32_t i = 0; i < v; ++i) {
      kl += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
      max_diff = std::max(max_diff, std::fabs(double(y[i]) - x[i]));
      max_logit = std::max(max_logit, std::fabs(double(x[i])));
    }
    kls.push_back(std::max(kl, 0.0));  // rounding can give -1e-17
    if (argmax(x, v) == argmax(y, v)) {
      ++agree;
    } else {
      max_gap_flipped = std::max(max_gap_flipped, top_gap(x, v));
    }
  }
  std::vector<double> sorted = kls;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double k : kls) mean += k;
  mean /= double(n_pos);
  const size_t p99 = size_t(std::ceil(0.99 * double(n_pos))) - 1;
  std::printf("| %s | %.2f | %.1f | %.4f | %.2e | %.2e | %.2e | %.2f%% | %.3f | %.2e |\n", label.c_str(),
              q.bits_per_weight, q.file_mib, perplexity(q.logits, v, tokens), mean, sorted[p99], sorted.back(),
              100.0 * double(agree) / double(n_pos), max_gap_flipped, max_diff / max_logit);
  std::fflush(stdout);
}

int usage() {
  std::fprintf(stderr,
               "usage: quant_kl REF.gguf QUANT.gguf... --text FILE [--tokens 512] [--chunk 128] [--threads N] "
               "[--backend cpu|reference]\n");
  return 2;
}

int run(int argc, char** argv) {
  Options o;
  o.threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      if (i + 1 >= argc) return usage();
      const std::string v = argv[++i];
      if (a == "--text") o.text_path = v;
      else if (a == "--tokens") o.tokens = std::atoi(v.c_str());
      else if (a == "--chunk") o.chunk = std::atoi(v.c_str());
      else if (a == "--threads") o.threads = std::atoi(v.c_str());
      else if (a == "--backend") o.backend = v;
      else return usage();
    } else if (o.ref_path.empty()) {
      o.ref_path = a;
    } else {
      o.quant_paths.push_back(a);
    }
  }
  if (o.ref_path.empty() || o.quant_paths.empty() || o.text_path.empty() || o.tokens < 2 || o.chunk < 1 ||
      o.threads < 1 || (o.backend != "cpu" && o.backend != "reference")) {
    return usage();
  }
  auto ref_file = GgufFile::open(o.ref_path);
  if (!ref_file.ok()) return std::fprintf(stderr, "quant_kl: %s\n", ref_file.message().c_str()), 1;
  auto tokens = read_tokens(*ref_file, o.text_path, o.tokens);
  if (!tokens.ok()) return std::fprintf(stderr, "quant_kl: %s\n", tokens.message().c_str()), 1;

  auto ref = run_model(o.ref_path, *tokens, o);
  if (!ref.ok()) return std::fprintf(stderr, "quant_kl: %s: %s\n", o.ref_path.c_str(), ref.message().c_str()), 1;
  std::fprintf(stderr, "quant_kl: %s: %d tokens in %.1f s\n", o.ref_path.c_str(), o.tokens, ref->seconds);
  const int64_t n_pos = o.tokens;
  print_reference(*ref, n_pos);
  std::printf("Reference perplexity %.4f\n\n", perplexity(ref->logits, ref->vocab, *tokens));
  std::printf("| type | bits/weight | file MiB | perplexity | mean KL (nats) | p99 KL | max KL | top-1 agreement | "
              "widest reference top-1 margin lost | max\\|diff\\|/max\\|logit\\| |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& path : o.quant_paths) {
    auto q = run_model(path, *tokens, o);
    if (!q.ok()) return std::fprintf(stderr, "quant_kl: %s: %s\n", path.c_str(), q.message().c_str()), 1;
    if (q->vocab != ref->vocab) {
      return std::fprintf(stderr, "quant_kl: %s has vocabulary %d, the reference %d; give files of one model\n",
                          path.c_str(), q->vocab, ref->vocab), 1;
    }
    std::fprintf(stderr, "quant_kl: %s: %.1f s\n", path.c_str(), q->seconds);
    print_row(std::filesystem::path(path).stem().string(), *ref, *q, n_pos, *tokens);
  }
  return 0;
}

}  // namespace
}  // namespace onebit

int main(int argc, char** argv) { return onebit::run(argc, argv); }
