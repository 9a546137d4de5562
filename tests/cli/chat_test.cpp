// `1bit run` without -p: the interactive chat. Each reply must be what the (separately tested)
// completion path gives for the conversation rendered by the (Jinja2-checked) chat template, so
// the chat loop is checked for carrying the history, the template variables and the stop tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "run_command.h"
#include "testdata.h"

namespace onebit {
namespace {

using ::onebit::testing::binary_path;
using ::onebit::testing::run_command;
using nlohmann::json;

std::string model() { return testing::source_path("models/onebit-20m-q8_0.gguf"); }

std::string temp_file(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("onebit_chat_test_" + std::to_string(::getpid()) + name);
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

// Lines of input piped into `1bit run` in chat mode (greedy).
testing::CommandResult chat(const std::string& input, const std::string& extra = "") {
  const std::string in = temp_file(".in", input);
  auto r = run_command(binary_path() + " run -m " + model() + " --temp 0 -n 40 " + extra + " < " + in);
  std::filesystem::remove(in);
  return r;
}

// The reply that `1bit run -p` gives for `messages` rendered by `1bit template` (greedy, 40).
std::string completion_of(const json& messages) {
  const std::string msgs = temp_file(".json", messages.dump());
  auto rendered = run_command(binary_path() + " template --model " + model() + " --messages " + msgs);
  std::filesystem::remove(msgs);
  EXPECT_EQ(rendered.exit_code, 0) << rendered.err;
  const std::string prompt_file = temp_file(".prompt", rendered.out);
  // $(cat) would drop the prompt's trailing newlines: keep them behind an x, then cut the x.
  auto r = run_command("p=$(cat " + prompt_file + "; printf x); " + binary_path() + " run -m " + model() +
                       " --temp 0 -n 40 -p \"${p%x}\"");
  std::filesystem::remove(prompt_file);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // -p prints the prompt, then the completion and a newline.
  EXPECT_EQ(r.out.rfind(rendered.out, 0), 0u) << r.out;
  return r.out.substr(std::min(rendered.out.size(), r.out.size()));
}

class Chat : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(model())) GTEST_SKIP() << "missing " << model();
  }
};

TEST_F(Chat, RepliesMatchCompletionsOfTheRenderedConversation) {
  auto r = chat("Hello there\nWhat did I just say?\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string first = completion_of(json::array({{{"role", "user"}, {"content", "Hello there"}}}));
  ASSERT_FALSE(first.empty());
  ASSERT_EQ(r.out.rfind(first, 0), 0u) << "chat:\n" << r.out << "\ncompletion:\n" << first;
  // The second turn sees the first reply as the assistant's message (without its newline).
  const std::string second = completion_of(json::array({{{"role", "user"}, {"content", "Hello there"}},
                                                        {{"role", "assistant"}, {"content", first.substr(0, first.size() - 1)}},
                                                        {{"role", "user"}, {"content", "What did I just say?"}}}));
  EXPECT_EQ(r.out, first + second);
}

TEST_F(Chat, SystemMessageComesFirst) {
  auto r = chat("Hello there\n", "--system 'You are a pirate.'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, completion_of(json::array({{{"role", "system"}, {"content", "You are a pirate."}},
                                              {{"role", "user"}, {"content", "Hello there"}}})));
}

TEST_F(Chat, ClearStartsOverAndExitEnds) {
  auto r = chat("Hello there\n/clear\n\nHello there\n/exit\nnot read\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string first = completion_of(json::array({{{"role", "user"}, {"content", "Hello there"}}}));
  EXPECT_EQ(r.out, first + first);
}

TEST_F(Chat, MessageBeyondTheContextIsReportedAndTheChatGoesOn) {
  auto r = chat(std::string(3000, 'a') + "\nHello there\n", "-c 64");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("was not added"), std::string::npos) << r.err;
  // The long message was dropped, so the next reply is the one of a fresh conversation.
  EXPECT_EQ(r.out, "\n" + completion_of(json::array({{{"role", "user"}, {"content", "Hello there"}}})));
}

TEST_F(Chat, ReplyIsCutToTheContextLeft) {
  auto r = chat("Hello there\n", "-c 36");  // a prompt of ~10 tokens leaves fewer than -n 40
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("was not added"), std::string::npos) << r.err;
  const std::string full = completion_of(json::array({{{"role", "user"}, {"content", "Hello there"}}}));
  ASSERT_FALSE(r.out.empty());
  const std::string reply = r.out.substr(0, r.out.size() - 1);  // greedy: a prefix of the full reply
  EXPECT_LT(reply.size() + 1, full.size()) << r.out;
  EXPECT_EQ(full.rfind(reply, 0), 0u) << "chat:\n" << r.out << "\nfull:\n" << full;
}

TEST(ChatErrors, ModelWithoutTemplateIsAUsageError) {
  const std::string stories = testing::testdata_path("models/stories260K.gguf");
  if (!std::filesystem::exists(stories)) GTEST_SKIP() << "missing " << stories;
  auto r = run_command(binary_path() + " run -m " + stories + " < /dev/null");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no chat template (tokenizer.chat_template)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("-p PROMPT"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace onebit
