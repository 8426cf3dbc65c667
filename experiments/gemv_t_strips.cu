// The transposed GEMV y = Aᵀx (A row-major M x N, float16) for every shape of the standard set, where our
// shipped path (the skinny GEMM family) runs at cuBLAS's level (geometric mean 1.04x on the H200) and
// about 20% slower than our plain GEMV reads the same bytes (float16 4096x8192: 20.0 us against 16.8).
// The decomposition generalises gemv_t_tall.cu to wide matrices: the columns are cut into strips of
// WIDTH, a team of WIDTH / 8 threads reads one row of a strip as 16-byte words (one coalesced read), a
// block's teams walk its share of the rows with UNROLL rows in flight, and the rows are split over
// gridDim.y blocks per strip. Each block adds its teams' column sums in shared memory and writes one row
// of float partials (or y itself when a strip is not split); the last block of a strip to finish (a
// counter per strip) adds the strip's partials in a fixed order, so the result is deterministic, and
// resets its counter. Checked against a float64 product on random data with y poisoned first; timed as
// autotune times a kernel (bench_common.cuh) beside cuBLAS (cublasGemmEx, the 1 x M by M x N GEMM) and
// the flat read of the same bytes.
//   nvcc -O3 -arch=sm_90 -o /tmp/gemv_t_strips experiments/gemv_t_strips.cu -lcublas && /tmp/gemv_t_strips
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "bench_common.cuh"

constexpr int VEC = 8;  // halves per 16-byte word

template <int BLOCK, int WIDTH, int UNROLL>
__global__ void __launch_bounds__(BLOCK)
    gemv_t_strips(const __half* __restrict__ A, const __half* __restrict__ x, __half* __restrict__ y, int M, int N,
                  float* __restrict__ partial, unsigned* __restrict__ counters) {
  constexpr int WORDS = WIDTH / VEC;    // threads a row of a strip takes
  constexpr int TEAMS = BLOCK / WORDS;  // rows a block reads at once
  static_assert(BLOCK % WORDS == 0 && WIDTH % VEC == 0, "a block holds whole teams");
  __shared__ float sums[TEAMS][WIDTH];
  __shared__ bool last;
  const int word = threadIdx.x % WORDS, team = threadIdx.x / WORDS;
  const int strip = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int c0 = strip * WIDTH;
  const int per_block = (M + splits - 1) / splits;
  const int begin = split * per_block, end = min(M, begin + per_block);
  float acc[VEC] = {};
  const __half* base = A + c0 + word * VEC;
  int r = begin + team;
  for (; r + (UNROLL - 1) * TEAMS < end; r += UNROLL * TEAMS) {
    uint4 a[UNROLL];
    float xr[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      a[u] = __ldcs(reinterpret_cast<const uint4*>(base + (size_t)(r + u * TEAMS) * N));
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
    const uint4 a = __ldcs(reinterpret_cast<const uint4*>(base + (size_t)r * N));
    const float xr = __half2float(__ldg(x + r));
    const __half* h = reinterpret_cast<const __half*>(&a);
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[e] = fmaf(__half2float(h[e]), xr, acc[e]);
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e) sums[team][word * VEC + e] = acc[e];
  __syncthreads();
  for (int c = threadIdx.x; c < WIDTH; c += BLOCK) {
    float s = 0.0f;
#pragma unroll
    for (int t = 0; t < TEAMS; ++t) s += sums[t][c];
    if (splits == 1)
      y[c0 + c] = __float2half(s);
    else
      partial[(size_t)split * N + c0 + c] = s;
  }
  if (splits == 1) return;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counters + strip, 1u) == (unsigned)splits - 1;
  __syncthreads();
  if (!last) return;
  // PARTS threads per column, each adding every PARTS-th split's partial; then the parts in order.
  constexpr int PARTS = BLOCK >= WIDTH ? BLOCK / WIDTH : 1;
  constexpr int STEP = BLOCK >= WIDTH ? WIDTH : BLOCK;
  const int col = threadIdx.x % STEP, part = threadIdx.x / STEP;
  float* spill = &sums[0][0];  // TEAMS * WIDTH = BLOCK * VEC >= PARTS * WIDTH floats
  if (part < PARTS) {
    for (int c = col; c < WIDTH; c += STEP) {
      float s = 0.0f;
      for (int b = part; b < splits; b += PARTS) s += __ldcg(partial + (size_t)b * N + c0 + c);
      spill[part * WIDTH + c] = s;
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < WIDTH; c += BLOCK) {
    float s = 0.0f;
    for (int p = 0; p < PARTS; ++p) s += spill[p * WIDTH + c];
    y[c0 + c] = __float2half(s);
  }
  if (threadIdx.x == 0) counters[strip] = 0u;
}

struct Problem {
  int m, n;
  std::vector<__half*> as;
  __half *x, *y;
  float* partial;
  unsigned* counters;
  std::vector<double> want;
  float cublas_us, floor_us;
};

struct Result {
  float us;
  int block, width, unroll, splits;
};

template <int BLOCK, int WIDTH, int UNROLL>
int run(const BenchSetup& setup, Problem& p, std::vector<Result>& results) {
  if (p.n % WIDTH != 0 || WIDTH > p.n) return 0;
  const int strips = p.n / WIDTH, sms = setup.prop.multiProcessorCount;
  const int teams = BLOCK / (WIDTH / VEC);
  std::vector<int> tried;
  for (int blocks : {sms, 2 * sms, 4 * sms, 8 * sms}) {
    const int splits = std::max(1, std::min((blocks + strips / 2) / strips, p.m / (teams * UNROLL)));
    if (std::find(tried.begin(), tried.end(), splits) != tried.end() || splits > 4096) continue;
    tried.push_back(splits);
    const dim3 grid(strips, splits);
    CHECK(cudaMemset(p.y, 0xff, p.n * sizeof(__half)));
    gemv_t_strips<BLOCK, WIDTH, UNROLL><<<grid, BLOCK>>>(p.as[0], p.x, p.y, p.m, p.n, p.partial, p.counters);
    CHECK(cudaGetLastError());
    std::vector<__half> got(p.n);
    CHECK(cudaMemcpy(got.data(), p.y, p.n * sizeof(__half), cudaMemcpyDeviceToHost));
    double err = 0, scale = 0;
    for (int c = 0; c < p.n; ++c) {
      const double g = __half2float(got[c]);
      err = std::isnan(g) ? INFINITY : fmax(err, fabs(g - p.want[c]));
      scale = fmax(scale, fabs(p.want[c]));
    }
    if (!(err / scale < 2e-3)) {
      printf("  WRONG: block %d width %d unroll %d splits %d rel err %.1e\n", BLOCK, WIDTH, UNROLL, splits,
             err / scale);
      continue;
    }
    const float us = best_of(
        [&](int i) {
          gemv_t_strips<BLOCK, WIDTH, UNROLL>
              <<<grid, BLOCK>>>(p.as[i % p.as.size()], p.x, p.y, p.m, p.n, p.partial, p.counters);
        },
        setup.start, setup.stop);
    results.push_back({us, BLOCK, WIDTH, UNROLL, splits});
  }
  return 0;
}

int shape(const BenchSetup& setup, cublasHandle_t handle, int m, int n) {
  Problem p{m, n};
  const size_t bytes = (size_t)m * n * sizeof(__half);
  p.as = rotating_buffers<__half>(setup.prop, bytes, 0);
  if (p.as.empty()) return 1;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<__half> a0((size_t)m * n), xh(m);
  for (auto& v : a0) v = __float2half(dist(rng));
  for (auto& v : xh) v = __float2half(dist(rng));
  for (__half* a : p.as) CHECK(cudaMemcpy(a, a0.data(), bytes, cudaMemcpyHostToDevice));
  p.want.assign(n, 0.0);
  for (int r = 0; r < m; ++r) {
    const double xr = __half2float(xh[r]);
    for (int c = 0; c < n; ++c) p.want[c] += (double)__half2float(a0[(size_t)r * n + c]) * xr;
  }
  CHECK(cudaMalloc(&p.x, m * sizeof(__half)));
  CHECK(cudaMalloc(&p.y, n * sizeof(__half)));
  CHECK(cudaMalloc(&p.partial, (size_t)4096 * n * sizeof(float)));
  CHECK(cudaMalloc(&p.counters, 65536 * sizeof(unsigned)));
  CHECK(cudaMemset(p.counters, 0, 65536 * sizeof(unsigned)));
  CHECK(cudaMemcpy(p.x, xh.data(), m * sizeof(__half), cudaMemcpyHostToDevice));
  const float one = 1.0f, zero = 0.0f;
  auto cublas = [&](int i) {
    cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, 1, m, &one, p.as[i % p.as.size()], CUDA_R_16F, n, p.x,
                 CUDA_R_16F, m, &zero, p.y, CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  p.cublas_us = best_of(cublas, setup.start, setup.stop);
  const size_t n16 = bytes / 16;
  p.floor_us = best_of(
      [&](int i) {
        read_flat<4><<<setup.prop.multiProcessorCount * 8, 256>>>((const uint4*)p.as[i % p.as.size()], n16,
                                                                    setup.out);
      },
      setup.start, setup.stop);
  std::vector<Result> results;
  if (run<256, 256, 4>(setup, p, results) || run<256, 256, 8>(setup, p, results) ||
      run<512, 256, 4>(setup, p, results) || run<512, 256, 8>(setup, p, results) ||
      run<256, 512, 4>(setup, p, results) || run<256, 512, 8>(setup, p, results) ||
      run<512, 512, 4>(setup, p, results) || run<512, 512, 8>(setup, p, results) ||
      run<256, 1024, 4>(setup, p, results) || run<256, 1024, 8>(setup, p, results) ||
      run<512, 1024, 4>(setup, p, results) || run<512, 1024, 8>(setup, p, results) ||
      run<256, 2048, 4>(setup, p, results) || run<512, 2048, 4>(setup, p, results) ||
      run<512, 2048, 8>(setup, p, results))
    return 1;
  std::sort(results.begin(), results.end(), [](const Result& a, const Result& b) { return a.us < b.us; });
  printf("float16 %6d x %6d (Aᵀx): cuBLAS %7.2f us, flat read %7.2f us, %zu configs", m, n, p.cublas_us, p.floor_us,
         results.size());
  for (size_t i = 0; i < std::min<size_t>(3, results.size()); ++i) {
    const Result& r = results[i];
    printf("%s %7.2f us (cuBLAS/ours %.3f, floor/ours %.3f; block %d width %d unroll %d splits %d)",
           i ? "\n                                                                            " : "\n  best",
           r.us, p.cublas_us / r.us, p.floor_us / r.us, r.block, r.width, r.unroll, r.splits);
  }
  printf("\n");
  for (__half* a : p.as) cudaFree(a);
  cudaFree(p.x), cudaFree(p.y), cudaFree(p.partial), cudaFree(p.counters);
  return 0;
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 1;
  const int shapes[][2] = {{4096, 8192},  {8192, 8192},  {2048, 2048},   {4096, 4096},  {4096, 14336},
                           {14336, 4096}, {28672, 4096}, {8192, 28672},  {1024, 65536}, {65536, 1024},
                           {131072, 256}, {256, 131072}, {16384, 16384}, {1024, 1024}};
  for (const auto& s : shapes)
    if (shape(setup, handle, s[0], s[1])) return 1;
  return 0;
}
