// Where the stored read floor's lead over the narrow family lies. The shipped float16 transposed picks of
// 64 MB and more run at 77-85% of their stored read floors (results/gemv_trans_nvidia-h200.json), but
// within 4-7% of a flat read of the same bytes by 2 blocks of 1024 threads an SM
// (gemv_t_tail_nvidia-h200.txt). The floor is the fastest of kernels/measure/read_floor.cu's read kernels:
// one block per chunk of LOADS x threads 16-byte words (thousands of short blocks), launched back to back
// with programmatic dependent launch (PDL), optionally prefetching into L2 before griddepcontrol.wait.
// Here, on the same buffers, one program: that floor kernel at 512 threads and 4 loads with and without PDL
// and with each prefetch, the flat read of gemv_t_tail.cu, and each shape's shipped narrow pick
// (kernels/gemv/gemv_t_narrow.cu as shipped, checked against a float64 product) with and without PDL.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I kernels -I kernels/common -I experiments -o /tmp/gemv_t_floor_gap \
//     experiments/gemv_t_floor_gap.cu
#include "gemv_t_harness.cuh"
#include "measure/read_floor.cu"

constexpr int BLOCK = 1024;

template <int WIDTH, int VEC, int UNROLL, int LEAN>
__global__ void __launch_bounds__(BLOCK, LEAN ? 2048 / BLOCK : 1)
    narrow(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
           float* workspace, unsigned* counters) {
  at_narrow::narrow_body<__half, false, BLOCK, WIDTH, VEC, UNROLL, 1, LEAN>(x, A, y, one, N, M, lda, ldb, ldc, 1.0f,
                                                                            0.0f, workspace, counters);
}

using Kernel = void (*)(const __half*, const __half*, __half*, int, int, int, int, int, int, float*, unsigned*);

// A shape and its shipped float16 pick (results/gemv_trans_nvidia-h200.json; gemv_llm_trans for 4096 x 14336).
struct Pick {
  int m, n, width, splits;
  Kernel kernel;
  const char* name;
};

using ReadKernel = void (*)(const uint4*, unsigned long long, unsigned int*, int);

int shape(const BenchSetup& setup, const Pick& p) {
  const int m = p.m, n = p.n;
  TransposedData d;
  if (make_data(setup, m, n, p.splits, d)) return 1;
  const int sms = setup.prop.multiProcessorCount;
  const size_t bytes = (size_t)m * n * sizeof(__half);
  const unsigned long long words = bytes / 16;
  auto word_buffer = [&](int i) { return reinterpret_cast<const uint4*>(d.as[i % d.as.size()]); };
  printf("float16 %6d x %6d (%.0f MB):", m, n, bytes / 1048576.0);
  const float flat = best_of([&](int i) { read_flat<4><<<2 * sms, 1024>>>(word_buffer(i), words, setup.out); },
                             setup.start, setup.stop);
  printf(" flat read 2/SM x 1024 x 4 %.2f us;", flat);
  const ReadKernel floors[] = {at_read_l4_p0, at_read_l4_p1, at_read_l4_p2, at_read_l4_p3};
  const unsigned blocks = (unsigned)((words + 512 * 4 - 1) / (512 * 4));
  for (int pdl = 0; pdl < 2; ++pdl)
    for (int prefetch = 0; prefetch < 4; ++prefetch) {
      if (!pdl && prefetch) continue;  // the prefetch is issued before the wait for the grid before: PDL's
      const float us = best_of(
          [&](int i) {
            launch(floors[prefetch], pdl, dim3(blocks), dim3(512), word_buffer(i), words, setup.out + 2, 0);
          },
          setup.start, setup.stop);
      printf(" floor 512 x 4%s p%d %.2f us;", pdl ? " PDL" : "", prefetch, us);
    }
  const dim3 grid((n + p.width - 1) / p.width, p.splits);
  for (int pdl = 0; pdl < 2; ++pdl) {
    const float us = checked_time(setup, d, [&](int i) {
      return launch(p.kernel, pdl, grid, dim3(BLOCK), (const __half*)d.x, (const __half*)d.as[i % d.as.size()], d.y, 1,
                    n, m, m, n, n, d.acc, d.counters);
    });
    CHECK(cudaGetLastError());
    printf(" narrow %s splits %d%s %.2f us;", p.name, p.splits, pdl ? " PDL" : "", us);
  }
  printf("\n");
  fflush(stdout);
  return 0;
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  unsigned* scratch;  // the read kernels' out[0..1] beside the setup's word
  CHECK(cudaMalloc(&scratch, 16));
  setup.out = scratch;
  const Pick picks[] = {
      {131072, 256, 64, 66, narrow<64, 8, 2, 1>, "w64 v8 u2 lean"},
      {65536, 1024, 128, 33, narrow<128, 4, 8, 1>, "w128 v4 u8 lean"},
      {4096, 11008, 128, 3, narrow<128, 8, 2, 1>, "w128 v8 u2 lean"},
      {28672, 4096, 128, 8, narrow<128, 8, 4, 1>, "w128 v8 u4 lean"},
      {8192, 4096, 64, 1, narrow<64, 8, 4, 0>, "w64 v8 u4"},
      {14336, 4096, 64, 2, narrow<64, 8, 4, 0>, "w64 v8 u4"},
      {4096, 14336, 64, 1, narrow<64, 8, 4, 0>, "w64 v8 u4"},
      {4096, 8192, 64, 1, narrow<64, 8, 4, 0>, "w64 v8 u4"},
  };
  for (const Pick& p : picks)
    if (shape(setup, p)) return 1;
  return 0;
}
