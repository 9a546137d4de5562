// Backends by name, for the CLI and the server: "cpu", "cuda" (or "cuda:N"), "reference".
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "base/status.h"

namespace onebit {

// The backend named `device`: "cpu" (n_threads threads), "cuda" / "cuda:N" (GPU N, default 0),
// "reference" (the scalar oracle). Errors name the unknown device or why CUDA is not usable.
Result<std::unique_ptr<Backend>> make_backend(const std::string& device, int n_threads);

}  // namespace onebit
