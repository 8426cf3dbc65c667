// GEMV for callers whose matrix A is not written by any kernel that may still run when this call
// starts: the weights of a model, as opposed to x, which the kernel before usually writes. Such a
// call may start reading A before it waits for the kernel before it (griddepcontrol.wait), so that
// A's DRAM latency overlaps the end of that kernel instead of following it.
//
// Each instance is gemv.cu's, unchanged, with one step added in front: after programmatic_start,
// every thread prefetches into L1 the vectors of A that its first step in gemv_body will load (its
// block's first tile, the first UNROLL vectors of each of its rows), and only then does gemv_body
// wait and load. L1 is not kept coherent with other SMs' writes, which is why this is only for a
// matrix nothing writes meanwhile; x, y and the split-K workspace are read after the wait as always.
// The loads in gemv_body find those lines in L1 (every load path of load_stream looks L1 up; only
// allocation on a miss differs). Kept in its own file so that gemv.cu's instances, and every
// measurement of them, stay as they are.
#pragma once
#include "gemv.cu"

namespace at_gemv {

// LEVEL 1 prefetches into L1 (and L2), LEVEL 2 into L2 only; the first DEPTH (<= UNROLL) vectors of
// each row are prefetched.
template <typename T, int BLOCK, int LANES, int VEC, int ROWS, int LEVEL, int DEPTH>
__device__ __forceinline__ void prefetch_first_step(const T* __restrict__ A, int M, int N) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  typedef typename at_common::Raw<VEC * sizeof(T)>::type V;
  constexpr int ROWS_PER_BLOCK = BLOCK / LANES * ROWS;
  // The same addresses as gemv_body's first tile and first step (see there).
  const int lane = threadIdx.x % LANES;
  const int group = threadIdx.x / LANES;
  long long v_begin, v_end;
  split_range<LANES>(N / VEC, v_begin, v_end);
  const long long len = v_end - v_begin;
  const int row0 = blockIdx.x * ROWS_PER_BLOCK + group * ROWS;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const V* row = reinterpret_cast<const V*>(A + (size_t)min(row0 + r, M - 1) * N) + v_begin;
#pragma unroll
    for (int u = 0; u < DEPTH; ++u) {
      const long long v = lane + (long long)u * LANES;
      if (v >= len) break;
      if (LEVEL == 1) asm volatile("prefetch.global.L1 [%0];" ::"l"(row + v) : "memory");
      if (LEVEL == 2) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + v) : "memory");
    }
  }
#endif
}

}  // namespace at_gemv

// One instance, as autotune/ops/gemv_static_a.py generates it:
//   extern "C" __global__ void __launch_bounds__(256) gemv_static_a_<key>(const __half* A, ...) {
//     at_gemv::programmatic_start<__half, 256, 32, 8, 1, 0>(A, M, N);
//     at_gemv::prefetch_first_step<__half, 256, 32, 8, 1, 1, 2>(A, M, N);
//     at_gemv::gemv_body<__half, 256, 32, 8, 2, 1, 0, 0, 1, 0>(A, x, y, M, N, alpha, beta, partial, counters);
//   }
