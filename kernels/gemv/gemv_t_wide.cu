// Transposed GEMV over wide bands of whole rows: y = alpha * A^T x + beta * y with A K x N row-major (row r
// at A + r*lda, lda >= N), x K long and y N long, elements of type T (float, __half, __nv_bfloat16),
// accumulated in float. The narrow family's second body (autotune/ops/gemv/narrow.py, bands > 0): it
// reads the matrix as the plain GEMV does, whole rows (or a few bands of them), so a block's loads
// cover one contiguous stretch of A rather than 32-512 bytes of each row. On the H200 that read, with the
// shares added by atomics, took float16 2304 x 9216 from narrow's 16.5 to 13.0 us and 5120 x 5120,
// 17920 x 1536 and 4544 x 18176 8-14% below narrow (experiments/gemv_t_rows.cu); this body adds them in
// a fixed order and takes 14.2 us on 2304 x 9216, and narrow's strips stay ahead on most other shapes.
//
// Arguments: the GEMM argument list, as gemv_t_narrow.cu takes it (A := x, B := the matrix, C := y).
//
// Bands: the N / VEC words of a row (VEC elements each) are cut into gridDim.x bands of `team` words;
// a team of `team` threads reads one row of a band, each thread one word, and a block of blockDim.x =
// team * teams threads holds `teams` teams (the launcher sizes it: narrow.py, launch). A thread past its
// band's last word reads that word again (its sums are never stored), so no branch surrounds the loop.
// Team t reads rows t, t + teams, ... of the block's share (gridDim.y contiguous shares of the rows),
// UNROLL rows in flight, each thread's first UNROLL prefetched into L2 before griddepcontrol.wait (the
// launch is programmatic dependent, as narrow's).
//
// Reduction: the teams' column sums meet in shared memory and are added in team order. One share: the
// block writes y. Several: each block writes its band's float partials to workspace[share * N +
// column], 16 bytes a store; the last block of a band to arrive (a counter per band) adds them in share
// order (deterministic), with as many of its threads as the band has 16-byte units of partials times
// the ranges of shares they split, zeroes them, writes y and resets its counter, so workspace and
// counters are zero again after each launch. The last block's read is the body's cost beside the rows':
// splits x n / bands floats, so the sweeps favour few shares of the rows where the bands are wide.
//
// Shared memory (static): BLOCK * VEC floats (32 KiB at most: BLOCK 1024, VEC 8).
// Workspace: gridDim.y * N floats and gridDim.x counters when gridDim.y > 1.
// Preconditions the tuner's constraints and the launcher guarantee: blockDim.x a multiple of the team
// (ceil(N / VEC / gridDim.x)) up to BLOCK; VEC > 1 only when N and ldb are multiples of VEC and B starts
// 16-byte aligned (the launcher runs VEC = 1 otherwise).
#pragma once
#include "gemv_t_narrow.cu"

namespace at_wide {

using at_common::finish;
using at_common::load_stream;
using at_common::Raw;
using at_common::to_float;
using at_narrow::accumulate;

template <typename T, bool B_NK, int BLOCK, int VEC, int UNROLL>
__device__ __forceinline__ void wide_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M,
                                          int N, int K, int lda, int ldb, int ldc, float alpha, float beta,
                                          float* __restrict__ workspace, unsigned int* __restrict__ counters) {
  static_assert(!B_NK, "wide bands serve the K x N layout (the transposed GEMV) only");
  static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "whole warps, one block");
  using V = typename Raw<VEC * sizeof(T)>::type;
  __shared__ __align__(16) float sums[BLOCK * VEC];
  __shared__ bool last;

  const int words = N / VEC;
  const int team = (words + gridDim.x - 1) / gridDim.x, teams = blockDim.x / team;
  const int lane = threadIdx.x % team, row0 = threadIdx.x / team;
  const int band = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int word0 = band * team, band_words = min(team, words - word0);
  const int word = word0 + min(lane, band_words - 1);
  const int per = (K + splits - 1) / splits;
  const int begin = min(K, split * per), end = min(K, begin + per);
  const T* base = B + (size_t)word * VEC;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int row = begin + row0 + u * teams;
    if (row < end) asm volatile("prefetch.global.L2 [%0];" ::"l"(base + (size_t)row * ldb) : "memory");
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif

  float acc[VEC] = {};
  int r = begin + row0;
  for (; r + (UNROLL - 1) * teams < end; r += UNROLL * teams) {
    V raw[UNROLL];
    float xr[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int row = r + u * teams;
      raw[u] = load_stream<at_narrow::POLICY>(reinterpret_cast<const V*>(base + (size_t)row * ldb));
      xr[u] = to_float(__ldg(A + row));
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) accumulate<T, VEC>(raw[u], xr[u], acc);
  }
  for (; r < end; r += teams) {
    const V raw = load_stream<at_narrow::POLICY>(reinterpret_cast<const V*>(base + (size_t)r * ldb));
    accumulate<T, VEC>(raw, to_float(__ldg(A + r)), acc);
  }

  const int width = team * VEC;  // a team's columns: row t of sums holds team t's
  if (row0 < teams)
#pragma unroll
    for (int e = 0; e < VEC; ++e) sums[row0 * width + lane * VEC + e] = acc[e];
  __syncthreads();

  // The band's columns in units of QUAD (4 floats: one 16-byte store or load; 1 where VEC is 1 and n
  // may be odd), so that each partial moves in few, wide accesses.
  constexpr int QUAD = VEC >= 4 ? 4 : 1;
  using Q = typename Raw<QUAD * sizeof(float)>::type;
  const int first = word0 * VEC, columns = band_words * VEC, units = columns / QUAD;
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    float s[QUAD];
#pragma unroll
    for (int q = 0; q < QUAD; ++q) {
      s[q] = 0.0f;
      for (int t = 0; t < teams; ++t) s[q] += sums[t * width + u * QUAD + q];
    }
    const int c = first + u * QUAD;
    if (splits == 1) {
#pragma unroll
      for (int q = 0; q < QUAD; ++q) C[c + q] = finish(s[q], alpha, beta, C + c + q);
    } else {
      __stcg(reinterpret_cast<Q*>(workspace + (size_t)split * N + c), *reinterpret_cast<const Q*>(s));
    }
  }
  if (splits == 1) return;

  __threadfence();  // the partials are visible before the counter says so
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counters + band, 1u) == (unsigned int)splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // and read after it

  // The last block reads splits x columns floats: `parts` threads a unit where the band has fewer units
  // than the block has threads, each over a contiguous range of the shares with BATCH loads in flight,
  // then the parts in order (deterministic); sums is free again (every thread passed the barriers above).
  constexpr int BATCH = QUAD == 4 ? 4 : 8;  // 64 bytes of loads in flight a thread: more spill at 1024 threads
  const int step = min(units, (int)blockDim.x);
  const int parts = min((int)blockDim.x / step, splits);
  const int unit = threadIdx.x % step, part = threadIdx.x / step;
  if (part < parts)
    for (int u = unit; u < units; u += step) {
      const int lo = part * splits / parts, hi = (part + 1) * splits / parts;
      Q* partial = reinterpret_cast<Q*>(workspace + first + u * QUAD);
      const size_t stride = (size_t)N / QUAD;  // N is a multiple of QUAD where QUAD is 4 (VEC >= 4)
      float s[QUAD] = {};
      for (int k = lo; k < hi; k += BATCH) {
        Q v[BATCH];
#pragma unroll
        for (int j = 0; j < BATCH; ++j)
          if (k + j < hi) v[j] = __ldcg(partial + (size_t)(k + j) * stride);
#pragma unroll
        for (int j = 0; j < BATCH; ++j)
          if (k + j < hi) {
            const float* f = reinterpret_cast<const float*>(&v[j]);
#pragma unroll
            for (int q = 0; q < QUAD; ++q) s[q] += f[q];
            __stcg(partial + (size_t)(k + j) * stride, Q{});
          }
      }
#pragma unroll
      for (int q = 0; q < QUAD; ++q) sums[part * columns + u * QUAD + q] = s[q];
    }
  __syncthreads();
  for (int c = threadIdx.x; c < columns; c += blockDim.x) {
    float s = 0.0f;
    for (int p = 0; p < parts; ++p) s += sums[p * columns + c];
    C[first + c] = finish(s, alpha, beta, C + first + c);
  }
  if (threadIdx.x == 0) counters[band] = 0u;
}

}  // namespace at_wide
