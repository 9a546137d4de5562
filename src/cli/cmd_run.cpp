// `1bit run -m FILE -p PROMPT`: one completion with the native engine, streamed to stdout as the
// tokens come (whole UTF-8 characters only). Timings go to stderr. Without -p: an interactive chat
// with the model's chat template (run_chat.h).
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include <unistd.h>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "base/utf8.h"
#include "cli/command.h"
#include "cli/default_model.h"
#include "cli/run_chat.h"
#include "engine/generate.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace onebit::cli {
namespace {

constexpr const char* kCmd = "run";

Result<SamplerParams> sampler_params(const ParsedArgs& args) {
  SamplerParams p;
  ONEBIT_ASSIGN_OR_RETURN(double temp, args.get_float("temp", 0.8, 0.0, 100.0));
  ONEBIT_ASSIGN_OR_RETURN(int64_t top_k, args.get_int("top-k", 40, 0, 1 << 24));
  ONEBIT_ASSIGN_OR_RETURN(double top_p, args.get_float("top-p", 0.95, 1e-9, 1.0));
  ONEBIT_ASSIGN_OR_RETURN(double min_p, args.get_float("min-p", 0.05, 0.0, 1.0));
  p.temperature = static_cast<float>(temp);
  p.top_k = static_cast<int32_t>(top_k);
  p.top_p = static_cast<float>(top_p);
  p.min_p = static_cast<float>(min_p);
  if (args.has("seed")) {
    ONEBIT_ASSIGN_OR_RETURN(int64_t seed, args.get_int("seed", 0, 0, INT64_MAX));
    p.seed = static_cast<uint64_t>(seed);
  } else {
    p.seed = std::random_device{}();
  }
  return p;
}

int run(const ParsedArgs& args) {
  if (!args.positionals().empty()) return usage_error(kCmd, "unexpected argument '" + args.positionals()[0] + "'");
  std::string path = args.get("model");
  if (path.empty()) {
    auto model = find_default_model();
    if (!model.ok()) return usage_error(kCmd, model.message());
    path = *model;
  }
  const bool chat = !args.has("prompt");
  auto n_predict = args.get_int("n-predict", chat ? 512 : 128, 0, 1 << 24);
  if (!n_predict.ok()) return usage_error(kCmd, n_predict.message());
  auto n_ctx = args.get_int("ctx-size", 0, 0, 1 << 24);
  if (!n_ctx.ok()) return usage_error(kCmd, n_ctx.message());
  auto threads = args.get_int("threads", 1, 1, 1024);
  if (!threads.ok()) return usage_error(kCmd, threads.message());
  auto sampling = sampler_params(args);
  if (!sampling.ok()) return usage_error(kCmd, sampling.message());

  auto file = GgufFile::open(path);
  if (!file.ok()) return failure(kCmd, file.message());
  auto tokenizer = Tokenizer::from_gguf(*file);
  if (!tokenizer.ok()) return failure(kCmd, path + ": vocabulary: " + tokenizer.message());
  if (args.has("backend") && args.get("backend") != "cpu" && args.get("backend") != "reference") return usage_error(kCmd, "--backend is cpu or reference, not '" + args.get("backend") + "'");
  if (args.has("backend") && args.has("device")) return usage_error(kCmd, "--backend and --device both given: pick one");
  const std::string device = args.has("device") ? args.get("device") : args.has("backend") ? args.get("backend") : "cpu";
  auto made = make_backend(device, static_cast<int>(*threads));
  if (!made.ok()) return failure(kCmd, "--device " + device + ": " + made.message());
  std::unique_ptr<Backend> backend = std::move(*made);
  std::string chat_template;
  if (chat) {
    if (!file->find("tokenizer.chat_template")) {
      return usage_error(kCmd, path + " has no chat template (tokenizer.chat_template) for an interactive chat; "
                               "give a prompt with -p PROMPT");
    }
    auto source = file->get_string("tokenizer.chat_template");
    if (!source.ok()) return failure(kCmd, path + ": tokenizer.chat_template: " + source.message());
    chat_template = *source;
  }
  auto model = Model::load(*file, *backend);
  if (!model.ok()) return failure(kCmd, path + ": " + model.message());

  if (args.has("dump")) {
    // Per-layer intermediates as llama.cpp's eval-callback lists them: name, shape, sum, rms.
    (*model)->set_debug_hook([](std::string_view name, int layer, int64_t rows, int64_t cols, std::span<const float> d) {
      double sum = 0.0, sum_sq = 0.0;
      for (float v : d) {
        sum += v;
        sum_sq += double(v) * v;
      }
      std::fprintf(stderr, "dump %-13.*s layer %3d [%lld, %lld] sum %.9g rms %.9g\n", static_cast<int>(name.size()),
                   name.data(), layer, static_cast<long long>(rows), static_cast<long long>(cols), sum,
                   d.empty() ? 0.0 : std::sqrt(sum_sq / d.size()));
    });
  }
  if (chat) {
    ChatOptions chat_options;
    chat_options.template_source = chat_template;
    chat_options.system = args.get("system");
    chat_options.generate.n_predict = static_cast<int32_t>(*n_predict);
    chat_options.generate.n_ctx = static_cast<int32_t>(*n_ctx);
    chat_options.generate.sampler = *sampling;
    chat_options.generate.is_end = [&](TokenId t) { return tokenizer->is_end_of_generation(t); };
    chat_options.show_prompt = ::isatty(::fileno(stdin)) != 0;
    return run_chat(**model, *tokenizer, chat_options, stdin, stdout);
  }
  const std::string prompt = args.get("prompt");
  EncodeOptions enc;
  enc.add_bos = tokenizer->adds_bos();
  const std::vector<TokenId> ids = tokenizer->encode(prompt, enc);
  if (ids.empty()) return usage_error(kCmd, "the prompt is empty and the vocabulary has no BOS token; give a prompt");

  GenerateOptions options;
  options.n_predict = static_cast<int32_t>(*n_predict);
  options.n_ctx = static_cast<int32_t>(*n_ctx);
  options.sampler = *sampling;
  options.is_end = [&](TokenId t) { return tokenizer->is_end_of_generation(t); };
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  std::string pending;  // bytes of an incomplete UTF-8 character
  auto stats = generate(**model, ids, options, [&](TokenId t) {
    if (tokenizer->is_end_of_generation(t)) return false;
    pending += tokenizer->token_to_piece(t);
    const size_t n = utf8_complete_prefix(pending);
    std::fwrite(pending.data(), 1, n, stdout);
    std::fflush(stdout);
    pending.erase(0, n);
    return true;
  });
  std::fwrite(pending.data(), 1, pending.size(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (!stats.ok()) return failure(kCmd, stats.message());
  std::fprintf(stderr, "1bit run: prompt %d tokens in %.1f ms (%.1f tok/s), generated %d tokens in %.1f ms (%.1f tok/s), backend %s\n",
               stats->n_prompt_tokens, stats->prompt_ms,
               stats->prompt_ms > 0 ? 1000.0 * stats->n_prompt_tokens / stats->prompt_ms : 0.0,
               stats->n_generated_tokens, stats->decode_ms,
               stats->decode_ms > 0 ? 1000.0 * std::max(0, stats->n_generated_tokens - 1) / stats->decode_ms : 0.0,
               std::string(backend->name()).c_str());
  return kExitOk;
}

}  // namespace

Command run_command() {
  return {kCmd,
          "generate a completion with the native engine",
          "1bit run -m FILE.gguf [-p PROMPT] [-n N] [--temp T] [--seed S] [--top-k K] [--top-p P] [--min-p P]\n"
          "  without -p: a chat on stdin, one user message a line (/clear starts over, /exit or EOF ends)",
          {
              {"model", 'm', "FILE", "the GGUF model (default: models/onebit-20m-q8_0.gguf)"},
              {"prompt", 'p', "TEXT", "the prompt (printed, then the completion); without it, a chat"},
              {"system", 0, "TEXT", "chat: a system message first"},
              {"n-predict", 'n', "N", "tokens to generate at most (default 128; a chat reply: 512)"},
              {"ctx-size", 'c', "N", "context positions (default prompt + N)"},
              {"temp", 0, "T", "temperature; 0 = greedy (default 0.8)"},
              {"seed", 0, "S", "random seed (default: random); same seed, same output"},
              {"top-k", 0, "K", "keep the K most likely tokens; 0 = off (default 40)"},
              {"top-p", 0, "P", "nucleus sampling threshold; 1 = off (default 0.95)"},
              {"min-p", 0, "P", "drop tokens below P x the top probability; 0 = off (default 0.05)"},
              {"threads", 't', "N", "CPU threads (default 1; the reference backend uses one)"},
              {"backend", 0, "NAME", "cpu (SIMD, the default) or reference (scalar oracle)"},
              {"device", 0, "D", "cpu (default), cuda, cuda:N (an NVIDIA GPU) or reference"},
              {"dump", 0, "", "print every named intermediate of every layer to stderr (debugging)"},
          },
          run};
}

}  // namespace onebit::cli
