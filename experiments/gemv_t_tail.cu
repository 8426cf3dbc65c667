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

constexpr int BLOCK = 1024;
constexpr int MAX_SPLITS = 4096;  // rows of partials the split grids below may write

// As autotune/ops/gemv/narrow.py instantiates them: lean kernels bounded to 2048 threads an SM.
template <int WIDTH, int VEC, int UNROLL, int TAIL>
__global__ void __launch_bounds__(BLOCK)
    plain(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
          float* workspace, unsigned* counters) {
  at_narrow::variant_body<__half, false, BLOCK, WIDTH, VEC, UNROLL, UNROLL, 0, TAIL>(x, A, y, one, N, M, lda, ldb, ldc,
                                                                              1.0f, 0.0f, workspace, counters);
}

template <int WIDTH, int VEC, int UNROLL, int TAIL>
__global__ void __launch_bounds__(BLOCK, 2048 / BLOCK)
    lean(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
         float* workspace, unsigned* counters) {
  at_narrow::variant_body<__half, false, BLOCK, WIDTH, VEC, UNROLL, UNROLL, 1, TAIL>(x, A, y, one, N, M, lda, ldb, ldc,
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
