// Does the *access pattern* of the int4 GEMV (kernels/qgemm/qgemm.cu) cap DRAM bandwidth on an H200,
// apart from its arithmetic? Pure-streaming kernels over an N x K/2-byte row-major matrix, no math:
// each thread folds what it loads into one word (XOR/add), stored only if it equals MAGIC (never), so
// no load is dead. Build and run (standalone, no project headers):
//   nvcc -O3 -arch=sm_90 access.cu -o access && ./access > results.jsonl
// One JSON object a line: the device first, then one per (kernel, unroll, block, policy, split, size).
//
// Every pattern kernel gives a warp the same 16 consecutive rows the qgemm kernel gives it, and one
// "step" is the same 1 KiB a warp (2 16-byte loads a thread); only where those bytes lie differs:
//   quad  qgemm's pattern: lane 4g + c loads piece 4s + c (16 B) of rows g and g + 8, so one warp-wide
//         load touches 8 rows x 64 contiguous bytes.
//   row   the warp's 16 rows are one contiguous 16 * K/2-byte span: it reads it front to back,
//         512 contiguous bytes a warp-wide load (lane * 16), two consecutive 512-B chunks a step.
//   row2  two streams a warp, rows 0-7 and rows 8-15 of its 16 (each contiguous), one 512-B chunk of
//         each a step: the row pattern with qgemm's two-rows-at-once shape.
//   copy  a grid-stride read of the whole buffer, 4 loads in flight a thread: the ceiling.
// UNROLL steps are loaded (2 * UNROLL loads a thread), then folded; the loop is not unrolled further.
// (qgemm keeps two stages of UNROLL steps in flight, so its UNROLL u is about this probe's 2u.)
// policy: the load qgemm's POLICY picks: 0 __ldg, 1 __ldcs (evict-first), 2 ld.global.nc with
// L1::no_allocate and L2::256B prefetch (the prefetch hint may matter most to quad's 64-B pieces).
// split: blockIdx.y splits each warp's steps into parts (qgemm's cluster split-K). Split 1 is the grid
// exactly covering N; for N = 4096 / 3584 that is only 32 / 28 blocks of 256 on 132 SMs, so those sizes
// are also run with split 8 (qgemm's largest cluster), or the grid, not the pattern, would be measured.
//
// Timing: before every launch (warm-up and timed) a kernel *reads* a 128 MiB scratch buffer (> 2x the
// 60 MiB L2) so the matrix is not in L2. A cudaMemsetAsync flush would leave ~60 MiB of dirty lines
// that drain to DRAM during the timed kernel, a write of the same order as the matrix it reads.
// Each launch has its own event pair; the median of 50 is reported. GB/s = N*K/2 / median (1e9 B/s).
// At ~7 us a launch (the 29 MB sizes), event resolution (~0.5 us) is a few per cent.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(call)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, \
              #call);                                                                          \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

constexpr unsigned MAGIC = 0x9E3779B9u;  // the fold never equals it in practice: the store stays unexecuted
constexpr int REPS = 50, WARMUP = 3;
constexpr size_t FLUSH_BYTES = 128u << 20;
enum { QUAD = 0, ROW = 1, ROW2 = 2 };

// The three load flavours qgemm's load_stream<POLICY> (kernels/common/common.cuh) issues.
template <int POL> __device__ __forceinline__ uint4 load(const uint4* p) {
  if (POL == 1) return __ldcs(p);
  if (POL == 2) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
  }
  return __ldg(p);
}
__device__ __forceinline__ unsigned fold(unsigned acc, uint4 v) { return acc + (v.x ^ v.y ^ v.z ^ v.w); }

// The pattern kernels (see the head of the file). A warp owns rows [16 w, 16 w + 16); load h of step s
// reads p[h] + s * STRIDE (in 16-byte units), so the three patterns differ only in p and STRIDE.
template <int PAT, int UNROLL, int BLOCK, int MINB, int POL>
__global__ void __launch_bounds__(BLOCK, MINB) stream(const uint4* __restrict__ w, int N, int K, unsigned* out) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int warp_row = (blockIdx.x * (BLOCK / 32) + threadIdx.x / 32) * 16;
  if (warp_row >= N) return;
  const size_t rb = K / 32;                  // 16-byte pieces a row
  const int units = K / 128 / UNROLL;        // steps a warp / UNROLL (host checks divisibility)
  const int per = (units + gridDim.y - 1) / gridDim.y;
  const int ub = blockIdx.y * per, ue = min(units, ub + per);
  constexpr int STRIDE = PAT == QUAD ? 4 : PAT == ROW ? 64 : 32;
  const uint4* p[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (PAT == QUAD) p[h] = w + (warp_row + g + 8 * h) * rb + c;
    if (PAT == ROW) p[h] = w + warp_row * rb + 32 * h + lane;
    if (PAT == ROW2) p[h] = w + (warp_row + 8 * h) * rb + lane;
  }
  unsigned acc = 0;
#pragma unroll 1
  for (int u = ub; u < ue; ++u) {
    uint4 v[UNROLL][2];  // every load of the iteration is issued before any is folded
#pragma unroll
    for (int i = 0; i < UNROLL; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) v[i][h] = load<POL>(p[h] + (size_t)(u * UNROLL + i) * STRIDE);
#pragma unroll
    for (int i = 0; i < UNROLL; ++i) acc = fold(fold(acc, v[i][0]), v[i][1]);
  }
  if (acc == MAGIC) out[0] = acc;
}

// The ceiling: grid-stride 16-byte reads of the whole matrix, 4 independent loads a thread in flight.
template <int BLOCK, int POL>
__global__ void __launch_bounds__(BLOCK) copy(const uint4* __restrict__ w, int N, int K, unsigned* out) {
  const size_t n = (size_t)N * K / 32, stride = (size_t)gridDim.x * BLOCK;
  size_t i = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  unsigned acc = 0;
#pragma unroll 1
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = load<POL>(w + i + j * stride);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc = fold(acc, v[j]);
  }
  for (; i < n; i += stride) acc = fold(acc, load<POL>(w + i));
  if (acc == MAGIC) out[0] = acc;
}

// Evicts the matrix from L2 by reading (not writing) a buffer > 2x the L2: lines left behind are clean.
__global__ void flush(const uint4* __restrict__ s, size_t n, unsigned* out) {
  unsigned acc = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    acc = fold(acc, s[i]);
  if (acc == MAGIC) out[1] = acc;
}

// Fills the matrix with non-constant words (a hash of the index), so nothing about it is uniform.
__global__ void fill(unsigned* w, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned x = (unsigned)i * 2654435761u;
    w[i] = x ^ (x >> 15) ^ 0x5bd1e995u;
  }
}

typedef void (*Kern)(const uint4*, int, int, unsigned*);
struct Cfg {
  const char* name;
  int unroll, block, policy;
  bool is_copy;
  Kern kern;
};

template <int POL> void add(std::vector<Cfg>& v) {
  v.push_back({"quad", 1, 256, POL, false, stream<QUAD, 1, 256, 2, POL>});
  v.push_back({"quad", 2, 256, POL, false, stream<QUAD, 2, 256, 2, POL>});
  v.push_back({"quad", 4, 256, POL, false, stream<QUAD, 4, 256, 2, POL>});
  // Block 128 with 4 blocks an SM bound (the register budget of one qgemm instance in the sweep).
  v.push_back({"quad", 1, 128, POL, false, stream<QUAD, 1, 128, 4, POL>});
  v.push_back({"quad", 2, 128, POL, false, stream<QUAD, 2, 128, 4, POL>});
  v.push_back({"quad", 4, 128, POL, false, stream<QUAD, 4, 128, 4, POL>});
  v.push_back({"row", 1, 256, POL, false, stream<ROW, 1, 256, 2, POL>});
  v.push_back({"row", 2, 256, POL, false, stream<ROW, 2, 256, 2, POL>});
  v.push_back({"row", 4, 256, POL, false, stream<ROW, 4, 256, 2, POL>});
  v.push_back({"row2", 1, 256, POL, false, stream<ROW2, 1, 256, 2, POL>});
  v.push_back({"row2", 2, 256, POL, false, stream<ROW2, 2, 256, 2, POL>});
  v.push_back({"row2", 4, 256, POL, false, stream<ROW2, 4, 256, 2, POL>});
  v.push_back({"copy", 4, 256, POL, true, copy<256, POL>});
}

int main() {
  int dev = 0, mem_khz = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  // CUDA 13 dropped cudaDeviceProp::memoryClockRate; the attribute still gives it (kHz).
  CK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev));
  const double peak = 2.0 * mem_khz * 1e3 * (prop.memoryBusWidth / 8) / 1e9;  // DDR: 2 transfers a clock
  printf("{\"device\": \"%s\", \"sm_count\": %d, \"l2_bytes\": %d, \"mem_clock_khz\": %d, "
         "\"bus_width_bits\": %d, \"nominal_peak_gbs\": %.1f}\n",
         prop.name, prop.multiProcessorCount, prop.l2CacheSize, mem_khz, prop.memoryBusWidth, peak);
  fflush(stdout);

  const int sizes[][2] = {{28672, 4096}, {37888, 3584}, {4096, 14336}, {3584, 18944}};  // N, K
  size_t max_bytes = 0;
  for (auto& s : sizes) max_bytes = std::max(max_bytes, (size_t)s[0] * s[1] / 2);
  uint4 *w, *scratch;
  unsigned* out;
  CK(cudaMalloc(&w, max_bytes));
  CK(cudaMalloc(&scratch, FLUSH_BYTES));
  CK(cudaMalloc(&out, 64));
  fill<<<1024, 256>>>(reinterpret_cast<unsigned*>(w), max_bytes / 4);
  CK(cudaGetLastError());
  CK(cudaMemset(scratch, 1, FLUSH_BYTES));
  CK(cudaMemset(out, 0, 64));
  CK(cudaDeviceSynchronize());

  std::vector<Cfg> cfgs;
  add<0>(cfgs);
  add<1>(cfgs);
  add<2>(cfgs);
  cudaEvent_t ev[REPS][2];
  for (auto& e : ev) {
    CK(cudaEventCreate(&e[0]));
    CK(cudaEventCreate(&e[1]));
  }
  const int flush_grid = prop.multiProcessorCount * 8;

  for (auto& s : sizes) {
    const int N = s[0], K = s[1];
    const double bytes = (double)N * K / 2;
    for (const Cfg& c : cfgs) {
      if (!c.is_copy && (N % 16 != 0 || (K / 128) % c.unroll != 0 || K % 128 != 0)) {
        fprintf(stderr, "size %d x %d does not fit %s unroll %d\n", N, K, c.name, c.unroll);
        exit(1);
      }
      dim3 grid;
      std::vector<int> splits = {1};
      if (c.is_copy) {
        int occ = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, c.kern, c.block, 0));
        grid = dim3(occ * prop.multiProcessorCount);
      } else {
        const int rows_per_block = c.block / 32 * 16;
        grid = dim3((N + rows_per_block - 1) / rows_per_block);
        if ((int)grid.x < prop.multiProcessorCount) splits.push_back(8);
      }
      for (int split : splits) {
        grid.y = split;
        float t[REPS];
        for (int r = -WARMUP; r < REPS; ++r) {
          flush<<<flush_grid, 256>>>(scratch, FLUSH_BYTES / 16, out);
          CK(cudaGetLastError());
          if (r >= 0) CK(cudaEventRecord(ev[r][0]));
          c.kern<<<grid, c.block>>>(w, N, K, out);
          CK(cudaGetLastError());
          if (r >= 0) CK(cudaEventRecord(ev[r][1]));
        }
        CK(cudaDeviceSynchronize());
        for (int r = 0; r < REPS; ++r) CK(cudaEventElapsedTime(&t[r], ev[r][0], ev[r][1]));
        std::sort(t, t + REPS);
        const double us = 1e3 * 0.5 * (t[REPS / 2 - 1] + t[REPS / 2]);
        printf("{\"kernel\": \"%s\", \"unroll\": %d, \"block\": %d, \"policy\": %d, \"split\": %d, "
               "\"grid\": %u, \"n\": %d, \"k\": %d, \"us\": %.3f, \"gbs\": %.1f}\n",
               c.name, c.unroll, c.block, c.policy, split, grid.x * grid.y, N, K, us, bytes / (us * 1e3));
        fflush(stdout);
      }
    }
  }
  unsigned host_out[2];
  CK(cudaMemcpy(host_out, out, 8, cudaMemcpyDeviceToHost));  // read back so the sink is observed
  if (host_out[0] == MAGIC || host_out[1] == MAGIC) fprintf(stderr, "note: the fold hit MAGIC\n");
  CK(cudaFree(w));
  CK(cudaFree(scratch));
  CK(cudaFree(out));
  return 0;
}
