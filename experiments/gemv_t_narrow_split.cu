// Where the narrow family's row split loses to the probe's (gemv_t_narrow_family_nvidia-h200.txt: float16
// 131072 x 256 split 66 ways 23.2 us against 18.1, while unsplit the family's runs 1.3-1.9x faster): the
// family's kernel body (kernels/gemv/gemv_t_narrow.cu, float16, 1024 threads, strips of 64 columns, 16-byte
// loads, 4 rows in flight, L2 prefetch, PDL) copied with each difference of its split path from the probe's
// as a switch, every combination timed beside the family's own kernel on the same grid and buffers:
//   STCG   the partials stored with st.global.cg (the family) or plain stores (the probe);
//   FENCE2 the last block's second __threadfence before it reads them (the family) or none (the probe);
//   ZERO   the last block zeroes each partial as it adds it (sum_partials: the family) or only reads them.
// And the family's kernel held to two blocks an SM (`family_two`), the occupancy the probe's kernel has, and
// the family's kernel with LEAN 1 (`family_lean`), which reaches that occupancy with 8 bytes spilled.
// Each variant is checked against a float64 product with y poisoned first.
//   nvcc -O3 -arch=sm_90 -I kernels -I kernels/common -o /tmp/gemv_t_narrow_split \
//     experiments/gemv_t_narrow_split.cu
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "bench_common.cuh"
#include "gemv/gemv_t_narrow.cu"

constexpr int BLOCK = 1024, WIDTH = 64, VEC = 8, UNROLL = 4;
constexpr int WORDS = WIDTH / VEC, TEAMS = BLOCK / WORDS, WARPS = BLOCK / 32;

__global__ void __launch_bounds__(BLOCK)
    family(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
           float* workspace, unsigned* counters) {
  at_narrow::narrow_body<__half, false, BLOCK, WIDTH, VEC, UNROLL, 1>(x, A, y, one, N, M, lda, ldb, ldc, 1.0f, 0.0f,
                                                                      workspace, counters);
}

// The family's kernel held to two blocks an SM (32 registers a thread at 1024 threads; it spills about 200
// bytes, one reload a step in the row loop): the probe's kernel takes 32 registers unasked and runs two blocks
// an SM, the family's 60 registers allow one, so a split grid of 2 blocks an SM (131072 x 256 at 66 splits:
// 264 blocks) takes the family two waves.
__global__ void __launch_bounds__(BLOCK, 2)
    family_two(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
               float* workspace, unsigned* counters) {
  at_narrow::narrow_body<__half, false, BLOCK, WIDTH, VEC, UNROLL, 1>(x, A, y, one, N, M, lda, ldb, ldc, 1.0f, 0.0f,
                                                                      workspace, counters);
}

// The family's kernel with LEAN 1 (no branch around the row loop, the partials added one at a time), held to
// two blocks an SM: 32 registers, 8 bytes spilled outside the loop, against 60 for the family's.
__global__ void __launch_bounds__(BLOCK, 2)
    family_lean(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
                 float* workspace, unsigned* counters) {
  at_narrow::narrow_body<__half, false, BLOCK, WIDTH, VEC, UNROLL, 1, 1>(x, A, y, one, N, M, lda, ldb, ldc, 1.0f,
                                                                         0.0f, workspace, counters);
}

template <int STCG, int FENCE2, int ZERO>
__global__ void __launch_bounds__(BLOCK)
    variant(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
            float* workspace, unsigned* counters) {
  __shared__ float sums[WARPS][WIDTH];
  __shared__ bool last;
  const int word = threadIdx.x % WORDS, team = threadIdx.x / WORDS;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int strip = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int first = strip * WIDTH, column = first + word * VEC;
  const bool inside = column < N;
  const int per = (M + splits - 1) / splits;
  const int begin = min(M, split * per), end = min(M, begin + per);
  const __half* base = A + column;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (inside)
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int row = begin + team + u * TEAMS;
      if (row < end) asm volatile("prefetch.global.L2 [%0];" ::"l"(base + (size_t)row * ldb) : "memory");
    }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  float acc[VEC] = {};
  if (inside) {
    int r = begin + team;
    for (; r + (UNROLL - 1) * TEAMS < end; r += UNROLL * TEAMS) {
      uint4 raw[UNROLL];
      float xr[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        raw[u] = __ldcs(reinterpret_cast<const uint4*>(base + (size_t)(r + u * TEAMS) * ldb));
        xr[u] = __half2float(__ldg(x + r + u * TEAMS));
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const __half* h = reinterpret_cast<const __half*>(&raw[u]);
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[e] = fmaf(__half2float(h[e]), xr[u], acc[e]);
      }
    }
    for (; r < end; r += TEAMS) {
      const uint4 raw = __ldcs(reinterpret_cast<const uint4*>(base + (size_t)r * ldb));
      const float xr = __half2float(__ldg(x + r));
      const __half* h = reinterpret_cast<const __half*>(&raw);
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] = fmaf(__half2float(h[e]), xr, acc[e]);
    }
  }
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
      y[first + c] = __float2half(s);
    else if (STCG)
      __stcg(workspace + (size_t)split * N + first + c, s);
    else
      workspace[(size_t)split * N + first + c] = s;
  }
  if (splits == 1) return;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counters + strip, 1u) == (unsigned)splits - 1;
  __syncthreads();
  if (!last) return;
  if (FENCE2) __threadfence();
  constexpr int PARTS = BLOCK / WIDTH < WARPS ? BLOCK / WIDTH : WARPS;
  const int col = threadIdx.x % WIDTH, part = threadIdx.x / WIDTH;
  if (part < PARTS) {
    float s = 0.0f;
    if (first + col < N) {
      const int lo = part * splits / PARTS, hi = (part + 1) * splits / PARTS;
      if (ZERO)
        s = at_common::sum_partials(workspace + first + col, (size_t)N, lo, hi);
      else
        for (int b = lo; b < hi; ++b) s += __ldcg(workspace + (size_t)b * N + first + col);
    }
    sums[part][col] = s;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < WIDTH; c += BLOCK) {
    if (first + c >= N) continue;
    float s = 0.0f;
#pragma unroll
    for (int p = 0; p < PARTS; ++p) s += sums[p][c];
    y[first + c] = __float2half(s);
  }
  if (threadIdx.x == 0) counters[strip] = 0u;
}

using Kernel = void (*)(const __half*, const __half*, __half*, int, int, int, int, int, int, float*, unsigned*);

int shape(const BenchSetup& setup, int m, int n, std::vector<int> split_counts) {
  const size_t bytes = (size_t)m * n * sizeof(__half);
  std::vector<__half*> as = rotating_buffers<__half>(setup.prop, bytes, 0);
  if (as.empty()) return 1;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<__half> a0((size_t)m * n), xh(m);
  for (auto& v : a0) v = __float2half(dist(rng));
  for (auto& v : xh) v = __float2half(dist(rng));
  for (__half* a : as) CHECK(cudaMemcpy(a, a0.data(), bytes, cudaMemcpyHostToDevice));
  std::vector<double> want(n, 0.0);
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) want[c] += (double)__half2float(a0[(size_t)r * n + c]) * __half2float(xh[r]);
  __half *x, *y;
  float* workspace;
  unsigned* counters;
  CHECK(cudaMalloc(&x, m * sizeof(__half)));
  CHECK(cudaMalloc(&y, n * sizeof(__half)));
  CHECK(cudaMalloc(&workspace, (size_t)4096 * n * sizeof(float)));
  CHECK(cudaMalloc(&counters, 65536 * sizeof(unsigned)));
  CHECK(cudaMemset(workspace, 0, (size_t)4096 * n * sizeof(float)));
  CHECK(cudaMemset(counters, 0, 65536 * sizeof(unsigned)));
  CHECK(cudaMemcpy(x, xh.data(), m * sizeof(__half), cudaMemcpyHostToDevice));
  const Kernel kernels[] = {family,           variant<1, 1, 1>, variant<0, 1, 1>, variant<1, 0, 1>, variant<1, 1, 0>,
                            variant<0, 0, 1>, variant<0, 1, 0>, variant<1, 0, 0>, variant<0, 0, 0>, family_two,
                            family_lean};
  const char* names[] = {"family",        "STCG FENCE2 ZERO", "FENCE2 ZERO", "STCG ZERO",          "STCG FENCE2",
                         "ZERO",          "FENCE2",           "STCG",        "none (the probe's)", "family, 2 blocks an SM",
                         "family, lean"};
  constexpr int KERNELS = sizeof(kernels) / sizeof(kernels[0]);
  static_assert(KERNELS == sizeof(names) / sizeof(names[0]), "a name for each kernel");
  for (int splits : split_counts) {
    const dim3 grid(n / WIDTH, splits);
    printf("float16 %6d x %6d split %4d:", m, n, splits);
    for (int k = 0; k < KERNELS; ++k) {
      auto call = [&](int i) {
        launch(kernels[k], true, grid, dim3(BLOCK), (const __half*)x, (const __half*)as[i % as.size()], y, 1, n, m,
               m, n, n, workspace, counters);
      };
      CHECK(cudaMemset(y, 0xff, n * sizeof(__half)));
      call(0);
      std::vector<__half> got(n);
      CHECK(cudaMemcpy(got.data(), y, n * sizeof(__half), cudaMemcpyDeviceToHost));
      double err = 0, scale = 0;
      for (int c = 0; c < n; ++c) {
        const double g = __half2float(got[c]);
        err = std::isnan(g) ? INFINITY : fmax(err, fabs(g - want[c]));
        scale = fmax(scale, fabs(want[c]));
      }
      const float us = err / scale < 2e-3 ? best_of(call, setup.start, setup.stop) : -1.0f;
      printf("%s %s %.2f", k ? "," : "", names[k], us);
    }
    printf("\n");
    fflush(stdout);
  }
  for (__half* a : as) cudaFree(a);
  cudaFree(x), cudaFree(y), cudaFree(workspace), cudaFree(counters);
  return 0;
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  for (auto [kernel, name] : {std::pair<Kernel, const char*>{family, "family"}, {variant<0, 0, 0>, "the probe's split"},
                              {family_two, "family, 2 blocks an SM"},
                              {family_lean, "family, lean"}}) {
    cudaFuncAttributes attributes;
    CHECK(cudaFuncGetAttributes(&attributes, kernel));
    printf("%s: %d registers, %zu bytes local a thread\n", name, attributes.numRegs, attributes.localSizeBytes);
  }
  if (shape(setup, 131072, 256, {33, 66, 132}) || shape(setup, 4096, 4096, {1, 4, 8}) ||
      shape(setup, 65536, 1024, {16, 33}) ||
      shape(setup, 2304, 9216, {1, 2, 4, 7}) || shape(setup, 1536, 8960, {1, 2, 4}))
    return 1;
  return 0;
}
