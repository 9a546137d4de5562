// What the backend's kernels share (included by cuda_backend.cu and the kernel headers): the error
// bits kernels set in the device flag, and the arguments of the attention kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onebit::cuda_detail {

// Error bits the kernels set in the device flag (reported at synchronize).
inline constexpr int kErrIds = 1, kErrSlots = 2, kErrBlockTable = 4, kErrSeq = 8, kErrExperts = 16, kErrStates = 32;

// attention_kernel's and flash_attn_kernel's arguments.
struct AttnArgs {
  const float* q;
  size_t q_stride;  // floats
  const uint8_t* k;
  const uint8_t* v;
  size_t kv_stride;  // bytes
  float* out;
  size_t o_stride;  // floats
  int32_t n_heads, group, head_dim;
  float scale;
  // paged: positions, seq ids, block tables; else first_pos
  const int32_t* positions;
  const int32_t* seq_ids;
  const int32_t* tables;
  size_t table_stride;  // ints
  int64_t n_seqs, max_blocks, n_pool_rows;
  int32_t block_size;
  int32_t first_pos;
  int* err;
  int64_t n_rows;         // paged: the batch's rows
  bool skip_flash_tiles;  // paged: leave the tiles flash_attn_kernel takes (flash_tile_uniform)
};

}  // namespace onebit::cuda_detail
