// Search order for the default model.
#include "cli/default_model.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace onebit::cli {

Result<std::string> find_default_model() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("ONEBIT_MODEL"); env != nullptr && env[0] != '\0') {
    if (!fs::exists(env)) return make_error(std::string("$ONEBIT_MODEL names '") + env + "', which does not exist");
    return std::string(env);
  }
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / ".." / ".." / "models" / kDefaultModelFile);  // build/bin/1bit
    candidates.push_back(exe.parent_path() / ".." / "share" / "1bit" / "models" / kDefaultModelFile);
  }
  candidates.push_back(fs::current_path(ec) / "models" / kDefaultModelFile);
  candidates.push_back(fs::path("/usr/local/share/1bit/models") / kDefaultModelFile);
  std::string looked;
  for (const auto& c : candidates) {
    if (fs::exists(c, ec)) return fs::weakly_canonical(c, ec).string();
    looked += (looked.empty() ? "" : ", ") + c.lexically_normal().string();
  }
  return make_error("no model given and the default model was not found (looked in " + looked +
                    "); pass -m FILE.gguf or set $ONEBIT_MODEL");
}

}  // namespace onebit::cli
