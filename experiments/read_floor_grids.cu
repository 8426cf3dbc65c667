// The least GPU time per call of a kernel that only reads an S-byte matrix, timed the way autotune
// times a GEMV (worker/timing.py): launches queued behind a spin kernel, run back to back, events
// around them, inputs rotating over buffers of at least 4x the L2 so every call reads from DRAM.
// A GEMV must read its whole matrix, so for each size this is a floor no GEMV config can beat
// (issue "GEMV faster than cuBLAS on every shape": its goal of <= 3 us for matrices of 8 MB or less).
// Each size tries several grids (blocks per SM x threads x 16-byte loads per thread, all issued
// before any is used) and keeps the fastest; the empty kernel gives the launch floor.
//   nvcc -O3 -arch=sm_90 -o /tmp/read_floor_grids experiments/read_floor_grids.cu && /tmp/read_floor
#include <vector>

#include "bench_common.cuh"

__global__ void empty() {}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  const cudaDeviceProp& prop = setup.prop;
  const int sms = prop.multiProcessorCount;
  cudaEvent_t a = setup.start, z = setup.stop;
  unsigned* out = setup.out;

  printf("%s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  printf("empty kernel: %.2f us per call\n", best_of([&](int) { empty<<<1, 32>>>(); }, a, z));
  printf("%8s %7s %9s %8s  grid (blocks x threads x loads)\n", "MB", "copies", "us/call", "GB/s");
  const size_t sizes_mb[] = {2, 4, 8, 16, 32, 64, 128, 256};
  for (size_t mb : sizes_mb) {
    const size_t bytes = mb << 20;
    const std::vector<uint4*> bufs = rotating_buffers<uint4>(prop, bytes, 1);
    if (bufs.empty()) return 1;
    const int copies = (int)bufs.size();
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
        run(read_flat<1>, 1);
        run(read_flat<2>, 2);
        run(read_flat<4>, 4);
        run(read_flat<8>, 8);
      }
    }
    CHECK(cudaGetLastError());
    printf("%8zu %7d %9.2f %8.0f  %s\n", mb, copies, best, bytes / (best * 1e3), how);
    for (auto b : bufs) CHECK(cudaFree(b));
  }
  return 0;
}
