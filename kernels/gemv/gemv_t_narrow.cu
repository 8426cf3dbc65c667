// Transposed GEMV over narrow column strips: y = alpha * A^T x + beta * y with A K x N row-major (row r at
// A + r*lda, lda >= N), x K long and y N long, elements of type T (float, __half, __nv_bfloat16),
// accumulated in float. It serves every transposed GEMV of at least 16 columns (autotune/ops/gemv/narrow.py).
//
// The kernel takes the GEMM argument list of the family it stands beside (the transposed GEMV is the
// one-row GEMM C = x^T A): A := x (1 x K), B := the matrix (K x N, row stride ldb), C := y; M is 1 and
// lda, ldc are not used. Names below are those of the GEMV: rows are B's K rows, columns its N.
//
// Strips: the columns are cut into strips of WIDTH (16 to 256); a team of WORDS = WIDTH / VEC threads
// (a power of two up to 32, so a team never straddles a warp) reads one row of a strip with VEC-element
// loads (16 or 8 bytes where N and ldb allow, one element otherwise), each thread owning VEC columns.
// A block of BLOCK threads holds TEAMS = BLOCK / WORDS teams; team t reads rows t, t + TEAMS, ... of
// its block's share, UNROLL rows in flight. Grid: (strips, splits), the rows cut into gridDim.y
// contiguous shares (one where the strips alone fill the GPU).
// The strips are narrow enough that most shapes need no sum across blocks; gemv_t_strips.cu's wider
// strips (256 to 2048 columns) needed 132 to 1056 blocks a strip on the shapes it serves.
//
// Reduction: the lanes of a warp that own the same columns add their sums with shuffles, then the
// block adds its warps' sums in shared memory in warp order. One split: the block writes y. Several:
// each block writes its WIDTH float partials to workspace[split * N + column]; the last block of a
// strip to arrive (a counter per strip) adds them in split order (deterministic), zeroes them, writes y
// and resets its counter, so workspace and counters are zero again after each launch.
//
// Launched with programmatic dependent launch (narrow.py: WAITS_FOR_PRIOR_GRID): the next call's blocks
// may start once every block of this one has; each block then prefetches (PREFETCH 1) its threads'
// first UNROLL rows into L2, which no kernel before writes to L2 stale (every write lands in L2), and
// waits for the grid before it (griddepcontrol.wait) before it reads anything. On the H200 this took
// float16 4096 x 4096 from 11.9 to 10.5 us (experiments/gemv_t_narrow.cu).
//
// Shared memory (static): BLOCK / 32 * WIDTH floats (32 KiB at most: BLOCK 1024, WIDTH 256).
// Workspace: gridDim.y * N floats and gridDim.x counters when gridDim.y > 1.
// Preconditions the tuner's constraints and the launcher guarantee: WIDTH / VEC divides 32 and BLOCK is
// a multiple of 32 up to 1024; VEC > 1 only when N and ldb are multiples of VEC and B starts 16-byte
// aligned (the launcher runs VEC = 1 otherwise).
#pragma once
#include "common.cuh"

namespace at_narrow {

using at_common::finish;
using at_common::load_stream;
using at_common::Raw;
using at_common::sum_partials;
using at_common::to_float;

constexpr int POLICY = 1;  // evict-first streaming loads (load_stream): each byte of A is read once

template <typename T, int VEC>
__device__ __forceinline__ void accumulate(const typename Raw<VEC * sizeof(T)>::type& raw, float xr,
                                           float (&acc)[VEC]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] = fmaf(to_float(e[i]), xr, acc[i]);
}

template <typename T, bool B_NK, int BLOCK, int WIDTH, int VEC, int UNROLL, int PREFETCH, int LEAN = 0>
__device__ __forceinline__ void narrow_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                            int M, int N, int K, int lda, int ldb, int ldc, float alpha, float beta,
                                            float* __restrict__ workspace, unsigned int* __restrict__ counters) {
  static_assert(!B_NK, "narrow strips serve the K x N layout (the transposed GEMV) only");
  constexpr int WORDS = WIDTH / VEC;
  constexpr int TEAMS = BLOCK / WORDS;
  constexpr int WARPS = BLOCK / 32;
  static_assert(WIDTH % VEC == 0 && WORDS >= 1 && 32 % WORDS == 0 && BLOCK % 32 == 0, "whole teams in a warp");
  using V = typename Raw<VEC * sizeof(T)>::type;
  __shared__ float sums[WARPS][WIDTH];
  __shared__ bool last;

  const int word = threadIdx.x % WORDS, team = threadIdx.x / WORDS;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int strip = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int first = strip * WIDTH;
  const int column = first + word * VEC;  // the first of this thread's VEC columns
  const bool inside = column < N;         // N % VEC == 0 when VEC > 1: a word is in or out whole
  const int per = (K + splits - 1) / splits;
  const int begin = min(K, split * per), end = min(K, begin + per);
  // LEAN 1: a thread past the last column reads its strip's first columns instead of skipping the row
  // loop (its sums are never stored), so no branch surrounds the loop.
  const bool reads = LEAN || inside;
  const T* base = B + (LEAN && !inside ? first : column);

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (PREFETCH && reads)
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int row = begin + team + u * TEAMS;
      if (row < end) asm volatile("prefetch.global.L2 [%0];" ::"l"(base + (size_t)row * ldb) : "memory");
    }
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif

  float acc[VEC] = {};
  if (reads) {
    int r = begin + team;
    for (; r + (UNROLL - 1) * TEAMS < end; r += UNROLL * TEAMS) {
      V raw[UNROLL];
      float xr[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int row = r + u * TEAMS;
        raw[u] = load_stream<POLICY>(reinterpret_cast<const V*>(base + (size_t)row * ldb));
        xr[u] = to_float(__ldg(A + row));
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) accumulate<T, VEC>(raw[u], xr[u], acc);
    }
    for (; r < end; r += TEAMS) {
      const V raw = load_stream<POLICY>(reinterpret_cast<const V*>(base + (size_t)r * ldb));
      accumulate<T, VEC>(raw, to_float(__ldg(A + r)), acc);
    }
  }
  // Lanes lane, lane ^ WORDS, lane ^ 2*WORDS, ... own the same columns: after the butterfly every one
  // holds their sum, and lanes below WORDS keep it.
#pragma unroll
  for (int offset = WORDS; offset < 32; offset *= 2)
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], offset);
  if (lane < WORDS)
#pragma unroll
    for (int e = 0; e < VEC; ++e) sums[warp][word * VEC + e] = acc[e];
  __syncthreads();

  for (int c = threadIdx.x; c < WIDTH; c += BLOCK) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) s += sums[w][c];
    if (first + c >= N) continue;
    if (splits == 1)
      C[first + c] = finish(s, alpha, beta, C + first + c);
    else
      __stcg(workspace + (size_t)split * N + first + c, s);
  }
  if (splits == 1) return;

  __threadfence();  // the partials are visible before the counter says so
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counters + strip, 1u) == (unsigned int)splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // and read after it

  // PARTS threads per column, each over a contiguous range of the splits, then the parts in order.
  // sums is free again (every thread passed the barriers above) and holds WARPS rows of WIDTH.
  constexpr int STEP = BLOCK >= WIDTH ? WIDTH : BLOCK;
  constexpr int PARTS = BLOCK / STEP < WARPS ? BLOCK / STEP : WARPS;
  const int col = threadIdx.x % STEP, part = threadIdx.x / STEP;
  if (part < PARTS)
    for (int c = col; c < WIDTH; c += STEP) {
      float s = 0.0f;
      if (first + c < N) {
        const int lo = part * splits / PARTS, hi = (part + 1) * splits / PARTS;
        if (LEAN)  // one partial at a time: sum_partials' two batches in flight take 32 registers
          for (int q = lo; q < hi; ++q) {
            float* partial = workspace + (size_t)q * N + first + c;
            s += __ldcg(partial);
            __stcg(partial, 0.0f);
          }
        else
          s = sum_partials(workspace + first + c, (size_t)N, lo, hi);
      }
      sums[part][c] = s;
    }
  __syncthreads();
  for (int c = threadIdx.x; c < WIDTH; c += BLOCK) {
    if (first + c >= N) continue;
    float s = 0.0f;
#pragma unroll
    for (int p = 0; p < PARTS; ++p) s += sums[p][c];
    C[first + c] = finish(s, alpha, beta, C + first + c);
  }
  if (threadIdx.x == 0) counters[strip] = 0u;
}

}  // namespace at_narrow
