// Step programs: a run of a decode step's ops as one persistent kernel (included by cuda_backend.cu
// after the kernels whose bodies it runs).
//
// A decode step of a small model is bound by its number of kernels (TinyLlama: ~200 kernels a
// token at ~5 us each, against ~0.2 ms of weights at the copy bandwidth; docs/cuda.md). A step
// program runs the step's ops that have a body here (the norms, one-row panel products, q/k
// RoPE + stores, decode attention, SwiGLU, adds) as instructions of one kernel: every block of a
// grid that fits on the GPU at once works through instruction i's items (a panel product's 32-row
// groups, a norm's rows, attention's (head, row) pairs, ...), waiting before its first item of i
// for instruction i - 1's counter to hold all of i - 1's items (pg_wait, below). Each item is
// computed by the same device code as the op's own kernel (for the panel products: with 16 warps a
// group, as the one-row kernel where a group has a multiprocessor to itself), so what changes is
// launches, not math.
// Activations are read through L2 (__ldcg) everywhere in these bodies: a phase reads what
// another multiprocessor wrote in the phase before, which a read-only or L1 copy could miss.

constexpr int kPgWarps = 16, kPgThreads = kPgWarps * 32;

enum PgOp : int { kPgNorm = 1, kPgMatvec, kPgQkv, kPgAttn, kPgSwiglu, kPgAdd };

// rms_norm(a) (b == nullptr) or add_rms_norm: sum = a + b, out = rms_norm(sum) * w.
struct PgNorm {
  const float* a;
  const float* b;
  float* sum;
  const float* w;
  float* out;
  size_t a_stride, b_stride, s_stride, o_stride;  // floats
  float eps;
  int64_t d;
};
// One activation row times up to Products::kMax panel weights of one type; a work item is
// `per_item` consecutive 32-row groups (1, 2 or 4: kPgWarps / per_item warps a group).
struct PgMatvec {
  PanelSegs s;
  const float* x;
  int64_t k, n_units;
  int type;
  int per_item;
  bool x15;
};
// swiglu (out = silu(a) * b) or add (out = a + b, b broadcast from one row when bcast).
struct PgElt {
  const float* a;
  const float* b;
  float* out;
  size_t a_stride, b_stride, o_stride;
  int64_t n, d;
  bool bcast;
};
struct PgAttn {
  AttnArgs a;
  bool f16;
};

// One instruction: `units` of work, done as `work` items (norm: a row each; matvec: per_item
// groups; q/k/v: kPgWarps (row, head) pairs; attention: two (head, row) pairs; elementwise:
// kPgThreads elements); block b takes items b, b + grid, ...
struct PgInstr {
  int op;
  unsigned units, work;
  union {
    PgNorm norm;
    PgMatvec mv;
    QkvArgs qkv;
    PgAttn attn;
    PgElt elt;
  };
};

// Items of work: instruction i's counter done[i] counts its finished items. A block waits, before
// its first item of instruction i, until done[i - 1] holds all of i - 1's items: as every item of
// i - 1 started after i - 2 was complete, every earlier instruction is then complete too (each has
// at least one item), so instruction i reads and overwrites nothing still in use. A block with no
// item in an instruction goes on to the next without waiting, and a product's block loads its
// first weights before it waits (they are constant).
// Counters kPgPad apart: one to a 128-byte line (the spinning readers of one and the adders of the
// next do not share a line).
constexpr int kPgPad = 32;
__device__ __forceinline__ unsigned pg_load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void pg_wait(const unsigned* done, unsigned target) {
  if (threadIdx.x == 0 && done != nullptr) {
    while (pg_load_acquire(done) < target) __nanosleep(20);
  }
  __syncthreads();  // the acquire, then the block (cumulative: every thread's reads come after)
}
// ONEBIT_CUDA_PROGRAM_TRACE=1: per instruction kPgTrace words: this launch's first start (after
// the wait) and last end (after the count) on %globaltimer, then over launches the sums of the
// wait before it (its start - the previous one's end) and of its time (end - start), and launches.
constexpr int kPgTrace = 5;
__device__ __forceinline__ unsigned long long pg_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void pg_mark_start(unsigned long long* trace) {
  if (trace != nullptr && threadIdx.x == 0) atomicMin(trace, pg_now());
}
// An item finished: every thread's writes, then the count.
__device__ __forceinline__ void pg_signal(unsigned* done, unsigned long long* trace) {
  __syncthreads();
  if (threadIdx.x == 0) {  // a release add: the block's writes (ordered by the barrier) before the count
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(done) : "memory");
    if (trace != nullptr) atomicMax(trace + 1, pg_now());
  }
}

// rms_norm_kernel / add_rms_norm_kernel's row r (blockDim threads, the sums in double).
__device__ __noinline__ void pg_norm_row(const PgNorm& p, int64_t r, double* sh) {
  const float* ar = p.a + size_t(r) * p.a_stride;
  const float* br = p.b != nullptr ? p.b + size_t(r) * p.b_stride : nullptr;
  float* sr = p.sum + size_t(r) * p.s_stride;
  float* o = p.out + size_t(r) * p.o_stride;
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < p.d; c += blockDim.x) {
    float v = __ldcg(ar + c);
    if (br != nullptr) {
      v += __ldcg(br + c);
      sr[c] = v;
    }
    s += double(v) * v;
  }
  s = block_sum_double(s, sh);
  const double inv = 1.0 / sqrt(s / double(p.d) + double(p.eps));
  for (int64_t c = threadIdx.x; c < p.d; c += blockDim.x) {
    const float v = br != nullptr ? sr[c] : __ldcg(ar + c);  // this thread's own write or the input
    o[c] = __fmul_rn(float(double(v) * inv), p.w[c]);
  }
}

// A product's items: this block's groups (warp w: group w / (kPgWarps / per_item) of the item, its
// slice of the units w % (kPgWarps / per_item)), x staged once for all of them (every warp a part,
// as the one-row kernel stages it), the first units loaded before the wait.
template <int T>
__device__ __noinline__ void pg_matvec(const PgInstr& in, const unsigned* dep, unsigned dep_target, unsigned* done,
                                       float* smem, unsigned long long* trace) {
  using F = PanelFmt<T>;
  const PgMatvec& m = in.mv;
  if (blockIdx.x >= in.work) return;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int wpg = kPgWarps / m.per_item, sub = warp / wpg, wg = warp % wpg;
  const int64_t n_units = m.n_units, groups = m.s.first[m.s.n];
  const int64_t u0 = n_units * wg / wpg, u1 = n_units * (wg + 1) / wpg;
  float* xs = smem;
  float* xsum = xs + n_units * F::E;                    // Q4_K: n_units * 8 floats
  float* red = xsum + (T == kQ4_K ? n_units * 8 : 0);   // kPgWarps * 32 floats
  // Group g's panel base for this lane, its output, its rows.
  struct Group {
    const uint8_t* base;
    float* out;
    int64_t rows;
  };
  auto group = [&](int64_t g) {
    int seg = 0;
    while (seg + 1 < m.s.n && g >= int64_t(m.s.first[seg + 1])) ++seg;
    const int64_t j = g - m.s.first[seg];
    return Group{m.s.panel[seg] + size_t(j) * size_t(n_units) * panel_unit_bytes<T>() + 16 * lane,
                 m.s.out[seg] + j * 32, m.s.m[seg] - j * 32};
  };
  constexpr bool kX15 = T == kQ4_0 || T == kQ8_0;
  constexpr int P = F::P > 1 ? F::P : 1;
  uint4 q[P][F::CH];
  uint32_t tail[P];
  int64_t g = int64_t(blockIdx.x) * m.per_item + sub;
  if (g < groups && u0 < u1) load_panel_units<T, P>(group(g).base, u0, u1, q, tail);
  pg_wait(dep, dep_target);
  pg_mark_start(trace);
  {
    const int64_t s0 = n_units * warp / kPgWarps, s1 = n_units * (warp + 1) / kPgWarps;
    if (kX15 && m.x15) {
      stage_panel_x15(m.x, s0, s1, xs, n_units);
    } else {
      stage_panel_x<T>(m.x, m.k, s0, s1, xs, xsum);
    }
  }
  __syncthreads();
  for (unsigned item = blockIdx.x; item < in.work; item += gridDim.x) {
    g = int64_t(item) * m.per_item + sub;
    const bool has = g < groups;
    const Group gr = has ? group(g) : Group{nullptr, nullptr, 0};
    float acc = 0.f;
    if (has && u0 < u1) {
      if (item != blockIdx.x) load_panel_units<T, P>(gr.base, u0, u1, q, tail);
      if constexpr (kX15) {
        if (m.x15) {
          const X15 xq = x15_layout(xs, n_units);
          acc = panel_dots_pipelined<T>(gr.base, u0, u1, q, tail, [&](const uint4 (&qu)[F::CH], uint32_t t, int64_t u) {
            return panel_unit_dot15<T>(qu, t, xq, u);
          });
        }
      }
      if (!(kX15 && m.x15)) {
        if constexpr (F::P > 1) {
          acc = panel_dots_pipelined<T>(gr.base, u0, u1, q, tail, [&](const uint4 (&qu)[F::CH], uint32_t t, int64_t u) {
            return panel_unit_dot<T>(qu, t, xs + u * F::E, xsum + u * 8);
          });
        } else {  // the K-quants: one unit at a time (two of a super-block's pieces cost occupancy)
          for (int64_t u = u0; u < u1; ++u) {
            if (u != u0) load_panel_units<T, 1>(gr.base, u, u1, q, tail);
            acc += panel_unit_dot<T>(q[0], tail[0], xs + u * F::E, xsum + u * 8);
          }
        }
      }
    }
    red[warp * 32 + lane] = acc;
    __syncthreads();
    if (wg == 0 && has) {  // the group's slices summed in order, as the one-row kernel's warps
      float s = 0.f;
      for (int w = 0; w < wpg; ++w) s += red[(sub * wpg + w) * 32 + lane];
      if (lane < gr.rows) gr.out[lane] = s;
    }
    pg_signal(done, trace);
  }
}

// Attention's (head, row) pairs two at a time: each half of the block (kAttnWarps warps) one pair,
// meeting at its own named barrier (1 or 2; 0 is __syncthreads').
template <bool F16>
__device__ __noinline__ void pg_attention(const AttnArgs& a, unsigned units, unsigned item, float* smem) {
  static_assert(kPgWarps == 2 * kAttnWarps, "two attention groups a block");
  const int half = int(threadIdx.x) / (kAttnWarps * 32), tid = int(threadIdx.x) % (kAttnWarps * 32);
  float* mine = smem + half * (2 * kAttnWarps + kAttnWarps * kAttnMaxDim);
  float* sh_m = mine;
  float* sh_l = mine + kAttnWarps;
  auto* sh_acc = reinterpret_cast<float(*)[kAttnMaxDim]>(mine + 2 * kAttnWarps);
  auto sync = [half] { asm volatile("bar.sync %0, %1;" ::"r"(1 + half), "r"(kAttnWarps * 32) : "memory"); };
  const unsigned pair = 2 * item + unsigned(half);
  if (pair >= units) return;
  attention_item<true, F16>(a, int(pair % unsigned(a.n_heads)), int64_t(pair / unsigned(a.n_heads)), tid, sync, sh_m,
                            sh_l, sh_acc);
}

// qk_rope_store's (row, head) pairs of an item, a warp each.
__device__ __noinline__ void pg_qkv(const QkvArgs& a, unsigned units, unsigned item, float* smem) {
  const int warp = int(threadIdx.x) / 32, heads = a.n_q_heads + 2 * a.n_kv_heads;
  const unsigned it = item * kPgWarps + unsigned(warp);
  if (it < units) qkv_head(a, int64_t(it / unsigned(heads)), int(it % unsigned(heads)), smem + warp * kAttnMaxDimQkv);
}

__device__ __noinline__ void pg_elementwise(const PgElt& e, unsigned item, bool swiglu) {
  const int64_t idx = int64_t(item) * kPgThreads + threadIdx.x;
  if (idx >= e.n * e.d) return;
  const int64_t r = idx / e.d, c = idx % e.d;
  const float av = __ldcg(e.a + r * e.a_stride + c);
  const float bv = __ldcg(e.b + (e.bcast ? 0 : r) * e.b_stride + c);
  if (swiglu) {  // swiglu_kernel's
    const double silu = av / (1.0 + exp(-double(av)));
    e.out[r * e.o_stride + c] = float(silu * bv);
  } else {
    e.out[r * e.o_stride + c] = av + bv;
  }
}

// The program: instructions prog[0, n) in order (done[i * kPgPad]: instruction i's finished items; fin:
// the blocks finished, the last of them zeroing the counters for the next launch); its panel
// products all of type T (a kernel a type keeps each one's registers those of its own loop).
// Launched cooperatively (every block resident at once) with pg_grid_ blocks, no early start.
template <int T>
__global__ void __launch_bounds__(kPgThreads, 1) step_program_kernel(const PgInstr* __restrict__ prog, int n,
                                                                     unsigned* done, unsigned* fin,
                                                                     unsigned long long* trace) {
  __shared__ PgInstr buf[2];  // instruction i in buf[i % 2], i + 1 fetched while i runs
  __shared__ double sh[32];
  extern __shared__ float4 panel_smem[];  // the product's x (and attention's / q-k-v's scratch)
  float* smem = reinterpret_cast<float*>(panel_smem);
  static_assert(sizeof(PgInstr) % 4 == 0, "copied as words");
  constexpr int kWords = int(sizeof(PgInstr) / 4);
  auto fetch = [&](int i) {
    for (int w = threadIdx.x; w < kWords; w += blockDim.x) {
      reinterpret_cast<uint32_t*>(&buf[i % 2])[w] = reinterpret_cast<const uint32_t*>(prog + i)[w];
    }
  };
  fetch(0);
  __syncthreads();
  for (int i = 0; i < n; ++i) {
    if (i + 1 < n) fetch(i + 1);
    const PgInstr& in = buf[i % 2];
    const unsigned* dep = i > 0 ? done + (i - 1) * kPgPad : nullptr;
    const unsigned target = i > 0 ? prog[i - 1].work : 0;
    unsigned long long* tr = trace != nullptr ? trace + i * kPgTrace : nullptr;
    auto items = [&](auto body) {
      for (unsigned it = blockIdx.x; it < in.work; it += gridDim.x) {
        if (it == blockIdx.x) {
          pg_wait(dep, target);
          pg_mark_start(tr);
        }
        body(it);
        pg_signal(done + i * kPgPad, tr);
      }
    };
    switch (in.op) {
      case kPgNorm: items([&](unsigned r) { pg_norm_row(in.norm, r, sh); }); break;
      case kPgMatvec: pg_matvec<T>(in, dep, target, done + i * kPgPad, smem, tr); break;
      case kPgQkv: items([&](unsigned it) { pg_qkv(in.qkv, in.units, it, smem); }); break;
      case kPgAttn:
        if (in.attn.f16) {
          items([&](unsigned it) { pg_attention<true>(in.attn.a, in.units, it, smem); });
        } else {
          items([&](unsigned it) { pg_attention<false>(in.attn.a, in.units, it, smem); });
        }
        break;
      case kPgSwiglu: items([&](unsigned it) { pg_elementwise(in.elt, it, true); }); break;
      case kPgAdd: items([&](unsigned it) { pg_elementwise(in.elt, it, false); }); break;
      default: break;
    }
    __syncthreads();  // buf[i % 2] free; buf[(i + 1) % 2] written
  }
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(fin, 1u) == gridDim.x - 1) {  // every block done: no one waits on a counter
      for (int i = 0; i < n; ++i) done[i * kPgPad] = 0;
      *fin = 0;
      for (int i = 0; trace != nullptr && i < n; ++i) {
        unsigned long long* t = trace + i * kPgTrace;
        if (i > 0) t[2] += t[0] - trace[(i - 1) * kPgTrace + 1];  // two's complement: a start before the end counts negative
        t[3] += t[1] - t[0];
        t[4] += 1;
      }
      for (int i = 0; trace != nullptr && i < n; ++i) trace[i * kPgTrace] = ~0ull, trace[i * kPgTrace + 1] = 0;
      __threadfence();
    }
  }
}
