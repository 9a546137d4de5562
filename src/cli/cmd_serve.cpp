// `1bit serve`: plans the backends (see serve/plan.h); `--dry-run` prints the plan as JSON.
#include <malloc.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/command.h"
#include "cli/default_model.h"
#include "gguf/gguf_reader.h"
#include "serve/front.h"
#include "serve/http_util.h"
#include "serve/native_backend.h"
#include "serve/plan.h"
#include "serve/supervisor.h"
#include "template/builtin_templates.h"

namespace onebit::cli {
namespace {

// Reads the planning metadata of a GGUF named on the command line; errors name the option.
Result<ModelHeader> header_of(const std::string& option, const std::string& path) {
  auto file = GgufFile::open(path);
  if (!file.ok()) return make_error(option + ": " + file.message());
  auto header = read_model_header(*file);
  if (!header.ok()) return make_error(option + " '" + path + "': " + header.message());
  return header;
}

// Serves a native plan: binds the port, loads the model on a loader thread (/health says loading
// meanwhile), serves until SIGINT/SIGTERM. Exit 1 when the port or the model fails.
int run_native_plan(const Plan& plan, const ServeOptions& options) {
  for (const auto& b : plan.backends) {
    if (b.route != plan.backends[0].route) {
      return failure("serve", "the native engine runs every pool on one device in this version (" + plan.backends[0].route +
                              ", not also " + b.route + ")");
    }
  }
  const sigset_t signals = block_stop_signals();

  const DrafterPlan& drafter = plan.backends[0].drafter;
  // One engine for every planned backend: a slot pool each (the primary, and under --adaptive the
  // overflow), over one loaded model and one thread pool.
  NativeOptions no;
  no.model_path = plan.model_path;
  no.alias = plan.alias;
  no.route = plan.backends[0].route;
  no.ctx_size = plan.ctx_size;
  no.drafter = drafter.kind == DrafterKind::kNone ? "" : drafter_kind_name(drafter.kind);
  no.drafter_path = drafter.path;
  no.draft_max = static_cast<int32_t>(drafter.n_max);
  no.draft_p_min = static_cast<float>(drafter.p_min.value_or(0.0));
  no.draft_fixed = drafter.fixed;
  no.roles.clear();
  no.pool_slots.clear();
  for (const auto& b : plan.backends) {
    no.roles.push_back(b.role);
    no.pool_slots.push_back(static_cast<int32_t>(b.slots));
  }
  const EnginePlan& ep = *plan.engine;
  no.n_threads = static_cast<int>(ep.threads);
  no.batch_tokens = static_cast<int32_t>(ep.batch_tokens);
  no.kv_memory = ep.kv_memory;
  no.cache_type = ep.cache_type;
  no.embedding = plan.embedding;
  no.pooling = plan.pooling;
  if (plan.chat_template.rfind("builtin:", 0) == 0) {
    no.chat_template = *builtin_chat_template(plan.chat_template.substr(8));
  } else if (plan.chat_template.rfind("file:", 0) == 0) {
    const std::string path = plan.chat_template.substr(5);
    std::ifstream f(path, std::ios::binary);
    std::stringstream text;
    text << f.rdbuf();
    if (!f || text.str().empty()) {
      std::fprintf(stderr, "1bit serve: --chat-template-file '%s': cannot read it, or it is empty\n", path.c_str());
      return 1;
    }
    no.chat_template = text.str();
  }
  if (const char* wait = std::getenv("ONEBIT_WHOLE_REPLY_WAIT_MS")) no.whole_reply_wait_ms = std::max(0, std::atoi(wait));
  auto native = std::make_shared<NativeEngine>(no);
  std::vector<std::unique_ptr<FrontBackend>> backends;
  for (size_t pool = 0; pool < plan.backends.size(); ++pool) backends.push_back(std::make_unique<NativeBackend>(native, pool));
  FrontOptions fo{plan.host, static_cast<int>(plan.port), plan.alias, options.api_key, 16 * 1024 * 1024,
                  options.adaptive_at};
  fo.cors_origins = plan.cors_origins;
  Front front(std::move(fo), std::move(backends));
  if (auto st = front.bind(); !st.ok()) {
    std::fprintf(stderr, "1bit serve: %s\n", st.message().c_str());
    return 1;
  }
  std::thread server([&] { front.serve(); });
  std::fprintf(stderr, "1bit serve: listening on http://%s:%lld as '%s'; loading %s\n", plan.host.c_str(),
               static_cast<long long>(plan.port), plan.alias.c_str(), plan.model_path.c_str());
  std::atomic<int> load_state{0};  // 0 loading, 1 ready, 2 failed
  std::string load_error;
  std::thread loader([&] {
    auto st = native->load();
    if (!st.ok()) {
      load_error = st.message();
      load_state.store(2);
      return;
    }
    std::fprintf(stderr, "1bit serve: %s\n", native->describe().c_str());
    load_state.store(1);
  });
  int exit_code = 0;
  bool announced = false, signalled = false;
  for (;;) {
    timespec ts{0, 100 * 1000000};
    if (sigtimedwait(&signals, nullptr, &ts) > 0) {
      signalled = true;
      break;
    }
    const int state = load_state.load();
    if (state == 2) {
      std::fprintf(stderr, "1bit serve: %s: %s\n", plan.model_path.c_str(), load_error.c_str());
      exit_code = 1;
      break;
    }
    if (state == 1 && !announced) {
      announced = true;
      front.set_ready(true);
      std::fprintf(stderr, "1bit serve: ready\n");
    }
  }
  if (signalled) shut_down_on_signal(front, signals, static_cast<int>(plan.shutdown_timeout_s * 1000));
  loader.join();
  front.set_ready(false);
  std::fprintf(stderr, "1bit serve: requests per backend: %s\n", front.counts_summary().c_str());
  front.stop();
  server.join();
  return exit_code;
}

int run_serve(const ParsedArgs& given) {
  // Big buffers (request bodies, their parses, prompts) are mapped and unmapped on their own: a
  // storm of large requests gives its memory back instead of fragmenting the heap (glibc would
  // otherwise raise this threshold after the first big free and keep such blocks in the heap).
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  ParsedArgs args = given;
  if (!args.has("model")) {
    auto model = find_default_model();
    if (!model.ok()) return usage_error("serve", model.message());
    args.add("model", *model);
  }
  auto options = parse_serve_options(args);
  if (!options.ok()) return usage_error("serve", options.message());
  PlanInputs in;
  in.options = *options;
  auto model = header_of("-m", options->model_path);
  if (!model.ok()) return usage_error("serve", model.message());
  in.model = *model;
  if (!options->dflash.empty()) {
    auto drafter = header_of("--dflash", options->dflash);
    if (!drafter.ok()) return usage_error("serve", drafter.message());
    in.drafter = *drafter;
  }
  in.environment = current_plan_environment();
  auto plan = make_plan(in);
  if (!plan.ok()) return failure("serve", plan.message());
  if (options->dry_run) {
    std::printf("%s\n", plan->to_json().dump(2).c_str());
    return kExitOk;
  }
  if (plan->backends[0].child) return run_child_plan(*plan, *options);
  return run_native_plan(*plan, *options);
}

}  // namespace

Command serve_command() {
  return {"serve", "serve a model behind an OpenAI-compatible HTTP API", "1bit serve -m MODEL.gguf [options]",
          serve_option_specs(), run_serve};
}

}  // namespace onebit::cli
