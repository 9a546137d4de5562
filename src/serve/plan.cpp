// Planning for `1bit serve`: options -> backends. Pure: the machine comes in as PlanEnvironment.
#include "serve/plan.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>

#include "backend/cuda/cuda_backend.h"
#include "gguf/gguf_reader.h"
#include "template/builtin_templates.h"

extern char** environ;

namespace onebit {
namespace {

const std::vector<std::string> kDevices = {"auto", "cpu", "cuda", "vulkan", "rocm", "hrx"};

bool is_native_route(const std::string& route) { return route == "cpu" || route == "cuda"; }

// The llama-server --device value and offload flags of a child route (product.md's route table).
std::vector<std::string> route_args(const std::string& route) {
  if (route == "cpu") return {"-ngl", "0", "--jinja"};
  if (route == "cuda") return {"--device", "CUDA0", "-ngl", "99", "--jinja"};
  if (route == "vulkan") return {"--device", "Vulkan0", "-ngl", "99", "--jinja"};
  if (route == "rocm") return {"--device", "ROCm0", "-ngl", "99", "--jinja"};
  return {"--device", "HRX0", "-ngl", "99", "--jinja"};  // hrx
}

// Shortest text that reads back as x ("0", "0.5", "0.125"), as a user would write it.
std::string format_number(double x) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x);
  return std::string(buf, end);
}

// Finds the llama-server for a child route: --llama-server, else $ONEBIT_LLAMA_SERVER
// ($ONEBIT_LEAN_SERVER for rocm), else `llama-server` on PATH.
Result<std::string> find_llama_server(const std::string& route, const ServeOptions& o,
                                      const PlanEnvironment& env) {
  if (!o.llama_server.empty()) return o.llama_server;
  const char* var = route == "rocm" ? "ONEBIT_LEAN_SERVER" : "ONEBIT_LLAMA_SERVER";
  if (auto v = env.get(var); v && !v->empty()) return *v;
  for (const auto& dir : env.path_dirs) {
    std::string candidate = (std::filesystem::path(dir.empty() ? "." : dir) / "llama-server").string();
    if (env.is_executable != nullptr && env.is_executable(candidate)) return candidate;
  }
  return make_error("--device " + route + " runs llama.cpp's llama-server, and none was found: give its path with --llama-server PATH, set $" +
                    std::string(var) + ", or put llama-server on PATH");
}

DrafterPlan plan_drafter(const PlanInputs& in) {
  const ServeOptions& o = in.options;
  DrafterPlan d;
  if (o.mtp) {
    d.kind = DrafterKind::kMtp;
    d.path = o.mtp_head.empty() ? o.model_path : o.mtp_head;
    d.n_max = o.mtp_max.value_or(3);
    d.p_min = o.mtp_p_min;
  } else if (!o.dflash.empty()) {
    d.kind = DrafterKind::kDflash;
    d.path = o.dflash;
    const auto block = in.drafter ? in.drafter->block_size : std::nullopt;
    d.n_max = o.mtp_max.value_or(block && *block > 1 ? static_cast<int64_t>(*block) - 1 : 16);
    d.p_min = o.mtp_p_min.value_or(0.0);
  } else if (!o.draft.empty()) {
    d.kind = DrafterKind::kDraftModel;
    d.path = o.draft;
    d.n_max = o.mtp_max.value_or(3);
    d.p_min = o.mtp_p_min;
  } else if (o.ngram) {
    d.kind = DrafterKind::kNgram;
    d.n_max = o.mtp_max.value_or(3);
    d.p_min = o.mtp_p_min;
  }
  d.fixed = o.mtp_fixed;
  return d;
}

// The argv of a llama-server child after its binary, in product.md's order.
std::vector<std::string> child_argv(const PlanInputs& in, const std::string& route, int64_t slots,
                                    bool slots_given, const DrafterPlan& d) {
  const ServeOptions& o = in.options;
  std::vector<std::string> a = {"-m", o.model_path, "--host", "127.0.0.1", "--port", kPortPlaceholder};
  for (auto& x : route_args(route)) a.push_back(x);
  if (o.ctx_size > 0) a.insert(a.end(), {"-c", std::to_string(o.ctx_size)});
  if (slots_given) a.insert(a.end(), {"-np", std::to_string(slots)});
  if (d.kind == DrafterKind::kMtp) a.insert(a.end(), {"--spec-type", "draft-mtp"});
  if (d.kind == DrafterKind::kDflash) a.insert(a.end(), {"--spec-type", "draft-dflash"});
  if (d.kind != DrafterKind::kNone) {
    a.insert(a.end(), {"-md", d.path, "-ngld", "99", "--spec-draft-n-max", std::to_string(d.n_max)});
    if (d.p_min) a.insert(a.end(), {"--spec-draft-p-min", format_number(*d.p_min)});
  }
  if (in.model.hadamard_q4_0 == 32 && in.model.expert_count > 0) a.insert(a.end(), {"-ub", "1024"});
  if (o.threads > 0) a.insert(a.end(), {"-t", std::to_string(o.threads)});
  if (o.batch_tokens > 0) a.insert(a.end(), {"-b", std::to_string(o.batch_tokens)});
  if (!o.cache_type.empty()) a.insert(a.end(), {"-ctk", o.cache_type, "-ctv", o.cache_type});
  // A template file either way (llama-server with --jinja reads --chat-template as template text).
  if (!o.chat_template.empty()) a.insert(a.end(), {"--chat-template-file", o.chat_template});
  if (!o.chat_template_file.empty()) a.insert(a.end(), {"--chat-template-file", o.chat_template_file});
  if (o.embedding) a.push_back("--embedding");
  if (!o.pooling.empty()) a.insert(a.end(), {"--pooling", o.pooling});
  return a;
}

bool readable_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && ::access(path.c_str(), R_OK) == 0;
}

// --chat-template NAME|FILE / --chat-template-file FILE -> "builtin:NAME", "file:PATH" or "".
Result<std::string> plan_chat_template(const ServeOptions& o) {
  if (!o.chat_template_file.empty()) {
    if (!readable_file(o.chat_template_file)) {
      return make_error("--chat-template-file '" + o.chat_template_file + "' is not a readable file");
    }
    return "file:" + o.chat_template_file;
  }
  if (o.chat_template.empty()) return std::string();
  if (builtin_chat_template(o.chat_template)) return "builtin:" + o.chat_template;
  if (readable_file(o.chat_template)) return "file:" + o.chat_template;
  std::string names;
  for (const auto& n : builtin_chat_template_names()) names += (names.empty() ? "" : ", ") + n;
  return make_error("--chat-template '" + o.chat_template + "' is neither a built-in template (" + names +
                    ") nor a readable file");
}

// Variables a child gets on top of the inherited environment; one the user set is never overridden.
std::vector<std::pair<std::string, std::string>> child_env(const PlanInputs& in) {
  std::vector<std::pair<std::string, std::string>> added;
  if (in.model.hadamard_q4_0 == 32 && !in.environment.get("GGML_W4A4_TENSORS")) {
    added.emplace_back("GGML_W4A4_TENSORS", "all");
  }
  return added;
}

Result<BackendPlan> plan_backend(const PlanInputs& in, const std::string& role, const std::string& route,
                                 bool child, int64_t slots, bool slots_given, const DrafterPlan& d) {
  BackendPlan b;
  b.role = role;
  b.route = route;
  b.child = child;
  b.slots = slots;
  b.drafter = d;
  if (!child) return b;
  if (d.kind == DrafterKind::kNgram) {
    return make_error("--ngram drafting runs only on the native engine; drop --ngram, or use --device cpu or cuda without --llama-server");
  }
  if (d.fixed) {
    return make_error("--mtp-fixed is the native engine's (llama-server picks its own draft lengths); drop it, or serve without --llama-server");
  }
  if (in.options.kv_memory > 0) {
    return make_error("--kv-memory sizes the native engine's K/V pool; llama-server has no such option (drop it, or give --ctx-size)");
  }
  ONEBIT_ASSIGN_OR_RETURN(b.binary, find_llama_server(route, in.options, in.environment));
  b.argv = child_argv(in, route, slots, slots_given, d);
  b.env_added = child_env(in);
  return b;
}

}  // namespace

const char* drafter_kind_name(DrafterKind k) {
  switch (k) {
    case DrafterKind::kMtp: return "mtp";
    case DrafterKind::kDflash: return "dflash";
    case DrafterKind::kDraftModel: return "draft";
    case DrafterKind::kNgram: return "ngram";
    case DrafterKind::kNone: break;
  }
  return "none";
}

std::optional<std::string> PlanEnvironment::get(const std::string& name) const {
  for (const auto& [k, v] : vars)
    if (k == name) return v;
  return std::nullopt;
}

PlanEnvironment current_plan_environment() {
  PlanEnvironment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env.vars.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (auto path = env.get("PATH")) {
    size_t start = 0;
    while (start <= path->size()) {
      size_t colon = path->find(':', start);
      if (colon == std::string::npos) colon = path->size();
      env.path_dirs.push_back(path->substr(start, colon - start));
      start = colon + 1;
    }
  }
  env.is_executable = [](const std::string& p) {
    std::error_code ec;
    return std::filesystem::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  env.cuda_usable = make_cuda_backend(0, nullptr) != nullptr;  // a CUDA build and a GPU it can run on
  return env;
}

Result<ModelHeader> read_model_header(const GgufFile& file) {
  ModelHeader h;
  ONEBIT_ASSIGN_OR_RETURN(h.architecture, file.get_string("general.architecture"));
  if (file.find(h.architecture + ".expert_count") != nullptr) {
    ONEBIT_ASSIGN_OR_RETURN(h.expert_count, file.get_uint(h.architecture + ".expert_count"));
  }
  if (file.find(h.architecture + ".block_size") != nullptr) {
    ONEBIT_ASSIGN_OR_RETURN(uint64_t block, file.get_uint(h.architecture + ".block_size"));
    h.block_size = block;
  }
  if (file.find("onebit.hadamard_q4_0") != nullptr) {
    ONEBIT_ASSIGN_OR_RETURN(h.hadamard_q4_0, file.get_uint("onebit.hadamard_q4_0"));
  }
  return h;
}

Result<Plan> make_plan(const PlanInputs& in) {
  const ServeOptions& o = in.options;
  std::string route = o.device;
  if (route == "auto") route = in.environment.cuda_usable ? "cuda" : "cpu";
  const bool child = !is_native_route(route) || !o.llama_server.empty();
  if (route == "cuda" && !child && !in.environment.cuda_usable) {
    return make_error("--device cuda: this build has no usable CUDA backend or no NVIDIA GPU was found; use --device cpu, or run llama.cpp with --llama-server PATH");
  }
  Plan plan;
  plan.model_path = o.model_path;
  plan.alias = o.alias.empty() ? std::filesystem::path(o.model_path).stem().string() : o.alias;
  plan.host = o.host;
  plan.port = o.port;
  plan.ctx_size = o.ctx_size;
  plan.api_key_set = !o.api_key.empty();
  plan.shutdown_timeout_s = o.shutdown_timeout_s;
  plan.cors_origins = o.cors_origins;
  plan.embedding = o.embedding;
  plan.pooling = o.pooling;
  ONEBIT_ASSIGN_OR_RETURN(plan.chat_template, plan_chat_template(o));
  if (child && plan.chat_template.rfind("builtin:", 0) == 0) {
    return make_error("--chat-template " + o.chat_template + ": the built-in templates are the native engine's; for a llama-server child give a Jinja file with --chat-template-file");
  }
  if (std::find(plan.cors_origins.begin(), plan.cors_origins.end(), "*") != plan.cors_origins.end()) plan.cors_origins.clear();
  if (!child && o.child_timeout_s) {
    return make_error("--child-timeout watches llama-server children; the native engine has none (drop it)");
  }
  plan.child_timeout_s = o.child_timeout_s.value_or(plan.child_timeout_s);
  const DrafterPlan drafter = plan_drafter(in);
  if (!child) plan.engine = EnginePlan{o.threads, o.batch_tokens, o.kv_memory, o.cache_type.empty() ? "f16" : o.cache_type};
  if (!o.adaptive) {
    ONEBIT_ASSIGN_OR_RETURN(auto b, plan_backend(in, "primary", route, child, o.parallel.value_or(1),
                                                 o.parallel.has_value(), drafter));
    plan.backends.push_back(std::move(b));
    return plan;
  }
  // Adaptive: the primary with N slots and the drafter, the overflow with 16 slots and none.
  // On the Vulkan/ROCm child routes the pair is Vulkan + ROCm (the seeds' pair).
  std::string primary_route = route, overflow_route = route;
  if (route == "vulkan" || route == "rocm") {
    primary_route = "vulkan";
    overflow_route = "rocm";
  }
  ONEBIT_ASSIGN_OR_RETURN(auto p, plan_backend(in, "primary", primary_route, child, o.adaptive_at,
                                               /*slots_given=*/true, drafter));
  ONEBIT_ASSIGN_OR_RETURN(auto v, plan_backend(in, "overflow", overflow_route, child, 16,
                                               /*slots_given=*/true, DrafterPlan{}));
  plan.backends.push_back(std::move(p));
  plan.backends.push_back(std::move(v));
  return plan;
}

nlohmann::json Plan::to_json() const {
  nlohmann::json j = {{"model", model_path}, {"alias", alias},   {"host", host},
                      {"port", port},        {"ctx_size", ctx_size}, {"api_key", api_key_set},
                      {"shutdown_timeout_s", shutdown_timeout_s}};
  j["cors_origins"] = cors_origins.empty() ? std::vector<std::string>{"*"} : cors_origins;
  j["chat_template"] = chat_template.empty() ? "model" : chat_template;
  if (embedding) j["embedding"] = {{"pooling", pooling.empty() ? "model" : pooling}};
  if (std::any_of(backends.begin(), backends.end(), [](const BackendPlan& b) { return b.child; })) {
    j["child_timeout_s"] = child_timeout_s;
  }
  j["backends"] = nlohmann::json::array();
  for (const auto& b : backends) {
    nlohmann::json jb = {{"role", b.role}, {"route", b.route}, {"child", b.child}, {"slots", b.slots}};
    if (b.drafter.kind == DrafterKind::kNone) {
      jb["drafter"] = nullptr;
    } else {
      jb["drafter"] = {{"kind", drafter_kind_name(b.drafter.kind)}, {"n_max", b.drafter.n_max}};
      if (!b.drafter.path.empty()) jb["drafter"]["path"] = b.drafter.path;
      jb["drafter"]["p_min"] = b.drafter.p_min ? nlohmann::json(*b.drafter.p_min) : nlohmann::json(nullptr);
      jb["drafter"]["fixed"] = b.drafter.fixed;
    }
    if (b.child) {
      jb["binary"] = b.binary;
      jb["argv"] = b.argv;
      jb["env"] = nlohmann::json::object();
      for (const auto& [k, v] : b.env_added) jb["env"][k] = v;
    }
    j["backends"].push_back(std::move(jb));
  }
  if (engine) {
    j["engine"] = {{"threads", engine->threads},
                   {"batch_tokens", engine->batch_tokens},
                   {"kv_memory", engine->kv_memory},
                   {"cache_type", engine->cache_type},
                   {"pools", nlohmann::json::array()}};
    for (const auto& b : backends) j["engine"]["pools"].push_back({{"role", b.role}, {"slots", b.slots}});
  }
  return j;
}

}  // namespace onebit
