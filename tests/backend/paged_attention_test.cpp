// The paged K/V ops of both host backends: store_kv (F32 exact, F16 the bits of fp32_to_fp16),
// copy of F16 and overlapping rows, and paged_attention: the reference against hand values and
// against its own contiguous attention on scattered block layouts; the CPU backend against the
// reference (F32 and F16 pools, every ISA), bit-equal to its contiguous attention on an identity
// layout, and bit-exact batch invariance (alone vs. mixed batch, 1 and 2 threads, two layouts);
// bad slots and block tables are CHECK failures.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "cpu_test_util.h"

namespace onebit {
namespace {

using namespace cpu_test;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kExpOps = 1e-11;  // as cpu_ops_test's attention comparison

// --- host-side helpers ---

Tensor upload_bytes(Backend& be, GgmlType type, int64_t rows, int64_t cols, const void* bytes) {
  Tensor t = be.alloc(type, rows, cols).value();
  be.write(t, bytes);
  return t;
}

Tensor upload_i32_2d(Backend& be, int64_t rows, int64_t cols, const std::vector<int32_t>& values) {
  EXPECT_EQ(values.size(), size_t(rows * cols));
  return upload_bytes(be, GgmlType::kI32, rows, cols, values.data());
}

std::vector<uint16_t> to_f16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = fp32_to_fp16(x[i]);
  return out;
}

std::vector<float> round_f16(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
  return out;
}

template <class T>
std::vector<T> download_as(Backend& be, const Tensor& t) {
  std::vector<T> out(size_t(t.n_rows * t.n_cols));
  be.read(t, out.data());
  be.synchronize();
  return out;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

// --- a paged K/V pool holding several sequences ---

// Sequences of keys and values in a pool of blocks, laid out consecutively (sequence 0's blocks
// first, in order) or scattered (a shuffled permutation of the pool's blocks). Unused pool rows
// and block table entries hold NaN / -1, so reading them shows in the results.
struct PagedKv {
  int n_heads, n_kv_heads, head_dim, block_size;
  std::vector<int> seq_len;              // keys stored per sequence
  std::vector<std::vector<float>> k, v;  // per sequence [len, kv_dim]

  PagedKv(int n_heads_, int n_kv_heads_, int head_dim_, int block_size_, std::vector<int> lens, uint32_t seed)
      : n_heads(n_heads_), n_kv_heads(n_kv_heads_), head_dim(head_dim_), block_size(block_size_),
        seq_len(std::move(lens)) {
    for (size_t s = 0; s < seq_len.size(); ++s) {
      k.push_back(random_floats(size_t(seq_len[s]) * kv_dim(), seed + 2 * uint32_t(s)));
      v.push_back(random_floats(size_t(seq_len[s]) * kv_dim(), seed + 2 * uint32_t(s) + 1));
    }
  }
  int64_t kv_dim() const { return int64_t(n_kv_heads) * head_dim; }
  int64_t q_dim() const { return int64_t(n_heads) * head_dim; }
  int blocks_of(size_t s) const { return (seq_len[s] + block_size - 1) / block_size; }
  int max_blocks() const {
    int m = 1;
    for (size_t s = 0; s < seq_len.size(); ++s) m = std::max(m, blocks_of(s));
    return m;
  }
  int n_pool_blocks() const {
    int n = 3;  // spare blocks that no sequence uses
    for (size_t s = 0; s < seq_len.size(); ++s) n += blocks_of(s);
    return n;
  }
  PagedAttentionParams params() const {
    PagedAttentionParams p;
    p.n_heads = n_heads;
    p.n_kv_heads = n_kv_heads;
    p.head_dim = head_dim;
    p.scale = 1.0f / std::sqrt(float(head_dim));
    p.block_size = block_size;
    return p;
  }
  // The block tables [n_seqs, max_blocks]; layout 0 consecutive, else scattered with that seed.
  std::vector<int32_t> tables(uint32_t layout) const {
    std::vector<int32_t> order(static_cast<size_t>(n_pool_blocks()));
    std::iota(order.begin(), order.end(), 0);
    if (layout != 0) std::shuffle(order.begin(), order.end(), std::mt19937(layout));
    std::vector<int32_t> t(seq_len.size() * size_t(max_blocks()), -1);
    size_t next = 0;
    for (size_t s = 0; s < seq_len.size(); ++s) {
      for (int b = 0; b < blocks_of(s); ++b) t[s * max_blocks() + b] = order[next++];
    }
    return t;
  }
  // Pool contents [n_pool_blocks * block_size, kv_dim] for `tables` (k or v).
  std::vector<float> pool(const std::vector<int32_t>& tables, bool values) const {
    std::vector<float> out(size_t(n_pool_blocks()) * block_size * kv_dim(), kNaN);
    for (size_t s = 0; s < seq_len.size(); ++s) {
      const std::vector<float>& src = values ? v[s] : k[s];
      for (int j = 0; j < seq_len[s]; ++j) {
        const int64_t row = int64_t(tables[s * max_blocks() + j / block_size]) * block_size + j % block_size;
        std::copy_n(src.data() + j * kv_dim(), kv_dim(), out.data() + row * kv_dim());
      }
    }
    return out;
  }
  // The pool as a tensor of `type` (F32 or F16) on `be`.
  Tensor pool_tensor(Backend& be, GgmlType type, const std::vector<int32_t>& tables, bool values) const {
    const std::vector<float> f = pool(tables, values);
    const int64_t rows = int64_t(n_pool_blocks()) * block_size;
    if (type == GgmlType::kF16) return upload_bytes(be, type, rows, kv_dim(), to_f16(f).data());
    return upload_bytes(be, type, rows, kv_dim(), f.data());
  }
};

// One query row: its sequence and position.
struct QueryRow {
  int seq, pos;
};

// The query of (seq, pos): the same values whatever batch it is in.
std::vector<float> query_of(const PagedKv& kv, QueryRow r) {
  return random_floats(size_t(kv.q_dim()), 7000u + 1009u * uint32_t(r.seq) + uint32_t(r.pos));
}

// paged_attention of `rows` on `be` (pool of `type`, layout as PagedKv::tables); out [n, q_dim].
std::vector<float> run_paged(Backend& be, const PagedKv& kv, GgmlType type, uint32_t layout,
                             const std::vector<QueryRow>& rows, bool guard = false) {
  const std::vector<int32_t> tables = kv.tables(layout);
  std::vector<float> q;
  std::vector<int32_t> pos, seq;
  for (QueryRow r : rows) {
    const auto qr = query_of(kv, r);
    q.insert(q.end(), qr.begin(), qr.end());
    pos.push_back(r.pos);
    seq.push_back(r.seq);
  }
  const auto n = int64_t(rows.size());
  Tensor out = guard ? guarded(be, n, kv.q_dim()) : be.alloc(GgmlType::kF32, n, kv.q_dim()).value();
  be.paged_attention(upload(be, n, kv.q_dim(), q), kv.pool_tensor(be, type, tables, false),
                     kv.pool_tensor(be, type, tables, true), upload_i32(be, pos), upload_i32(be, seq),
                     upload_i32_2d(be, int64_t(kv.seq_len.size()), kv.max_blocks(), tables), out, kv.params());
  if (guard) {
    EXPECT_TRUE(guard_intact(be, out));
  }
  return download(be, out);
}

// attention() of one row on the sequence's contiguous K/V (rounded through F16 for F16 pools).
std::vector<float> run_contiguous(Backend& be, const PagedKv& kv, GgmlType type, QueryRow r) {
  const int64_t n_keys = r.pos + 1;
  std::vector<float> k(kv.k[r.seq].begin(), kv.k[r.seq].begin() + n_keys * kv.kv_dim());
  std::vector<float> v(kv.v[r.seq].begin(), kv.v[r.seq].begin() + n_keys * kv.kv_dim());
  if (type == GgmlType::kF16) {
    k = round_f16(k);
    v = round_f16(v);
  }
  AttentionParams p;
  p.n_heads = kv.n_heads;
  p.n_kv_heads = kv.n_kv_heads;
  p.head_dim = kv.head_dim;
  p.scale = kv.params().scale;
  p.first_pos = r.pos;
  Tensor out = be.alloc(GgmlType::kF32, 1, kv.q_dim()).value();
  be.attention(upload(be, 1, kv.q_dim(), query_of(kv, r)), upload(be, n_keys, kv.kv_dim(), k),
               upload(be, n_keys, kv.kv_dim(), v), out, p);
  return download(be, out);
}

std::vector<float> row_of(const std::vector<float>& out, int64_t i, int64_t d) {
  return std::vector<float>(out.begin() + i * d, out.begin() + (i + 1) * d);
}

// Query rows covering every stored key of every sequence: prefill-like runs and single rows.
std::vector<QueryRow> every_row(const PagedKv& kv) {
  std::vector<QueryRow> rows;
  for (int s = 0; s < int(kv.seq_len.size()); ++s) {
    for (int j = 0; j < kv.seq_len[s]; ++j) rows.push_back({s, j});
  }
  return rows;
}

struct Shape {
  int n_heads, n_kv_heads, head_dim;
};
// GQA groups 1, 4, 8 and 10 (a block of 8 and one of 2); head_dim 64, 12, 8, 33 and 128.
const Shape kShapes[] = {{4, 4, 64}, {8, 2, 64}, {8, 1, 12}, {4, 1, 12}, {2, 2, 12},
                         {8, 1, 8},  {20, 2, 128}, {6, 2, 33}};

// --- reference ---

class PagedReferenceTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_reference_backend();
};

TEST_F(PagedReferenceTest, HandValuesThroughScatteredSingleRowBlocks) {
  // 2 query heads share 1 kv head (head_dim 2), blocks of 1 row. Sequence 0's keys k0 = (0, 0)
  // and k1 = (ln 3, 0) are at pool rows 3 and 1; sequence 1's one key at row 0; row 2 is NaN.
  PagedAttentionParams p;
  p.n_heads = 2;
  p.n_kv_heads = 1;
  p.head_dim = 2;
  p.scale = 1.0f;
  p.block_size = 1;
  const float ln3 = std::log(3.0f);
  Tensor k = upload(*be, 4, 2, {7, 7, ln3, 0, kNaN, kNaN, 0, 0});
  Tensor v = upload(*be, 4, 2, {-1, -2, 5, 6, kNaN, kNaN, 1, 2});
  Tensor tables = upload_i32_2d(*be, 2, 2, {3, 1, 0, -1});
  Tensor q = upload(*be, 3, 4, {1, 0, 0, 1, /*seq 1:*/ 3, 3, 3, 3, /*seq 0 pos 0:*/ 9, 9, -9, 4});
  Tensor out = be->alloc(GgmlType::kF32, 3, 4).value();
  be->paged_attention(q, k, v, upload_i32(*be, {1, 0, 0}), upload_i32(*be, {0, 1, 0}), tables, out, p);
  const auto got = download(*be, out);
  // seq 0 pos 1, head 0: scores (0, ln 3) -> weights 1/4, 3/4; head 1: scores (0, 0) -> 1/2, 1/2
  EXPECT_NEAR(got[0], 0.25 * 1 + 0.75 * 5, 1e-6);
  EXPECT_NEAR(got[1], 0.25 * 2 + 0.75 * 6, 1e-6);
  EXPECT_NEAR(got[2], 3, 1e-6);
  EXPECT_NEAR(got[3], 4, 1e-6);
  // seq 1 sees its one key; seq 0 pos 0 sees k0 only.
  EXPECT_EQ(std::vector<float>(got.begin() + 4, got.end()), (std::vector<float>{-1, -2, -1, -2, 1, 2, 1, 2}));
}

TEST_F(PagedReferenceTest, ScatteredLayoutsEqualContiguousAttention) {
  for (const Shape& sh : kShapes) {
    for (int bs : {16, 1, 7}) {
      const PagedKv kv(sh.n_heads, sh.n_kv_heads, sh.head_dim, bs, {37, 5, 16, 1}, 100);
      const auto rows = every_row(kv);
      for (GgmlType type : {GgmlType::kF32, GgmlType::kF16}) {
        const auto scattered = run_paged(*be, kv, type, 11, rows);
        EXPECT_TRUE(bit_equal(scattered, run_paged(*be, kv, type, 0, rows)));
        for (size_t i = 0; i < rows.size(); ++i) {
          ASSERT_TRUE(bit_equal(row_of(scattered, int64_t(i), kv.q_dim()), run_contiguous(*be, kv, type, rows[i])))
              << sh.n_heads << "/" << sh.n_kv_heads << "x" << sh.head_dim << " bs " << bs << " type "
              << int(type) << " seq " << rows[i].seq << " pos " << rows[i].pos;
        }
      }
    }
  }
}

// --- CPU against the reference, every ISA ---

class PagedCpuTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  std::unique_ptr<Backend> cpu = make_cpu_backend(3, GetParam());
  std::unique_ptr<Backend> ref = make_reference_backend();
};

TEST_P(PagedCpuTest, MatchesReferenceF32AndF16Pools) {
  double worst_nmse[2] = {0, 0}, worst_abs[2] = {0, 0};  // F32, F16 pools
  for (const Shape& sh : kShapes) {
    for (int bs : {16, 1, 7}) {
      const PagedKv kv(sh.n_heads, sh.n_kv_heads, sh.head_dim, bs, {70, 3, 16, 1, 33}, 200);
      // Mixed batch: a prefill chunk of sequence 0, decode rows of the others, out of order.
      std::vector<QueryRow> rows = {{4, 32}, {1, 2}, {3, 0}};
      for (int j = 50; j < 70; ++j) rows.push_back({0, j});
      rows.push_back({2, 15});
      rows.push_back({4, 0});
      for (GgmlType type : {GgmlType::kF32, GgmlType::kF16}) {
        const auto c = run_paged(*cpu, kv, type, 5, rows, /*guard=*/true);
        const auto r = run_paged(*ref, kv, type, 5, rows);
        const double e = nmse(c, r);
        EXPECT_LE(e, kExpOps) << sh.n_heads << "/" << sh.n_kv_heads << "x" << sh.head_dim << " bs " << bs;
        const int t = type == GgmlType::kF16;
        worst_nmse[t] = std::max(worst_nmse[t], e);
        worst_abs[t] = std::max(worst_abs[t], max_abs_diff(c, r));
      }
    }
  }
  std::printf("[ paged ] cpu vs reference: f32 pool nmse %.3g max |diff| %.3g; f16 pool nmse %.3g max |diff| %.3g\n",
              worst_nmse[0], worst_abs[0], worst_nmse[1], worst_abs[1]);
}

TEST_P(PagedCpuTest, IdentityLayoutF32EqualsContiguousAttention) {
  struct Case { int n_heads, n_kv_heads, head_dim, first_pos, n, block_size; };
  for (const Case& c : {Case{4, 2, 8, 0, 7, 16}, Case{8, 1, 33, 5, 3, 7}, Case{32, 4, 64, 100, 1, 16},
                        Case{6, 6, 16, 40, 19, 1}, Case{20, 2, 128, 3, 37, 16}, Case{10, 2, 24, 0, 9, 7},
                        Case{8, 8, 12, 30, 4, 16}, Case{8, 1, 64, 200, 2, 16}}) {
    const int64_t vis = c.first_pos + c.n;
    const int n_blocks = int((vis + c.block_size - 1) / c.block_size);
    const int64_t pool_rows = int64_t(n_blocks) * c.block_size;
    const int64_t qd = int64_t(c.n_heads) * c.head_dim, kd = int64_t(c.n_kv_heads) * c.head_dim;
    const auto q = random_floats(c.n * qd, 31);
    const auto k = random_floats(pool_rows * kd, 32), v = random_floats(pool_rows * kd, 33);
    Tensor qt = upload(*cpu, c.n, qd, q), kt = upload(*cpu, pool_rows, kd, k), vt = upload(*cpu, pool_rows, kd, v);
    AttentionParams ap;
    ap.n_heads = c.n_heads;
    ap.n_kv_heads = c.n_kv_heads;
    ap.head_dim = c.head_dim;
    ap.scale = 1.0f / std::sqrt(float(c.head_dim));
    ap.first_pos = c.first_pos;
    Tensor want = cpu->alloc(GgmlType::kF32, c.n, qd).value();
    cpu->attention(qt, kt.rows(0, vis), vt.rows(0, vis), want, ap);
    PagedAttentionParams pp;
    pp.n_heads = c.n_heads;
    pp.n_kv_heads = c.n_kv_heads;
    pp.head_dim = c.head_dim;
    pp.scale = ap.scale;
    pp.block_size = c.block_size;
    std::vector<int32_t> table(static_cast<size_t>(n_blocks)), pos, seq(static_cast<size_t>(c.n), 0);
    std::iota(table.begin(), table.end(), 0);
    for (int i = 0; i < c.n; ++i) pos.push_back(c.first_pos + i);
    Tensor got = cpu->alloc(GgmlType::kF32, c.n, qd).value();
    cpu->paged_attention(qt, kt, vt, upload_i32(*cpu, pos), upload_i32(*cpu, seq),
                         upload_i32_2d(*cpu, 1, n_blocks, table), got, pp);
    EXPECT_TRUE(bit_equal(download(*cpu, got), download(*cpu, want)))
        << c.n_heads << "/" << c.n_kv_heads << "x" << c.head_dim << " bs " << c.block_size;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, PagedCpuTest, ::testing::ValuesIn(supported_isas()), isa_param_name);

// --- CPU batch invariance (bit-exact) ---

TEST(PagedCpuInvariance, RowAloneEqualsRowInMixedBatchAnyThreadsAnyLayout) {
  for (const Shape& sh : {Shape{8, 2, 64}, Shape{8, 1, 12}, Shape{4, 4, 32}}) {
    for (int bs : {16, 7}) {
      const PagedKv kv(sh.n_heads, sh.n_kv_heads, sh.head_dim, bs, {90, 40, 1, 64}, 300);
      // The probe rows, and a batch holding them among other sequences' rows and more rows of
      // their own sequence (a prefill chunk of sequence 0 around the probe at 60).
      const std::vector<QueryRow> probes = {{0, 60}, {1, 39}, {3, 0}};
      std::vector<QueryRow> batch = {{3, 63}, {2, 0}};
      for (int j = 45; j < 90; ++j) batch.push_back({0, j});
      batch.push_back({1, 39});
      batch.push_back({3, 0});
      for (GgmlType type : {GgmlType::kF32, GgmlType::kF16}) {
        std::vector<std::vector<float>> want;  // each probe alone, 1 thread, consecutive layout
        {
          auto be = make_cpu_backend(1);
          for (QueryRow r : probes) want.push_back(run_paged(*be, kv, type, 0, {r}));
        }
        for (int threads : {1, 2}) {
          auto be = make_cpu_backend(threads);
          for (uint32_t layout : {0u, 17u}) {
            const auto out = run_paged(*be, kv, type, layout, batch);
            for (size_t p = 0; p < probes.size(); ++p) {
              const auto it = std::find_if(batch.begin(), batch.end(), [&](QueryRow r) {
                return r.seq == probes[p].seq && r.pos == probes[p].pos;
              });
              const int64_t i = it - batch.begin();
              const std::string where = "threads " + std::to_string(threads) + " layout " +
                                        std::to_string(layout) + " type " + std::to_string(int(type)) +
                                        " probe " + std::to_string(p);
              EXPECT_TRUE(bit_equal(row_of(out, i, kv.q_dim()), want[p])) << where;
              EXPECT_TRUE(bit_equal(run_paged(*be, kv, type, layout, {probes[p]}), want[p])) << where << " alone";
            }
          }
        }
      }
    }
  }
}

// --- store_kv and copy, both backends ---

// Floats whose F16 rounding is delicate: ties (to even), subnormal halves and their ties, the
// underflow and overflow edges, float subnormals, infinities, NaN with a payload, signed zeros.
std::vector<float> tricky_floats() {
  std::vector<float> x = {
      1.0f + 0x1p-11f,          // tie between 1 and 1 + 2^-10: stays 1 (even)
      1.0f + 3 * 0x1p-11f,      // tie: rounds up to 1 + 2^-9 (even)
      -(1.0f + 0x1p-11f),
      1.0f + 0x1p-11f + 0x1p-23f,  // just above a tie: up
      2048.0f + 1.0f,           // tie at a spacing of 2
      0x1p-24f,                 // the smallest subnormal half
      1.5f * 0x1p-24f,          // subnormal tie: to 2^-23 (even)
      2.5f * 0x1p-24f,          // subnormal tie: to 2^-23 (even, down)
      0x1p-25f,                 // exactly half the smallest subnormal: to zero
      0x1p-25f * 1.0000001f,    // just above: to 2^-24
      -0x1p-25f,
      0x1p-14f,                 // the smallest normal half
      0x1p-14f - 0x1p-25f,      // rounds up to the smallest normal
      0x1.ffcp-15f,             // the largest subnormal half
      1e-40f,                   // a float subnormal: signed zero
      -1e-45f,
      65504.0f,                 // the largest half
      65519.99f,                // rounds down to 65504
      65520.0f,                 // rounds to infinity
      1e10f, -1e10f,
      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
      std::bit_cast<float>(0x7fc12345u), std::bit_cast<float>(0xff812345u),  // NaNs (quiet, signalling)
      0.0f, -0.0f, 0.1f, -3.14159f, 1000.7f};
  const auto r = random_floats(200, 77, 100.0f);
  x.insert(x.end(), r.begin(), r.end());
  return x;
}

TEST(PagedStoreKv, F32ExactF16BitsOfScalarConversionBothBackends) {
  const std::vector<float> tricky = tricky_floats();
  const int64_t cols = 37;  // vectors of 8 and a scalar tail
  const int64_t n = int64_t(tricky.size() + cols - 1) / cols + 1;
  std::vector<float> src(size_t(n * cols));
  for (size_t i = 0; i < src.size(); ++i) src[i] = tricky[i % tricky.size()];
  // rows go to slots out of order, with untouched rows between them
  std::vector<int32_t> slots(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) slots[size_t(i)] = int32_t((i * 5 + 3) % (2 * n));
  const int64_t dst_rows = 2 * n;
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_reference_backend());
  for (CpuIsa isa : supported_isas()) backends.push_back(make_cpu_backend(2, isa));
  for (auto& be : backends) {
    Tensor s = upload(*be, n, cols, src);
    Tensor sl = upload_i32(*be, slots);
    Tensor d32 = be->alloc(GgmlType::kF32, dst_rows, cols).value();
    Tensor d16 = be->alloc(GgmlType::kF16, dst_rows, cols).value();
    be->store_kv(s, sl, d32);
    be->store_kv(s, sl, d16);
    const auto got32 = download_as<uint32_t>(*be, d32);
    const auto got16 = download_as<uint16_t>(*be, d16);
    std::vector<bool> stored(size_t(dst_rows), false);
    for (int64_t i = 0; i < n; ++i) {
      stored[size_t(slots[size_t(i)])] = true;
      for (int64_t c = 0; c < cols; ++c) {
        const float x = src[size_t(i * cols + c)];
        const size_t at = size_t(slots[size_t(i)] * cols + c);
        ASSERT_EQ(got32[at], std::bit_cast<uint32_t>(x)) << be->name() << " " << x;
        ASSERT_EQ(got16[at], fp32_to_fp16(x)) << be->name() << " " << x << " row " << i << " col " << c;
      }
    }
    for (int64_t r = 0; r < dst_rows; ++r) {
      if (stored[size_t(r)]) continue;
      for (int64_t c = 0; c < cols; ++c) {
        EXPECT_EQ(got32[size_t(r * cols + c)], 0u) << be->name();
        EXPECT_EQ(got16[size_t(r * cols + c)], 0u) << be->name();
      }
    }
  }
  // A few conversions pinned by hand (the reference of the reference).
  EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(fp32_to_fp16(1.5f * 0x1p-24f), 0x0002);
  EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);
}

TEST(PagedCopy, F16BlocksAndOverlappingRowsBothBackends) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_reference_backend());
  backends.push_back(make_cpu_backend(2));
  for (auto& be : backends) {
    // A zeroed F16 pool; one block of 3 rows copied to another place.
    Tensor pool = be->alloc(GgmlType::kF16, 9, 5).value();
    EXPECT_EQ(download_as<uint16_t>(*be, pool), std::vector<uint16_t>(45, 0)) << be->name();
    std::vector<uint16_t> bits(45);
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = uint16_t(0x3c00 + 37 * i);
    be->write(pool, bits.data());
    be->copy(pool.rows(0, 3), pool.rows(6, 3));
    std::vector<uint16_t> want = bits;
    std::copy_n(bits.begin(), 15, want.begin() + 30);
    EXPECT_EQ(download_as<uint16_t>(*be, pool), want) << be->name();
    // Overlapping views of one F32 buffer, both directions: as if the source were read first.
    const auto f = random_floats(6 * 4, 3);
    for (int shift : {1, -1}) {
      Tensor t = upload(*be, 6, 4, f);
      be->copy(t.rows(shift > 0 ? 0 : 1, 5), t.rows(shift > 0 ? 1 : 0, 5));
      std::vector<float> expect = f;
      if (shift > 0) std::copy_n(f.begin(), 20, expect.begin() + 4);
      else std::copy_n(f.begin() + 4, 20, expect.begin());
      EXPECT_EQ(download(*be, t), expect) << be->name() << " shift " << shift;
    }
  }
}

TEST(PagedChecks, BadSlotsAndBlockTablesAreCheckFailures) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (bool use_cpu : {false, true}) {
    auto be = use_cpu ? make_cpu_backend(1) : make_reference_backend();
    Tensor src = upload(*be, 2, 4, random_floats(8, 1));
    Tensor dst = be->alloc(GgmlType::kF16, 4, 4).value();
    EXPECT_DEATH(be->store_kv(src, upload_i32(*be, {0, 4}), dst), "slot");
    EXPECT_DEATH(be->store_kv(src, upload_i32(*be, {-1, 0}), dst), "slot");
    // One block of 2 rows in a pool of 4 rows: block 2 would lie outside it.
    PagedAttentionParams p;
    p.n_heads = p.n_kv_heads = 1;
    p.head_dim = 4;
    p.block_size = 2;
    Tensor q = upload(*be, 1, 4, random_floats(4, 2)), out = be->alloc(GgmlType::kF32, 1, 4).value();
    Tensor pool = be->alloc(GgmlType::kF16, 4, 4).value();
    EXPECT_DEATH(be->paged_attention(q, pool, pool, upload_i32(*be, {1}), upload_i32(*be, {0}),
                                     upload_i32_2d(*be, 1, 1, {2}), out, p), "block");
    EXPECT_DEATH(be->paged_attention(q, pool, pool, upload_i32(*be, {2}), upload_i32(*be, {0}),
                                     upload_i32_2d(*be, 1, 1, {1}), out, p), "block_size");
    EXPECT_DEATH(be->paged_attention(q, pool, pool, upload_i32(*be, {0}), upload_i32(*be, {1}),
                                     upload_i32_2d(*be, 1, 1, {1}), out, p), "seq");
  }
}

}  // namespace
}  // namespace onebit
