// The serving Plan: a pure function of `1bit serve`'s options and the model's GGUF header metadata
// to the backends to start (route, slots, drafter; for a llama-server child its argv and the
// environment it adds). Rules: ../shared/design/product.md ("Routes", "Adaptive serving"), docs/serve.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/cli_args.h"
#include "base/status.h"

namespace onebit {

class GgufFile;

// `1bit serve`'s options, validated (ranges and combinations), not yet resolved against the machine.
struct ServeOptions {
  std::string model_path;
  std::string host = "127.0.0.1";
  int64_t port = 8000;
  std::string alias;                 // empty: the model file's stem
  int64_t ctx_size = 0;              // 0: the model's training context capped by memory
  std::string device = "auto";       // auto | cpu | cuda | vulkan | rocm | hrx
  std::string llama_server;          // explicit --llama-server binary, or empty
  std::optional<int64_t> parallel;   // --parallel / -np
  bool mtp = false;                  // --mtp, with mtp_head empty when the head is in the model
  std::string mtp_head;
  std::string dflash;                // --dflash DRAFT.gguf
  std::string draft;                 // --draft MODEL.gguf
  bool ngram = false;
  std::optional<int64_t> mtp_max;    // --mtp-max
  std::optional<double> mtp_p_min;   // --mtp-p-min
  bool mtp_fixed = false;            // --mtp-fixed: draft n_max every step (no cost model)
  bool adaptive = false;
  int64_t adaptive_at = 8;
  std::string api_key;
  int64_t shutdown_timeout_s = 5;    // --shutdown-timeout
  std::vector<std::string> cors_origins;  // --cors-origin; empty = any
  std::string chat_template;         // --chat-template NAME|FILE
  std::string chat_template_file;    // --chat-template-file FILE
  std::optional<int64_t> child_timeout_s;  // --child-timeout (child routes only)
  int64_t threads = 0;               // engine threads (child: -t); 0 = every core
  int64_t batch_tokens = 0;          // --batch-tokens: tokens per engine step (child: -b); 0 = default
  int64_t kv_memory = 0;             // --kv-memory: K/V pool bytes (native only); 0 = ctx x slots
  std::string cache_type;            // --cache-type f16 | f32 (child: -ctk/-ctv); empty = f16
  bool embedding = false;            // --embedding / --embeddings: /v1/embeddings only
  std::string pooling;               // --pooling last | mean | cls; empty = the model's, else last
  bool dry_run = false;
};

// The options `1bit serve` accepts (also those Lemonade passes: --jinja, --metrics, -np).
const std::vector<OptionSpec>& serve_option_specs();

// Checks values and combinations; an error is one line naming the option, the value and the fix.
Result<ServeOptions> parse_serve_options(const ParsedArgs& args);

// What planning reads from a GGUF: header metadata only, tensors are not touched.
struct ModelHeader {
  std::string architecture;            // general.architecture
  uint64_t expert_count = 0;           // <arch>.expert_count, 0 when absent
  std::optional<uint64_t> block_size;  // <arch>.block_size (DFlash drafters)
  uint64_t hadamard_q4_0 = 0;          // onebit.hadamard_q4_0 (32 for a rotated file), 0 when absent
};

// Reads the planning keys; a key of the wrong type is an error naming it.
Result<ModelHeader> read_model_header(const GgufFile& file);

// The machine as planning sees it, injected so that planning stays pure and testable.
struct PlanEnvironment {
  std::vector<std::pair<std::string, std::string>> vars;  // the process environment
  std::vector<std::string> path_dirs;                     // $PATH, split
  bool cuda_usable = false;                               // a usable NVIDIA GPU and a CUDA build
  // Value of an environment variable, or nullopt when unset.
  std::optional<std::string> get(const std::string& name) const;
  // Whether `path` names an executable file (a hook so tests need no real binaries).
  bool (*is_executable)(const std::string& path) = nullptr;
};

// The real environment of this process (environ, $PATH, CUDA presence).
PlanEnvironment current_plan_environment();

enum class DrafterKind { kNone, kMtp, kDflash, kDraftModel, kNgram };

// "mtp", "dflash", "draft", "ngram"; "none".
const char* drafter_kind_name(DrafterKind k);

struct DrafterPlan {
  DrafterKind kind = DrafterKind::kNone;
  std::string path;                // head / drafter / draft model file; the model itself for an MTP head inside it
  int64_t n_max = 0;               // tokens drafted per step
  std::optional<double> p_min;     // draft only while the drafter is this sure
  bool fixed = false;              // n_max every step, no cost model (native engine only)
};

// One backend to start. Native backends run in process; children are llama-server processes.
struct BackendPlan {
  std::string role;                // "primary" or "overflow" (a single backend is "primary")
  std::string route;               // cpu | cuda | vulkan | rocm | hrx
  bool child = false;
  int64_t slots = 1;               // sequences decoded together
  DrafterPlan drafter;
  std::string binary;              // child: the llama-server to run
  std::vector<std::string> argv;   // child: arguments after the binary; kPortPlaceholder marks the port
  std::vector<std::pair<std::string, std::string>> env_added;  // child: variables set for it
};

// The argv element that the supervisor replaces with the child's free loopback port.
inline constexpr const char* kPortPlaceholder = "{port}";

// How the native engine is sized (native routes): what --dry-run shows and the engine starts with.
struct EnginePlan {
  int64_t threads = 0;         // 0: every core
  int64_t batch_tokens = 0;    // 0: the engine's default
  int64_t kv_memory = 0;       // bytes; 0: ctx_size x slots
  std::string cache_type = "f16";
};

struct Plan {
  std::string model_path;
  std::string alias;
  std::string host;
  int64_t port = 0;
  int64_t ctx_size = 0;
  bool api_key_set = false;
  int64_t shutdown_timeout_s = 5;
  std::vector<std::string> cors_origins;  // browser origins allowed; empty = any ("*")
  // The chat template: "builtin:NAME", "file:PATH", or "" for the model's own (ChatML when it has
  // none).
  std::string chat_template;
  bool embedding = false;            // /v1/embeddings only (child: --embedding)
  std::string pooling;               // last | mean | cls; empty: the model's (child: --pooling P when given)
  int64_t child_timeout_s = 10;      // child routes only
  std::vector<BackendPlan> backends;  // the primary first
  std::optional<EnginePlan> engine;   // native routes: one engine serves every backend's slots

  nlohmann::json to_json() const;
};

// Inputs of planning: the options, the model's header, a drafter's header when it matters.
struct PlanInputs {
  ServeOptions options;
  ModelHeader model;
  std::optional<ModelHeader> drafter;  // the --dflash file's header
  PlanEnvironment environment;
};

// Decides the backends. Refusals (no llama-server found for a child route, an unusable device)
// are one-line errors that say how to fix them.
Result<Plan> make_plan(const PlanInputs& inputs);

}  // namespace onebit
