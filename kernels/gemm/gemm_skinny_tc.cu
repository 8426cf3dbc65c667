// Skinny GEMM on tensor cores: C = alpha * A B + beta * C with A M x K (M <= 16), C M x N and B either
// K x N (B_NK false) or N x K (B_NK true: K contiguous, the weight W of a torch nn.Linear, C = A Wᵀ),
// all row-major with runtime leading dimensions: A[m*lda + k], C[m*ldc + n], B(k, n) = B[k*ldb + n]
// (K x N) or B[n*ldb + k] (N x K), lda >= K, ldb >= the row length, ldc >= N. T = __half or
// __nv_bfloat16, accumulated in float by mma.sync.m16n8k16. beta == 0: C is never read.
//
// Why tensor cores: B is streamed from DRAM once, so the time floor is its bytes over the
// bandwidth. On CUDA cores the 16*N*K FMAs of M = 16 take as long as that stream on an H200; an mma
// does 2048 FMAs per instruction and leaves the loop memory-bound for every M <= 16 (rows of A past
// M are zeros).
//
// Fragments without shared memory or ldmatrix (STAGES == 0), K x N. mma.m16n8k16 wants B as pairs
// along K per thread, and row-major B has N contiguous, so the sum over K is relabelled (any
// permutation of k applied to both A and B leaves the product unchanged): lane (g = lane / 4,
// t = lane % 4) loads the 8 columns c0 .. c0+7 (c0 = 8g within its warp's 64 columns) of the 4 rows
// 4t .. 4t+3 of a 16-row step of B, and lets those rows stand for the mma's k = 2t, 2t+1, 2t+8, 2t+9.
// Then
//   - mma j (j < 8) takes column c0 + j of each lane group: its B registers are the row pairs
//     (4t, 4t+1) and (4t+2, 4t+3) of that column, packed with one byte permute each;
//   - A's fragment is rows g and g+8 at k 4t .. 4t+3: one 8-byte load per row;
//   - the accumulator of mma j, logical column n = 2t or 2t+1, is C column 8n + j of the warp's 64,
//     so a lane ends with C[g][16t .. 16t+15] and C[g+8][16t .. 16t+15] (the "relabelled" layout).
//
// Fragments without shared memory, N x K (B_NK): B's rows are already the mma's "col" operand (pairs
// along K), so no permute is needed. A warp covers 64 rows of B (64 columns of C) as 8 n8 tiles; in a
// slice of SLICE = 4*KCH k (KCH = max(4, VEC) elements: a 16-byte chunk at VEC 8, else 8 bytes) lane
// (g, t) loads the KCH elements KCH*t .. KCH*t + KCH-1 of row 8j + g of each tile j, coalesced along
// the row (4 lanes read 4*KCH contiguous elements of it), and A's rows g and g+8 at the same k. Those
// KCH elements stand for the mma's k = 2t, 2t+1, 2t+8, 2t+9 of KCH / 4 successive k16 steps (step p:
// elements 4p .. 4p+3), the same relabelling for A and B, so each loaded word is a B register as is.
// mma j's accumulators then land in the natural layout (below): C column 8j + 2t + e % 2.
//
// Block: WN warps along N (64 columns each) times KW warps along K; warp w: wn = w % WN, wk = w / WN.
// Grid:  blockIdx.x = column tile of COLS = 64*WN columns; blockIdx.y = K split.
// K: split s gets rows [kb, kb + len), per = ceil(ceil(K / SPLIT) / STEP) * STEP with
// STEP = SLICE*KW*UNROLL (SLICE: 16 for K x N, 4*KCH for N x K), kb = min(K, s*per),
// len = min(K - kb, per). In step s warp wk reads the slices s*STEP + (u*KW + wk)*SLICE, u < UNROLL:
// 4*UNROLL (K x N) or 8*UNROLL (N x K) rows of B loaded independently per thread. PREFETCH == 1
// issues the next step's loads before the current step's mmas (two steps of B in registers); PREFETCH == 0
// holds one step, so a block of more warps fits twice on an SM and the other warps hide the latency
// instead (a plain read of B reached ~4.4 TB/s on an H200 only with 16 warps per SM, measured with
// experiments/stream_patterns.cu). Rows past the split and columns past N load as zeros (A and B),
// so tails need no second code path.
//
// Epilogue: every warp stores the M rows of its 16 x 64 accumulators to shared memory,
// red[wk][16][COLS] (16-byte chunks permuted against bank conflicts: red_at); the block sums the KW
// slices per output in a fixed order. SPLIT == 1: it writes C. CLUSTER > 1 (then SPLIT == CLUSTER, and
// the instance is declared with __cluster_dims__(1, CLUSTER, 1)): block r of the cluster finishes
// columns [r*W, r*W + W), W = COLS / CLUSTER; each block pushes its sums of those columns into block
// r's shared memory (distributed shared memory, kernels/common/cluster.cuh), between two phases of the
// cluster barrier, and block r adds them in rank order and writes C. Otherwise, SPLIT > 1: the block
// writes float partials to workspace[(split * M + m) * N + n] (packed: N floats a row, whatever ldc);
// the last block of the tile to arrive (atomic counter per tile, counters[blockIdx.x]) sums them in
// split order (deterministic), zeroes them, writes C and resets its counter, so workspace and
// counters are zero again after each launch.
//
// STAGES > 0: B and A go through shared memory instead, filled by the tensor memory accelerator (TMA,
// plain sm_90; the Python side offers it on Hopper for rows of A and B that are multiples of 16
// bytes, and the launcher runs it only on 16-byte aligned arrays and pitches). Thread 0 keeps STAGES
// stages of 64 rows of K in flight, each A's 16 x 64 box (rows past M are zeros) and WN boxes of B,
// 128-byte swizzled, completing on one mbarrier a stage: for K x N a 64 (k) x 64 (n) box, B fragments
// by ldmatrix.trans; for N x K a 64 (n) x 64 (k) box (B's rows as they lie), B fragments by plain
// ldmatrix. Warp (wn, wk) multiplies the k16 steps wk, wk + KW, ... of its 64 columns from shared
// memory with ldmatrix and mma.sync (the accumulators in their natural layout: mma j's element e is
// row g + 8*(e / 2), column 8j + 2t + e % 2), and the block refills a stage once all warps have
// passed it. Each split is a whole number of 64-row tiles; the TMA zero-fills rows past K and columns
// (N x K: rows) past N. The two tensor maps (with the pitches lda and ldb) come in `workspace` (A's
// at byte 0, B's at 128: autotune/ops/tma.py), so a TMA instance reduces its splits in a cluster
// (CLUSTER == SPLIT) or has none. VEC, UNROLL, POLICY and PREFETCH do not apply to it.
//
// Dynamic shared memory: KW * 16 * COLS * 4 bytes, plus 16 * COLS * 4 for the pushed sums with a
// cluster (autotune/ops/gemm/skinny_tc.py mirrors it); with TMA the larger of that (the partial sums
// reuse the stages) and 1024 + STAGES * (2048 + WN * 8192).
// Workspace: SPLIT * M * N floats and ceil(N / COLS) counters when SPLIT > 1 and CLUSTER == 1, else none.
// Preconditions the tuner's constraints and the launcher guarantee: M <= 16; VEC > 1 only where every
// row of B starts VEC-element aligned (the space asks that B's row length, N or for N x K K, be a
// multiple of VEC, the tuner measures contiguous operands, and the launcher runs vector loads only on
// 16-byte aligned arrays and leading dimensions). A needs no alignment: vector loads of A (8 bytes,
// or 16 for N x K at VEC 8) are used only when lda and A's address allow them, checked here.
#pragma once
#include "common.cuh"
#include "cluster.cuh"
#include "tma.cuh"

namespace at_skinny_tc {

using at_common::finish;
using at_common::load_stream;
using at_common::sum_partials;

template <typename T> struct Mma;
template <> struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// 32-bit word q (elements 2q and 2q+1) of the elements a lane holds of one row, whatever width they
// were loaded with (8 elements: q < 4; 4 elements: q < 2).
template <int P> __device__ __forceinline__ unsigned word(const uint4 (&p)[P], int q) {
  const uint4& v = p[q / 4];
  return q % 4 == 0 ? v.x : q % 4 == 1 ? v.y : q % 4 == 2 ? v.z : v.w;
}
template <int P> __device__ __forceinline__ unsigned word(const uint2 (&p)[P], int q) {
  return q % 2 ? p[q / 2].y : p[q / 2].x;
}
template <int P> __device__ __forceinline__ unsigned word(const unsigned (&p)[P], int q) { return p[q]; }
template <int P> __device__ __forceinline__ unsigned word(const unsigned short (&p)[P], int q) {
  return (unsigned)p[2 * q] | ((unsigned)p[2 * q + 1] << 16);
}

// Four 8x8 matrices of 16-bit elements from shared memory, lane l giving the address of row l % 8 of
// matrix l / 8; .trans hands each lane a column pair instead of a row pair.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// Byte offset of 16-byte chunk c of 128-byte row r in a TMA box written with the 128-byte swizzle
// (the box starts 1024-aligned).
__device__ __forceinline__ uint32_t swizzled(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

// The TMA mainloop (STAGES > 0, see the top of the file): this split's rows [kb, kb + len) of A and
// of the block's COLS columns of B (B_NK: COLS rows of B) through shared-memory stages in `smem` (the
// dynamic shared memory; `maps` the two tensor maps), summed into acc in the mma's natural layout
// (see emit).
template <typename T, bool B_NK, int WN, int KW, int STAGES>
__device__ __forceinline__ void tma_mainloop(float (&acc)[8][4], float* smem, const void* maps, int kb, unsigned len,
                                             int n0) {
  using namespace at_tma;
  constexpr int BK = 64;                          // rows of K a stage
  constexpr int A_BYTES = 16 * BK * 2;            // A's box: 16 rows of 128 bytes
  constexpr int ATOM_BYTES = BK * 64 * 2;         // one 64-column box of B (B_NK: 64 rows of 64 k)
  constexpr int STAGE_BYTES = A_BYTES + WN * ATOM_BYTES;
  static_assert(4 % KW == 0, "the KW warps along K share a stage's four k16 steps");
  __shared__ __align__(8) uint64_t full[STAGES];

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wn = warp % WN, wk = warp / WN;
  const uint32_t base = (smem_addr(smem) + 1023u) & ~1023u;
  const uint32_t bars = smem_addr(full);
  const void* map_a = maps;
  const void* map_b = static_cast<const unsigned char*>(maps) + MAP_BYTES;
  const int tiles = (int)((len + BK - 1) / BK);

  if (tid == 0) start_pipeline<STAGES>(maps, bars);
  __syncthreads();
  auto load = [&](int stage, int tile) {  // thread 0 only
    const uint32_t bar = bars + 8 * stage, dst = base + stage * STAGE_BYTES;
    const int k0 = kb + tile * BK;
    mbarrier_arrive_expect_tx(bar, STAGE_BYTES);
    tma_load_2d(dst, map_a, bar, k0, 0);
#pragma unroll
    for (int j = 0; j < WN; ++j) {
      if constexpr (B_NK) {
        tma_load_2d(dst + A_BYTES + j * ATOM_BYTES, map_b, bar, k0, n0 + 64 * j);
      } else {
        tma_load_2d(dst + A_BYTES + j * ATOM_BYTES, map_b, bar, n0 + 64 * j, k0);
      }
    }
  };
  if (tid == 0)
    for (int s = 0; s < STAGES && s < tiles; ++s) load(s, s);

  // Lane l addresses row l % 8 of matrix l / 8: for A rows (l % 8) + 8 (l / 8 % 2) and k chunk
  // l / 16 of the step; for K x N B's k-row (l % 8) + 8 (l / 8 % 2) and column chunk l / 16 of the
  // pair (.trans); for N x K B's row (n) (l % 8) + 8 (l / 16) of the pair of n8 tiles and k chunk
  // l / 8 % 2 of the step, so that matrices 0, 1 are b0, b1 of the first tile and 2, 3 of the second.
  const int row = (lane & 7) + 8 * ((lane >> 3) & 1), half = lane >> 4;
  const int nrow = (lane & 7) + 8 * (lane >> 4), khalf = (lane >> 3) & 1;
  int stage = 0;
  uint32_t phase = 0;
  for (int tile = 0; tile < tiles; ++tile) {
    mbarrier_wait(bars + 8 * stage, phase);
    const uint32_t sa = base + stage * STAGE_BYTES;
    const uint32_t sb = sa + A_BYTES + wn * ATOM_BYTES;
#pragma unroll
    for (int step = 0; step < 4 / KW; ++step) {
      const int kk = step * KW + wk;  // this warp's k16 step of the stage
      unsigned a[4];
      ldmatrix_x4(a, sa + swizzled(row, 2 * kk + half));
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {  // column chunks 2 jj and 2 jj + 1 of the warp's 8
        unsigned b[4];
        if constexpr (B_NK) {
          ldmatrix_x4(b, sb + swizzled(16 * jj + nrow, 2 * kk + khalf));
        } else {
          ldmatrix_x4_trans(b, sb + swizzled(16 * kk + row, 2 * jj + half));
        }
        Mma<T>::run(acc[2 * jj], a, b[0], b[1]);
        Mma<T>::run(acc[2 * jj + 1], a, b[2], b[3]);
      }
    }
    // This thread's reads of the stage (generic proxy) come before the copy engine's next writes.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (tid == 0 && tile + STAGES < tiles) load(stage, tile + STAGES);
    stage = stage == STAGES - 1 ? 0 : stage + 1;
    phase ^= stage == 0;
  }
}

// The register-streaming mainloop of K x N B (STAGES == 0, see the top of the file): this split's
// rows [kb, kb + len) of A and of the block's COLS columns of B, loaded straight into mma fragments
// and summed into acc in the relabelled layout (see emit).
template <typename T, int WN, int KW, int VEC, int UNROLL, int POLICY, int PREFETCH>
__device__ __forceinline__ void register_mainloop(float (&acc)[8][4], const T* __restrict__ A,
                                                  const T* __restrict__ B, int M, int N, int lda, int ldb, int kb,
                                                  unsigned len, int n0) {
  typedef typename at_common::Raw<VEC * 2>::type V;
  constexpr int PIECES = 8 / VEC;          // loads per row and lane
  constexpr int STEP = 16 * KW * UNROLL;   // rows of B a block reads per step
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wn = warp % WN, wk = warp / WN;
  const int g = lane / 4, t = lane % 4;
  const int cw = wn * 64 + 8 * g;          // the lane's first column, relative to n0
  const int left = N - n0 - cw;            // columns of the lane's 8 that exist: min(8, left)
  const int nsteps = (int)((len + STEP - 1) / STEP);
  const int nfull = (int)(len / STEP);  // steps wholly inside the split: their loads need no row test

  // The lane's rows: 4t .. 4t+3 of each 16-row slice; A rows g and g+8.
  const T* bptr = B + ((size_t)kb + (size_t)(wk * 16 + 4 * t)) * ldb + n0 + cw;
  const size_t nn = (size_t)ldb;
  const bool a_row0 = g < M, a_row1 = g + 8 < M;
  const T* arow0 = A + (size_t)g * lda + kb + wk * 16 + 4 * t;
  const T* arow1 = A + (size_t)(g + 8) * lda + kb + wk * 16 + 4 * t;
  const bool a_vec = lda % 4 == 0 && (reinterpret_cast<uintptr_t>(A) & 7) == 0;  // kb % 4 == 0 too

  V bnext[UNROLL][4][PIECES];
  unsigned anext[UNROLL][4];

  // A: 4 consecutive k of one row as two words (elements 4t, 4t+1 | 4t+2, 4t+3), zeros past the split.
  auto load_a = [&](const T* p, bool row_ok, bool whole, unsigned rr, unsigned& lo, unsigned& hi) {
    lo = 0u;
    hi = 0u;
    if (!row_ok) return;
    if (whole && a_vec) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
      lo = v.x;
      hi = v.y;
      return;
    }
    const unsigned short* e = reinterpret_cast<const unsigned short*>(p);
    unsigned short x[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = whole || rr + i < len ? __ldg(e + i) : (unsigned short)0;
    lo = (unsigned)x[0] | ((unsigned)x[1] << 16);
    hi = (unsigned)x[2] | ((unsigned)x[3] << 16);
  };

  auto load_step = [&](int s) {
    const bool whole = s < nfull;  // block-uniform
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const unsigned slice = (unsigned)s * STEP + (unsigned)(u * KW) * 16;  // of warp 0; + wk*16 in bptr
      const unsigned rr = slice + wk * 16 + 4 * t;                          // the lane's first row
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool in = whole || rr + i < len;
        const T* row = bptr + (size_t)(slice + i) * nn;
#pragma unroll
        for (int p = 0; p < PIECES; ++p) {
          V v{};
          if (in && p * VEC < left) v = load_stream<POLICY>(reinterpret_cast<const V*>(row) + p);
          bnext[u][i][p] = v;
        }
      }
      load_a(arow0 + slice, a_row0, whole, rr, anext[u][0], anext[u][2]);
      load_a(arow1 + slice, a_row1, whole, rr, anext[u][1], anext[u][3]);
    }
  };

  if (PREFETCH && nsteps > 0) load_step(0);
  for (int s = 0; s < nsteps; ++s) {
    if (!PREFETCH) load_step(s);  // then bcur is bnext: one set of registers
    V bcur[UNROLL][4][PIECES];
    unsigned acur[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int p = 0; p < PIECES; ++p) bcur[u][i][p] = bnext[u][i][p];
#pragma unroll
      for (int r = 0; r < 4; ++r) acur[u][r] = anext[u][r];
    }
    if (PREFETCH && s + 1 < nsteps) load_step(s + 1);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        // Column j of the lane's 8: rows (4t, 4t+1) in b0 and (4t+2, 4t+3) in b1, lower k in the low half.
        const unsigned sel = j % 2 ? 0x7632u : 0x5410u;
        const unsigned b0 = __byte_perm(word(bcur[u][0], j / 2), word(bcur[u][1], j / 2), sel);
        const unsigned b1 = __byte_perm(word(bcur[u][2], j / 2), word(bcur[u][3], j / 2), sel);
        Mma<T>::run(acc[j], acur[u], b0, b1);
      }
    }
  }
}

// The register-streaming mainloop of N x K B (B_NK, STAGES == 0, see the top of the file): this
// split's k in [kb, kb + len) of A and of the block's COLS rows of B, loaded straight into mma
// fragments (B's words need no permute) and summed into acc in the natural layout (see emit).
template <typename T, int WN, int KW, int VEC, int UNROLL, int POLICY, int PREFETCH>
__device__ __forceinline__ void register_mainloop_nt(float (&acc)[8][4], const T* __restrict__ A,
                                                     const T* __restrict__ B, int M, int N, int lda, int ldb, int kb,
                                                     unsigned len, int n0) {
  typedef typename at_common::Raw<VEC * 2>::type V;
  constexpr int KCH = VEC > 4 ? VEC : 4;   // elements along K a lane holds of each row per slice
  constexpr int PIECES = KCH / VEC;        // loads per row, lane and slice
  constexpr int SLICE = 4 * KCH;           // k of a slice: KCH / 4 k16 steps of the mma
  constexpr int STEP = SLICE * KW * UNROLL;  // k a block reads per step
  typedef typename at_common::Raw<KCH * 2>::type VA;  // KCH elements of A in one load
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wn = warp % WN, wk = warp / WN;
  const int g = lane / 4, t = lane % 4;
  const int rw = wn * 64 + g;              // the lane's first row of B relative to n0: rows rw + 8j, j < 8
  const int left = N - n0 - rw;            // row rw + 8j exists where 8j < left
  const int nsteps = (int)((len + STEP - 1) / STEP);
  const int nfull = (int)(len / STEP);  // steps wholly inside the split: their loads need no k test

  // The lane's k: KCH*t .. KCH*t + KCH-1 of each slice; B rows rw + 8j; A rows g and g+8.
  const size_t ld = (size_t)ldb;
  const T* bptr = B + ((size_t)n0 + rw) * ld + kb + wk * SLICE + KCH * t;
  const bool a_row0 = g < M, a_row1 = g + 8 < M;
  const T* arow0 = A + (size_t)g * lda + kb + wk * SLICE + KCH * t;
  const T* arow1 = A + (size_t)(g + 8) * lda + kb + wk * SLICE + KCH * t;
  // kb and the lane's offset are multiples of KCH too.
  const bool a_vec = lda % KCH == 0 && (reinterpret_cast<uintptr_t>(A) & (2 * KCH - 1)) == 0;

  V bnext[UNROLL][8][PIECES];
  unsigned anext[UNROLL][2][KCH / 2];

  // A: KCH consecutive k of one row as KCH / 2 words, zeros past the split.
  auto load_a = [&](const T* p, bool row_ok, bool whole, unsigned kk, unsigned (&w)[KCH / 2]) {
#pragma unroll
    for (int q = 0; q < KCH / 2; ++q) w[q] = 0u;
    if (!row_ok) return;
    if (a_vec && (whole || kk + KCH <= len)) {
      const VA v[1] = {__ldg(reinterpret_cast<const VA*>(p))};
#pragma unroll
      for (int q = 0; q < KCH / 2; ++q) w[q] = word(v, q);
      return;
    }
    const unsigned short* e = reinterpret_cast<const unsigned short*>(p);
    unsigned short x[KCH];
#pragma unroll
    for (int i = 0; i < KCH; ++i) x[i] = whole || kk + i < len ? __ldg(e + i) : (unsigned short)0;
#pragma unroll
    for (int q = 0; q < KCH / 2; ++q) w[q] = word(x, q);
  };

  auto load_step = [&](int s) {
    const bool whole = s < nfull;  // block-uniform
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const unsigned slice = (unsigned)s * STEP + (unsigned)(u * KW) * SLICE;  // of warp 0; + wk*SLICE in bptr
      const unsigned kk = slice + wk * SLICE + KCH * t;                        // the lane's first k
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const T* row = bptr + (size_t)(8 * j) * ld + slice;
#pragma unroll
        for (int p = 0; p < PIECES; ++p) {
          V v{};
          if (8 * j < left && (whole || kk + p * VEC < len))
            v = load_stream<POLICY>(reinterpret_cast<const V*>(row) + p);
          bnext[u][j][p] = v;
        }
      }
      load_a(arow0 + slice, a_row0, whole, kk, anext[u][0]);
      load_a(arow1 + slice, a_row1, whole, kk, anext[u][1]);
    }
  };

  if (PREFETCH && nsteps > 0) load_step(0);
  for (int s = 0; s < nsteps; ++s) {
    if (!PREFETCH) load_step(s);  // then bcur is bnext: one set of registers
    V bcur[UNROLL][8][PIECES];
    unsigned acur[UNROLL][2][KCH / 2];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int p = 0; p < PIECES; ++p) bcur[u][j][p] = bnext[u][j][p];
#pragma unroll
      for (int q = 0; q < KCH / 2; ++q) acur[u][0][q] = anext[u][0][q], acur[u][1][q] = anext[u][1][q];
    }
    if (PREFETCH && s + 1 < nsteps) load_step(s + 1);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int p = 0; p < KCH / 4; ++p) {  // k16 step p of the slice: the lane's elements 4p .. 4p+3
        // Rows g and g+8 at the mma's k (2t, 2t+1) and (2t+8, 2t+9).
        const unsigned a[4] = {acur[u][0][2 * p], acur[u][1][2 * p], acur[u][0][2 * p + 1], acur[u][1][2 * p + 1]};
#pragma unroll
        for (int j = 0; j < 8; ++j) Mma<T>::run(acc[j], a, word(bcur[u][j], 2 * p), word(bcur[u][j], 2 * p + 1));
      }
    }
  }
}

// Hands the lane's accumulators to sink(row, column, values): column counted from the block's first,
// values a float4 (the relabelled layout of the K x N register mainloop) or float2 (the natural
// layout of the TMA and N x K mainloops) of consecutive columns.
template <bool NATURAL, typename Sink>
__device__ __forceinline__ void emit(const float (&acc)[8][4], int wn, Sink sink) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // row g, then g + 8
    if constexpr (NATURAL) {
      // mma j's element e is row g + 8*(e / 2), column 8j + 2t + e % 2 of the warp's 64.
#pragma unroll
      for (int j = 0; j < 8; ++j) sink(g + 8 * h, wn * 64 + 8 * j + 2 * t, make_float2(acc[j][2 * h], acc[j][2 * h + 1]));
    } else {
      // mma j's element e is row g + 8*(e / 2), column 16t + 8*(e % 2) + j of the warp's 64.
#pragma unroll
      for (int half = 0; half < 2; ++half)  // columns 16t .. 16t+7, then 16t+8 .. 16t+15
#pragma unroll
        for (int q = 0; q < 2; ++q)
          sink(g + 8 * h, wn * 64 + 16 * t + 8 * half + 4 * q,
               make_float4(acc[4 * q][2 * h + half], acc[4 * q + 1][2 * h + half], acc[4 * q + 2][2 * h + half],
                           acc[4 * q + 3][2 * h + half]));
    }
  }
}

// Float offset of (row, col) in a warp's 16 x COLS slice of the partial sums. The 16-byte chunks of
// a row are permuted (chunk bits 0 and 1 XOR column bit 5 and row bit 0): a warp's float4 stores in
// the register layout (the 8 lanes of a phase: rows g, g + 1 x columns 16t + c) then hit 8 different
// 16-byte banks, where the plain layout puts t and t + 2 and both rows on the same ones (4-way
// conflicts; at 16 x 4096^2 on an H200 the permutation alone took 1.1 us off 14.2), and any 8
// consecutive chunks of a row still lie in 8 different banks for the readers.
template <int COLS> __device__ __forceinline__ int red_at(int row, int col) {
  const int chunk = (col >> 2) ^ ((col >> 5) & 1) ^ ((row & 1) << 1);
  return row * COLS + chunk * 4 + (col & 3);
}

template <typename T, bool B_NK, int WN, int KW, int VEC, int UNROLL, int POLICY, int CLUSTER, int PREFETCH,
          int STAGES>
__device__ __forceinline__ void skinny_tc_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                               int M, int N, int K, int lda, int ldb, int ldc, float alpha,
                                               float beta, float* __restrict__ workspace,
                                               unsigned int* __restrict__ counters) {
  static_assert(sizeof(T) == 2, "tensor-core skinny GEMM is for 16-bit types");
  static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "1 to 8 elements per load");
  constexpr int BLOCK = WN * KW * 32;
  constexpr int COLS = WN * 64;            // columns of a block tile
  constexpr int SLICE = B_NK ? 4 * (VEC > 4 ? VEC : 4) : 16;  // k of a warp's slice (register mainloops)
  constexpr int STEP = STAGES > 0 ? 64 : SLICE * KW * UNROLL;  // rows of K a block reads per step
  static_assert(BLOCK <= 1024, "at most 1024 threads");

  extern __shared__ __align__(16) float red[];
  __shared__ bool last_block;

  const int tid = threadIdx.x, wn = tid / 32 % WN, wk = tid / 32 / WN;
  const int n0 = blockIdx.x * COLS;        // < N; n0 + COLS may not fit an int, so compare offsets

  // This split's rows [kb, kb + len), a whole number of steps except at the end of K.
  const int splits = gridDim.y;
  long long per = ((long long)K + splits - 1) / splits;
  per = (per + STEP - 1) / STEP * STEP;
  const int kb = (int)min((long long)K, (long long)blockIdx.y * per);
  const unsigned len = (unsigned)min((long long)K - kb, per);
  const int rows = min(M, 16);

  float acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  // With a cluster, each block arrives once its shared memory may take the other blocks' pushes:
  // at once when B streams through registers, after the last stage with TMA.
  if constexpr (STAGES > 0) {
    tma_mainloop<T, B_NK, WN, KW, STAGES>(acc, red, workspace, kb, len, n0);
    __syncthreads();  // every warp is done with the stages: the partial sums may reuse them
    if constexpr (CLUSTER > 1) at_cluster::arrive();
  } else {
    if constexpr (CLUSTER > 1) at_cluster::arrive_relaxed();
    if constexpr (B_NK) {
      register_mainloop_nt<T, WN, KW, VEC, UNROLL, POLICY, PREFETCH>(acc, A, B, M, N, lda, ldb, kb, len, n0);
    } else {
      register_mainloop<T, WN, KW, VEC, UNROLL, POLICY, PREFETCH>(acc, A, B, M, N, lda, ldb, kb, len, n0);
    }
  }
  // red[wk] = this warp's partial sums; rows past M are not stored, nothing reads them.
  emit<(STAGES > 0 || B_NK)>(acc, wn, [&](int row, int col, auto v) {
    if (row < rows) *reinterpret_cast<decltype(v)*>(red + wk * 16 * COLS + red_at<COLS>(row, col)) = v;
  });
  __syncthreads();

  if constexpr (CLUSTER > 1) {
    // The block's sums, 4 columns at a time, go into the shared memory of the block that finishes
    // them: block r of the cluster owns columns [r*W, r*W + W) and receives them after red, in
    // land[sender's rank][row][W]. Pushing the block sums (4 KB a block at 16 x 64) beats pushing
    // every warp's (16 KB): the network between the SMs is the narrower path.
    constexpr int W = COLS / CLUSTER;                    // a multiple of 8
    static_assert(W % 4 == 0, "whole chunks of 4 columns a block");
    constexpr int CPR = COLS / 4;                        // chunks of 4 columns a row
    constexpr int PER = (16 * CPR + BLOCK - 1) / BLOCK;  // chunks a thread, at most
    float* land = red + KW * 16 * COLS;
    const uint32_t rank = at_cluster::block_rank();
    float4 sums[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {  // every load before the first push: they stay in flight together
      const int q = tid + i * BLOCK, r = q / CPR, c = 4 * (q % CPR);
      float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < rows) {
#pragma unroll
        for (int w = 0; w < KW; ++w) {
          const float4 v = *reinterpret_cast<const float4*>(red + w * 16 * COLS + red_at<COLS>(r, c));
          sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
        }
      }
      sums[i] = sum;
    }
    at_cluster::wait();  // every block of the cluster can take pushes
    const uint32_t mine = at_tma::smem_addr(land) + 4u * rank * 16 * W;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int q = tid + i * BLOCK, r = q / CPR, c = 4 * (q % CPR);
      if (r < rows) at_cluster::store(at_cluster::map_to_rank(mine + 4u * (r * W + c % W), c / W), sums[i]);
    }
    at_cluster::arrive();
    at_cluster::wait();  // every push has landed, and nobody touches another block's memory after this
    for (int o = tid; o < rows * W; o += BLOCK) {
      const int r = o / W, cn = (int)rank * W + o % W;
      float sum = 0.0f;
#pragma unroll
      for (int from = 0; from < CLUSTER; ++from) sum += land[(from * 16 + r) * W + o % W];  // in rank order
      if (cn >= N - n0) continue;
      const size_t at = (size_t)r * ldc + n0 + cn;
      C[at] = finish<T>(sum, alpha, beta, C + at);
    }
    return;
  }

  const int outputs = rows * COLS;
  const size_t mn = (size_t)M * N;
  for (int o = tid; o < outputs; o += BLOCK) {
    const int r = o / COLS, cn = o % COLS;
    if (cn >= N - n0) continue;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < KW; ++w) sum += red[w * 16 * COLS + red_at<COLS>(r, cn)];
    if (splits == 1) {
      const size_t at = (size_t)r * ldc + n0 + cn;
      C[at] = finish<T>(sum, alpha, beta, C + at);
    } else {
      workspace[(size_t)blockIdx.y * mn + (size_t)r * N + n0 + cn] = sum;
    }
  }
  if (splits == 1) return;

  __threadfence();  // partials visible device-wide before this block is counted
  __syncthreads();
  if (tid == 0) last_block = atomicAdd(counters + blockIdx.x, 1u) == (unsigned)(splits - 1);
  __syncthreads();
  if (!last_block) return;
  __threadfence();

  // The last block sums every output's partials in split order: the order depends only on SPLIT,
  // never on which block arrived last.
  for (int o = tid; o < outputs; o += BLOCK) {
    const int r = o / COLS, cn = o % COLS;
    if (cn >= N - n0) continue;
    const float sum = sum_partials(workspace + (size_t)r * N + n0 + cn, mn, 0, splits);
    const size_t at = (size_t)r * ldc + n0 + cn;
    C[at] = finish<T>(sum, alpha, beta, C + at);
  }
  if (tid == 0) counters[blockIdx.x] = 0u;
}

}  // namespace at_skinny_tc

// One instance, as the tuner generates it (see autotune/ops/gemm/skinny_tc.py and
// autotune/ops/gemm/shared.py's instance_source; B_NK true for a trans problem, name suffix _nt):
//   extern "C" __global__ void __launch_bounds__(128) gemm_skinny_tc_<key>(const __half* A,
//       const __half* B, __half* C, int M, int N, int K, int lda, int ldb, int ldc, float alpha,
//       float beta, float* workspace, unsigned int* counters)
//   { at_skinny_tc::skinny_tc_body<__half, false, 1, 4, 8, 2, 1, 1, 1, 0>(A, B, C, M, N, K, lda, ldb,
//     ldc, alpha, beta, workspace, counters); }
// with CLUSTER > 1 the declaration also carries __cluster_dims__(1, CLUSTER, 1).
