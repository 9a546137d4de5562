// `1bit version`: prints "1bit <version>" (Lemonade parses this line).
#include <cstdio>

#include "base/version.h"
#include "cli/command.h"

namespace onebit::cli {

Command version_command() {
  return {"version", "print the version", "1bit version", {}, [](const ParsedArgs& args) {
            if (!args.positionals().empty()) {
              return usage_error("version", "takes no arguments, got '" + args.positionals()[0] + "'");
            }
            std::printf("1bit %s\n", ONEBIT_VERSION_STRING);
            return kExitOk;
          }};
}

}  // namespace onebit::cli
