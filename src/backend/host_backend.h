// What every backend over host memory shares (the scalar reference and the CPU backend): buffers
// that own 64-byte-aligned zeroed bytes or alias caller memory (mapped weights), the memory half
// of the Backend interface over them, row addressing, and shape checks. Knows nothing of models.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/check.h"

namespace onebit {

// Host bytes: owned (64-byte aligned, zeroed) or an alias of caller memory (never written).
class HostBuffer : public BackendBuffer {
 public:
  explicit HostBuffer(uint8_t* owned) : data_(owned), owned_(true) {}
  explicit HostBuffer(std::span<const uint8_t> alias) : data_(const_cast<uint8_t*>(alias.data())) {}
  ~HostBuffer() override;
  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_;
  bool owned_ = false;
};

// Row `row` of t: its first byte, as F32 (CHECKs the type), as I32.
inline uint8_t* row_ptr(const Tensor& t, int64_t row) {
  return static_cast<HostBuffer*>(t.buffer)->data() + t.offset_bytes + static_cast<size_t>(row) * t.row_stride_bytes;
}
inline float* f32_row(const Tensor& t, int64_t row) {
  ONEBIT_CHECK(t.type == GgmlType::kF32);
  return reinterpret_cast<float*>(row_ptr(t, row));
}
inline const int32_t* i32_row(const Tensor& t, int64_t row) {
  ONEBIT_CHECK(t.type == GgmlType::kI32);
  return reinterpret_cast<const int32_t*>(row_ptr(t, row));
}
inline void check_same_shape(const Tensor& a, const Tensor& b) { ONEBIT_CHECK(a.n_rows == b.n_rows && a.n_cols == b.n_cols); }

// CHECKs the arguments of Backend::store_kv (shapes, types, every slot in range).
void check_store_kv(const Tensor& src, const Tensor& slots, const Tensor& dst);
// CHECKs the arguments of Backend::paged_attention: shapes, types, seq ids, positions within the
// block tables. Block table entries are checked where they are read (paged_kv_row).
void check_paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const Tensor& positions,
                           const Tensor& seq_ids, const Tensor& block_tables, const Tensor& out,
                           const PagedAttentionParams& p);
// The pool row of key j of sequence `seq`: block_tables[seq][j / block_size] * block_size + j %
// block_size; CHECKs that the block lies inside a pool of n_pool_rows rows.
inline int64_t paged_kv_row(const Tensor& block_tables, int32_t seq, int64_t j, int32_t block_size,
                            int64_t n_pool_rows) {
  const int64_t block = i32_row(block_tables, seq)[j / block_size];
  ONEBIT_CHECK(block >= 0 && (block + 1) * block_size <= n_pool_rows);
  return block * block_size + j % block_size;
}

// RoPE angles as llama.cpp's ggml_rope_ext computes them (rope_yarn), in double: theta = pos *
// base^(-2i/n_rot) (divided by freq_factors[i] when given), scaled by 1/factor and blended with
// the unscaled angle by YaRN's ramp; cos and sin are multiplied by mscale().
class RopeAngles {
 public:
  explicit RopeAngles(const RopeParams& p);
  double theta(int32_t pos, int i, const float* freq_factors) const;
  double mscale() const { return mscale_; }

 private:
  double freq_base_, freq_scale_, ext_factor_ = 0.0, corr_low_ = 0.0, corr_high_ = 0.0, mscale_;
  int n_rot_;
};

// The memory half of Backend over HostBuffers; ops run when enqueued. `label` names the backend
// in errors ("cpu backend").
class HostBackend : public Backend {
 public:
  explicit HostBackend(std::string label) : label_(std::move(label)) {}

  // Checks type and byte count, then aliases the bytes (no copy).
  Result<Tensor> weight_from_host(GgmlType type, int64_t n_rows, int64_t n_cols,
                                  std::span<const uint8_t> bytes) override;
  Result<Tensor> alloc(GgmlType type, int64_t n_rows, int64_t n_cols) override;
  void free(const Tensor& t) override;
  void write(const Tensor& dst, const void* src) override;
  void read(const Tensor& src, void* dst) override;
  void synchronize() override {}
  // dst = src, any type, row by row (may overlap).
  void copy(const Tensor& src, const Tensor& dst) override;
  // The rows scanned in order (the definition: backend.h).
  void argmax_rows(const Tensor& x, const Tensor& ids) override;

 private:
  std::string label_;
  std::vector<std::unique_ptr<HostBuffer>> buffers_;
};

}  // namespace onebit
