// The transposed GEMV (y = Aᵀx, A row-major M x N, float16) with A's stages read by the tensor cores, as
// cuBLAS's kernel for it does (experiments/cublas_trans_kernels_nvidia-h200.txt). gemv_t_tma.cu brought
// the same stages in by the TMA, but multiplied them on CUDA cores, and a block then read at about half
// cuBLAS's rate: a 16 KiB stage cost 256 threads some 640 warp instructions. Here it costs a warp 4
// ldmatrix and 4 mma.sync instructions per 16 columns.
//   tma_mma<BLOCK, W, R, STAGES>: grid (strips of W columns, parts of the rows) as in gemv_t_tma.cu; thread
//   0 keeps STAGES stages of R rows x W columns in flight, each as W / 64 boxes of 64 columns (128 bytes,
//   swizzled by the TMA's 128-byte pattern so that ldmatrix's 8 rows of 16 bytes fall in 8 bank groups).
//   The product is Dᵀ = Aᵀ x with Aᵀ as mma's A operand (16 columns of A x 16 rows, read by
//   ldmatrix.trans) and x as B (16 rows x 8, x in column 0, zeros in the rest): a warp owns 16-column
//   tiles (one, or W / 16 / warps) and 1 / KSPLIT of each stage's 16-row steps, and lanes 0, 4, ..., 28 end with the column sums. Parts >
//   1 add them with atomics; the last part of a strip writes y (gemv_t_tma.cu's scheme).
// Beside it, narrow at the shipped picks' tilings and gemv_t_tma.cu's best tiling (CUDA-core reads of the
// same stages), every kernel checked against a float64 product with y poisoned first. Not yet run.
//   nvcc -O3 -arch=sm_90 -I kernels -I kernels/common -I experiments -o /tmp/gemv_t_tma_mma experiments/gemv_t_tma_mma.cu
#include <cuda.h>
#include <cuda_fp16.h>

#include <string>
#include <vector>

#include "gemv_t_harness.cuh"
#include "tma.cuh"

constexpr int BOX = 64;         // columns a box: 128 bytes, the span of the 128-byte swizzle
constexpr int BOX_BYTES = 128;  // a box row
constexpr int SWIZZLE_ALIGN = 1024;  // the 128-byte swizzle repeats every 8 rows: boxes start 1024-aligned

__device__ __forceinline__ unsigned pack_halves(__half lo, __half hi) {
  return (unsigned)__half_as_ushort(lo) | ((unsigned)__half_as_ushort(hi) << 16);
}

template <int BLOCK, int W, int R, int STAGES>
__global__ void __launch_bounds__(BLOCK)
    tma_mma(const __grid_constant__ CUtensorMap map, const __half* __restrict__ x, __half* __restrict__ y, int M,
            int N, int rows_per, float* __restrict__ acc, unsigned* __restrict__ counters) {
  constexpr int WARPS = BLOCK / 32, MTILES = W / 16, KSTEPS = R / 16;
  // A warp owns OWN column tiles of 16 and 1 / KSPLIT of each stage's 16-row steps.
  constexpr int OWN = WARPS >= MTILES ? 1 : MTILES / WARPS, KSPLIT = WARPS >= MTILES ? WARPS / MTILES : 1;
  constexpr int BOXES = W / BOX, STAGE_BYTES = R * W * 2, BOX_STAGE_BYTES = R * BOX_BYTES;
  static_assert(W % BOX == 0 && R % 16 == 0, "whole boxes, whole 16-row steps");
  static_assert((WARPS >= MTILES ? WARPS % MTILES : MTILES % WARPS) == 0 && KSTEPS % KSPLIT == 0,
                "warps split the column tiles, then the steps");
  static_assert(BOX_STAGE_BYTES % SWIZZLE_ALIGN == 0, "every box of every stage starts 1024-aligned");
  extern __shared__ unsigned char raw_smem[];
  __shared__ __align__(8) uint64_t full[STAGES];
  __shared__ float sums[KSPLIT][W];
  const uint32_t base = (at_tma::smem_addr(raw_smem) + SWIZZLE_ALIGN - 1) / SWIZZLE_ALIGN * SWIZZLE_ALIGN;
  const int strip = blockIdx.x, first = strip * W;
  const int begin = blockIdx.y * rows_per, end = min(M, begin + rows_per);
  const int steps = (end - begin + R - 1) / R;
  const uint32_t bars = at_tma::smem_addr(full);
  if (threadIdx.x == 0) {
    at_tma::prefetch_tensor_map(&map);
    for (int s = 0; s < STAGES; ++s) at_tma::mbarrier_init(bars + 8 * s, 1);
    at_tma::fence_mbarrier_init();
  }
  __syncthreads();
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  auto ask = [&](int slot, int step) {
    at_tma::mbarrier_arrive_expect_tx(bars + 8 * slot, STAGE_BYTES);
#pragma unroll
    for (int b = 0; b < BOXES; ++b)
      at_tma::tma_load_2d(base + slot * STAGE_BYTES + b * BOX_STAGE_BYTES, &map, bars + 8 * slot, first + b * BOX,
                          begin + step * R);
  };
  if (threadIdx.x == 0)
    for (int s = 0; s < STAGES && s < steps; ++s) ask(s, s);

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int mtile0 = (warp % (MTILES / OWN)) * OWN, kpart = warp / (MTILES / OWN);
  // ldmatrix.x4.trans: lanes 8j..8j+7 give the rows of matrix j, which holds A's rows k0 + 8 (j / 2) + (lane
  // % 8) at columns m0 + 8 (j % 2) ..+7; transposed, the four are the fragments a0a1, a2a3, a4a5, a6a7.
  const int j = lane / 8, row_in = (j / 2) * 8 + lane % 8;
  uint32_t lane_box[OWN], chunk[OWN];
#pragma unroll
  for (int o = 0; o < OWN; ++o) {
    const int col = (mtile0 + o) * 16 + (j % 2) * 8;
    lane_box[o] = (col / BOX) * BOX_STAGE_BYTES;
    chunk[o] = (col % BOX) / 8;
  }
  const int g = lane / 4, t = lane % 4;  // mma fragment coordinates: group (row of A's tile) and pair
  float d[OWN][4] = {};
  for (int step = 0; step < steps; ++step) {
    const int s = step % STAGES;
    at_tma::mbarrier_wait(bars + 8 * s, (step / STAGES) & 1);
    const int row0 = begin + step * R;
#pragma unroll
    for (int i = 0; i < KSTEPS / KSPLIT; ++i) {
      const int k0 = (kpart + i * KSPLIT) * 16, k = k0 + row_in;
      unsigned b0 = 0, b1 = 0;  // B's column g: x in column 0, zeros elsewhere
      if (g == 0) {
        const int r = row0 + k0 + 2 * t;
        const __half zero = __float2half(0.0f);
        b0 = pack_halves(r < end ? x[r] : zero, r + 1 < end ? x[r + 1] : zero);
        b1 = pack_halves(r + 8 < end ? x[r + 8] : zero, r + 9 < end ? x[r + 9] : zero);
      }
#pragma unroll
      for (int o = 0; o < OWN; ++o) {
        const uint32_t addr = base + s * STAGE_BYTES + lane_box[o] + k * BOX_BYTES + ((chunk[o] ^ (k % 8)) * 16);
        unsigned a0, a1, a2, a3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3)
                     : "r"(addr));
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d[o][0]), "+f"(d[o][1]), "+f"(d[o][2]), "+f"(d[o][3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      }
    }
    __syncthreads();  // every warp is done with slot s
    if (threadIdx.x == 0 && step + STAGES < steps) ask(s, step + STAGES);
  }
  // D's column 0: d[0] at row g, d[2] at row g + 8 of the warp's 16 columns, in lanes with t == 0.
  if (t == 0)
#pragma unroll
    for (int o = 0; o < OWN; ++o) {
      sums[kpart][(mtile0 + o) * 16 + g] = d[o][0];
      sums[kpart][(mtile0 + o) * 16 + g + 8] = d[o][2];
    }
  __syncthreads();
  finish_strip<BLOCK, W, KSPLIT>(sums, strip, N, y, acc, counters);
}

template <int BLOCK, int W, int R, int STAGES>
TransposedCase tma_mma_case(int per_sm) {
  auto kernel = tma_mma<BLOCK, W, R, STAGES>;
  constexpr int smem = STAGES * R * W * 2 + SWIZZLE_ALIGN;  // room to align the first stage
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  return {"tma_mma b" + std::to_string(BLOCK) + " w" + std::to_string(W) + " r" + std::to_string(R) + " s" +
              std::to_string(STAGES) + " x" + std::to_string(per_sm),
          8,  // the box's zero fill covers a last strip of fewer columns
          [kernel, per_sm](const __half* x, const __half* a, __half* y, int m, int n, float* acc, unsigned* counters,
                           int sms) {
            return launch_tma(kernel, BLOCK, W, R, BOX, CU_TENSOR_MAP_SWIZZLE_128B, smem, per_sm, x, a, y, m, n, acc,
                              counters, sms);
          }};
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  const std::vector<TransposedCase> cases = {
      family_case<1024, 64, 8, 4, 0>(0),     // the short-and-wide picks (2304 x 9216)
      family_case<1024, 128, 4, 8, 1>(2),    // the lean picks (4096 x 11008, 4544 x 4544)
      tma_mma_case<256, 128, 64, 12>(0),     // cuBLAS's tile and stages, a block a strip
      tma_mma_case<256, 128, 64, 12>(1),
      tma_mma_case<256, 128, 64, 6>(2),
      tma_mma_case<256, 64, 64, 8>(3),
      tma_mma_case<128, 64, 64, 12>(2),
      tma_mma_case<512, 128, 64, 6>(2),      // two warps a column tile, each half of a stage's steps
      tma_mma_case<256, 256, 32, 6>(2),
      tma_mma_case<128, 128, 128, 4>(2),
  };
  for (auto [m, n] : {std::pair{2304, 9216}, {1536, 8960}, {4096, 11008}, {4096, 4096}, {8192, 4096}, {5120, 5120},
                      {16384, 3072}, {14336, 4096}, {28672, 4096}, {4096, 14336}, {131072, 256}, {4544, 4544}})
    if (time_cases(setup, m, n, cases, MAX_PARTS)) return 1;
  return 0;
}
