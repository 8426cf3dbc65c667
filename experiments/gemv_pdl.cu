// Does programmatic dependent launch (PDL, sm_90) shorten back-to-back GEMVs (issue 3: <= 3 us for
// matrices of 8 MB or less, >= 90% of copy bandwidth at 64 MB and more)?
//
// Back to back, a launch cannot start until the previous kernel has finished and flushed: every call
// pays the launch and the ramp-up of its loads (an empty kernel costs 1.41 us a call, a 2 MB read 2.82
// on the H200, measured with experiments/read_floor_grids.cu). With the PDL launch attribute, the next grid's
// blocks may become resident as soon as every block of the running grid has executed
// `griddepcontrol.launch_dependents`; they wait in `griddepcontrol.wait` until the running grid has
// finished and its memory is visible, so reading anything after the wait is as safe as without PDL.
// Before the wait a block may do work that reads nothing the previous kernel could write. Prefetching
// its rows of A into L2 is such work: L2 is where every write lands, so a line prefetched early is
// never stale.
//
// Each shape runs the real kernel (kernels/gemv/gemv.cu, at the config shipped in db/records) three ways,
// timed like autotune times kernels (bench_common.cuh):
//   plain        an ordinary launch
//   pdl          launched with the PDL attribute; launch_dependents first thing, the wait once
//                gemv_body has set its addresses (kernels/gemv/gemv.cu: wait_for_prior_grid)
//   pdl+L2       the same, and before the wait one bulk L2 prefetch per row segment the block reads
// Every y is checked against a float64 reference on random data after each way's timing.
//   nvcc -O3 -arch=sm_90 -I kernels/common -o /tmp/gemv_pdl experiments/gemv_pdl.cu && /tmp/gemv_pdl
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "bench_common.cuh"
#include "../kernels/gemv/gemv.cu"

template <int MODE>
__global__ void empty_kernel() {
  if (MODE >= 1) asm volatile("griddepcontrol.launch_dependents;");
  if (MODE >= 1) asm volatile("griddepcontrol.wait;" ::: "memory");
}

// The read floor under PDL: block b reads the contiguous chunk of blockDim.x * LOADS 16-byte words at
// b * blockDim.x * LOADS (all loads in flight at once), XOR of everything written so no load is dead.
// MODE as below; MODE 2 prefetches the block's chunk into L2 (one bulk prefetch) before the wait.
template <int LOADS, int MODE>
__global__ void read_chunks(const uint4* __restrict__ a, size_t n16, unsigned* __restrict__ out) {
  const size_t base = (size_t)blockIdx.x * blockDim.x * LOADS;
  if (MODE >= 1) asm volatile("griddepcontrol.launch_dependents;");
  if (MODE == 2 && threadIdx.x == 0) {
    const size_t words = min((size_t)blockDim.x * LOADS, n16 - base);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a + base), "r"((unsigned)(words * 16)) : "memory");
  }
  if (MODE >= 1) asm volatile("griddepcontrol.wait;" ::: "memory");
  uint4 v[LOADS];
#pragma unroll
  for (int u = 0; u < LOADS; ++u) {
    const size_t i = base + (size_t)u * blockDim.x + threadIdx.x;
    v[u] = i < n16 ? __ldcs(a + i) : uint4{};
  }
  unsigned acc = 0;
#pragma unroll
  for (int u = 0; u < LOADS; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  if (acc == 0x12345678u) out[0] = acc;
}

// MODE 0: plain; 1: PDL; 2: PDL and an L2 prefetch of the block's row segments before the wait
// (kernels/gemv/gemv.cu: programmatic_start, as every tuned instance starts).
template <typename T, int BLOCK, int LANES, int VEC, int UNROLL, int ROWS, int POLICY, int MODE>
__global__ void __launch_bounds__(BLOCK) gemv(const T* A, const T* x, T* y, int M, int N, float* partial,
                                               unsigned* counters) {
  if (MODE >= 1) at_gemv::programmatic_start<T, BLOCK, LANES, VEC, ROWS, MODE == 2>(A, M, N, N);
  at_gemv::gemv_body<T, BLOCK, LANES, VEC, UNROLL, ROWS, 0, POLICY, 1, 0>(A, x, y, M, N, N, 1.0f, 0.0f, partial,
                                                                         counters);
}


template <typename T> float host_float(T v);
template <> float host_float<float>(float v) { return v; }
template <> float host_float<__half>(__half v) { return __half2float(v); }
template <> float host_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> T host_from(float v);
template <> float host_from<float>(float v) { return v; }
template <> __half host_from<__half>(float v) { return __float2half(v); }
template <> __nv_bfloat16 host_from<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

struct Env {
  cudaDeviceProp prop;
  cudaEvent_t start, stop;
};

// One shape at one config, the three ways. Returns nonzero on a CUDA error or a wrong y.
template <typename T, int BLOCK, int LANES, int VEC, int UNROLL, int ROWS, int POLICY>
int run(Env& env, const char* dtype, int M, int N, int split, int persist) {
  const size_t bytes = (size_t)M * N * sizeof(T);
  // Random values in [-1, 1): the first copy holds them, the rest are copies of it.
  std::vector<T> host_a((size_t)M * N), host_x(N);
  srand(12345 + M);
  for (auto& v : host_a) v = host_from<T>((float)rand() / RAND_MAX * 2.0f - 1.0f);
  for (auto& v : host_x) v = host_from<T>((float)rand() / RAND_MAX * 2.0f - 1.0f);
  std::vector<T*> bufs = rotating_buffers<T>(env.prop, bytes, 0);
  if (bufs.empty()) return 1;
  for (T* b : bufs) CHECK(cudaMemcpy(b, host_a.data(), bytes, cudaMemcpyHostToDevice));
  T *x, *y;
  float* partial;
  unsigned* counters;
  constexpr int RPB = BLOCK / LANES * ROWS;
  const int tiles = (M + RPB - 1) / RPB;
  CHECK(cudaMalloc(&x, N * sizeof(T)));
  CHECK(cudaMemcpy(x, host_x.data(), N * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&y, M * sizeof(T)));
  CHECK(cudaMalloc(&partial, (size_t)split * M * 4));
  CHECK(cudaMalloc(&counters, tiles * 4));
  CHECK(cudaMemset(counters, 0, tiles * 4));
  std::vector<double> ref(M);
  for (int i = 0; i < M; ++i) {
    double s = 0;
    for (int j = 0; j < N; ++j) s += (double)host_float(host_a[(size_t)i * N + j]) * host_float(host_x[j]);
    ref[i] = s;
  }
  const dim3 grid(persist ? std::min(tiles, persist * env.prop.multiProcessorCount) : tiles, split);
  const int copies = (int)bufs.size();
  const char* names[3] = {"plain", "pdl", "pdl+L2"};
  float times[3];
  std::vector<T> host_y(M);
  for (int mode = 0; mode < 3; ++mode) {
    auto kernel = mode == 0   ? gemv<T, BLOCK, LANES, VEC, UNROLL, ROWS, POLICY, 0>
                  : mode == 1 ? gemv<T, BLOCK, LANES, VEC, UNROLL, ROWS, POLICY, 1>
                              : gemv<T, BLOCK, LANES, VEC, UNROLL, ROWS, POLICY, 2>;
    CHECK(cudaMemset(y, 0xff, M * sizeof(T)));  // NaN in every format
    times[mode] = best_of(
        [&](int i) { launch(kernel, mode > 0, grid, dim3(BLOCK), (const T*)bufs[i % copies], (const T*)x, y, M, N, partial, counters); },
        env.start, env.stop);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(host_y.data(), y, M * sizeof(T), cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int i = 0; i < M; ++i) {
      const double got = host_float(host_y[i]);
      const double err = std::isnan(got) ? INFINITY : std::fabs(got - ref[i]) / (1.0 + std::fabs(ref[i]));
      worst = err > worst ? err : worst;
    }
    if (!(worst < 2e-2)) {
      printf("WRONG: %s %dx%d %s worst error %.3g\n", dtype, M, N, names[mode], worst);
      return 1;
    }
  }
  printf("%-9s %6d x %-6d %7.1f MB  plain %7.2f  pdl %7.2f  pdl+L2 %7.2f us   (%d blocks x %d, split %d)\n", dtype, M, N,
         bytes / 1048576.0, times[0], times[1], times[2], grid.x * grid.y, BLOCK, split);
  for (T* b : bufs) cudaFree(b);
  cudaFree(x);
  cudaFree(y);
  cudaFree(partial);
  cudaFree(counters);
  return 0;
}

int main() {
  Env env;
  CHECK(cudaGetDeviceProperties(&env.prop, 0));
  CHECK(cudaEventCreate(&env.start));
  CHECK(cudaEventCreate(&env.stop));
  printf("%s, %d SMs; GPU us per call, back to back\n", env.prop.name, env.prop.multiProcessorCount);
  printf("empty kernel: plain %.2f  pdl %.2f us\n",
         best_of([&](int) { launch(empty_kernel<0>, false, dim3(1), dim3(32)); }, env.start, env.stop),
         best_of([&](int) { launch(empty_kernel<1>, true, dim3(1), dim3(32)); }, env.start, env.stop));
  // Read floors: the fastest of a few block shapes, each way.
  unsigned* out;
  CHECK(cudaMalloc(&out, 4));
  for (size_t mb : {2, 4, 8, 16}) {
    const size_t bytes = mb << 20, n16 = bytes / 16;
    std::vector<uint4*> bufs = rotating_buffers<uint4>(env.prop, bytes, 0x3c);
    if (bufs.empty()) return 1;
    const int copies = (int)bufs.size();
    float best[3] = {1e30f, 1e30f, 1e30f};
    auto time_read = [&](auto kernel, int mode, int threads, int loads) {
      const unsigned blocks = (unsigned)((n16 + (size_t)threads * loads - 1) / ((size_t)threads * loads));
      const float t = best_of([&](int i) { launch(kernel, mode > 0, dim3(blocks), dim3(threads), (const uint4*)bufs[i % copies], n16, out); },
                              env.start, env.stop);
      best[mode] = t < best[mode] ? t : best[mode];
    };
    for (int threads : {128, 256, 512}) {
      time_read(read_chunks<1, 0>, 0, threads, 1);
      time_read(read_chunks<1, 1>, 1, threads, 1);
      time_read(read_chunks<1, 2>, 2, threads, 1);
      time_read(read_chunks<2, 0>, 0, threads, 2);
      time_read(read_chunks<2, 1>, 1, threads, 2);
      time_read(read_chunks<2, 2>, 2, threads, 2);
      time_read(read_chunks<4, 0>, 0, threads, 4);
      time_read(read_chunks<4, 1>, 1, threads, 4);
      time_read(read_chunks<4, 2>, 2, threads, 4);
    }
    CHECK(cudaGetLastError());
    printf("read %2zu MB (best of 9 block shapes)  plain %5.2f  pdl %5.2f  pdl+L2 %5.2f us\n", mb, best[0], best[1], best[2]);
    for (uint4* b : bufs) cudaFree(b);
  }
  int bad = 0;
  // The configs shipped in db/records/nvidia-h200.jsonl (block, lanes, vec, unroll, rows, policy; split, persist).
  bad |= run<__half, 64, 64, 8, 2, 1, 1>(env, "float16", 1024, 1024, 1, 0);
  bad |= run<__nv_bfloat16, 128, 128, 8, 4, 2, 1>(env, "bfloat16", 1024, 1024, 1, 0);
  bad |= run<__half, 128, 128, 8, 1, 1, 1>(env, "float16", 1024, 1024, 1, 0);
  bad |= run<__half, 32, 32, 8, 4, 1, 1>(env, "float16", 1024, 1024, 1, 0);
  bad |= run<float, 64, 64, 4, 2, 1, 1>(env, "float32", 1024, 1024, 1, 0);
  bad |= run<__half, 128, 128, 8, 4, 2, 1>(env, "float16", 2048, 2048, 1, 0);
  bad |= run<__half, 128, 128, 8, 4, 2, 1>(env, "float16", 4096, 4096, 1, 0);
  bad |= run<__half, 128, 128, 8, 4, 2, 1>(env, "float16", 4096, 8192, 1, 0);
  bad |= run<__half, 128, 128, 8, 8, 1, 1>(env, "float16", 4096, 8192, 1, 0);
  bad |= run<__half, 128, 128, 8, 4, 2, 1>(env, "float16", 8192, 4096, 1, 0);
  bad |= run<float, 128, 128, 4, 4, 2, 1>(env, "float32", 4096, 4096, 1, 0);
  bad |= run<__half, 64, 64, 8, 4, 2, 1>(env, "float16", 256, 131072, 16, 4);
  bad |= run<__half, 128, 128, 8, 1, 8, 1>(env, "float16", 256, 131072, 32, 0);
  bad |= run<__half, 256, 8, 8, 2, 4, 2>(env, "float16", 131072, 256, 1, 2);
  bad |= run<__half, 128, 128, 8, 4, 2, 1>(env, "float16", 8192, 8192, 1, 0);
  return bad;
}
