// The least GPU time per call of a kernel that only reads an S-byte matrix, timed the way autotune
// times a GEMV (worker/timing.py): launches queued behind a spin kernel, run back to back, events
// around them, inputs rotating over buffers of at least 4x the L2 so every call reads from DRAM.
// A GEMV must read its whole matrix, so for each size this is a floor no GEMV config can beat
// (issue "GEMV faster than cuBLAS on every shape": its goal of <= 3 us for matrices of 8 MB or less).
// Each size tries several grids (blocks per SM x threads x 16-byte loads per thread, all issued
// before any is used) and keeps the fastest; the empty kernel gives the launch floor.
//   nvcc -O3 -arch=sm_90 -o /tmp/read_floor scripts/read_floor.cu && /tmp/read_floor
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                               \
  do {                                                                         \
    cudaError_t e = (x);                                                       \
    if (e != cudaSuccess) {                                                    \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));         \
      return 1;                                                                \
    }                                                                          \
  } while (0)

__global__ void spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

__global__ void empty() {}

// Grid-stride over n16 16-byte words, LOADS independent evict-first loads in flight per thread; the
// XOR of everything read is written so that no load is dead.
template <int LOADS>
__global__ void read(const uint4* __restrict__ a, size_t n16, unsigned* __restrict__ out) {
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

// GPU microseconds per call over `calls` launches queued behind a spin kernel.
template <typename Launch>
float per_call_us(Launch launch, int calls, cudaEvent_t a, cudaEvent_t z) {
  spin<<<1, 32>>>(20ull * 1000 * calls + 200000);
  cudaEventRecord(a);
  for (int i = 0; i < calls; ++i) launch(i);
  cudaEventRecord(z);
  cudaEventSynchronize(z);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, z);
  return ms * 1000.0f / calls;
}

template <typename Launch>
float best_of(Launch launch, cudaEvent_t a, cudaEvent_t z) {
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    const float t = per_call_us(launch, 200, a, z);
    best = t < best ? t : best;
  }
  return best;
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  cudaEvent_t a, z;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&z));
  unsigned* out;
  CHECK(cudaMalloc(&out, 4));
  const size_t rotation = 4 * (size_t)prop.l2CacheSize;

  printf("%s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  printf("empty kernel: %.2f us per call\n", best_of([&](int) { empty<<<1, 32>>>(); }, a, z));
  printf("%8s %7s %9s %8s  grid (blocks x threads x loads)\n", "MB", "copies", "us/call", "GB/s");
  const size_t sizes_mb[] = {2, 4, 8, 16, 32, 64, 128, 256};
  for (size_t mb : sizes_mb) {
    const size_t bytes = mb << 20;
    const int copies = (int)((rotation + bytes - 1) / bytes);
    std::vector<uint4*> bufs(copies);
    for (auto& b : bufs) {
      CHECK(cudaMalloc(&b, bytes));
      CHECK(cudaMemset(b, 1, bytes));
    }
    const size_t n16 = bytes / 16;
    float best = 1e30f;
    char how[64] = "";
    for (int per_sm : {1, 2, 4, 8, 16}) {
      for (int threads : {256, 512, 1024}) {
        if (per_sm * threads > 2048) continue;
        const int blocks = per_sm * sms;
        auto run = [&](auto kernel, int loads) {
          const float t = best_of([&](int i) { kernel<<<blocks, threads>>>(bufs[i % copies], n16, out); }, a, z);
          if (t < best) {
            best = t;
            snprintf(how, sizeof how, "%d x %d x %d", blocks, threads, loads);
          }
        };
        run(read<1>, 1);
        run(read<2>, 2);
        run(read<4>, 4);
        run(read<8>, 8);
      }
    }
    CHECK(cudaGetLastError());
    printf("%8zu %7d %9.2f %8.0f  %s\n", mb, copies, best, bytes / (best * 1e3), how);
    for (auto b : bufs) CHECK(cudaFree(b));
  }
  return 0;
}
