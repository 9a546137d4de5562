// Which tensors a Hadamard-rotated file holds rotated (rotation.h).
#include "model/rotation.h"

#include <string>

namespace onebit {

bool rotated_by_hadamard(std::string_view name, int n_dims, int64_t n_cols, int32_t block) {
  if (block <= 0 || n_dims < 2 || n_cols % block != 0 || !name.ends_with(".weight")) return false;
  return name != "token_embd.weight" && name.find("ssm_conv1d") == std::string_view::npos;
}

Result<int32_t> hadamard_block(const GgufFile& f) {
  if (f.find(kHadamardKey) == nullptr) return 0;
  auto v = f.get_uint(kHadamardKey);
  if (!v.ok() || *v != 32) {
    return make_error(std::string(kHadamardKey) + " is " + (v.ok() ? std::to_string(*v) : std::string("not a number")) +
                      "; the only rotation read is 32 (Hadamard blocks of 32 along the input)");
  }
  return 32;
}

}  // namespace onebit
