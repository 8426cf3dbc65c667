// What the float16 transposed-GEMV probes share. A shape's operands and a checked timing (TransposedData,
// make_data, checked_time: gemv_t_floor_gap.cu, gemv_t_prefetch.cu, gemv_t_tail.cu), and cases (gemv_t_tiles.cu,
// gemv_t_tma.cu): a case is one kernel at one tiling, launched on (x, A, y, M, N, acc, counters, SMs) with A
// row-major M x N; time_cases fills A and x with random values, checks each case against a float64 product
// with y poisoned first, and prints its time per call on one line per shape (-1: wrong, -2: the launch
// failed, n/a: N is not whole strips of the case's width). acc holds acc_rows x N floats and counters N
// words, both zero before and after a call.
// The TMA probes (gemv_t_tma.cu, gemv_t_tma_mma.cu) also share the narrow family's kernel as a case, how
// a grid of (strips, parts of the rows) is cut, and the launch with A's tensor map.
// And the narrow family's body with the switches the prefetch and tail probes measure (variant_body, below).
#pragma once
#include <cuda.h>
#include <cuda_fp16.h>

#include <algorithm>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "gemv/gemv_t_narrow.cu"

using TransposedRun =
    std::function<cudaError_t(const __half*, const __half*, __half*, int, int, float*, unsigned*, int)>;

struct TransposedCase {
  std::string name;
  int width;  // the case runs where N is a multiple of it
  TransposedRun run;
};

// One shape's operands: copies of A spanning 4x the L2 (so that every call reads A from DRAM) and x filled
// with random values, their float64 product, y, and acc_rows x N floats and N counters, zeroed.
struct TransposedData {
  int m = 0, n = 0;
  std::vector<__half*> as;
  __half *x = nullptr, *y = nullptr;
  float* acc = nullptr;
  unsigned* counters = nullptr;
  std::vector<double> want;
  TransposedData() = default;
  TransposedData(const TransposedData&) = delete;
  TransposedData& operator=(const TransposedData&) = delete;
  ~TransposedData() {
    for (__half* a : as) cudaFree(a);
    cudaFree(x), cudaFree(y), cudaFree(acc), cudaFree(counters);
  }
};

// Fills `d` (1 where a CUDA call failed, after printing it).
inline int make_data(const BenchSetup& setup, int m, int n, int acc_rows, TransposedData& d) {
  const size_t bytes = (size_t)m * n * sizeof(__half);
  d.m = m, d.n = n;
  d.as = rotating_buffers<__half>(setup.prop, bytes, 0);
  if (d.as.empty()) return 1;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<__half> a0((size_t)m * n), xh(m);
  for (auto& v : a0) v = __float2half(dist(rng));
  for (auto& v : xh) v = __float2half(dist(rng));
  for (__half* a : d.as) CHECK(cudaMemcpy(a, a0.data(), bytes, cudaMemcpyHostToDevice));
  d.want.assign(n, 0.0);
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) d.want[c] += (double)__half2float(a0[(size_t)r * n + c]) * __half2float(xh[r]);
  CHECK(cudaMalloc(&d.x, m * sizeof(__half)));
  CHECK(cudaMalloc(&d.y, n * sizeof(__half)));
  CHECK(cudaMalloc(&d.acc, (size_t)acc_rows * n * sizeof(float)));
  CHECK(cudaMalloc(&d.counters, n * sizeof(unsigned)));
  CHECK(cudaMemset(d.acc, 0, (size_t)acc_rows * n * sizeof(float)));
  CHECK(cudaMemset(d.counters, 0, n * sizeof(unsigned)));
  CHECK(cudaMemcpy(d.x, xh.data(), m * sizeof(__half), cudaMemcpyHostToDevice));
  return 0;
}

// `call(i)` (a launch on copy i of A, returning its error) checked against the float64 product with y
// poisoned first, then timed: its microseconds per call, -1 where it is wrong, -2 where it failed.
template <typename Call>
float checked_time(const BenchSetup& setup, const TransposedData& d, Call call) {
  if (cudaMemset(d.y, 0xff, d.n * sizeof(__half)) != cudaSuccess || call(0) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess)
    return -2.0f;  // the error stays for the caller's CHECK(cudaGetLastError())
  std::vector<__half> got(d.n);
  if (cudaMemcpy(got.data(), d.y, d.n * sizeof(__half), cudaMemcpyDeviceToHost) != cudaSuccess) return -2.0f;
  double err = 0, scale = 0;
  for (int c = 0; c < d.n; ++c) {
    const double g = __half2float(got[c]);
    err = std::isnan(g) ? INFINITY : fmax(err, fabs(g - d.want[c]));
    scale = fmax(scale, fabs(d.want[c]));
  }
  return err / scale < 2e-3 ? best_of(call, setup.start, setup.stop) : -1.0f;
}

inline int time_cases(const BenchSetup& setup, int m, int n, const std::vector<TransposedCase>& cases, int acc_rows) {
  TransposedData d;
  if (make_data(setup, m, n, acc_rows, d)) return 1;
  const int sms = setup.prop.multiProcessorCount;
  printf("float16 %6d x %6d:", m, n);
  for (size_t k = 0; k < cases.size(); ++k) {
    if (n % cases[k].width) {
      printf("%s %s n/a", k ? "," : "", cases[k].name.c_str());
      continue;
    }
    const float us = checked_time(
        setup, d, [&](int i) { return cases[k].run(d.x, d.as[i % d.as.size()], d.y, m, n, d.acc, d.counters, sms); });
    CHECK(cudaGetLastError());
    printf("%s %s %.2f", k ? "," : "", cases[k].name.c_str(), us);
    fflush(stdout);  // a case that hangs leaves the ones before it on record
  }
  printf("\n");
  fflush(stdout);
  return 0;
}

constexpr int MAX_PARTS = 16;  // acc's rows: narrow's split writes a row of partials each

// Rows split so that about per_sm blocks run on each SM over all strips (one part for per_sm 0).
inline int parts_for(int strips, int per_sm, int sms) {
  return per_sm == 0 ? 1 : std::max(1, std::min(MAX_PARTS, (per_sm * sms + strips / 2) / strips));
}

// narrow's kernel at one tiling, taking the GEMM argument list as autotune passes it (x as A, the matrix
// as B, y as C), its rows split over gridDim.y.
template <int BLOCK, int WIDTH, int NVEC, int UNROLL, int LEAN>
__global__ void __launch_bounds__(BLOCK, LEAN ? 2048 / BLOCK : 1)
    family(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
           float* workspace, unsigned* counters) {
  at_narrow::narrow_body<__half, false, BLOCK, WIDTH, NVEC, UNROLL, 1, LEAN>(x, A, y, one, N, M, lda, ldb, ldc, 1.0f,
                                                                            0.0f, workspace, counters);
}

template <int BLOCK, int WIDTH, int NVEC, int UNROLL, int LEAN>
TransposedCase family_case(int per_sm) {
  auto kernel = family<BLOCK, WIDTH, NVEC, UNROLL, LEAN>;
  return {"narrow b" + std::to_string(BLOCK) + " w" + std::to_string(WIDTH) + " v" + std::to_string(NVEC) + " u" +
              std::to_string(UNROLL) + (LEAN ? " lean" : "") + " x" + std::to_string(per_sm),
          NVEC,  // narrow serves a last strip of fewer columns
          [kernel, per_sm](const __half* x, const __half* a, __half* y, int m, int n, float* acc, unsigned* counters,
                           int sms) {
            const int strips = (n + WIDTH - 1) / WIDTH;
            const int splits = std::min(parts_for(strips, per_sm, sms), std::max(1, m / 64));
            return launch(kernel, true, dim3(strips, splits), dim3(BLOCK), x, a, y, 1, n, m, m, n, n, acc, counters);
          }};
}

// The end of a TMA probe's block: its strip's W column sums lie in ROWS rows of partial sums (sums, filled
// before a barrier). With one part of the rows (gridDim.y 1) the block writes them to y; with several it
// adds them into acc, and the last part of the strip to finish (a counter per strip) writes y and zeroes
// acc and its counter, so both are zero again after each launch.
template <int BLOCK, int W, int ROWS>
__device__ void finish_strip(const float (&sums)[ROWS][W], int strip, int N, __half* __restrict__ y,
                             float* __restrict__ acc, unsigned* __restrict__ counters) {
  __shared__ bool last;
  const int first = strip * W;
  for (int c = threadIdx.x; c < W; c += BLOCK) {
    float total = 0.0f;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) total += sums[r][c];
    if (first + c < N) {
      if (gridDim.y == 1)
        y[first + c] = __float2half(total);
      else
        atomicAdd(acc + first + c, total);
    }
  }
  if (gridDim.y == 1) return;
  __threadfence();  // this block's additions are visible before the counter says so
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counters + strip, 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int c = threadIdx.x; c < W; c += BLOCK)
    if (first + c < N) {
      y[first + c] = __float2half(__ldcg(acc + first + c));
      __stcg(acc + first + c, 0.0f);
    }
  if (threadIdx.x == 0) counters[strip] = 0u;
}

// cuTensorMapEncodeTiled through the runtime's entry point, so that nothing links libcuda.
using Encode = decltype(&cuTensorMapEncodeTiled);
inline Encode encode_tiled() {
  static Encode f = nullptr;
  if (!f) {
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&f), 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      f = nullptr;
  }
  return f;
}

// Launches kernel(map, x, y, M, N, rows_per, acc, counters) in blocks of `block` threads over (strips of
// W columns, parts of whole R-row stages), with PDL and `smem` bytes of dynamic shared memory; the map gives A in boxes of box_cols
// columns x R rows, swizzled as asked (zeros past its edges).
template <typename Kernel>
cudaError_t launch_tma(Kernel kernel, int block, int W, int R, int box_cols, CUtensorMapSwizzle swizzle, int smem, int per_sm,
                       const __half* x, const __half* a, __half* y, int m, int n, float* acc, unsigned* counters,
                       int sms) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {(cuuint64_t)n, (cuuint64_t)m};
  const cuuint64_t strides[1] = {(cuuint64_t)n * 2};
  const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)R}, unit[2] = {1, 1};
  const Encode encode = encode_tiled();
  if (!encode || encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<__half*>(a), dims, strides, box, unit,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    return cudaErrorInvalidValue;
  const int strips = (n + W - 1) / W, parts = parts_for(strips, per_sm, sms);
  const int rows_per = ((m + parts - 1) / parts + R - 1) / R * R;
  const int used = (m + rows_per - 1) / rows_per;  // parts that hold rows
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(strips, used);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, map, x, y, m, n, rows_per, acc, counters);
}

// kernels/gemv/gemv_t_narrow.cu's narrow_body with two switches the probes measure (HEADS = UNROLL and TAIL
// = 0 compile the shipped body at PREFETCH 1): HEADS, the rows each thread prefetches into L2 before
// griddepcontrol.wait (gemv_t_prefetch.cu), and TAIL 1, the team's rows left after its last whole step
// read in one predicated step of UNROLL loads instead of one at a time (gemv_t_tail.cu).
namespace at_narrow {
template <typename T, bool B_NK, int BLOCK, int WIDTH, int VEC, int UNROLL, int HEADS, int LEAN, int TAIL>
__device__ __forceinline__ void variant_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
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
  if (HEADS && reads)
#pragma unroll
    for (int u = 0; u < HEADS; ++u) {
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
    if constexpr (TAIL) {
      // TAIL 1: the team's last rows (fewer than UNROLL) in one step, UNROLL loads in flight as in the
      // loop, the rows past the end read as zeros.
      if (r < end) {
        V raw[UNROLL];
        float xr[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
          const int row = r + u * TEAMS;
          raw[u] = row < end ? load_stream<POLICY>(reinterpret_cast<const V*>(base + (size_t)row * ldb)) : V{};
          xr[u] = row < end ? to_float(__ldg(A + row)) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) accumulate<T, VEC>(raw[u], xr[u], acc);
      }
    } else {  // the shipped body's tail
      for (; r < end; r += TEAMS) {
        const V raw = load_stream<POLICY>(reinterpret_cast<const V*>(base + (size_t)r * ldb));
        accumulate<T, VEC>(raw, to_float(__ldg(A + r)), acc);
      }
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
