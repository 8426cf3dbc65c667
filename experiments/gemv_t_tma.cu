// Does the transposed GEMV (y = Aᵀx, A row-major M x N, float16) read faster through the TMA than through
// the narrow family's loads? cuBLAS answers float16 2304 x 9216 with a tensor-core GEMM kernel
// (nvjet_sm90_hsh_128x8_64x12_4x1: tiles of 128 columns, 64 rows a stage, 12 stages, 72 blocks of 384
// threads; experiments/cublas_trans_kernels_nvidia-h200.txt) in 13.3-14.1 us cold where narrow takes
// 16.4, and a persistent grid over smaller units did not help (gemv_t_tiles.cu): the wave count is not
// what holds narrow back there.
//   tma<BLOCK, W, R, STAGES>: grid (strips of W columns, parts of the rows); thread 0 keeps STAGES boxes
//   of R rows x W columns in flight into shared memory (cp.async.bulk.tensor, one mbarrier a stage); all
//   threads read a stage (a row's W / 8 threads, one 16-byte word each), multiply by x in float, and
//   after a block barrier the slot is asked for again, STAGES - 1 stages still in flight. Parts > 1 add
//   their column sums into a float accumulator with atomics; the last part of a strip to finish writes y
//   and zeroes the accumulator and its counter. Launched with PDL like narrow.
// Beside it, narrow's kernel (kernels/gemv/gemv_t_narrow.cu) at the shipped picks' tilings; every kernel
// is checked against a float64 product with y poisoned first, timed as bench_common.cuh times.
//   nvcc -O3 -arch=sm_90 -I kernels -I kernels/common -I experiments -o /tmp/gemv_t_tma experiments/gemv_t_tma.cu
#include <cuda.h>
#include <cuda_fp16.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gemv/gemv_t_narrow.cu"
#include "gemv_t_harness.cuh"
#include "tma.cuh"

constexpr int VEC = 8;  // halves a 16-byte word holds

template <int BLOCK, int W, int R, int STAGES>
__global__ void __launch_bounds__(BLOCK)
    tma(const __grid_constant__ CUtensorMap map, const __half* __restrict__ x, __half* __restrict__ y, int M,
        int N, int rows_per, float* __restrict__ acc, unsigned* __restrict__ counters) {
  constexpr int TPR = W / VEC, GROUPS = BLOCK / TPR, WARPS = BLOCK / 32, TILE = R * W;
  static_assert(32 % TPR == 0 && R % GROUPS == 0, "whole rows in a warp, whole groups in a stage");
  extern __shared__ __align__(128) unsigned char smem[];
  const __half* tiles = reinterpret_cast<const __half*>(smem);
  __shared__ __align__(8) uint64_t full[STAGES];
  __shared__ float sums[WARPS][W];
  const int strip = blockIdx.x, first = strip * W;
  const int begin = blockIdx.y * rows_per, end = min(M, begin + rows_per);
  const int steps = (end - begin + R - 1) / R;  // rows_per is whole stages: no stage reaches the next part
  const uint32_t bars = at_tma::smem_addr(full), base = at_tma::smem_addr(smem);
  if (threadIdx.x == 0) {
    at_tma::prefetch_tensor_map(&map);
    for (int s = 0; s < STAGES; ++s) at_tma::mbarrier_init(bars + 8 * s, 1);
    at_tma::fence_mbarrier_init();
  }
  __syncthreads();
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0)
    for (int s = 0; s < STAGES && s < steps; ++s) {
      at_tma::mbarrier_arrive_expect_tx(bars + 8 * s, TILE * 2);
      at_tma::tma_load_2d(base + s * TILE * 2, &map, bars + 8 * s, first, begin + s * R);
    }
  const int word = threadIdx.x % TPR, group = threadIdx.x / TPR;
  float a[VEC] = {};
  for (int step = 0; step < steps; ++step) {
    const int s = step % STAGES;
    at_tma::mbarrier_wait(bars + 8 * s, (step / STAGES) & 1);
    const __half* tile = tiles + s * TILE;
    const int row0 = begin + step * R;
#pragma unroll
    for (int i = 0; i < R / GROUPS; ++i) {
      const int rr = group + i * GROUPS, r = row0 + rr;
      const float xr = r < end ? __half2float(__ldg(x + r)) : 0.0f;  // rows past M are zeros in the box
      const uint4 raw = *reinterpret_cast<const uint4*>(tile + rr * W + word * VEC);
      const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
      for (int e = 0; e < VEC / 2; ++e) {
        const float2 f = __half22float2(h[e]);
        a[2 * e] = fmaf(f.x, xr, a[2 * e]);
        a[2 * e + 1] = fmaf(f.y, xr, a[2 * e + 1]);
      }
    }
    __syncthreads();  // every thread is done with slot s
    if (threadIdx.x == 0 && step + STAGES < steps) {
      at_tma::mbarrier_arrive_expect_tx(bars + 8 * s, TILE * 2);
      at_tma::tma_load_2d(base + s * TILE * 2, &map, bars + 8 * s, first, begin + (step + STAGES) * R);
    }
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int offset = TPR; offset < 32; offset *= 2)
#pragma unroll
    for (int e = 0; e < VEC; ++e) a[e] += __shfl_xor_sync(0xffffffffu, a[e], offset);
  if (lane < TPR)
#pragma unroll
    for (int e = 0; e < VEC; ++e) sums[warp][word * VEC + e] = a[e];
  __syncthreads();
  finish_strip<BLOCK, W, WARPS>(sums, strip, N, y, acc, counters);
}

template <int BLOCK, int W, int R, int STAGES>
TransposedCase tma_case(int per_sm) {
  auto kernel = tma<BLOCK, W, R, STAGES>;
  constexpr int smem = STAGES * R * W * 2;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  return {"tma b" + std::to_string(BLOCK) + " w" + std::to_string(W) + " r" + std::to_string(R) + " s" +
              std::to_string(STAGES) + " x" + std::to_string(per_sm),
          VEC,  // the box's zero fill covers a last strip of fewer columns
          [kernel, per_sm](const __half* x, const __half* a, __half* y, int m, int n, float* acc, unsigned* counters,
                           int sms) {
            return launch_tma(kernel, BLOCK, W, R, W, CU_TENSOR_MAP_SWIZZLE_NONE, smem, per_sm, x, a, y, m, n, acc,
                              counters, sms);
          }};
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  const std::vector<TransposedCase> cases = {
      family_case<1024, 64, 8, 4, 0>(0),      // the short-and-wide picks (2304 x 9216, 4096 x 11008)
      family_case<1024, 128, 4, 8, 0>(1),     // 28672 x 4096's pick
      family_case<1024, 128, 4, 8, 1>(2),     // the lean picks (4544 x 4544, 17920 x 1536)
      tma_case<256, 128, 64, 12>(0),          // cuBLAS's tile and stages, a block a strip
      tma_case<256, 128, 64, 12>(1),
      tma_case<256, 128, 64, 6>(2),
      tma_case<256, 128, 32, 8>(3),
      tma_case<256, 64, 64, 8>(3),
      tma_case<512, 256, 32, 12>(0),
      tma_case<256, 256, 32, 6>(2),
      tma_case<128, 64, 64, 12>(2),
      tma_case<256, 128, 128, 4>(2),
  };
  for (auto [m, n] : {std::pair{2304, 9216}, {1536, 8960}, {4096, 11008}, {4096, 4096}, {8192, 4096}, {5120, 5120},
                      {16384, 3072}, {14336, 4096}, {28672, 4096}, {4096, 14336}, {131072, 256}, {4544, 4544}})
    if (time_cases(setup, m, n, cases, MAX_PARTS)) return 1;
  return 0;
}
