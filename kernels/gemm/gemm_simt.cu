// SIMT GEMM on CUDA cores: C = alpha * A B + beta * C, float32 in, float32 accumulate, float32 out.
// Row-major with runtime row strides: A is M x K (row stride lda >= K), C is M x N (row stride ldc >= N),
// and B, by the template parameter B_NK, either
//   false: K x N, row stride ldb >= N: B(k, n) = B[k * ldb + n]
//   true:  N x K, row stride ldb >= K: B(k, n) = B[n * ldb + k] (an nn.Linear weight W, C = A W^T).
//
// Template parameters (the tuner's compiled parameters, see autotune/ops/gemm/simt.py):
//   B_NK         B's layout, above (the problem's `trans`, not a tuned parameter)
//   BM, BN, BK   block tile: a block computes a BM x BN tile of C, walking K in BK-deep k-tiles
//   WM, WN       warp tile: each warp owns a WM x WN sub-tile of the block tile
//   TM, TN       thread tile: each thread owns TM x TN outputs (multiples of 4: read as float4)
//   VEC          elements per global load (4, 2, 1): float4 / float2 / float
//   STAGES       2: double buffer (the next k-tile is loaded into registers while the current one is
//                computed, then stored to the other shared-memory buffer); 1: single buffer
// Threads per block: (BM / WM) * (BN / WN) * 32. Lanes of a warp form a (WM/TM) x (WN/TN) grid.
// The generated wrapper's __launch_bounds__(threads, OCC) asks ptxas to fit OCC blocks per SM (the
// tuner's `occ`): OCC 2 caps a 256-thread block at 128 registers so two 8x8-tile blocks co-reside.
//
// Grid: blockIdx.x walks the N tiles (ceil(N / BN) blocks), blockIdx.y the M tiles; gridDim.y may be
// smaller than ceil(M / BM) (CUDA caps it at 65535), then blocks stride over the M tiles.
//
// Shared memory (dynamic, bytes), also in autotune/ops/gemm/simt.py:
//   STAGES * (BK * (BM + A_PAD) + BK * (BN + B_PAD)) * sizeof(float),   A_PAD = 4, B_PAD = B_NK ? 4 : 0
// A is stored transposed (k-major, As[k][m]) so that a thread's TM values of one k are float4 reads,
// exactly like B's (Bs[k][n]). The pad of 4 floats keeps rows 16-byte aligned and spreads the
// transposing stores over the banks (conflict-free for BK / VEC == 2, e.g. BK 8 with float4 loads).
// Global loads run along each operand's contiguous dimension, VEC floats at a time: A's tile (BM rows
// of BK) along K. B_NK == false: B's tile (BK rows of BN) along N, stored row by row as whole vectors.
// B_NK == true: B's tile is the BN x BK box of B's rows n0.. (BN rows of BK, coalesced along K), and it
// is stored transposed into Bs[k][n] exactly as A is (pad B_PAD): compute_tile does not know the layout.
//
// Shared-memory reads: in each warp the WM/TM lanes along M read WM/TM consecutive float4 of As (the
// others of the same row broadcast), the WN/TN lanes along N consecutive float4 of Bs: conflict-free.
// A thread's i-th float4 along M sits at warp_m0 + i * (WM/TM) * 4 + lane_m * 4 (likewise along N),
// so that a warp's reads for one i are contiguous.
//
// Tails: out-of-range elements of A and B load as zero (zero-filled k-tiles add nothing) and stores
// are guarded, so every M, N, K >= 1 is exact (indices are int: M, N, K below 2^31 - 1024; element
// offsets, row * ld, are size_t). Preconditions: VEC > 1 only when K % VEC == 0 and N % VEC == 0 (the
// tuner's vec choices: a vector is wholly inside or wholly outside a row: A's rows and C's always,
// B's K x N rows by N % VEC, B's N x K rows by K % VEC; for B_NK, N % VEC is needed by C's stores
// only), and every row of A, B and C starts VEC-aligned (the launcher runs vec > 1 only with 16-byte
// aligned base pointers and lda, ldb, ldc multiples of 4).
// workspace / counters of the common GEMM signature are not used.
#pragma once
#include <stdint.h>

namespace at_gemm_simt {

constexpr int A_PAD = 4;
constexpr int B_PAD_NK = 4;  // B_PAD when B_NK (B's tile is stored transposed too); 0 otherwise

template <int VEC> struct Vec;
template <> struct Vec<4> { typedef float4 type; };
template <> struct Vec<2> { typedef float2 type; };
template <> struct Vec<1> { typedef float type; };

__device__ __forceinline__ float4 zero_vec(float4*) { return make_float4(0.f, 0.f, 0.f, 0.f); }
__device__ __forceinline__ float2 zero_vec(float2*) { return make_float2(0.f, 0.f); }
__device__ __forceinline__ float zero_vec(float*) { return 0.f; }

template <typename V> __device__ __forceinline__ float elem(const V& v, int e) {
  return reinterpret_cast<const float*>(&v)[e];
}

template <typename T, bool B_NK_, int BM, int BN, int BK, int WM, int WN, int TM, int TN, int VEC, int STAGES>
struct Config {
  static_assert(sizeof(T) == 4, "the SIMT family is float32 only");
  static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles divide the block tile");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are read as float4");
  static_assert(WM % TM == 0 && WN % TN == 0 && (WM / TM) * (WN / TN) == 32, "32 lanes per warp tile");
  static_assert(VEC == 1 || VEC == 2 || VEC == 4, "float, float2 or float4 loads");
  static_assert(BK % VEC == 0 && BN % VEC == 0, "whole vectors per tile row");
  static_assert(STAGES == 1 || STAGES == 2, "single or double buffer");
  static constexpr bool B_NK = B_NK_;
  static constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
  static constexpr int TILE_M = BM;
  static constexpr int TILE_N = BN;
  static constexpr int TILE_K = BK;
  static constexpr int WARPS_N = BN / WN;
  static constexpr int LANES_N = WN / TN;  // lanes along N in a warp
  static constexpr int LANES_M = WM / TM;
  static constexpr int FM = TM / 4;  // float4 fragments per thread along M
  static constexpr int FN = TN / 4;
  static constexpr int AS_LD = BM + A_PAD;  // As[k][m]
  static constexpr int BS_LD = BN + (B_NK ? B_PAD_NK : 0);  // Bs[k][n]
  static constexpr int A_STAGE = BK * AS_LD;
  static constexpr int B_STAGE = BK * BS_LD;
  static constexpr int STAGE = A_STAGE + B_STAGE;  // floats per stage: As then Bs
  static constexpr int A_ROW_VECS = BK / VEC;  // vectors per k-tile row of A (along K)
  // Vectors per k-tile row of B: along N (a row k), or for B_NK along K (a row n).
  static constexpr int B_ROW_VECS = B_NK ? BK / VEC : BN / VEC;
  static constexpr int A_VECS = BM * A_ROW_VECS;
  static constexpr int B_VECS = (B_NK ? BN : BK) * B_ROW_VECS;
  static constexpr int A_ITERS = (A_VECS + THREADS - 1) / THREADS;
  static constexpr int B_ITERS = (B_VECS + THREADS - 1) / THREADS;
  static_assert(THREADS % A_ROW_VECS == 0, "an A slot's k column is the same in every slot");
  static_assert(!B_NK || THREADS % B_ROW_VECS == 0, "a B_NK slot's k column is the same in every slot");
  static constexpr bool A_EXACT = A_VECS % THREADS == 0;  // no idle loaders: skip the guard
  static constexpr bool B_EXACT = B_VECS % THREADS == 0;
};

// Slot i of a thread loads vector tid + i * THREADS of a tile of rows of ROW_VECS vectors. Both counts
// are powers of two, so one divides the other and the slot's row and vector column split into a
// per-thread part (tid / ROW_VECS, tid % ROW_VECS) plus a compile-time part: these offsets.
template <int THREADS, int ROW_VECS> struct Slots {
  static_assert(THREADS % ROW_VECS == 0 || ROW_VECS % THREADS == 0, "powers of two");
  static __device__ __forceinline__ constexpr int row(int i) { return i * THREADS / ROW_VECS; }
  static __device__ __forceinline__ constexpr int vec_col(int i) { return i * THREADS % ROW_VECS; }
};

// Global -> register -> shared loads of one block's k-tiles. A thread keeps one running pointer per
// operand (at its slot 0 of the next k-tile); its other slots sit at compile-time row and column
// offsets from it. Per k-tile only the pointers and the two k indices move.
// B's tile rows are k's (K x N) or, for B_NK, n's (N x K: then B is handled exactly like A).
template <typename Cfg, int VEC> struct TileLoader {
  typedef typename Vec<VEC>::type V;
  typedef Slots<Cfg::THREADS, Cfg::A_ROW_VECS> SA;
  typedef Slots<Cfg::THREADS, Cfg::B_ROW_VECS> SB;
  const float* a_ptr;  // &A[m0 + a_r][a_k]
  const float* b_ptr;  // &B[b_k][n0 + b_c]; B_NK: &B[n0 + b_r][b_k]
  int a_k, b_k;        // k index of slot 0 in A (a column) and in B (a row; B_NK: a column), next k-tile
  int a_rows;          // rows of A left from slot 0's row (M - m0 - a_r)
  int b_n_left;        // columns of B left from slot 0's (N - n0 - b_c); B_NK: rows of B (N - n0 - b_r)
  int a_sts, b_sts;    // slot 0's offset in a stage: As[a_c][a_r], Bs[b_r][b_c] (B_NK: Bs[b_c][b_r])
  int a_r, b_r;        // slot 0's row in the A tile and in the B tile (for partly idle slots)
  V a_reg[Cfg::A_ITERS];
  V b_reg[Cfg::B_ITERS];

  __device__ __forceinline__ void init(const float* A, const float* B, int M, int N, int lda, int ldb, int m0,
                                       int n0, int tid) {
    a_r = tid / Cfg::A_ROW_VECS;
    const int a_c = tid % Cfg::A_ROW_VECS * VEC;
    b_r = tid / Cfg::B_ROW_VECS;
    const int b_c = tid % Cfg::B_ROW_VECS * VEC;
    a_k = a_c;
    a_rows = M - (m0 + a_r);
    a_sts = a_c * Cfg::AS_LD + a_r;
    // Only dereferenced where the row / column / k is in range (see load).
    a_ptr = A + (size_t)(m0 + a_r) * lda + a_c;
    if constexpr (!Cfg::B_NK) {
      b_k = b_r;
      b_n_left = N - (n0 + b_c);
      b_sts = Cfg::A_STAGE + b_r * Cfg::BS_LD + b_c;
      b_ptr = B + (size_t)b_r * ldb + n0 + b_c;
    } else {
      b_k = b_c;
      b_n_left = N - (n0 + b_r);
      b_sts = Cfg::A_STAGE + b_c * Cfg::BS_LD + b_r;
      b_ptr = B + (size_t)(n0 + b_r) * ldb + b_c;
    }
  }

  // Loads the next k-tile into registers, zero outside the matrices, and moves on by BK. VEC > 1
  // implies K % VEC == 0 and N % VEC == 0, so a vector is either wholly inside or wholly outside.
  __device__ __forceinline__ void load(int lda, int ldb, int K) {
#pragma unroll
    for (int i = 0; i < Cfg::A_ITERS; ++i) {
      const int dr = SA::row(i);  // SA::vec_col(i) == 0: A_ROW_VECS <= 32 divides THREADS
      const bool ok = (Cfg::A_EXACT || a_r + dr < Cfg::TILE_M) && dr < a_rows && a_k < K;
      a_reg[i] = zero_vec(&a_reg[i]);
      if (ok) a_reg[i] = __ldg(reinterpret_cast<const V*>(a_ptr + (size_t)dr * lda));
    }
    if constexpr (!Cfg::B_NK) {
#pragma unroll
      for (int i = 0; i < Cfg::B_ITERS; ++i) {
        const int dr = SB::row(i), dc = SB::vec_col(i) * VEC;
        const bool ok = (Cfg::B_EXACT || b_r + dr < Cfg::TILE_K) && b_k + dr < K && dc < b_n_left;
        b_reg[i] = zero_vec(&b_reg[i]);
        if (ok) b_reg[i] = __ldg(reinterpret_cast<const V*>(b_ptr + (size_t)dr * ldb + dc));
      }
    } else {
#pragma unroll
      for (int i = 0; i < Cfg::B_ITERS; ++i) {
        const int dr = SB::row(i);  // SB::vec_col(i) == 0, as for A
        const bool ok = (Cfg::B_EXACT || b_r + dr < Cfg::TILE_N) && dr < b_n_left && b_k < K;
        b_reg[i] = zero_vec(&b_reg[i]);
        if (ok) b_reg[i] = __ldg(reinterpret_cast<const V*>(b_ptr + (size_t)dr * ldb));
      }
    }
    a_ptr += Cfg::TILE_K;
    a_k += Cfg::TILE_K;
    if constexpr (!Cfg::B_NK)
      b_ptr += (size_t)Cfg::TILE_K * ldb;
    else
      b_ptr += Cfg::TILE_K;
    b_k += Cfg::TILE_K;
  }

  // Into the stage at `stage`: A transposed (As[k][m]), B row by row (Bs[k][n]) as whole vectors, or
  // for B_NK transposed like A. Idle slots (only when a tile holds fewer vectors than THREADS * ITERS)
  // store nothing.
  __device__ __forceinline__ void store(float* stage) const {
#pragma unroll
    for (int i = 0; i < Cfg::A_ITERS; ++i) {
      if (!Cfg::A_EXACT && a_r + SA::row(i) >= Cfg::TILE_M) continue;
#pragma unroll
      for (int e = 0; e < VEC; ++e) stage[a_sts + e * Cfg::AS_LD + SA::row(i)] = elem(a_reg[i], e);
    }
#pragma unroll
    for (int i = 0; i < Cfg::B_ITERS; ++i) {
      if constexpr (!Cfg::B_NK) {
        if (!Cfg::B_EXACT && b_r + SB::row(i) >= Cfg::TILE_K) continue;
        *reinterpret_cast<V*>(stage + b_sts + SB::row(i) * Cfg::BS_LD + SB::vec_col(i) * VEC) = b_reg[i];
      } else {
        if (!Cfg::B_EXACT && b_r + SB::row(i) >= Cfg::TILE_N) continue;
#pragma unroll
        for (int e = 0; e < VEC; ++e) stage[b_sts + e * Cfg::BS_LD + SB::row(i)] = elem(b_reg[i], e);
      }
    }
  }
};

// A thread's operand fragments of k-step k: TM values of A's column k, TN of B's row k, as float4.
template <typename Cfg>
__device__ __forceinline__ void read_fragments(const float* As, const float* Bs, int k, int a_off, int b_off,
                                               float4 (&a)[Cfg::FM], float4 (&b)[Cfg::FN]) {
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i)
    a[i] = *reinterpret_cast<const float4*>(As + k * Cfg::AS_LD + a_off + i * Cfg::LANES_M * 4);
#pragma unroll
  for (int j = 0; j < Cfg::FN; ++j)
    b[j] = *reinterpret_cast<const float4*>(Bs + k * Cfg::BS_LD + b_off + j * Cfg::LANES_N * 4);
}

// acc += the outer products of the BK k-steps of one shared-memory k-tile. The fragments of k-step
// k + 1 are read before the FMAs of k-step k, into the other of two fragment sets. Written as one
// set read per k-step, the same instructions came out of ptxas with registers that made the FMAs
// 4-7% slower on most tilings (the 4096^3 product's best went from 2983 to 2857 us on an H200 this way).
template <typename Cfg, int BK>
__device__ __forceinline__ void compute_tile(const float* As, const float* Bs, int a_off, int b_off,
                                             float (&acc)[Cfg::FM * 4][Cfg::FN * 4]) {
  float4 a[2][Cfg::FM], b[2][Cfg::FN];
  read_fragments<Cfg>(As, Bs, 0, a_off, b_off, a[0], b[0]);
#pragma unroll
  for (int k = 0; k < BK; ++k) {
    if (k + 1 < BK) read_fragments<Cfg>(As, Bs, k + 1, a_off, b_off, a[(k + 1) % 2], b[(k + 1) % 2]);
#pragma unroll
    for (int i = 0; i < Cfg::FM * 4; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::FN * 4; ++j)
        acc[i][j] = fmaf(elem(a[k % 2][i / 4], i % 4), elem(b[k % 2][j / 4], j % 4), acc[i][j]);
  }
}

// Writes the thread's TM x TN outputs: alpha * acc (+ beta * C when beta != 0: C is not read
// otherwise, so NaN in C cannot leak in). Rows >= M and columns >= N are skipped.
template <typename Cfg, int VEC>
__device__ __forceinline__ void store_c(float* C, int M, int N, int ldc, int row0, int col0, float alpha,
                                        float beta, const float (&acc)[Cfg::FM * 4][Cfg::FN * 4]) {
  typedef typename Vec<VEC>::type V;
#pragma unroll
  for (int i = 0; i < Cfg::FM * 4; ++i) {
    const int row = row0 + i / 4 * Cfg::LANES_M * 4 + i % 4;
    if (row >= M) continue;
    float* c_row = C + (size_t)row * ldc;
#pragma unroll
    for (int j = 0; j < Cfg::FN * 4; j += VEC) {
      const int col = col0 + j / 4 * Cfg::LANES_N * 4 + j % 4;
      if (col >= N) continue;  // VEC > 1: N % VEC == 0, so the whole vector is in range
      V out;
      float* o = reinterpret_cast<float*>(&out);
#pragma unroll
      for (int e = 0; e < VEC; ++e) o[e] = alpha * acc[i][j + e];
      if (beta != 0.0f) {
        const V old = *reinterpret_cast<const V*>(c_row + col);
#pragma unroll
        for (int e = 0; e < VEC; ++e) o[e] = fmaf(beta, elem(old, e), o[e]);
      }
      *reinterpret_cast<V*>(c_row + col) = out;
    }
  }
}

template <typename T, bool B_NK, int BM, int BN, int BK, int WM, int WN, int TM, int TN, int VEC, int STAGES>
__device__ __forceinline__ void gemm_simt_body(const T* __restrict__ A, const T* __restrict__ B,
                                               T* __restrict__ C, int M, int N, int K, int lda, int ldb,
                                               int ldc, float alpha, float beta) {
  typedef Config<T, B_NK, BM, BN, BK, WM, WN, TM, TN, VEC, STAGES> Cfg;
  extern __shared__ __align__(16) float smem[];  // STAGES x [As: BK x (BM + A_PAD) | Bs: BK x (BN + B_PAD)]

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int warp_m0 = warp / Cfg::WARPS_N * WM;
  const int warp_n0 = warp % Cfg::WARPS_N * WN;
  // Along N the lanes are consecutive, so 4 * LANES_N consecutive columns of C leave per store.
  const int a_off = warp_m0 + lane / Cfg::LANES_N * 4;
  const int b_off = warp_n0 + lane % Cfg::LANES_N * 4;

  const int n0 = blockIdx.x * BN;
  const int tiles_m = (M - 1) / BM + 1;
  const int ktiles = (K - 1) / BK + 1;

  for (int tile_m = blockIdx.y; tile_m < tiles_m; tile_m += gridDim.y) {
    const int m0 = tile_m * BM;
    TileLoader<Cfg, VEC> loader;
    loader.init(A, B, M, N, lda, ldb, m0, n0, tid);

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    loader.load(lda, ldb, K);
    loader.store(smem);
    __syncthreads();
    int read = 0;  // offset of the stage being computed (STAGES == 2: toggles 0 <-> STAGE)
    for (int kt = 0; kt < ktiles; ++kt) {
      if (STAGES == 2) {
        // Unconditional on purpose: past the last k-tile every load is out of range (zero, no memory
        // access), and a branch would let the compiler sink the loads below the math, where their
        // latency is no longer hidden.
        loader.load(lda, ldb, K);
        compute_tile<Cfg, BK>(smem + read, smem + read + Cfg::A_STAGE, a_off, b_off, acc);
        // The other stage was last read in iteration kt - 1, which ended with a barrier.
        read = Cfg::STAGE - read;
        loader.store(smem + read);
        __syncthreads();
      } else {
        compute_tile<Cfg, BK>(smem, smem + Cfg::A_STAGE, a_off, b_off, acc);
        __syncthreads();  // every thread is done reading before the buffer is refilled
        if (kt + 1 < ktiles) {
          loader.load(lda, ldb, K);
          loader.store(smem);
          __syncthreads();
        }
      }
    }
    // The last barrier above also protects the buffers from the next M tile's first store.
    store_c<Cfg, VEC>(C, M, N, ldc, m0 + a_off, n0 + b_off, alpha, beta, acc);
  }
}

}  // namespace at_gemm_simt

// One instance, as the tuner generates it (see autotune/ops/gemm/simt.py; "_nt" names and `true` for B_NK):
//   extern "C" __global__ void __launch_bounds__(256, 2) gemm_simt_<key>(const float* A, const float* B,
//       float* C, int M, int N, int K, int lda, int ldb, int ldc, float alpha, float beta, float* workspace,
//       unsigned int* counters)
//   { at_gemm_simt::gemm_simt_body<float, false, 128, 128, 8, 32, 64, 8, 8, 4, 2>(A, B, C, M, N, K, lda, ldb,
//       ldc, alpha, beta); }
