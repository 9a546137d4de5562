// Tensor view arithmetic shared by every backend (rows, reshapes, row sizes).
#include "backend/backend.h"
#include "base/check.h"

namespace onebit {

size_t Tensor::row_bytes() const {
  const auto traits = ggml_type_traits(static_cast<uint32_t>(type));
  ONEBIT_CHECK(traits.has_value());
  ONEBIT_CHECK(n_cols % traits->block_elems == 0);
  return static_cast<size_t>(n_cols / traits->block_elems) * traits->block_bytes;
}

Tensor Tensor::rows(int64_t first, int64_t n) const {
  ONEBIT_CHECK(first >= 0 && n >= 0 && first + n <= n_rows);
  Tensor t = *this;
  t.offset_bytes += static_cast<size_t>(first) * row_stride_bytes;
  t.n_rows = n;
  return t;
}

Tensor Tensor::reshaped(int64_t rows, int64_t cols) const {
  ONEBIT_CHECK(row_stride_bytes == row_bytes() || n_rows <= 1);
  ONEBIT_CHECK(rows * cols == n_rows * n_cols);
  Tensor t = *this;
  t.n_rows = rows;
  t.n_cols = cols;
  t.row_stride_bytes = t.row_bytes();
  return t;
}

}  // namespace onebit
