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

constexpr int BLOCK = 1024;
constexpr int MAX_SPLITS = 4096;  // rows of partials the split grids below may write

template <int WIDTH, int VEC, int UNROLL, int LEAN, int HEADS>
__global__ void __launch_bounds__(BLOCK, LEAN ? 2048 / BLOCK : 1)
    narrow(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
           float* workspace, unsigned* counters) {
  at_narrow::variant_body<__half, false, BLOCK, WIDTH, VEC, UNROLL, HEADS, LEAN, 0>(x, A, y, one, N, M, lda, ldb, ldc,
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
