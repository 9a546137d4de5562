// `1bit serve`: plans the backends (see serve/plan.h); `--dry-run` prints the plan as JSON.
#include <cstdio>

#include "cli/command.h"
#include "gguf/gguf_reader.h"
#include "serve/plan.h"
#include "serve/supervisor.h"

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

int run_serve(const ParsedArgs& args) {
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
  return failure("serve", "the native engine's server is not built yet in this version; use --llama-server PATH, or --dry-run to print the plan");
}

}  // namespace

Command serve_command() {
  return {"serve", "serve a model behind an OpenAI-compatible HTTP API", "1bit serve -m MODEL.gguf [options]",
          serve_option_specs(), run_serve};
}

}  // namespace onebit::cli
