// The transposed GEMV of a tall, narrow matrix (y = Aᵀx, A row-major M x N, M >= 16384, N <= 1024),
// where the skinny GEMM family that serves transposed GEMVs trails cuBLAS (float16 131072x256: 0.87x,
// 65536x1024: 0.95x on the H200). A dedicated decomposition: each thread owns one 16-byte word of
// columns (VEC of them) and a team of N / VEC threads covers a row, so every row is one coalesced
// read; the block's teams walk their share of the rows with UNROLL rows in flight, add their column
// sums in shared memory, and write one row of float partials; the last block to finish (a counter)
// adds the blocks' partials in a fixed order, so the result is deterministic, and resets the counter.
// Checked against a float64 product on random data with y poisoned first; timed as autotune times a
// kernel (bench_common.cuh) beside cuBLAS (cublasGemmEx, the same product as a 1 x M by M x N GEMM)
// and the flat read of the same bytes.
//   nvcc -O3 -arch=sm_90 -o /tmp/gemv_t_tall experiments/gemv_t_tall.cu -lcublas && /tmp/gemv_t_tall
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <cmath>
#include <random>

#include "bench_common.cuh"

constexpr int VEC = 8;  // halves per 16-byte word

template <int BLOCK, int N, int UNROLL>
__global__ void __launch_bounds__(BLOCK) gemv_t_tall(const __half* __restrict__ A, const __half* __restrict__ x,
                                                     __half* __restrict__ y, int M, float* __restrict__ partial,
                                                     unsigned* __restrict__ counter) {
  constexpr int WORDS = N / VEC;       // threads a row takes
  constexpr int TEAMS = BLOCK / WORDS;  // rows a block reads at once
  static_assert(BLOCK % WORDS == 0 && N % VEC == 0, "a block holds whole teams");
  __shared__ float sums[TEAMS][N];
  __shared__ bool last;
  const int word = threadIdx.x % WORDS, team = threadIdx.x / WORDS;
  const int per_block = (M + gridDim.x - 1) / gridDim.x;
  const int begin = blockIdx.x * per_block, end = min(M, begin + per_block);
  float acc[VEC] = {};
  const uint4* rows = reinterpret_cast<const uint4*>(A) + word;
  int r = begin + team;
  for (; r + (UNROLL - 1) * TEAMS < end; r += UNROLL * TEAMS) {
    uint4 a[UNROLL];
    float xr[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      a[u] = __ldcs(rows + (size_t)(r + u * TEAMS) * WORDS);
      xr[u] = __half2float(__ldg(x + r + u * TEAMS));
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const __half* h = reinterpret_cast<const __half*>(&a[u]);
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] = fmaf(__half2float(h[e]), xr[u], acc[e]);
    }
  }
  for (; r < end; r += TEAMS) {
    const uint4 a = __ldcs(rows + (size_t)r * WORDS);
    const float xr = __half2float(__ldg(x + r));
    const __half* h = reinterpret_cast<const __half*>(&a);
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[e] = fmaf(__half2float(h[e]), xr, acc[e]);
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e) sums[team][word * VEC + e] = acc[e];
  __syncthreads();
  for (int c = threadIdx.x; c < N; c += BLOCK) {
    float s = 0.0f;
#pragma unroll
    for (int t = 0; t < TEAMS; ++t) s += sums[t][c];
    partial[(size_t)blockIdx.x * N + c] = s;
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  // PARTS threads per column, each adding every PARTS-th block's partial; then the parts in order.
  constexpr int PARTS = BLOCK >= N ? BLOCK / N : 1;
  const int c0 = threadIdx.x % N, part = threadIdx.x / N;
  float* spill = &sums[0][0];  // TEAMS * N >= PARTS * N floats
  if (part < PARTS) {
    for (int c = c0; c < N; c += BLOCK >= N ? N : BLOCK) {
      float s = 0.0f;
      for (int b = part; b < (int)gridDim.x; b += PARTS) s += __ldcg(partial + (size_t)b * N + c);
      spill[part * N + c] = s;
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < N; c += BLOCK) {
    float s = 0.0f;
    for (int p = 0; p < PARTS; ++p) s += spill[p * N + c];
    y[c] = __float2half(s);
  }
  if (threadIdx.x == 0) *counter = 0u;
}

template <int BLOCK, int N, int UNROLL>
int run(const BenchSetup& setup, int m, int grid, const std::vector<__half*>& as, const __half* x, __half* y,
        float* partial, unsigned* counter, const std::vector<double>& want, float cublas_us, float floor_us) {
  // Correctness on the first buffer, y poisoned with NaN first.
  CHECK(cudaMemset(y, 0xff, N * sizeof(__half)));
  gemv_t_tall<BLOCK, N, UNROLL><<<grid, BLOCK>>>(as[0], x, y, m, partial, counter);
  CHECK(cudaGetLastError());
  std::vector<__half> got(N);
  CHECK(cudaMemcpy(got.data(), y, N * sizeof(__half), cudaMemcpyDeviceToHost));
  double err = 0, scale = 0;
  for (int c = 0; c < N; ++c) {
    const double g = __half2float(got[c]);
    err = std::isnan(g) ? INFINITY : fmax(err, fabs(g - want[c]));
    scale = fmax(scale, fabs(want[c]));
  }
  const float us = best_of(
      [&](int i) { gemv_t_tall<BLOCK, N, UNROLL><<<grid, BLOCK>>>(as[i % as.size()], x, y, m, partial, counter); },
      setup.start, setup.stop);
  printf("  block %3d unroll %d grid %4d: %7.2f us  cuBLAS/ours %.3f  floor/ours %.3f  rel err %.1e%s\n", BLOCK,
         UNROLL, grid, us, cublas_us / us, floor_us / us, err / scale, err / scale < 2e-3 ? "" : "  WRONG");
  return 0;
}

template <int N>
int shape(const BenchSetup& setup, cublasHandle_t handle, int m) {
  const size_t bytes = (size_t)m * N * sizeof(__half);
  std::vector<__half*> as = rotating_buffers<__half>(setup.prop, bytes, 0);
  if (as.empty()) return 1;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<__half> a0((size_t)m * N), xh(m);
  for (auto& v : a0) v = __float2half(dist(rng));
  for (auto& v : xh) v = __float2half(dist(rng));
  for (__half* a : as) CHECK(cudaMemcpy(a, a0.data(), bytes, cudaMemcpyHostToDevice));
  std::vector<double> want(N, 0.0);
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < N; ++c) want[c] += (double)__half2float(a0[(size_t)r * N + c]) * __half2float(xh[r]);
  __half *x, *y;
  float* partial;
  unsigned* counter;
  CHECK(cudaMalloc(&x, m * sizeof(__half)));
  CHECK(cudaMalloc(&y, N * sizeof(__half)));
  CHECK(cudaMalloc(&partial, (size_t)2048 * N * sizeof(float)));
  CHECK(cudaMalloc(&counter, sizeof(unsigned)));
  CHECK(cudaMemset(counter, 0, sizeof(unsigned)));
  CHECK(cudaMemcpy(x, xh.data(), m * sizeof(__half), cudaMemcpyHostToDevice));
  // cuBLAS: y (1 x N) = x (1 x M) . A (M x N), row-major; in cuBLAS's column-major terms
  // yᵀ (N x 1) = Aᵀ (N x M, A's storage read as column-major N x M) . xᵀ (M x 1).
  const float one = 1.0f, zero = 0.0f;
  auto cublas = [&](int i) {
    cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, 1, m, &one, as[i % as.size()], CUDA_R_16F, N, x, CUDA_R_16F, m,
                 &zero, y, CUDA_R_16F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  const float cublas_us = best_of(cublas, setup.start, setup.stop);
  const size_t n16 = bytes / 16;
  const float floor_us = best_of(
      [&](int i) { read_flat<4><<<setup.prop.multiProcessorCount * 8, 256>>>((const uint4*)as[i % as.size()], n16,
                                                                            setup.out); },
      setup.start, setup.stop);
  printf("float16 %d x %d (Aᵀx): cuBLAS %.2f us, flat read %.2f us\n", m, N, cublas_us, floor_us);
  const int sms = setup.prop.multiProcessorCount;
  for (int grid : {sms, 2 * sms, 4 * sms}) {
    if (run<256, N, 4>(setup, m, grid, as, x, y, partial, counter, want, cublas_us, floor_us)) return 1;
    if (run<256, N, 8>(setup, m, grid, as, x, y, partial, counter, want, cublas_us, floor_us)) return 1;
    if (run<512, N, 4>(setup, m, grid, as, x, y, partial, counter, want, cublas_us, floor_us)) return 1;
    if (run<512, N, 8>(setup, m, grid, as, x, y, partial, counter, want, cublas_us, floor_us)) return 1;
    if (run<1024, N, 4>(setup, m, grid, as, x, y, partial, counter, want, cublas_us, floor_us)) return 1;
  }
  for (__half* a : as) cudaFree(a);
  cudaFree(x), cudaFree(y), cudaFree(partial), cudaFree(counter);
  return 0;
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (shape<256>(setup, handle, 131072)) return 1;
  if (shape<1024>(setup, handle, 65536)) return 1;
  if (shape<256>(setup, handle, 262144)) return 1;
  return 0;
}
