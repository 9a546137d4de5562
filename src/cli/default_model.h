// The model `1bit run` and `1bit serve` use when no -m is given: the project's own small model.
#pragma once

#include <string>

#include "base/status.h"

namespace onebit::cli {

inline constexpr const char* kDefaultModelFile = "onebit-20m-q8_0.gguf";

// $ONEBIT_MODEL when set, else models/onebit-20m-q8_0.gguf found beside the binary's source tree
// (build/bin/1bit -> ../../models/), in the working directory's models/, or in
// /usr/local/share/1bit/models/. The error lists where it looked and says to pass -m FILE.
Result<std::string> find_default_model();

}  // namespace onebit::cli
