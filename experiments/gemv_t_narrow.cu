// The transposed GEMV y = Aᵀx (A row-major M x N, float16) over narrow column strips: does a strip of
// 16-128 columns, read by a team of 2-16 threads (64-256 bytes of each row), with the rows split over few
// or no blocks, read the mid-size shapes closer to the flat read than the skinny family (float16 4096²
// on the H200: 13.2 us, where the plain GEMV reads the same bytes in 8.7 and the flat read takes 8.0)?
// gemv_t_strips.cu tried strips of 256-2048 columns, whose blocks add their teams' sums serially and
// split the rows over 132-1056 blocks a strip; here the strips are narrow enough that the strips alone
// fill the GPU, so most shapes need no cross-block sum at all, and a block adds its teams' sums with warp
// shuffles first (the lanes of a warp that own the same columns) and then over its warps.
// Each block writes y (one split) or a row of float partials that the last block of the strip adds in
// split order (a counter per strip, reset by that block), as gemv_t_strips.cu does. Checked against a
// float64 product on random data with y poisoned first; timed as autotune times a kernel
// (bench_common.cuh) beside cuBLAS (cublasGemmEx, the 1 x M by M x N GEMM) and the flat read.
// With the argument `pdl`, every kernel is launched with programmatic dependent launch, as autotune launches
// its plain GEMVs on sm_90 (the next call's blocks start while this one drains and wait before reading),
// without or with an L2 prefetch of each thread's first rows before the wait, and the flat read is the
// floor autotune's benchmarks measure against: launched the same way, each thread's first word prefetched.
//   nvcc -O3 -arch=sm_90 -I kernels -I kernels/common -o /tmp/gemv_t_narrow experiments/gemv_t_narrow.cu -lcublas
//   /tmp/gemv_t_narrow       # plain launches:  experiments/gemv_t_narrow_nvidia-h200.txt
//   /tmp/gemv_t_narrow pdl   # PDL launches:    experiments/gemv_t_narrow_pdl_nvidia-h200.txt
//   /tmp/gemv_t_narrow pdl 131072 256   # one shape of the set
//   /tmp/gemv_t_narrow family 131072 256   # this probe's kernel beside kernels/gemv/gemv_t_narrow.cu's
// (compile with -I kernels -I kernels/common).
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "gemv/gemv_t_narrow.cu"  // the narrow family's kernel, for the `family` mode (-I kernels -I kernels/common)

constexpr int VEC = 8;  // halves per 16-byte word

template <int BLOCK, int WIDTH, int UNROLL, int PDL>
__global__ void __launch_bounds__(BLOCK)
    gemv_t_narrow(const __half* __restrict__ A, const __half* __restrict__ x, __half* __restrict__ y, int M, int N,
                  float* __restrict__ partial, unsigned* __restrict__ counters) {
  constexpr int WORDS = WIDTH / VEC;    // threads a row of a strip takes (a power of two up to 32)
  constexpr int TEAMS = BLOCK / WORDS;  // rows a block reads at once
  constexpr int WARPS = BLOCK / 32;
  static_assert(WORDS >= 1 && WORDS <= 32 && 32 % WORDS == 0 && WIDTH % VEC == 0, "whole teams in a warp");
  __shared__ float sums[WARPS][WIDTH];
  __shared__ bool last;
  const int word = threadIdx.x % WORDS, team = threadIdx.x / WORDS;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int strip = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int c0 = strip * WIDTH;
  const int per_block = (M + splits - 1) / splits;
  const int begin = min(M, split * per_block), end = min(M, begin + per_block);
  float acc[VEC] = {};
  const __half* base = A + c0 + word * VEC;
  int r = begin + team;
  if (PDL > 0) {
    // Launched with PDL: let the next grid's blocks in, prefetch (PDL 2: into L2) this thread's first UNROLL
    // rows, which no earlier kernel writes, then wait for the previous grid before reading anything.
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (PDL == 2)
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        if (r + u * TEAMS < end) asm volatile("prefetch.global.L2 [%0];" ::"l"(base + (size_t)(r + u * TEAMS) * N));
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
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
  // The lanes of a warp with the same word own the same columns: add them, lanes < WORDS keep the sums.
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
  // PARTS threads per column, each adding a contiguous range of the splits' partials; then the parts in order.
  constexpr int PARTS = BLOCK / WIDTH < WARPS ? BLOCK / WIDTH : WARPS;
  const int col = threadIdx.x % WIDTH, part = threadIdx.x / WIDTH;
  if (part < PARTS) {
    float s = 0.0f;
    const int lo = part * splits / PARTS, hi = (part + 1) * splits / PARTS;
    for (int b = lo; b < hi; ++b) s += __ldcg(partial + (size_t)b * N + c0 + col);
    sums[part][col] = s;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < WIDTH; c += BLOCK) {
    float s = 0.0f;
    for (int p = 0; p < PARTS; ++p) s += sums[p][c];
    y[c0 + c] = __float2half(s);
  }
  if (threadIdx.x == 0) counters[strip] = 0u;
}

// The flat read of bench_common.cuh, launched with PDL and prefetching each thread's first word into L2
// before the wait: the read floor autotune's GEMV benchmarks measure against (autotune/measure/floor.py).
template <int LOADS>
__global__ void read_flat_pdl(const uint4* __restrict__ a, size_t n16, unsigned* __restrict__ out) {
  const size_t stride = (size_t)gridDim.x * blockDim.x, first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (first < n16) asm volatile("prefetch.global.L2 [%0];" ::"l"(a + first));
  asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned acc = 0;
  for (size_t i = first; i < n16; i += stride * LOADS) {
    uint4 v[LOADS];
#pragma unroll
    for (int u = 0; u < LOADS; ++u) v[u] = i + u * stride < n16 ? __ldcs(a + i + u * stride) : uint4{};
#pragma unroll
    for (int u = 0; u < LOADS; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// The narrow family's kernel (kernels/gemv/gemv_t_narrow.cu) at the probe's commonest tiling, taking the
// GEMM argument list as autotune passes it: x as A (1 x M), the matrix as B (M x N), y as C.
__global__ void __launch_bounds__(1024)
    family_1024_64(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
                   float alpha, float beta, float* workspace, unsigned* counters) {
  at_narrow::narrow_body<__half, false, 1024, 64, 8, 4, 1>(x, A, y, one, N, M, lda, ldb, ldc, alpha, beta, workspace,
                                                           counters);
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
  int block, width, unroll, splits, pdl;
};

// y against the float64 product, relative to its largest entry (infinite where y holds a NaN or cannot be read).
double relative_error(const Problem& p) {
  std::vector<__half> got(p.n);
  if (cudaMemcpy(got.data(), p.y, p.n * sizeof(__half), cudaMemcpyDeviceToHost) != cudaSuccess) return INFINITY;
  double err = 0, scale = 0;
  for (int c = 0; c < p.n; ++c) {
    const double g = __half2float(got[c]);
    err = std::isnan(g) ? INFINITY : fmax(err, fabs(g - p.want[c]));
    scale = fmax(scale, fabs(p.want[c]));
  }
  return err / scale;
}

template <int BLOCK, int WIDTH, int UNROLL, int PDL>
int run(const BenchSetup& setup, Problem& p, std::vector<Result>& results) {
  if (p.n % WIDTH != 0 || WIDTH > p.n) return 0;
  const int strips = p.n / WIDTH, sms = setup.prop.multiProcessorCount;
  const int teams = BLOCK / (WIDTH / VEC);
  std::vector<int> tried;
  for (int blocks : {0, sms, 2 * sms, 4 * sms, PDL ? 0 : 8 * sms}) {
    const int most = std::max(1, p.m / (teams * UNROLL));
    const int splits = blocks == 0 ? 1 : std::max(1, std::min((blocks + strips / 2) / strips, most));
    if (std::find(tried.begin(), tried.end(), splits) != tried.end() || splits > 4096) continue;
    tried.push_back(splits);
    const dim3 grid(strips, splits);
    CHECK(cudaMemset(p.y, 0xff, p.n * sizeof(__half)));
    CHECK(launch(gemv_t_narrow<BLOCK, WIDTH, UNROLL, PDL>, PDL > 0, grid, dim3(BLOCK), (const __half*)p.as[0],
                      (const __half*)p.x, p.y, p.m, p.n, p.partial, p.counters));
    const double error = relative_error(p);
    if (!(error < 2e-3)) {
      printf("  WRONG: block %d width %d unroll %d splits %d rel err %.1e\n", BLOCK, WIDTH, UNROLL, splits, error);
      continue;
    }
    const float us = best_of(
        [&](int i) {
          launch(gemv_t_narrow<BLOCK, WIDTH, UNROLL, PDL>, PDL > 0, grid, dim3(BLOCK), (const __half*)p.as[i % p.as.size()],
                      (const __half*)p.x, p.y, p.m, p.n, p.partial, p.counters);
        },
        setup.start, setup.stop);
    results.push_back({us, BLOCK, WIDTH, UNROLL, splits, PDL});
  }
  return 0;
}

template <int BLOCK, int UNROLL, int PDL = 0>
int widths(const BenchSetup& setup, Problem& p, std::vector<Result>& results) {
  return run<BLOCK, 16, UNROLL, PDL>(setup, p, results) || run<BLOCK, 32, UNROLL, PDL>(setup, p, results) ||
         run<BLOCK, 64, UNROLL, PDL>(setup, p, results) || run<BLOCK, 128, UNROLL, PDL>(setup, p, results) ||
         run<BLOCK, 256, UNROLL, PDL>(setup, p, results);
}

int shape(const BenchSetup& setup, cublasHandle_t handle, int m, int n, bool pdl, bool family) {
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
  if (pdl)
    p.floor_us = best_of(
        [&](int i) {
          launch(read_flat_pdl<4>, true, dim3(setup.prop.multiProcessorCount * 8), dim3(256),
                    (const uint4*)p.as[i % p.as.size()], n16, setup.out);
        },
        setup.start, setup.stop);
  if (family) {  // the probe's kernel and the family's, block 1024, strips of 64, 4 rows in flight, PDL
    const int strips = p.n / 64, sms = setup.prop.multiProcessorCount;
    for (int splits : {1, std::max(1, sms / strips), std::max(1, 2 * sms / strips), std::max(1, 4 * sms / strips)}) {
      const dim3 grid(strips, splits);
      float us[2];
      for (int which = 0; which < 2; ++which) {
        auto call = [&](int i) {
          const __half* a = p.as[i % p.as.size()];
          if (which == 0)
            launch(gemv_t_narrow<1024, 64, 4, 2>, true, grid, dim3(1024), a, (const __half*)p.x, p.y, p.m, p.n,
                   p.partial, p.counters);
          else
            launch(family_1024_64, true, grid, dim3(1024), (const __half*)p.x, a, p.y, 1, p.n, p.m, p.m, p.n, p.n,
                   1.0f, 0.0f, p.partial, p.counters);
        };
        CHECK(cudaMemset(p.y, 0xff, p.n * sizeof(__half)));
        call(0);
        us[which] = relative_error(p) < 2e-3 ? best_of(call, setup.start, setup.stop) : -1.0f;
      }
      printf("float16 %6d x %6d splits %4d: probe %7.2f us, family %7.2f us\n", m, n, splits, us[0], us[1]);
    }
    return 0;
  }
  std::vector<Result> results;
  if (pdl ? widths<256, 8, 1>(setup, p, results) || widths<512, 4, 1>(setup, p, results) ||
                widths<1024, 4, 1>(setup, p, results) || widths<256, 8, 2>(setup, p, results) ||
                widths<512, 4, 2>(setup, p, results) || widths<1024, 4, 2>(setup, p, results)
          : widths<256, 4>(setup, p, results) || widths<256, 8>(setup, p, results) ||
                widths<512, 4>(setup, p, results) || widths<512, 8>(setup, p, results) ||
                widths<256, 16>(setup, p, results) || widths<1024, 4>(setup, p, results))
    return 1;
  std::sort(results.begin(), results.end(), [](const Result& a, const Result& b) { return a.us < b.us; });
  printf("float16 %6d x %6d (Aᵀx%s): cuBLAS %7.2f us, flat read%s %7.2f us, %zu configs", m, n,
         pdl ? ", PDL" : "", p.cublas_us, pdl ? " (PDL, L2 prefetch)" : "", p.floor_us, results.size());
  for (size_t i = 0; i < std::min<size_t>(3, results.size()); ++i) {
    const Result& r = results[i];
    printf("%s %7.2f us (cuBLAS/ours %.3f, floor/ours %.3f; block %d width %d unroll %d splits %d%s)",
           i ? "\n      " : "\n  best", r.us, p.cublas_us / r.us, p.floor_us / r.us, r.block, r.width, r.unroll,
           r.splits, r.pdl == 2 ? ", L2 prefetch" : "");
  }
  printf("\n");
  fflush(stdout);
  for (__half* a : p.as) cudaFree(a);
  cudaFree(p.x), cudaFree(p.y), cudaFree(p.partial), cudaFree(p.counters);
  return 0;
}

int main(int argc, char** argv) {
  const bool family = argc > 1 && std::string(argv[1]) == "family";  // the probe's kernel beside the family's
  const bool pdl = family || (argc > 1 && std::string(argv[1]) == "pdl");  // PDL launches (and the PDL floor) only
  BenchSetup setup;
  CHECK(bench_setup(setup));
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 1;
  const int shapes[][2] = {{1024, 1024},  {2048, 2048},   {4096, 4096},   {4096, 8192},  {8192, 4096},
                           {6144, 4096},  {8192, 8192},   {4096, 11008},  {4096, 14336}, {14336, 4096},
                           {10240, 8192}, {28672, 4096},  {8192, 28672},  {1024, 65536}, {65536, 1024},
                           {256, 131072}, {131072, 256},  {16384, 16384}, {57344, 8192}, {128256, 4096}};
  const int only_m = argc > 3 ? atoi(argv[2]) : 0, only_n = argc > 3 ? atoi(argv[3]) : 0;  // one shape
  for (const auto& s : shapes)
    if ((!only_m || (s[0] == only_m && s[1] == only_n)) && shape(setup, handle, s[0], s[1], pdl, family)) return 1;
  return 0;
}
