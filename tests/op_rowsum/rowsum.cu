// The test op's kernel: y[i] = alpha * sum_j A[i][j] + beta * y[i], a block of THREADS threads per
// row, each adding UNROLL elements a step. Small on purpose: it proves the op interface, not speed.
#pragma once
#include "common.cuh"

namespace at_rowsum {

template <typename T, int THREADS, int UNROLL>
__device__ void rowsum(const T* A, T* y, int M, int N, float alpha, float beta) {
  __shared__ float warp_sums[THREADS / 32];
  const int row = blockIdx.x;
  if (row >= M) return;
  const T* a = A + (size_t)row * N;
  float acc = 0.0f;
  for (int j = threadIdx.x; j < N; j += THREADS * UNROLL) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int col = j + u * THREADS;
      if (col < N) acc += at_common::to_float(a[col]);
    }
  }
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < THREADS / 32; ++w) total += warp_sums[w];
    y[row] = at_common::finish<T>(total, alpha, beta, y + row);
  }
}

}  // namespace at_rowsum
