// The narrow family's row tail (kernels/gemv/gemv_t_narrow.cu): each team walks its share of the rows
// UNROLL rows at a time, then reads the rows left over (fewer than UNROLL) one after another. Every block of
// a split grid gets a share of the same length, so every team of every block ends at about the same time
// with one load in flight instead of UNROLL: 65536 x 1024 at the shipped float16 tiling (strips of 128,
// 32 teams, 8 rows in flight, 33 splits of 1986 rows) ends each share with 6-7 rows read one at a time
// after 7 steps of 8. TAIL 1 reads those rows in one more step, UNROLL loads in flight, the rows past the
// end read as zeros.
//
// For each shape: the shipped picks' tilings and their neighbours (float16, 1024 threads, prefetch, PDL),
// at each split count narrow.py gives for per_sm 0, 1, 2 and 4, with TAIL 0 (the shipped body) and TAIL 1,
// beside the flat read of the same bytes, on the same buffers. Each kernel is checked against a float64
// product with y poisoned first (-1: wrong).
//   nvcc -O3 -arch=sm_90 -std=c++17 -I kernels -I kernels/common -I experiments \
//     -o /tmp/gemv_t_tail experiments/gemv_t_tail.cu
#include <algorithm>
#include <string>
#include <vector>

#include "gemv_t_harness.cuh"

// kernels/gemv/gemv_t_narrow.cu's narrow_body with the tail as a switch (TAIL 0: the shipped code).
namespace at_narrow {
template <typename T, bool B_NK, int BLOCK, int WIDTH, int VEC, int UNROLL, int PREFETCH, int LEAN, int TAIL>
__device__ __forceinline__ void tail_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
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
  if (PREFETCH && reads)
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
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

constexpr int BLOCK = 1024;
constexpr int MAX_SPLITS = 4096;  // rows of partials the split grids below may write

// As autotune/ops/gemv/narrow.py instantiates them: lean kernels bounded to 2048 threads an SM.
template <int WIDTH, int VEC, int UNROLL, int TAIL>
__global__ void __launch_bounds__(BLOCK)
    plain(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
          float* workspace, unsigned* counters) {
  at_narrow::tail_body<__half, false, BLOCK, WIDTH, VEC, UNROLL, 1, 0, TAIL>(x, A, y, one, N, M, lda, ldb, ldc,
                                                                              1.0f, 0.0f, workspace, counters);
}

template <int WIDTH, int VEC, int UNROLL, int TAIL>
__global__ void __launch_bounds__(BLOCK, 2048 / BLOCK)
    lean(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
         float* workspace, unsigned* counters) {
  at_narrow::tail_body<__half, false, BLOCK, WIDTH, VEC, UNROLL, 1, 1, TAIL>(x, A, y, one, N, M, lda, ldb, ldc,
                                                                              1.0f, 0.0f, workspace, counters);
}

using Kernel = void (*)(const __half*, const __half*, __half*, int, int, int, int, int, int, float*, unsigned*);

struct Tiling {
  int width, vec, unroll, lean;
  Kernel tail0, tail1;
  std::string name() const {
    return "w" + std::to_string(width) + " v" + std::to_string(vec) + " u" + std::to_string(unroll) +
           (lean ? " lean" : "");
  }
};

template <int W, int V, int U, int L>
Tiling tiling() {
  if constexpr (L)
    return {W, V, U, L, lean<W, V, U, 0>, lean<W, V, U, 1>};
  else
    return {W, V, U, L, plain<W, V, U, 0>, plain<W, V, U, 1>};
}

// narrow.py's splits(): about per_sm blocks an SM over all strips, no share shorter than one step.
int splits_for(int m, int n, const Tiling& t, int per_sm, int sms) {
  if (per_sm == 0) return 1;
  const int strips = (n + t.width - 1) / t.width, teams = BLOCK * t.vec / t.width;
  const int most = std::max(1, m / (teams * t.unroll));
  return std::max(1, std::min(most, (per_sm * sms + strips / 2) / strips));
}

int shape(const BenchSetup& setup, int m, int n, const std::vector<Tiling>& tilings) {
  TransposedData d;
  if (make_data(setup, m, n, MAX_SPLITS, d)) return 1;
  const int sms = setup.prop.multiProcessorCount;
  const unsigned long long words = (unsigned long long)m * n * sizeof(__half) / 16;
  const float flat = best_of(
      [&](int i) { read_flat<4><<<2 * sms, 1024>>>(reinterpret_cast<const uint4*>(d.as[i % d.as.size()]), words, setup.out); },
      setup.start, setup.stop);
  printf("float16 %6d x %6d: flat read %.2f us\n", m, n, flat);
  for (const Tiling& t : tilings) {
    std::vector<int> done;
    for (int per_sm : {0, 1, 2, 4}) {
      const int splits = splits_for(m, n, t, per_sm, sms);
      if (std::find(done.begin(), done.end(), splits) != done.end()) continue;
      done.push_back(splits);
      const dim3 grid((n + t.width - 1) / t.width, splits);
      const int per = (m + splits - 1) / splits, step = BLOCK * t.vec / t.width * t.unroll;
      float us[2];
      for (int k = 0; k < 2; ++k) {
        const Kernel kernel = k ? t.tail1 : t.tail0;
        us[k] = checked_time(setup, d, [&](int i) {
          return launch(kernel, true, grid, dim3(BLOCK), (const __half*)d.x, (const __half*)d.as[i % d.as.size()], d.y,
                        1, n, m, m, n, n, d.acc, d.counters);
        });
        CHECK(cudaGetLastError());
      }
      printf("  %-16s splits %4d (share %6d rows, %2d steps + %4d): tail0 %7.2f us (%3.0f%% of flat)  tail1 %7.2f "
             "us (%3.0f%%)  %+.1f%%\n",
             t.name().c_str(), splits, per, per / step, per % step, us[0], 100 * flat / us[0], us[1],
             100 * flat / us[1], 100 * (us[0] / us[1] - 1));
      fflush(stdout);
    }
  }
  return 0;
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  const std::vector<Tiling> tilings = {
      tiling<64, 8, 2, 1>(),  tiling<64, 8, 4, 1>(),  tiling<64, 8, 8, 1>(),  tiling<64, 4, 8, 1>(),
      tiling<128, 4, 8, 1>(), tiling<128, 8, 2, 1>(), tiling<128, 8, 4, 1>(), tiling<128, 8, 8, 1>(),
      tiling<64, 8, 4, 0>(),  tiling<128, 8, 4, 0>(), tiling<32, 8, 4, 0>(),
  };
  for (const Tiling& t : tilings)
    for (Kernel k : {t.tail0, t.tail1}) {
      cudaFuncAttributes attributes;
      CHECK(cudaFuncGetAttributes(&attributes, k));
      printf("%s tail%d: %d registers, %zu bytes local a thread\n", t.name().c_str(), k == t.tail1,
             attributes.numRegs, attributes.localSizeBytes);
    }
  const int shapes[][2] = {{131072, 256}, {65536, 1024}, {4096, 11008}, {28672, 4096},
                           {8192, 4096},  {14336, 4096}, {4096, 14336}, {4096, 8192}};
  for (auto [m, n] : shapes)
    if (shape(setup, m, n, tilings)) return 1;
  return 0;
}
