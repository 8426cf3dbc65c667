// The narrow family's L2 prefetch (kernels/gemv/gemv_t_narrow.cu, PREFETCH 1): before it waits for the grid
// before it (griddepcontrol.wait, programmatic dependent launch), each thread asks L2 for the first UNROLL
// rows of its share. The read floor's kernels (kernels/measure/read_floor.cu) ran 64 MB in 14.70 us when
// each thread prefetched its first 16-byte word, 15.97 when its first two, 15.76 with none and 17.36 when
// one bulk prefetch asked for the block's whole chunk (gemv_t_floor_gap_nvidia-h200.txt): asking L2 for
// more than a thread's first load cost time. Here the family's body with HEADS, the rows each thread
// prefetches (0, 1, 2, UNROLL: the shipped PREFETCH 1), at each shape's shipped float16 pick and its
// neighbours, launched back to back with PDL, checked against a float64 product with y poisoned first.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I kernels -I kernels/common -I experiments -o /tmp/gemv_t_prefetch \
//     experiments/gemv_t_prefetch.cu
#include <vector>

#include "gemv_t_harness.cuh"

// kernels/gemv/gemv_t_narrow.cu's narrow_body, prefetching each thread's first HEADS rows.
namespace at_narrow {
template <typename T, bool B_NK, int BLOCK, int WIDTH, int VEC, int UNROLL, int HEADS, int LEAN>
__device__ __forceinline__ void heads_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
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
    for (; r < end; r += TEAMS) {
      const V raw = load_stream<POLICY>(reinterpret_cast<const V*>(base + (size_t)r * ldb));
      accumulate<T, VEC>(raw, to_float(__ldg(A + r)), acc);
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

template <int WIDTH, int VEC, int UNROLL, int LEAN, int HEADS>
__global__ void __launch_bounds__(BLOCK, LEAN ? 2048 / BLOCK : 1)
    narrow(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
           float* workspace, unsigned* counters) {
  at_narrow::heads_body<__half, false, BLOCK, WIDTH, VEC, UNROLL, HEADS, LEAN>(x, A, y, one, N, M, lda, ldb, ldc,
                                                                              1.0f, 0.0f, workspace, counters);
}

using Kernel = void (*)(const __half*, const __half*, __half*, int, int, int, int, int, int, float*, unsigned*);

struct Variant {
  int width, vec, unroll, lean;
  Kernel heads[4];  // 0, 1, 2 and UNROLL rows prefetched
};

template <int W, int V, int U, int L>
Variant variant() {
  return {W, V, U, L, {narrow<W, V, U, L, 0>, narrow<W, V, U, L, 1>, narrow<W, V, U, L, 2>, narrow<W, V, U, L, U>}};
}

// narrow.py's splits(): about per_sm blocks an SM over all strips, no share shorter than one step.
int splits_for(int m, int n, const Variant& t, int per_sm, int sms) {
  if (per_sm == 0) return 1;
  const int strips = (n + t.width - 1) / t.width, teams = BLOCK * t.vec / t.width;
  const int most = m / (teams * t.unroll) > 1 ? m / (teams * t.unroll) : 1;
  const int want = (per_sm * sms + strips / 2) / strips;
  return want < 1 ? 1 : (want < most ? want : most);
}

struct Case {
  int m, n;
  Variant v;
  int per_sm;
};

int shape(const BenchSetup& setup, int m, int n, const std::vector<Case>& cases) {
  TransposedData d;
  if (make_data(setup, m, n, MAX_SPLITS, d)) return 1;
  const int sms = setup.prop.multiProcessorCount;
  printf("float16 %6d x %6d\n", m, n);
  for (const Case& c : cases) {
    if (c.m != m || c.n != n) continue;
    const Variant& t = c.v;
    const int splits = splits_for(m, n, t, c.per_sm, sms);
    const dim3 grid((n + t.width - 1) / t.width, splits);
    printf("  w%d v%d u%d%s splits %d:", t.width, t.vec, t.unroll, t.lean ? " lean" : "", splits);
    const int heads[4] = {0, 1, 2, t.unroll};
    for (int h = 0; h < 4; ++h) {
      if (h == 3 && t.unroll == 2) continue;  // UNROLL 2 is heads 2
      const float us = checked_time(setup, d, [&](int i) {
        return launch(t.heads[h], true, grid, dim3(BLOCK), (const __half*)d.x, (const __half*)d.as[i % d.as.size()],
                      d.y, 1, n, m, m, n, n, d.acc, d.counters);
      });
      CHECK(cudaGetLastError());
      printf(" heads %d %.2f us%s", heads[h], us, h == 3 || (h == 2 && t.unroll == 2) ? "" : ";");
    }
    printf("\n");
    fflush(stdout);
  }
  return 0;
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  // Each shape's shipped float16 pick first (results/gemv_trans_nvidia-h200.json), then neighbours.
  const std::vector<Case> cases = {
      {131072, 256, variant<64, 8, 2, 1>(), 2},  {131072, 256, variant<64, 8, 4, 1>(), 2},
      {131072, 256, variant<128, 8, 2, 1>(), 2}, {65536, 1024, variant<128, 4, 8, 1>(), 2},
      {65536, 1024, variant<64, 8, 2, 1>(), 4},  {65536, 1024, variant<128, 8, 4, 1>(), 2},
      {4096, 11008, variant<128, 8, 2, 1>(), 2}, {4096, 11008, variant<128, 8, 4, 1>(), 2},
      {4096, 11008, variant<64, 8, 4, 0>(), 0},  {28672, 4096, variant<128, 8, 4, 1>(), 2},
      {28672, 4096, variant<64, 8, 4, 1>(), 1},  {8192, 4096, variant<64, 8, 4, 0>(), 0},
      {8192, 4096, variant<64, 8, 4, 1>(), 2},   {8192, 4096, variant<128, 8, 4, 0>(), 0},
      {14336, 4096, variant<64, 8, 4, 0>(), 1},  {14336, 4096, variant<64, 4, 8, 1>(), 2},
      {4096, 14336, variant<64, 8, 4, 0>(), 1},  {4096, 14336, variant<64, 8, 4, 1>(), 0},
      {4096, 8192, variant<64, 8, 4, 0>(), 0},   {4096, 8192, variant<64, 4, 8, 1>(), 0},
  };
  const int shapes[][2] = {{131072, 256}, {65536, 1024}, {4096, 11008}, {28672, 4096},
                           {8192, 4096},  {14336, 4096}, {4096, 14336}, {4096, 8192}};
  for (auto [m, n] : shapes)
    if (shape(setup, m, n, cases)) return 1;
  return 0;
}
