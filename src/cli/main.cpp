// `1bit` entry point: picks the subcommand, parses its options, runs it.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "base/version.h"
#include "cli/command.h"

namespace onebit::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      serve_command(),
      run_command(),
      info_command(),
      tokenize_command(),
      convert_command(),
      quantize_command(),
      bench_command(),
      template_command(),
      version_command(),
  };
  return kCommands;
}

int usage_error(const std::string& cmd, const std::string& message) {
  std::fprintf(stderr, "1bit %s: %s\n", cmd.c_str(), message.c_str());
  return kExitUsage;
}

int failure(const std::string& cmd, const std::string& message) {
  std::fprintf(stderr, "1bit %s: %s\n", cmd.c_str(), message.c_str());
  return kExitFailure;
}

namespace {

void print_main_help() {
  std::string out = "1bit " ONEBIT_VERSION_STRING " - serve large language models\n\nusage: 1bit COMMAND [options]\n\ncommands:\n";
  for (const auto& c : commands()) {
    out += "  " + c.name + std::string(c.name.size() < 12 ? 12 - c.name.size() : 1, ' ') + c.summary + "\n";
  }
  out += "\n'1bit COMMAND --help' lists a command's options.\n";
  std::fputs(out.c_str(), stdout);
}

void print_command_help(const Command& c) {
  std::string out = "usage: " + c.usage + "\n\n" + c.summary + "\n";
  if (!c.options.empty()) out += "\noptions:\n" + format_options(c.options);
  out += "  -h, --help  show this help\n";
  std::fputs(out.c_str(), stdout);
}

}  // namespace
}  // namespace onebit::cli

int main(int argc, char** argv) {
  using namespace onebit::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    print_main_help();
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "--version" || args[0] == "-v") args[0] = "version";
  for (const auto& c : commands()) {
    if (c.name != args[0]) continue;
    auto parsed = onebit::parse_args({args.begin() + 1, args.end()}, c.options);
    if (!parsed.ok()) {
      return usage_error(c.name, parsed.message() + " (see '1bit " + c.name + " --help')");
    }
    if (parsed->has("help")) {
      print_command_help(c);
      return kExitOk;
    }
    try {
      return c.run(*parsed);
    } catch (const std::exception& e) {
      return failure(c.name, std::string("internal error: ") + e.what());
    }
  }
  std::fprintf(stderr, "1bit: unknown command '%s' (see '1bit --help')\n", args[0].c_str());
  return kExitUsage;
}
