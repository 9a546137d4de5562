// AMX tiles for the 32-element panel types (amx.h). Per weight tile (two panels, 16 rows) the codes
// are first unpacked once into unsigned bytes in AMX's B layout (Q8_0's signed codes + 128), then
// every group of 16 activation rows meets them block by block, in the panel kernels' arithmetic
// (panel_kernels_impl.h, whose VNNI dot products take the weights unsigned too):
//   P[16 x 16] (int32) = A[16 x 32] (activation codes, s8) * B[32 x 16] (weight codes, u8)  TDPBSUD
//   t = P * da[r] - offset * s[r]          (offset: 8 Q4_0, 16 Q5_0, 128 Q8_0, else 0)
//   acc[r][j] += dw[j] * t                 (then += mw[j] * s[r] for Q4_1 / Q5_1)
// so a row's outputs carry the same bits as from the panel kernels and from decode's matrix-vector
// kernels: a prompt, a verification step or a batch of streams computes each row as alone.
// B's layout (Intel SDM vol. 1, 18.2: "VNNI" rows of 4 bytes per column) is the panels' own:
// panel code group c holds elements 4c .. 4c+3 of each of 8 rows, one 32-bit lane per row, so B
// row c is group c of p0 then group c of p1.
// Every header is included before the target pragma so that no shared inline code is compiled for it.
#include "backend/cpu/amx.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/panels.h"
#include "base/cpu_features.h"

#include <immintrin.h>

namespace onebit::cpu {

bool amx_ready() {
  static const bool ready = [] {
    const CpuFeatures& f = cpu_features();
    if (!f.amx_int8 || !f.avx512vnni || !f.avx512bw || !f.avx512vl || !f.f16c) return false;
    // Linux (5.16+) hands out the 8 KiB tile data state per process on request.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ready;
}

bool amx_supports(GgmlType type) {
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ5_0 ||
         type == GgmlType::kQ5_1 || type == GgmlType::kQ8_0;
}

namespace {

constexpr size_t kBBytes = 512;  // one block's B tile: 8 rows of 64 bytes
constexpr size_t kScaleBytes = kAmxRows * sizeof(float);
bool has_min(GgmlType type) { return type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1; }

}  // namespace

size_t amx_scratch_bytes(GgmlType type, int64_t k) {
  // Per block: B, the 16 weight scales and (Q4_1, Q5_1) mins; then one C tile.
  return size_t(k / 32) * (kBBytes + kScaleBytes * (has_min(type) ? 2 : 1)) + kAmxRows * 64;
}

}  // namespace onebit::cpu

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"))), apply_to = function)
#else
#pragma GCC target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")
#endif

namespace onebit::cpu {
namespace {

// Tile 0: A, 16 rows x 32 bytes. Tile 1: B, 8 rows x 64 bytes. Tile 2: C, 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {32, 64, 64};
  uint8_t rows[16] = {16, 8, 16};
};
static_assert(sizeof(TileConfig) == 64);

// The tile configuration is per thread: loaded at the start of each weight tile and released at
// its end, so a thread outside a prompt product holds no tile state (decode after an AMX prompt
// measured 5-10% slower on one thread while the state stayed configured).
void configure_tiles() {
  static const TileConfig kConfig;
  _tile_loadconfig(&kConfig);
}

// Bit `bit` of every byte moved to bit 4: the fifth bit of a Q5 code (panels.h's spread layout).
inline __m256i fifth_bit(__m256i hb, int bit) {
  const __m256i m = _mm256_set1_epi8(0x10);
  return bit <= 4 ? _mm256_and_si256(_mm256_slli_epi16(hb, 4 - bit), m)
                  : _mm256_and_si256(_mm256_srli_epi16(hb, bit - 4), m);
}

// One block of one panel (8 rows; null: zeros) as unsigned codes into half `h` of the block's B
// rows, and its 8 scales (and mins) into the block's scale rows.
void unpack_block(GgmlType type, const uint8_t* blk, int h, uint8_t* b_tile, float* dw, float* mw) {
  if (blk == nullptr) {
    for (int c = 0; c < 8; ++c) std::memset(b_tile + 64 * c + 32 * h, 0, 32);
    std::memset(dw + 8 * h, 0, 8 * sizeof(float));
    if (mw != nullptr) std::memset(mw + 8 * h, 0, 8 * sizeof(float));
    return;
  }
  _mm256_storeu_ps(dw + 8 * h, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk))));
  const bool min = has_min(type);
  if (min) _mm256_storeu_ps(mw + 8 * h, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16))));
  const uint8_t* codes = blk + (min ? 32 : 16);
  if (type == GgmlType::kQ8_0) {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));  // code + 128
    for (int c = 0; c < 8; ++c) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * c));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b_tile + 64 * c + 32 * h), _mm256_xor_si256(raw, flip));
    }
    return;
  }
  const bool five = type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i hb = five ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 128)) : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * c));
    __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    if (five) {
      lo = _mm256_or_si256(lo, fifth_bit(hb, 2 * c));
      hi = _mm256_or_si256(hi, fifth_bit(hb, 2 * c + 1));
    }
    // Low nibbles: elements 4c .. 4c+3 (B row c); high: 16 + 4c .. (B row 4 + c).
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b_tile + 64 * c + 32 * h), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b_tile + 64 * (4 + c) + 32 * h), hi);
  }
}

}  // namespace

void amx_panel_tile(GgmlType type, int64_t k, const uint8_t* p0, const uint8_t* p1, const void* act,
                    size_t act_stride, int64_t n, float* out, size_t os, uint8_t* scratch) {
  configure_tiles();
  const int64_t n_blocks = k / 32;
  const bool min = has_min(type);
  const size_t panel_block = panel_bytes(type, 32);
  // Scratch: B tiles [n_blocks][512], weight scales [n_blocks][16], mins [n_blocks][16], C [16][16].
  uint8_t* b_tiles = scratch;
  float* dw = reinterpret_cast<float*>(scratch + n_blocks * kBBytes);
  float* mw = min ? dw + n_blocks * kAmxRows : nullptr;
  int32_t* c_tile = reinterpret_cast<int32_t*>(scratch + n_blocks * (kBBytes + kScaleBytes * (min ? 2 : 1)));
  for (int64_t b = 0; b < n_blocks; ++b) {
    float* mwb = min ? mw + b * kAmxRows : nullptr;
    unpack_block(type, p0 + b * panel_block, 0, b_tiles + b * kBBytes, dw + b * kAmxRows, mwb);
    unpack_block(type, p1 ? p1 + b * panel_block : nullptr, 1, b_tiles + b * kBBytes, dw + b * kAmxRows, mwb);
  }
  const int n_cols = p1 ? 16 : 8;
  const float offset = type == GgmlType::kQ4_0 ? 8.0f : type == GgmlType::kQ5_0 ? 16.0f : type == GgmlType::kQ8_0 ? 128.0f : 0.0f;
  const uint8_t* a0 = static_cast<const uint8_t*>(act);
  for (int64_t r0 = 0; r0 < n; r0 += kAmxRows) {
    __m512 acc[kAmxRows];
    for (int r = 0; r < kAmxRows; ++r) acc[r] = _mm512_setzero_ps();
    const uint8_t* a_rows = a0 + size_t(r0) * act_stride;
    for (int64_t b = 0; b < n_blocks; ++b) {
      _tile_loadd(0, a_rows + b * sizeof(ActQ8) + offsetof(ActQ8, qs), act_stride);
      _tile_loadd(1, b_tiles + b * kBBytes, 64);
      _tile_zero(2);
      _tile_dpbsud(2, 0, 1);
      _tile_stored(2, c_tile, 64);
      const __m512 dwb = _mm512_loadu_ps(dw + b * kAmxRows);
      for (int r = 0; r < kAmxRows; ++r) {
        const ActQ8& a = *reinterpret_cast<const ActQ8*>(a_rows + r * act_stride + b * sizeof(ActQ8));
        // (masked form: GCC 12 warns of the unmasked one's undefined pass-through)
        const __m512 p = _mm512_mask_cvtepi32_ps(_mm512_setzero_ps(), 0xFFFF, _mm512_loadu_si512(c_tile + 16 * r));
        const __m512 t = _mm512_fmsub_ps(p, _mm512_set1_ps(a.d), _mm512_set1_ps(offset * a.s));
        acc[r] = _mm512_fmadd_ps(dwb, t, acc[r]);
        if (min) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(mw + b * kAmxRows), _mm512_set1_ps(a.s), acc[r]);
      }
    }
    const __mmask16 cols = n_cols == 16 ? __mmask16(0xFFFF) : __mmask16(0x00FF);
    for (int r = 0; r < kAmxRows && r0 + r < n; ++r) _mm512_mask_storeu_ps(out + (r0 + r) * os, cols, acc[r]);
  }
  _tile_release();
}

}  // namespace onebit::cpu

#if defined(__clang__)
#pragma clang attribute pop
#endif
