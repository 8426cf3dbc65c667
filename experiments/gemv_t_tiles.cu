// Short-and-wide transposed GEMVs (y = Aᵀx, A row-major M x N, float16) lose to cuBLAS in the narrow family
// because its unit of work is a whole strip: float16 2304 x 9216 has 144 strips of 64 columns for 132 SMs,
// one block of 1024 threads an SM, so it runs two waves of about 8 us (16.5 us; cuBLAS 13.3-14.1, the read
// floor 9.7), and splitting the rows costs each block more than the waves do (docs/findings.md). Does a
// persistent grid over smaller units, (strip, chunk of ROWS rows), that adds each unit's column sums into
// a float accumulator with atomics, balance the SMs without a split's cost?
//   tiles<BLOCK, WIDTH, UNROLL, ROWS, PER_SM>: gridDim.x = PER_SM blocks an SM, each walking units
//   blockIdx.x, + gridDim.x, ...; unit u is strip u % strips of chunk u / strips (neighbouring blocks read
//   neighbouring strips of the same rows). A team of WIDTH / 8 threads reads a row of the strip with
//   16-byte loads, UNROLL rows in flight; the block adds its teams' sums (shuffles, then shared memory) and
//   atomically adds them to acc; the last unit of a strip to finish (a counter per strip) writes y from
//   acc and zeroes acc and its counter, so both are zero again after each launch. Launched with PDL as
//   autotune launches narrow, each block's first rows prefetched into L2 before griddepcontrol.wait.
// Beside it, narrow's kernel (kernels/gemv/gemv_t_narrow.cu) unsplit at 1024 threads and strips of 64 and
// 32, in the same harness; every kernel is checked against a float64 product with y poisoned first.
// On the H200 (gemv_t_tiles_nvidia-h200.txt) no tiling beat narrow unsplit on 2304 x 9216 (16.55 us against
// 16.49), nor the shipped picks on any shape: balancing the SMs is not what that shape lacks.
//   nvcc -O3 -arch=sm_90 -I kernels -I kernels/common -o /tmp/gemv_t_tiles experiments/gemv_t_tiles.cu
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gemv/gemv_t_narrow.cu"
#include "gemv_t_harness.cuh"

constexpr int VEC = 8;  // halves a 16-byte load holds

template <int BLOCK, int WIDTH, int UNROLL, int ROWS>
__global__ void __launch_bounds__(BLOCK, 2048 / BLOCK)  // 32 registers: 2048 threads an SM
    tiles(const __half* __restrict__ x, const __half* __restrict__ A, __half* __restrict__ y, int M, int N,
          float* __restrict__ acc, unsigned* __restrict__ counters) {
  constexpr int WORDS = WIDTH / VEC, TEAMS = BLOCK / WORDS, WARPS = BLOCK / 32;
  static_assert(WORDS >= 1 && 32 % WORDS == 0 && BLOCK % 32 == 0, "whole teams in a warp");
  __shared__ float sums[WARPS][WIDTH];
  __shared__ bool last;
  const int word = threadIdx.x % WORDS, team = threadIdx.x / WORDS;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int strips = N / WIDTH, chunks = (M + ROWS - 1) / ROWS, units = strips * chunks;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if ((int)blockIdx.x < units) {
    const int strip = blockIdx.x % strips, begin = (blockIdx.x / strips) * ROWS;
    const __half* base = A + strip * WIDTH + word * VEC;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int row = begin + team + u * TEAMS;
      if (row < M) asm volatile("prefetch.global.L2 [%0];" ::"l"(base + (size_t)row * N) : "memory");
    }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int strip = unit % strips, chunk = unit / strips;
    const int first = strip * WIDTH, begin = chunk * ROWS, end = min(M, begin + ROWS);
    const __half* base = A + first + word * VEC;
    float a[VEC] = {};
    int r = begin + team;
    for (; r + (UNROLL - 1) * TEAMS < end; r += UNROLL * TEAMS) {
      uint4 raw[UNROLL];
      float xr[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        raw[u] = __ldcs(reinterpret_cast<const uint4*>(base + (size_t)(r + u * TEAMS) * N));
        xr[u] = __half2float(__ldg(x + r + u * TEAMS));
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const __half* h = reinterpret_cast<const __half*>(&raw[u]);
#pragma unroll
        for (int e = 0; e < VEC; ++e) a[e] = fmaf(__half2float(h[e]), xr[u], a[e]);
      }
    }
    for (; r < end; r += TEAMS) {
      const uint4 raw = __ldcs(reinterpret_cast<const uint4*>(base + (size_t)r * N));
      const float xr = __half2float(__ldg(x + r));
      const __half* h = reinterpret_cast<const __half*>(&raw);
#pragma unroll
      for (int e = 0; e < VEC; ++e) a[e] = fmaf(__half2float(h[e]), xr, a[e]);
    }
#pragma unroll
    for (int offset = WORDS; offset < 32; offset *= 2)
#pragma unroll
      for (int e = 0; e < VEC; ++e) a[e] += __shfl_xor_sync(0xffffffffu, a[e], offset);
    if (lane < WORDS)
#pragma unroll
      for (int e = 0; e < VEC; ++e) sums[warp][word * VEC + e] = a[e];
    __syncthreads();
    for (int c = threadIdx.x; c < WIDTH; c += BLOCK) {
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) s += sums[w][c];
      atomicAdd(acc + first + c, s);
    }
    __threadfence();  // this block's additions are visible before the counter says so
    __syncthreads();  // and sums is free for the next unit
    if (threadIdx.x == 0) last = atomicAdd(counters + strip, 1u) == (unsigned)chunks - 1;
    __syncthreads();
    if (last) {
      __threadfence();
      for (int c = threadIdx.x; c < WIDTH; c += BLOCK) {
        y[first + c] = __float2half(__ldcg(acc + first + c));
        __stcg(acc + first + c, 0.0f);
      }
      if (threadIdx.x == 0) counters[strip] = 0u;
    }
  }
}

// narrow's kernel at one tiling, taking the GEMM argument list as autotune passes it (x as A, the matrix
// as B, y as C), unsplit.
template <int BLOCK, int WIDTH>
__global__ void __launch_bounds__(BLOCK)
    family(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
           float* workspace, unsigned* counters) {
  at_narrow::narrow_body<__half, false, BLOCK, WIDTH, VEC, 4, 1>(x, A, y, one, N, M, lda, ldb, ldc, 1.0f, 0.0f,
                                                                  workspace, counters);
}

template <int BLOCK, int WIDTH, int UNROLL, int ROWS, int PER_SM>
TransposedCase tiles_case() {
  auto kernel = tiles<BLOCK, WIDTH, UNROLL, ROWS>;
  return {"tiles b" + std::to_string(BLOCK) + " w" + std::to_string(WIDTH) + " u" + std::to_string(UNROLL) +
              " rows " + std::to_string(ROWS) + " x" + std::to_string(PER_SM),
          WIDTH,
          [kernel](const __half* x, const __half* a, __half* y, int m, int n, float* acc, unsigned* counters,
                   int sms) {
            return launch(kernel, true, dim3(sms * PER_SM), dim3(BLOCK), x, a, y, m, n, acc, counters);
          }};
}

template <int BLOCK, int WIDTH>
TransposedCase family_case() {
  auto kernel = family<BLOCK, WIDTH>;
  return {"narrow b" + std::to_string(BLOCK) + " w" + std::to_string(WIDTH) + " unsplit", WIDTH,
          [kernel](const __half* x, const __half* a, __half* y, int m, int n, float* acc, unsigned* counters, int) {
            return launch(kernel, true, dim3(n / WIDTH, 1), dim3(BLOCK), x, a, y, 1, n, m, m, n, n, acc, counters);
          }};
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  const std::vector<TransposedCase> cases = {
      family_case<1024, 64>(),
      family_case<1024, 32>(),
      tiles_case<512, 64, 4, 256, 4>(),
      tiles_case<512, 64, 4, 512, 4>(),
      tiles_case<256, 64, 4, 256, 8>(),
      tiles_case<256, 64, 8, 512, 8>(),
      tiles_case<1024, 64, 4, 512, 2>(),
      tiles_case<512, 128, 4, 256, 4>(),
      tiles_case<256, 64, 4, 128, 8>(),
      tiles_case<1024, 64, 4, 1024, 2>(),
  };
  for (auto [m, n] : {std::pair{2304, 9216}, {1536, 8960}, {4544, 4544}, {5120, 5120}, {4096, 4096},
                      {7168, 5120}, {16384, 3072}, {4096, 11008},
                      {8192, 4096}, {14336, 4096}, {28672, 4096}, {4096, 14336}})
    if (time_cases(setup, m, n, cases, 1)) return 1;
  return 0;
}
