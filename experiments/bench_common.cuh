// What the standalone CUDA benchmarks in scripts/ share: error checks, the flat read every floor is
// measured against, and the way autotune times a kernel (autotune/measure/worker/timing.py): launches queued
// behind a spin kernel, run back to back, events around them.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

// For main(): prints the failing call and returns 1.
#define CHECK(x)                                                               \
  do {                                                                         \
    cudaError_t e = (x);                                                       \
    if (e != cudaSuccess) {                                                    \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));         \
      return 1;                                                                \
    }                                                                          \
  } while (0)

// What a benchmark's main() starts with: device 0, the events best_of times with, and the word its
// kernels write when their XOR hits a magic value (so that no load is dead).
struct BenchSetup {
  cudaDeviceProp prop;
  cudaEvent_t start, stop;
  unsigned* out;
};

inline cudaError_t bench_setup(BenchSetup& setup) {
  cudaError_t e = cudaGetDeviceProperties(&setup.prop, 0);
  if (e == cudaSuccess) e = cudaEventCreate(&setup.start);
  if (e == cudaSuccess) e = cudaEventCreate(&setup.stop);
  if (e == cudaSuccess) e = cudaMalloc(&setup.out, 4);
  return e;
}

// Keeps the GPU busy for `ns` while the host queues the launches to time behind it.
__global__ void spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// Grid-stride over n16 16-byte words, LOADS independent evict-first loads in flight per thread; the
// XOR of everything read is written so that no load is dead.
template <int LOADS>
__global__ void read_flat(const uint4* __restrict__ a, size_t n16, unsigned* __restrict__ out) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  unsigned acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += stride * LOADS) {
    uint4 v[LOADS];
#pragma unroll
    for (int u = 0; u < LOADS; ++u) v[u] = i + u * stride < n16 ? __ldcs(a + i + u * stride) : uint4{};
#pragma unroll
    for (int u = 0; u < LOADS; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) out[0] = acc;  // practically never true, but the loads must stay
}

// A kernel launch, with `pdl` as programmatic dependent launch (autotune launches its waiting kernels
// so on sm_90): the next grid's blocks may start once every block of this one has run
// griddepcontrol.launch_dependents.
template <typename Kernel, typename... Args>
cudaError_t launch(Kernel kernel, bool pdl, dim3 grid, dim3 block, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

// Enough buffers of `bytes` to span 4x the L2, so that a kernel cycling through them reads from DRAM
// every call, each filled with the byte `fill`; none (after printing why) if one cannot be had.
template <typename T>
std::vector<T*> rotating_buffers(const cudaDeviceProp& prop, size_t bytes, int fill) {
  const size_t copies = (4 * (size_t)prop.l2CacheSize + bytes - 1) / bytes;
  std::vector<T*> bufs;
  for (size_t i = 0; i < copies; ++i) {
    void* b = nullptr;
    const cudaError_t e = cudaMalloc(&b, bytes);
    if (e != cudaSuccess || cudaMemset(b, fill, bytes) != cudaSuccess) {
      printf("rotating_buffers: %s\n", cudaGetErrorString(e != cudaSuccess ? e : cudaGetLastError()));
      return {};
    }
    bufs.push_back(static_cast<T*>(b));
  }
  return bufs;
}

// What separates calls in the benchmarks' isolated clock: one warp writing one word, launched plainly
// (no programmatic dependent launch) before each call, so that no call overlaps the one before.
__global__ void separator(unsigned* out) {
  if (threadIdx.x == 0) out[0] = 0u;
}

// GPU microseconds per call over `calls` launches (launch(i) for i < calls) queued behind a spin kernel.
template <typename Launch>
float per_call_us(Launch launch, int calls, cudaEvent_t start, cudaEvent_t stop) {
  spin<<<1, 32>>>(20ull * 1000 * calls + 200000);
  cudaEventRecord(start);
  for (int i = 0; i < calls; ++i) launch(i);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  return ms * 1000.0f / calls;
}

// The least of five per_call_us runs of 200 calls.
template <typename Launch>
float best_of(Launch launch, cudaEvent_t start, cudaEvent_t stop) {
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    const float t = per_call_us(launch, 200, start, stop);
    best = t < best ? t : best;
  }
  return best;
}

// The benchmarks' isolated clock (scripts/bench_lowbit.py, bench_lowbit8.py): each call launch(i) after
// the plain separator kernel, so that no call overlaps the one before, the separator's own time taken
// off. `before(i)`, where given, runs between the separator and the call in both timings (a memset
// the call needs, say), so its time is taken off too.
template <typename Launch, typename Before>
float isolated_us(const BenchSetup& setup, Launch launch, Before before) {
  const float with_call = best_of(
      [&](int i) {
        separator<<<1, 32>>>(setup.out);
        before(i);
        launch(i);
      },
      setup.start, setup.stop);
  const float without = best_of(
      [&](int i) {
        separator<<<1, 32>>>(setup.out);
        before(i);
      },
      setup.start, setup.stop);
  return with_call - without;
}

template <typename Launch>
float isolated_us(const BenchSetup& setup, Launch launch) {
  return isolated_us(setup, launch, [](int) {});
}
