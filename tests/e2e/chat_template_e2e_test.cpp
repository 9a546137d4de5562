// Chat templates from outside (issue 15): a model without one chats in ChatML, --chat-template
// picks a built-in or a file, --chat-template-file overrides the model's, content parts are joined
// with "\n". The ChatML and Llama 3 formats are the published ones; when a llama-server binary is
// given ($ONEBIT_LLAMA_SERVER), its /apply-template renders the same requests for comparison.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "e2e_util.h"
#include "run_command.h"
#include "template/builtin_templates.h"

namespace onebit::e2e {
namespace {

const json kMessages = json::array({{{"role", "system"}, {"content", "Be brief."}},
                                    {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "What is"}},
                                                                                 {{"type", "text"}, {"text", "the best book?"}}})}}});

std::string rendered(const Server& s, const json& messages = kMessages) {
  auto r = s.post("/apply-template", json{{"messages", messages}});
  EXPECT_EQ(r.status, 200) << r.raw;
  return r.body.value("prompt", "");
}

TEST(ChatTemplate, ModelWithoutOneChatsInChatml) {
  ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
  Server server;
  server.start(stories_model());
  EXPECT_EQ(rendered(server),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is\nthe best book?<|im_end|>\n"
            "<|im_start|>assistant\n");
  auto chat = server.post("/v1/chat/completions", json{{"messages", kMessages}, {"max_tokens", 4}, {"temperature", 0}});
  EXPECT_EQ(chat.status, 200) << chat.raw;
  // The built-in does not render tools: the server describes them in the system message, not dropped.
  const json tool_list = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  auto prompt = server.post("/apply-template", json{{"messages", kMessages}, {"tools", tool_list}});
  EXPECT_EQ(prompt.status, 200) << prompt.raw;
  EXPECT_NE(prompt.body.value("prompt", "").find("<tools>\n{\"function\":{\"name\":\"f\"},\"type\":\"function\"}\n</tools>"),
            std::string::npos)
      << prompt.raw;
  auto tools = server.post("/v1/chat/completions", json{{"messages", kMessages}, {"max_tokens", 1}, {"tools", tool_list}});
  EXPECT_EQ(tools.status, 200) << tools.raw;
}

TEST(ChatTemplate, BuiltinsAndFilesOverrideTheModels) {
  ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
  {
    Server server;
    server.start(stories_model(), {"--chat-template", "llama3"});
    EXPECT_EQ(rendered(server),
              "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
              "What is\nthe best book?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  }
  const std::string file = ::testing::TempDir() + "onebit_tmpl_" + std::to_string(::getpid()) + ".jinja";
  std::ofstream(file) << "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}";
  // The trained model has its own template; the file wins.
  Server server;
  server.start(onebit_model(), {"--chat-template-file", file});
  EXPECT_EQ(rendered(server), "[system:Be brief.][user:What is\nthe best book?]");
  std::filesystem::remove(file);
}

TEST(ChatTemplate, BadTemplateOptionsAreClearErrors) {
  auto bad = testing::run_command(testing::binary_path() + " serve -m " + onebit_model() + " --chat-template nope --dry-run");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("chatml, llama3, qwen3"), std::string::npos) << bad.err;
  auto both = testing::run_command(testing::binary_path() + " serve -m " + onebit_model() +
                                   " --chat-template chatml --chat-template-file x.jinja --dry-run");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("not both"), std::string::npos) << both.err;
  auto plan = testing::run_command(testing::binary_path() + " serve -m " + onebit_model() + " --chat-template qwen3 --dry-run");
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("\"chat_template\": \"builtin:qwen3\""), std::string::npos) << plan.out;
}

// llama.cpp renders the same requests the same way (only when a llama-server binary is given).
TEST(ChatTemplate, SameAsLlamaServer) {
  ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
  const char* llama = std::getenv("ONEBIT_LLAMA_SERVER");
  if (llama == nullptr) GTEST_SKIP() << "set ONEBIT_LLAMA_SERVER to a llama-server binary to compare with llama.cpp";
  for (const char* name : {"chatml", "llama3"}) {
    // llama-server renders our built-in's text with its own Jinja engine.
    const std::string file = ::testing::TempDir() + "onebit_" + name + "_" + std::to_string(::getpid()) + ".jinja";
    std::ofstream(file) << *builtin_chat_template(name);
    Server ours;
    ours.start(stories_model(), {"--chat-template", name});
    Server theirs;
    theirs.start(stories_model(), {"--llama-server", llama, "--chat-template-file", file});
    // llama.cpp drops a leading BOS from what the template renders (its tokenizer adds one); ours
    // keeps it in /apply-template and does not add a second when tokenizing.
    std::string mine = rendered(ours);
    if (mine.rfind("<s>", 0) == 0) mine = mine.substr(3);
    EXPECT_EQ(mine, rendered(theirs)) << name;
    std::filesystem::remove(file);
  }
}

}  // namespace
}  // namespace onebit::e2e
