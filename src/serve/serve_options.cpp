// `1bit serve`'s option table and their validation (values and combinations).
#include <algorithm>

#include "serve/plan.h"

namespace onebit {

const std::vector<OptionSpec>& serve_option_specs() {
  static const std::vector<OptionSpec> kSpecs = {
      {"model", 'm', "FILE", "the GGUF model to serve (default: models/onebit-20m-q8_0.gguf)"},
      {"host", 0, "H", "address to bind (default 127.0.0.1)"},
      {"port", 'p', "P", "port to listen on (default 8000)"},
      {"alias", 0, "NAME", "model name in the API (default: the file's stem)"},
      {"ctx-size", 'c', "N", "context per sequence; 0 = the model's, capped by memory (default 0)"},
      {"device", 0, "D", "auto | cpu | cuda | vulkan | rocm | hrx (default auto)"},
      {"llama-server", 0, "PATH", "llama-server binary for child routes"},
      {"parallel", 0, "N", "sequences decoded together (continuous batching)"},
      {"np", 0, "N", "same as --parallel (llama-server's spelling)"},
      {"mtp", 0, "HEAD.gguf", "speculative decoding with the model's MTP head", false, /*value_optional=*/true},
      {"dflash", 0, "DRAFT.gguf", "speculative decoding with a DFlash block drafter"},
      {"draft", 0, "MODEL.gguf", "speculative decoding with a small draft model"},
      {"ngram", 0, "", "speculative decoding by prompt n-gram lookup"},
      {"mtp-max", 0, "N", "draft length (default 3; DFlash: block_size - 1, else 16)"},
      {"mtp-p-min", 0, "P", "draft only while the drafter is at least P sure (DFlash default 0)"},
      {"mtp-fixed", 0, "", "draft --mtp-max tokens every step (no cost model; native engine): measures acceptance"},
      {"adaptive", 0, "", "two backends: a primary, and an overflow with 16 slots"},
      {"adaptive-at", 0, "N", "requests in flight on the primary before overflowing (default 8)"},
      {"api-key", 0, "KEY", "require 'Authorization: Bearer KEY'"},
      {"chat-template", 0, "NAME|FILE", "chat template: a built-in (chatml, llama3, qwen3) or a Jinja file (default: the model's; ChatML if it has none)"},
      {"chat-template-file", 0, "FILE", "chat template from a Jinja file"},
      {"cors-origin", 0, "ORIGIN", "browser origins allowed to call the API, e.g. http://localhost:3000 (repeatable; default any: '*')", true},
      {"child-timeout", 0, "S", "a llama-server child silent on /health this long gets no requests; its replies end with 504 (default 10)"},
      {"shutdown-timeout", 0, "S", "on SIGTERM, seconds replies in progress may take before they are ended (default 5)"},
      {"threads", 't', "N", "engine threads (default: every core)"},
      {"batch-tokens", 0, "N", "tokens per engine step at most (default 512)"},
      {"kv-memory", 0, "SIZE", "K/V pool size, e.g. 2G or 512M (default: ctx-size x slots)"},
      {"cache-type", 0, "T", "K/V storage: f16 or f32 (default f16)"},
      {"embedding", 0, "", "serve /v1/embeddings only (an embedding model); completions are refused"},
      {"embeddings", 0, "", "same as --embedding (llama-server's spelling)"},
      {"pooling", 0, "last|mean|cls", "how --embedding pools a prompt's hidden states (default: the model's <arch>.pooling_type, else last)"},
      {"dry-run", 0, "", "print the plan as JSON and exit"},
      {"jinja", 0, "", "accepted for llama-server compatibility (templates are always Jinja)"},
      {"metrics", 0, "", "accepted for llama-server compatibility (/metrics is always on)"},
  };
  return kSpecs;
}

namespace {

// "4G", "512M", "64K" or plain bytes -> bytes (binary units).
Result<int64_t> parse_size(const std::string& option, const std::string& text) {
  size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  std::string unit = text.substr(used);
  double scale = 1.0;
  if (unit == "K" || unit == "k" || unit == "KiB") scale = 1024.0;
  else if (unit == "M" || unit == "m" || unit == "MiB") scale = 1024.0 * 1024.0;
  else if (unit == "G" || unit == "g" || unit == "GiB") scale = 1024.0 * 1024.0 * 1024.0;
  else if (!unit.empty()) used = 0;
  if (used == 0 || !(value > 0.0) || value * scale > 1e15) {
    return make_error(option + " must be a size like 2G, 512M or a byte count; got '" + text + "'");
  }
  return static_cast<int64_t>(value * scale);
}

}  // namespace

Result<ServeOptions> parse_serve_options(const ParsedArgs& args) {
  ServeOptions o;
  if (!args.positionals().empty()) {
    return make_error("unexpected argument '" + args.positionals()[0] + "' (the model is given with -m FILE)");
  }
  o.model_path = args.get("model");
  if (o.model_path.empty()) return make_error("-m/--model FILE is required: the GGUF model to serve");
  o.host = args.get("host", o.host);
  if (o.host.empty()) return make_error("--host must not be empty");
  ONEBIT_ASSIGN_OR_RETURN(o.port, args.get_int("port", 8000, 1, 65535));
  o.alias = args.get("alias");
  ONEBIT_ASSIGN_OR_RETURN(o.ctx_size, args.get_int("ctx-size", 0, 0, int64_t{1} << 24));
  o.device = args.get("device", "auto");
  static const std::vector<std::string> kDevices = {"auto", "cpu", "cuda", "vulkan", "rocm", "hrx"};
  if (std::find(kDevices.begin(), kDevices.end(), o.device) == kDevices.end()) {
    return make_error("--device must be one of auto, cpu, cuda, vulkan, rocm, hrx; got '" + o.device + "'");
  }
  o.llama_server = args.get("llama-server");
  if (args.has("parallel") && args.has("np")) return make_error("--parallel and -np say the same; give one");
  const char* np_name = args.has("np") ? "np" : "parallel";
  if (args.has(np_name)) {
    ONEBIT_ASSIGN_OR_RETURN(int64_t n, args.get_int(np_name, 1, 1, 256));
    o.parallel = n;
  }
  o.mtp = args.has("mtp");
  o.mtp_head = args.get("mtp");
  o.dflash = args.get("dflash");
  o.draft = args.get("draft");
  o.ngram = args.has("ngram");
  if (o.mtp && !o.dflash.empty()) return make_error("--mtp and --dflash both given: pick one");
  const int n_drafters = int(o.mtp) + int(!o.dflash.empty()) + int(!o.draft.empty()) + int(o.ngram);
  if (n_drafters > 1) return make_error("more than one drafter given (--mtp, --dflash, --draft, --ngram): pick one");
  if (args.has("mtp-max")) {
    ONEBIT_ASSIGN_OR_RETURN(int64_t n, args.get_int("mtp-max", 3, 1, 64));
    o.mtp_max = n;
  }
  if (args.has("mtp-p-min")) {
    ONEBIT_ASSIGN_OR_RETURN(double p, args.get_float("mtp-p-min", 0, 0, 1));
    o.mtp_p_min = p;
  }
  if (o.ngram && o.mtp_p_min) return make_error("--mtp-p-min does not apply to --ngram: an n-gram lookup has no probabilities");
  o.mtp_fixed = args.has("mtp-fixed");
  if (n_drafters == 0 && (o.mtp_max || o.mtp_p_min || o.mtp_fixed)) {
    return make_error("--mtp-max, --mtp-p-min and --mtp-fixed tune a drafter; give one with --mtp, --dflash, --draft or --ngram");
  }
  o.adaptive = args.has("adaptive");
  ONEBIT_ASSIGN_OR_RETURN(o.adaptive_at, args.get_int("adaptive-at", 8, 1, 256));
  if (args.has("adaptive-at") && !o.adaptive) return make_error("--adaptive-at N needs --adaptive");
  ONEBIT_ASSIGN_OR_RETURN(o.shutdown_timeout_s, args.get_int("shutdown-timeout", 5, 0, 3600));
  if (args.has("child-timeout")) {
    ONEBIT_ASSIGN_OR_RETURN(o.child_timeout_s, args.get_int("child-timeout", 10, 1, 3600));
  }
  for (const std::string& origin : args.get_all("cors-origin")) {
    if (origin != "*" && origin.rfind("http://", 0) != 0 && origin.rfind("https://", 0) != 0) {
      return make_error("--cors-origin '" + origin + "' is not an origin; give scheme://host[:port] (e.g. http://localhost:3000) or '*'");
    }
    if (origin != "*" && origin.back() == '/') {
      return make_error("--cors-origin '" + origin + "' ends with '/'; an origin has no path (drop the '/')");
    }
    o.cors_origins.push_back(origin);
  }
  o.chat_template = args.get("chat-template");
  o.chat_template_file = args.get("chat-template-file");
  if (args.has("chat-template") && o.chat_template.empty()) return make_error("--chat-template must not be empty");
  if (args.has("chat-template-file") && o.chat_template_file.empty()) return make_error("--chat-template-file must not be empty");
  if (!o.chat_template.empty() && !o.chat_template_file.empty()) {
    return make_error("give one of --chat-template and --chat-template-file, not both");
  }
  o.api_key = args.get("api-key");
  if (args.has("api-key") && o.api_key.empty()) return make_error("--api-key must not be empty");
  ONEBIT_ASSIGN_OR_RETURN(o.threads, args.get_int("threads", 0, 0, 1024));
  ONEBIT_ASSIGN_OR_RETURN(o.batch_tokens, args.get_int("batch-tokens", 0, 1, 65536));
  if (args.has("kv-memory")) {
    ONEBIT_ASSIGN_OR_RETURN(o.kv_memory, parse_size("--kv-memory", args.get("kv-memory")));
  }
  o.cache_type = args.get("cache-type");
  if (args.has("cache-type") && o.cache_type != "f16" && o.cache_type != "f32") {
    return make_error("--cache-type must be f16 or f32; got '" + o.cache_type + "'" +
                      (o.cache_type == "q8_0" ? " (q8_0 K/V is not built yet)" : ""));
  }
  o.embedding = args.has("embedding") || args.has("embeddings");
  if (args.has("pooling")) {
    o.pooling = args.get("pooling");
    if (o.pooling != "last" && o.pooling != "mean" && o.pooling != "cls") {
      return make_error("--pooling must be last, mean or cls; got '" + o.pooling + "'");
    }
    if (!o.embedding) return make_error("--pooling chooses how --embedding pools; give --embedding too");
  }
  if (o.embedding && n_drafters > 0) {
    return make_error("--embedding serves embeddings, which decode nothing: drop the drafter (--mtp, --dflash, --draft, --ngram)");
  }
  o.dry_run = args.has("dry-run");
  return o;
}

}  // namespace onebit
