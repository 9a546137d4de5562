// `1bit info FILE.gguf`: placeholder until the GGUF reader lands (issue 2).
#include "cli/command.h"

namespace onebit::cli {

Command info_command() {
  return {"info", "print a GGUF file's metadata, tensors and sizes", "1bit info [--json] FILE.gguf",
          {{"json", 0, "", "print JSON instead of text"}},
          [](const ParsedArgs& args) { return failure("info", "not built yet"); }};
}

}  // namespace onebit::cli
