// `1bit quantize IN.gguf OUT.gguf TYPE [--hadamard 32]`: re-encode a model's matrices
// (model/quantize_model), optionally Hadamard-rotated, with progress on a terminal.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "model/quantize_model.h"

namespace onebit::cli {
namespace {

constexpr const char* kName = "quantize";

int run(const ParsedArgs& args) {
  if (args.positionals().size() != 3) {
    return usage_error(kName, "takes IN.gguf OUT.gguf TYPE; got " + std::to_string(args.positionals().size()) + " arguments");
  }
  QuantizeOptions o;
  o.in_path = args.positionals()[0];
  o.out_path = args.positionals()[1];
  const auto target = parse_quant_target(args.positionals()[2]);
  if (!target) {
    return usage_error(kName, "TYPE '" + args.positionals()[2] +
                                  "' is not supported; use f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
                                  "q4_K, q5_K, q6_K, Q4_K_M or Q5_K_M");
  }
  o.target = *target;
  auto threads = args.get_int("threads", 0, 0, 1024);
  if (!threads.ok()) return usage_error(kName, threads.message());
  o.n_threads = int(*threads);
  auto hadamard = args.get_int("hadamard", 0, 0, 1 << 20);
  if (!hadamard.ok()) return usage_error(kName, hadamard.message());
  if (*hadamard != 0 && *hadamard != 32) {
    return usage_error(kName, "--hadamard " + std::to_string(*hadamard) + ": the rotation block must be 32");
  }
  o.hadamard = int32_t(*hadamard);
  if (isatty(STDERR_FILENO)) {
    o.progress = [](int done, int total, std::string_view name, GgmlType type) {
      std::fprintf(stderr, "\r\033[K[%d/%d] %.*s -> %s", done, total, int(name.size()), name.data(),
                   ggml_type_name(uint32_t(type)).c_str());
      if (done == total) std::fputc('\n', stderr);
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto st = quantize_model(o);
  if (!st.ok()) return failure(kName, st.message());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "1bit quantize: wrote %s in %.1f s\n", o.out_path.c_str(), s);
  return kExitOk;
}

}  // namespace

Command quantize_command() {
  return {kName,
          "re-encode a GGUF model's matrices to another type or K-quant mix",
          "1bit quantize IN.gguf OUT.gguf TYPE (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_K q5_K q6_K Q4_K_M Q5_K_M)",
          {{"threads", 't', "N", "threads (default: all)"},
           {"hadamard", 0, "32", "rotate the multiplied matrices by a Hadamard transform over blocks of 32 along "
                                 "the input first (onebit.hadamard_q4_0 = 32; the loader rotates activations to match)"}},
          run};
}

}  // namespace onebit::cli
