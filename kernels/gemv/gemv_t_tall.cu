// Transposed GEMV of a tall matrix with a few columns: y = alpha * A^T x + beta * y with A K x N row-major
// (row r at A + r*lda, lda >= N), N <= 8, x K long and y N long, elements of type T (float, __half,
// __nv_bfloat16), accumulated in float (autotune/ops/gemv/tall.py). A dot product is its N = 1.
//
// Arguments: the GEMM argument list, as gemv_t_narrow.cu takes it (A := x, B := the matrix, C := y; M
// is 1, lda and ldc unused). Names below are the GEMV's: rows are B's K rows, columns its N.
//
// Why a family of its own: a strip of 16 columns, narrow's narrowest, wastes most of each load on 1 to
// 8 columns, and the skinny GEMM (which served them) reads one row of N elements per thread step. Here
// a contiguous matrix (ldb == N) is one flat array: a thread reads chunks of ROWS whole rows, ROWS * N
// elements in the widest loads their bytes allow, and the ROWS elements of x beside them, so a float16
// 65536 x 1 reads 16 bytes of A and 16 of x a load.
//
// Work: chunk c holds rows c*ROWS ... c*ROWS + ROWS - 1. Thread t of the grid takes chunks t, t + T,
// t + 2T, ... (T the grid's threads), UNROLL of them asked for before any is multiplied; the last step
// of a thread loads under a predicate (zeros past the end) instead of a scalar remainder loop, so no
// thread walks its last chunks one round trip at a time. Rows past the last whole chunk, and every row
// where the matrix is not contiguous or not aligned to its loads (a view of some columns of a wider
// matrix), are read one row at a time by the grid's threads in turn.
//
// Reduction: each thread's N sums meet in a warp butterfly and in shared memory in warp order. One
// block: it writes y. CLUSTER > 1 (sm_90+): the grid is one thread-block cluster of CLUSTER blocks
// along y, which add their sums in rank order through distributed shared memory (common.cuh:
// cluster_sum): no workspace, fence or counter. Several blocks otherwise: block b writes its N
// partials to workspace[b * N + column]; the last block to arrive (one counter) adds them with PARTS
// ranges of blocks in order and the ranges in order (deterministic), zeroes them, writes y and resets
// the counter, so workspace and counter are zero again after each launch. That pass, the fence and
// the counter cost about 2 us on an H200 (docs/findings.md), which a cluster avoids where its blocks
// can read the matrix fast enough.
//
// Launched with programmatic dependent launch (tall.py: WAITS_FOR_PRIOR_GRID): each block lets the next
// grid start, asks L2 for its threads' first chunk (PREFETCH 1; a grid before that writes the matrix
// writes it into L2, so the line is never stale), and waits for the grid before it
// (griddepcontrol.wait) before it reads x, y, the workspace or the matrix itself.
//
// Shared memory (static): (BLOCK / 32 + PARTS + 1) * N floats. Workspace: gridDim.x * N floats and one
// counter when gridDim.x > 1 (CLUSTER 1).
#pragma once
#include "common.cuh"

namespace at_tall {

using at_common::cluster_sum;
using at_common::finish;
using at_common::load_stream;
using at_common::Raw;
using at_common::sum_partials;
using at_common::to_float;

constexpr int POLICY = 1;  // evict-first streaming loads: each byte of A is read once
constexpr int MOST_PARTS = 32;  // ranges of blocks the last block adds in parallel, at most

// The widest load (16, 8, 4 or 2 bytes) that divides `bytes`.
template <int BYTES> struct Widest {
  static constexpr int value = BYTES % 16 == 0 ? 16 : BYTES % 8 == 0 ? 8 : BYTES % 4 == 0 ? 4 : 2;
};

// acc[col] += sum over the chunk's rows of a[row][col] * x[row].
template <typename T, int NCOL, int ROWS>
__device__ __forceinline__ void accumulate(const T* a, const T* x, float (&acc)[NCOL]) {
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const float xr = to_float(x[r]);
#pragma unroll
    for (int c = 0; c < NCOL; ++c) acc[c] = fmaf(to_float(a[r * NCOL + c]), xr, acc[c]);
  }
}

template <typename T, bool B_NK, int NCOL, int BLOCK, int ROWS, int UNROLL, int PREFETCH, int CLUSTER = 1>
__device__ __forceinline__ void tall_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                          int M, int N, int K, int lda, int ldb, int ldc, float alpha, float beta,
                                          float* __restrict__ workspace, unsigned int* __restrict__ counters) {
  static_assert(!B_NK, "the tall family serves the K x N layout (the transposed GEMV) only");
  static_assert(BLOCK % 32 == 0 && BLOCK / 32 * NCOL <= 1024, "whole warps");
  constexpr int CHUNK = ROWS * NCOL;  // elements of a chunk
  constexpr int A_BYTES = Widest<CHUNK * sizeof(T)>::value, A_LOADS = CHUNK * sizeof(T) / A_BYTES;
  constexpr int X_BYTES = Widest<ROWS * sizeof(T)>::value, X_LOADS = ROWS * sizeof(T) / X_BYTES;
  using AW = typename Raw<A_BYTES>::type;
  using XW = typename Raw<X_BYTES>::type;
  constexpr int WARPS = BLOCK / 32;
  constexpr int PARTS = BLOCK / NCOL < MOST_PARTS ? BLOCK / NCOL : MOST_PARTS;
  __shared__ float sums[WARPS + PARTS][NCOL];
  __shared__ float block_sums[NCOL];  // a cluster's blocks read each other's
  __shared__ bool last;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int block = CLUSTER > 1 ? blockIdx.y : blockIdx.x, blocks = CLUSTER > 1 ? gridDim.y : gridDim.x;
  const int thread = block * BLOCK + threadIdx.x, threads = blocks * BLOCK;
  // Whole chunks where the matrix is one flat array aligned to the chunk's and x's loads.
  const bool flat = ldb == NCOL && reinterpret_cast<size_t>(B) % A_BYTES == 0 &&
                    reinterpret_cast<size_t>(A) % X_BYTES == 0;
  const int chunks = flat ? K / ROWS : 0;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (PREFETCH && thread < chunks)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(B + (size_t)thread * CHUNK) : "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif

  float acc[NCOL] = {};
  for (int c = thread; c < chunks; c += UNROLL * threads) {
    AW a[UNROLL][A_LOADS];
    XW x[UNROLL][X_LOADS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int chunk = c + u * threads;
      const bool in = chunk < chunks;  // the step's loads all issue first: no remainder loop
      const AW* pa = reinterpret_cast<const AW*>(B + (size_t)chunk * CHUNK);
      const XW* px = reinterpret_cast<const XW*>(A + (size_t)chunk * ROWS);
#pragma unroll
      for (int j = 0; j < A_LOADS; ++j) a[u][j] = in ? load_stream<POLICY>(pa + j) : AW{};
#pragma unroll
      for (int j = 0; j < X_LOADS; ++j) x[u][j] = in ? __ldg(px + j) : XW{};
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)  // past the end both are zero: + 0 * 0
      accumulate<T, NCOL, ROWS>(reinterpret_cast<const T*>(a[u]), reinterpret_cast<const T*>(x[u]), acc);
  }
  for (int r = chunks * ROWS + thread; r < K; r += threads) {  // the rest, a row at a time
    const float xr = to_float(__ldg(A + r));
#pragma unroll
    for (int col = 0; col < NCOL; ++col) acc[col] = fmaf(to_float(B[(size_t)r * ldb + col]), xr, acc[col]);
  }

#pragma unroll
  for (int col = 0; col < NCOL; ++col)
#pragma unroll
    for (int offset = 16; offset; offset /= 2) acc[col] += __shfl_xor_sync(0xffffffffu, acc[col], offset);
  if (lane == 0)
#pragma unroll
    for (int col = 0; col < NCOL; ++col) sums[warp][col] = acc[col];
  __syncthreads();
  if (threadIdx.x < NCOL) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) s += sums[w][threadIdx.x];
    if (CLUSTER > 1)
      block_sums[threadIdx.x] = s;
    else if (blocks == 1)
      C[threadIdx.x] = finish(s, alpha, beta, C + threadIdx.x);
    else
      __stcg(workspace + (size_t)block * NCOL + threadIdx.x, s);
  }
  if constexpr (CLUSTER > 1) {  // every thread of the cluster takes part (its barriers)
    cluster_sum<CLUSTER>(block_sums, NCOL, [&](int col, float s) { C[col] = finish(s, alpha, beta, C + col); });
    return;
  }
  if (blocks == 1) return;

  __threadfence();  // the partials are visible before the counter says so
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counters, 1u) == (unsigned int)blocks - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // and read after it

  // Thread (part, col) adds the partials of blocks part * G / PARTS ... (part + 1) * G / PARTS - 1.
  const int col = threadIdx.x % NCOL, part = threadIdx.x / NCOL;
  if (part < PARTS) {
    const int lo = part * blocks / PARTS, hi = (part + 1) * blocks / PARTS;
    sums[WARPS + part][col] = sum_partials(workspace + col, (size_t)NCOL, lo, hi);
  }
  __syncthreads();
  if (threadIdx.x < NCOL) {
    float s = 0.0f;
#pragma unroll
    for (int p = 0; p < PARTS; ++p) s += sums[WARPS + p][threadIdx.x];
    C[threadIdx.x] = finish(s, alpha, beta, C + threadIdx.x);
  }
  if (threadIdx.x == 0) counters[0] = 0u;
}

}  // namespace at_tall
