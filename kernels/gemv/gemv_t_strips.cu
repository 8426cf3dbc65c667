// Transposed GEMV over column strips: y = alpha * A^T x + beta * y with A K x N row-major (row r at
// A + r*lda, lda >= N), x K long and y N long, elements of type T (float, __half, __nv_bfloat16),
// accumulated in float. It serves the tall, narrow transposed GEMVs (64 to 1024 columns, at least 64 rows
// a column: autotune/ops/gemv/strips.py), where the skinny GEMM family, which reads B in tiles of at most
// 128 threads along N, keeps too few bytes in flight per row and reduces too many K splits (131072 x 256
// float16 on an H200: 25.2 us against cuBLAS's 21.9).
//
// The kernel takes the GEMM argument list of the family it stands beside (the transposed GEMV is the
// one-row GEMM C = x^T A): A := x (1 x K), B := the matrix (K x N, row stride ldb), C := y; M is 1 and
// lda, ldc are not used. Names below are those of the GEMV: rows are B's K rows, columns its N.
//
// Strips: the columns are cut into strips of WIDTH; a team of WORDS = WIDTH / VEC threads reads one row
// of a strip with VEC-element loads (8 or 16 bytes where N and ldb allow, one element otherwise), each
// thread owning VEC columns. A block of BLOCK threads holds TEAMS = BLOCK / WORDS teams; team t reads rows
// t, t + TEAMS, ... of its block's share, UNROLL rows in flight. Grid: (strips, splits), the rows cut
// into gridDim.y contiguous shares.
// Reduction: each block adds its teams' column sums in shared memory in team order. One split: the
// block writes y. Several: each block writes its WIDTH float partials to workspace[split * N + column];
// the last block of a strip to arrive (a counter per strip, counters[strip]) adds them in split order
// (PARTS threads per column, each over a contiguous range of the splits, then the parts in order:
// deterministic),
// zeroes them, writes y and resets its counter, so workspace and counters are zero again after each
// launch, as every split-K family here leaves them.
//
// Shared memory (static): TEAMS * WIDTH = BLOCK * VEC floats (32 KiB at most: BLOCK 1024, VEC 8).
// Workspace: gridDim.y * N floats and gridDim.x counters when gridDim.y > 1.
// Preconditions the tuner's constraints and the launcher guarantee: WIDTH / VEC divides BLOCK, BLOCK a
// multiple of 32 and at most 1024; VEC > 1 only when N and ldb are multiples of VEC and B starts
// 16-byte aligned (the launcher runs VEC = 1 otherwise).
#pragma once
#include "common.cuh"

namespace at_strips {

using at_common::finish;
using at_common::load_stream;
using at_common::Raw;
using at_common::sum_partials;
using at_common::to_float;

template <typename T, int VEC>
__device__ __forceinline__ void accumulate(const typename Raw<VEC * sizeof(T)>::type& raw, float xr,
                                           float (&acc)[VEC]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] = fmaf(to_float(e[i]), xr, acc[i]);
}

template <typename T, bool B_NK, int BLOCK, int WIDTH, int VEC, int UNROLL, int POLICY>
__device__ __forceinline__ void strips_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                            int M, int N, int K, int lda, int ldb, int ldc, float alpha, float beta,
                                            float* __restrict__ workspace, unsigned int* __restrict__ counters) {
  static_assert(!B_NK, "strips serve the K x N layout (the transposed GEMV) only");
  constexpr int WORDS = WIDTH / VEC;
  constexpr int TEAMS = BLOCK / WORDS;
  static_assert(WIDTH % VEC == 0 && BLOCK % WORDS == 0, "a block holds whole teams");
  using V = typename Raw<VEC * sizeof(T)>::type;
  __shared__ float sums[TEAMS * WIDTH];
  __shared__ bool last;

  const int word = threadIdx.x % WORDS, team = threadIdx.x / WORDS;
  const int strip = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int column = strip * WIDTH + word * VEC;  // the first of this thread's VEC columns
  const bool inside = column < N;                 // N % VEC == 0 when VEC > 1: a word is in or out whole
  const int per = (K + splits - 1) / splits;
  const int begin = min(K, split * per), end = min(K, begin + per);

  float acc[VEC] = {};
  if (inside) {
    const T* base = B + column;
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
#pragma unroll
  for (int e = 0; e < VEC; ++e) sums[team * WIDTH + word * VEC + e] = acc[e];
  __syncthreads();

  const int first = strip * WIDTH;
  for (int c = threadIdx.x; c < WIDTH; c += BLOCK) {
    float s = 0.0f;
#pragma unroll 4
    for (int t = 0; t < TEAMS; ++t) s += sums[t * WIDTH + c];
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

  constexpr int PARTS = BLOCK >= WIDTH ? BLOCK / WIDTH : 1;  // threads per column
  constexpr int STEP = BLOCK >= WIDTH ? WIDTH : BLOCK;
  const int col = threadIdx.x % STEP, part = threadIdx.x / STEP;
  // sums is free again (every thread passed the barriers above): PARTS * WIDTH <= BLOCK * VEC floats.
  for (int c = col; c < WIDTH; c += STEP) {
    float s = 0.0f;
    if (first + c < N) {
      const int lo = part * splits / PARTS, hi = (part + 1) * splits / PARTS;
      s = sum_partials(workspace + first + c, (size_t)N, lo, hi);
    }
    sums[part * WIDTH + c] = s;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < WIDTH; c += BLOCK) {
    if (first + c >= N) continue;
    float s = 0.0f;
#pragma unroll
    for (int p = 0; p < PARTS; ++p) s += sums[p * WIDTH + c];
    C[first + c] = finish(s, alpha, beta, C + first + c);
  }
  if (threadIdx.x == 0) counters[strip] = 0u;
}

}  // namespace at_strips
