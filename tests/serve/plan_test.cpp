// Tests of serve planning against product.md's route table, argv order and environment rules.
#include "serve/plan.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace onebit {
namespace {

Result<ServeOptions> options_from(std::vector<std::string> argv) {
  auto parsed = parse_args(argv, serve_option_specs());
  if (!parsed.ok()) return parsed.error();
  return parse_serve_options(*parsed);
}

PlanEnvironment fake_env(std::vector<std::pair<std::string, std::string>> vars = {},
                         bool llama_server_on_path = false) {
  PlanEnvironment env;
  env.vars = std::move(vars);
  env.path_dirs = {"/usr/bin", "/opt/llama/bin"};
  env.is_executable = llama_server_on_path
                          ? +[](const std::string& p) { return p == "/opt/llama/bin/llama-server"; }
                          : +[](const std::string&) { return false; };
  return env;
}

Result<Plan> plan_for(std::vector<std::string> argv, PlanEnvironment env = fake_env(),
                      ModelHeader model = {"llama", 0, std::nullopt, 0},
                      std::optional<ModelHeader> drafter = std::nullopt) {
  auto o = options_from(std::move(argv));
  if (!o.ok()) return o.error();
  return make_plan({*o, model, drafter, std::move(env)});
}

// The value after `flag` in argv, or "<absent>".
std::string after(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  if (it == argv.end()) return "<absent>";
  if (it + 1 == argv.end()) return "<last>";
  return *(it + 1);
}

using Strings = std::vector<std::string>;

TEST(ServePlan, AutoIsNativeCpuWithoutCuda) {
  auto p = plan_for({"-m", "/models/qwen.gguf"});
  ASSERT_TRUE(p.ok()) << p.message();
  ASSERT_EQ(p->backends.size(), 1u);
  EXPECT_EQ(p->backends[0].route, "cpu");
  EXPECT_FALSE(p->backends[0].child);
  EXPECT_EQ(p->alias, "qwen");
  EXPECT_EQ(p->port, 8000);
  EXPECT_EQ(p->host, "127.0.0.1");
}

TEST(ServePlan, AutoIsCudaWhenUsable) {
  auto env = fake_env();
  env.cuda_usable = true;
  auto p = plan_for({"-m", "m.gguf"}, env);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->backends[0].route, "cuda");
  EXPECT_FALSE(p->backends[0].child);
}

TEST(ServePlan, CudaWithoutCudaIsARefusal) {
  auto p = plan_for({"-m", "m.gguf", "--device", "cuda"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.message().find("--device cpu"), std::string::npos) << p.message();
}

TEST(ServePlan, ChildRouteArgvPerRoute) {
  struct Case {
    std::string device;
    Strings route_args;
  };
  const std::vector<Case> cases = {
      {"vulkan", {"--device", "Vulkan0", "-ngl", "99", "--jinja"}},
      {"rocm", {"--device", "ROCm0", "-ngl", "99", "--jinja"}},
      {"hrx", {"--device", "HRX0", "-ngl", "99", "--jinja"}},
      {"cpu", {"-ngl", "0", "--jinja"}},
      {"cuda", {"--device", "CUDA0", "-ngl", "99", "--jinja"}},
  };
  for (const auto& c : cases) {
    auto p = plan_for({"-m", "/m.gguf", "--device", c.device, "--llama-server", "/bin/ls"});
    ASSERT_TRUE(p.ok()) << c.device << ": " << p.message();
    const auto& b = p->backends[0];
    EXPECT_TRUE(b.child);
    EXPECT_EQ(b.binary, "/bin/ls");
    Strings want = {"-m", "/m.gguf", "--host", "127.0.0.1", "--port", kPortPlaceholder};
    want.insert(want.end(), c.route_args.begin(), c.route_args.end());
    EXPECT_EQ(b.argv, want) << c.device;
  }
}

TEST(ServePlan, LlamaServerLookupOrder) {
  // --llama-server beats the environment, which beats PATH; rocm reads $ONEBIT_LEAN_SERVER.
  auto env = fake_env({{"ONEBIT_LLAMA_SERVER", "/env/llama"}, {"ONEBIT_LEAN_SERVER", "/env/lean"}}, true);
  EXPECT_EQ(plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/x"}, env)->backends[0].binary, "/x");
  EXPECT_EQ(plan_for({"-m", "m", "--device", "vulkan"}, env)->backends[0].binary, "/env/llama");
  EXPECT_EQ(plan_for({"-m", "m", "--device", "rocm"}, env)->backends[0].binary, "/env/lean");
  EXPECT_EQ(plan_for({"-m", "m", "--device", "hrx"}, fake_env({}, true))->backends[0].binary,
            "/opt/llama/bin/llama-server");
  auto none = plan_for({"-m", "m", "--device", "vulkan"});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("--llama-server PATH"), std::string::npos) << none.message();
  EXPECT_NE(none.message().find("$ONEBIT_LLAMA_SERVER"), std::string::npos) << none.message();
  auto none_rocm = plan_for({"-m", "m", "--device", "rocm"});
  EXPECT_NE(none_rocm.message().find("$ONEBIT_LEAN_SERVER"), std::string::npos) << none_rocm.message();
}

TEST(ServePlan, ModifiersInOrder) {
  auto p = plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/ls", "-c", "4096", "-np", "4",
                     "--mtp", "head.gguf", "--mtp-max", "5", "--mtp-p-min", "0.5"});
  ASSERT_TRUE(p.ok()) << p.message();
  const Strings want = {"-m", "m", "--host", "127.0.0.1", "--port", "{port}", "--device", "Vulkan0", "-ngl",
                        "99", "--jinja", "-c", "4096", "-np", "4", "--spec-type", "draft-mtp", "-md",
                        "head.gguf", "-ngld", "99", "--spec-draft-n-max", "5", "--spec-draft-p-min", "0.5"};
  EXPECT_EQ(p->backends[0].argv, want);
}

TEST(ServePlan, NoCtxNoParallelMeansNoFlags) {
  auto p = plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/ls"});
  EXPECT_EQ(after(p->backends[0].argv, "-c"), "<absent>");
  EXPECT_EQ(after(p->backends[0].argv, "-np"), "<absent>");
}

TEST(ServePlan, MtpDefaultsAndHeadInModel) {
  auto p = plan_for({"-m", "/m.gguf", "--device", "vulkan", "--llama-server", "/ls", "--mtp"});
  ASSERT_TRUE(p.ok()) << p.message();
  const auto& a = p->backends[0].argv;
  EXPECT_EQ(after(a, "--spec-type"), "draft-mtp");
  EXPECT_EQ(after(a, "-md"), "/m.gguf");
  EXPECT_EQ(after(a, "--spec-draft-n-max"), "3");
  EXPECT_EQ(after(a, "--spec-draft-p-min"), "<absent>");
}

TEST(ServePlan, DflashNMaxFromBlockSizeAndPMinZero) {
  ModelHeader drafter{"qwen3-dflash", 0, 16, 0};
  auto p = plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/ls", "--dflash", "d.gguf"}, fake_env(),
                    {"qwen3", 0, std::nullopt, 0}, drafter);
  ASSERT_TRUE(p.ok()) << p.message();
  const auto& a = p->backends[0].argv;
  EXPECT_EQ(after(a, "--spec-type"), "draft-dflash");
  EXPECT_EQ(after(a, "-md"), "d.gguf");
  EXPECT_EQ(after(a, "-ngld"), "99");
  EXPECT_EQ(after(a, "--spec-draft-n-max"), "15");
  EXPECT_EQ(after(a, "--spec-draft-p-min"), "0");
  // Without <arch>.block_size: 16. An explicit --mtp-p-min wins over 0.
  auto q = plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/ls", "--dflash", "d.gguf",
                     "--mtp-p-min", "0.25"},
                    fake_env(), {"qwen3", 0, std::nullopt, 0}, ModelHeader{"x", 0, std::nullopt, 0});
  EXPECT_EQ(after(q->backends[0].argv, "--spec-draft-n-max"), "16");
  EXPECT_EQ(after(q->backends[0].argv, "--spec-draft-p-min"), "0.25");
}

TEST(ServePlan, HadamardEnvAndMoeUbatch) {
  ModelHeader dense{"qwen3", 0, std::nullopt, 32};
  ModelHeader moe{"qwen3moe", 128, std::nullopt, 32};
  auto d = plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/ls"}, fake_env(), dense);
  EXPECT_EQ(d->backends[0].env_added, (std::vector<std::pair<std::string, std::string>>{{"GGML_W4A4_TENSORS", "all"}}));
  EXPECT_EQ(after(d->backends[0].argv, "-ub"), "<absent>");
  auto m = plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/ls"}, fake_env(), moe);
  EXPECT_EQ(after(m->backends[0].argv, "-ub"), "1024");
  EXPECT_EQ(m->backends[0].argv.back(), "1024");  // after the drafter flags: last
  // A variable the user set is never overridden.
  auto u = plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/ls"},
                    fake_env({{"GGML_W4A4_TENSORS", "none"}}), moe);
  EXPECT_TRUE(u->backends[0].env_added.empty());
  // Unrotated MoE: neither.
  auto plain = plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/ls"}, fake_env(),
                        ModelHeader{"qwen3moe", 128, std::nullopt, 0});
  EXPECT_TRUE(plain->backends[0].env_added.empty());
  EXPECT_EQ(after(plain->backends[0].argv, "-ub"), "<absent>");
}

TEST(ServePlan, AdaptiveChildPairIsVulkanAndRocm) {
  auto env = fake_env({{"ONEBIT_LLAMA_SERVER", "/v"}, {"ONEBIT_LEAN_SERVER", "/r"}});
  auto p = plan_for({"-m", "m", "--device", "vulkan", "--adaptive", "--adaptive-at", "6", "--mtp", "h.gguf"}, env);
  ASSERT_TRUE(p.ok()) << p.message();
  ASSERT_EQ(p->backends.size(), 2u);
  EXPECT_EQ(p->backends[0].role, "primary");
  EXPECT_EQ(p->backends[0].route, "vulkan");
  EXPECT_EQ(p->backends[0].binary, "/v");
  EXPECT_EQ(after(p->backends[0].argv, "-np"), "6");
  EXPECT_EQ(after(p->backends[0].argv, "--spec-type"), "draft-mtp");
  EXPECT_EQ(p->backends[1].role, "overflow");
  EXPECT_EQ(p->backends[1].route, "rocm");
  EXPECT_EQ(p->backends[1].binary, "/r");
  EXPECT_EQ(after(p->backends[1].argv, "-np"), "16");
  EXPECT_EQ(after(p->backends[1].argv, "--spec-type"), "<absent>");
}

// --embedding (or llama-server's --embeddings) and --pooling: in the plan, passed to a child as
// llama-server spells them; --pooling alone or with another value is refused with the allowed ones.
TEST(ServePlan, EmbeddingAndPooling) {
  auto native = plan_for({"-m", "m", "--embedding", "--pooling", "mean"});
  ASSERT_TRUE(native.ok()) << native.message();
  EXPECT_TRUE(native->embedding);
  EXPECT_EQ(native->pooling, "mean");
  EXPECT_EQ(native->to_json()["embedding"]["pooling"], "mean");
  auto model_default = plan_for({"-m", "m", "--embeddings"});
  ASSERT_TRUE(model_default.ok()) << model_default.message();
  EXPECT_EQ(model_default->to_json()["embedding"]["pooling"], "model");
  EXPECT_FALSE(plan_for({"-m", "m"})->to_json().contains("embedding"));
  auto child = plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/ls", "--embedding", "--pooling", "cls"});
  ASSERT_TRUE(child.ok()) << child.message();
  const Strings& argv = child->backends[0].argv;
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--embedding"), argv.end());
  EXPECT_EQ(after(argv, "--pooling"), "cls");
  auto plain_child = plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/ls", "--embedding"});
  EXPECT_EQ(after(plain_child->backends[0].argv, "--pooling"), "<absent>");
  auto bad = plan_for({"-m", "m", "--embedding", "--pooling", "rank"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message(), "--pooling must be last, mean or cls; got 'rank'");
  auto alone = plan_for({"-m", "m", "--pooling", "last"});
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.message(), "--pooling chooses how --embedding pools; give --embedding too");
}

// The native engine's sizes go through the plan (and --dry-run); a child gets llama-server's flags.
TEST(ServePlan, EngineOptionsInThePlanAndTheChildArgv) {
  auto p = plan_for({"-m", "m", "--threads", "3", "--batch-tokens", "256", "--kv-memory", "1.5G", "--cache-type", "f32"});
  ASSERT_TRUE(p.ok()) << p.message();
  ASSERT_TRUE(p->engine.has_value());
  EXPECT_EQ(p->engine->threads, 3);
  EXPECT_EQ(p->engine->batch_tokens, 256);
  EXPECT_EQ(p->engine->kv_memory, int64_t(1.5 * 1024 * 1024 * 1024));
  EXPECT_EQ(p->engine->cache_type, "f32");
  const auto j = p->to_json();
  EXPECT_EQ(j["engine"]["threads"], 3);
  EXPECT_EQ(j["engine"]["batch_tokens"], 256);
  EXPECT_EQ(j["engine"]["cache_type"], "f32");
  EXPECT_EQ(j["engine"]["pools"][0]["slots"], 1);
  auto d = plan_for({"-m", "m"});
  EXPECT_EQ(d->to_json()["engine"]["cache_type"], "f16");
  EXPECT_EQ(plan_for({"-m", "m", "--kv-memory", "512M"})->engine->kv_memory, 512 << 20);
  auto c = plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/ls", "-t", "3", "--batch-tokens", "256",
                     "--cache-type", "f32"});
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_FALSE(c->engine.has_value());
  EXPECT_FALSE(c->to_json().contains("engine"));
  EXPECT_EQ(after(c->backends[0].argv, "-t"), "3");
  EXPECT_EQ(after(c->backends[0].argv, "-b"), "256");
  EXPECT_EQ(after(c->backends[0].argv, "-ctk"), "f32");
  EXPECT_EQ(after(c->backends[0].argv, "-ctv"), "f32");
}

TEST(ServePlan, AdaptiveNativeIsTwoEngines) {
  auto p = plan_for({"-m", "m", "--adaptive", "--ngram"});
  ASSERT_TRUE(p.ok()) << p.message();
  ASSERT_EQ(p->backends.size(), 2u);
  EXPECT_EQ(p->backends[0].slots, 8);
  EXPECT_EQ(p->backends[0].drafter.kind, DrafterKind::kNgram);
  EXPECT_EQ(p->backends[1].slots, 16);
  EXPECT_EQ(p->backends[1].drafter.kind, DrafterKind::kNone);
  EXPECT_FALSE(p->backends[1].child);
  // One engine with a slot pool per backend.
  const auto pools = p->to_json()["engine"]["pools"];
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools[0]["role"], "primary");
  EXPECT_EQ(pools[1]["slots"], 16);
}

TEST(ServePlan, Refusals) {
  struct Case {
    Strings argv;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"--port", "80"}, "-m/--model FILE is required"},
      {{"-m", "m", "--mtp", "--dflash", "d"}, "pick one"},
      {{"-m", "m", "--draft", "d", "--ngram"}, "pick one"},
      {{"-m", "m", "--ngram", "--mtp-p-min", "0.5"}, "does not apply to --ngram"},
      {{"-m", "m", "--embedding", "--ngram"}, "drop the drafter"},
      {{"-m", "m", "--device", "tpu"}, "--device must be one of"},
      {{"-m", "m", "--port", "70000"}, "--port must be an integer from 1 to 65535"},
      {{"-m", "m", "-c", "-1"}, "--ctx-size"},
      {{"-m", "m", "--parallel", "0"}, "--parallel must be an integer from 1 to 256"},
      {{"-m", "m", "--mtp-max", "3"}, "tune a drafter"},
      {{"-m", "m", "--mtp-fixed"}, "tune a drafter"},
      {{"-m", "m", "--device", "vulkan", "--llama-server", "/ls", "--draft", "d", "--mtp-fixed"}, "native engine's"},
      {{"-m", "m", "--mtp", "--mtp-p-min", "1.5"}, "--mtp-p-min must be a number from 0"},
      {{"-m", "m", "--adaptive-at", "4"}, "needs --adaptive"},
      {{"-m", "m", "extra"}, "unexpected argument 'extra'"},
      {{"-m", "m", "--device", "vulkan", "--llama-server", "/ls", "--ngram"}, "native engine"},
      {{"-m", "m", "--batch-tokens", "0"}, "--batch-tokens must be an integer from 1"},
      {{"-m", "m", "--kv-memory", "lots"}, "--kv-memory must be a size like 2G"},
      {{"-m", "m", "--kv-memory", "-1G"}, "--kv-memory must be a size"},
      {{"-m", "m", "--cache-type", "q8_0"}, "q8_0 K/V is not built yet"},
      {{"-m", "m", "--cache-type", "bf16"}, "--cache-type must be f16 or f32"},
      {{"-m", "m", "--device", "vulkan", "--llama-server", "/ls", "--kv-memory", "1G"}, "llama-server has no such option"},
  };
  for (const auto& c : cases) {
    auto p = plan_for(c.argv);
    ASSERT_FALSE(p.ok()) << c.needle;
    EXPECT_NE(p.message().find(c.needle), std::string::npos) << p.message();
    EXPECT_EQ(p.message().find('\n'), std::string::npos) << "one line: " << p.message();
  }
}

TEST(ServePlan, LemonadeFlagsAccepted) {
  auto p = plan_for({"-m", "m", "--port", "9000", "--ctx-size", "2048", "--device", "cpu", "--alias", "x",
                     "--jinja", "--metrics", "-np", "2", "--host", "0.0.0.0"});
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->alias, "x");
  EXPECT_EQ(p->backends[0].slots, 2);
  EXPECT_EQ(p->to_json()["port"], 9000);
}

TEST(ServePlan, JsonHasEveryField) {
  auto p = plan_for({"-m", "m", "--device", "vulkan", "--llama-server", "/ls", "--dflash", "d", "--api-key", "k"});
  ASSERT_TRUE(p.ok());
  auto j = p->to_json();
  EXPECT_EQ(j["api_key"], true);
  EXPECT_EQ(j["backends"][0]["drafter"]["kind"], "dflash");
  EXPECT_EQ(j["backends"][0]["drafter"]["n_max"], 16);
  EXPECT_EQ(j["backends"][0]["argv"][5], "{port}");
  EXPECT_TRUE(j["backends"][0]["env"].is_object());
}

}  // namespace
}  // namespace onebit
