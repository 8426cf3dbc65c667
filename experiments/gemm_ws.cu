// A persistent, warp-specialized tensor-core GEMM for Hopper (issue 58, stage 1), beside cuBLAS in the
// same run: C = alpha * A W^T + beta * C, A row-major M x K, W row-major N x K (an nn.Linear's weight,
// the wgmma family's B_NK layout), C row-major M x N, float16 or bfloat16, float32 accumulation.
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I kernels -I kernels/common -I kernels/gemm -o /tmp/gemm_ws \
//        experiments/gemm_ws.cu -lcublas -lcuda && /tmp/gemm_ws
//
// One block an SM (grid = SM count) walks output tiles tile = blockIdx.x, + gridDim.x, ... in groups
// of GROUP tile rows (the order the wgmma family's SWIZZLE gives one block a tile). Warpgroup 0 is the
// producer: it gives back registers (setmaxnreg.dec) and one thread issues the TMA copies of every
// k-tile of every tile into a ring of STAGES stages, each on its "full" mbarrier, after waiting for the
// stage's "empty" mbarrier. Warpgroups 1..CONSUMERS take more registers (setmaxnreg.inc): each waits
// for a stage, issues its wgmma.m64n<BN>k16 (both operands from shared memory, K-major, 128-byte
// swizzle as TMA writes it), keeps one group in flight and gives the stage before back (one arrive a
// warp). The producer runs ahead into the next tile's k-tiles while the consumers write C.
//
// Variants (template parameters), each a row of gemm_ws_nvidia-h200.jsonl:
//   PINGPONG   false: the consumers share each tile (BM / CONSUMERS rows each); true: each owns whole
//              tiles, dealt out in turn, their mainloops taking turns (a `done` mbarrier each), so one
//              writes C while the other multiplies
//   TMA_STORE  0: C written from registers (store_pair: alpha, beta); 1: staged row-major in shared
//              memory, one bulk tensor store (a warp's 8 rows fall on the same banks); 2: staged in
//              64-column blocks of 128-byte rows, 128-byte swizzled, four bulk tensor stores (no bank
//              conflicts). The store runs while the consumer goes on; beta must be 0 (C is not read);
//              3: 2's staging written out by the consumer's threads, 16-byte coalesced stores (no map)
//   STORE      false: one sum a thread written instead of C (the check fails): the cost of the epilogue
//
// Limits of this experiment: M % BM == 0, N % BN == 0, K % 64 == 0 (other shapes are skipped), B N x K
// only; the tensor maps are kernel parameters (__grid_constant__), not the launch path's workspace.
// The output of every kernel is checked against cuBLAS's (float32 accumulation, poisoned with NaN
// first) before it is timed: best of 7 rounds of 20 calls, ours and cuBLAS in turns.
#include <cublas_v2.h>
#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_common.cuh"
#include "gemm/gemm_ws.cu"  // the family's helpers (kernels/gemm/), gemm_wgmma.cu's with them

using namespace at_wgmma;
using at_tma::fence_mbarrier_init;
using at_tma::mbarrier_init;
using at_tma::prefetch_tensor_map;
using at_ws::BK;  // a k-tile: 128 bytes of each row, one 128-byte swizzle row
using at_ws::mbarrier_arrive;
using at_ws::tile_at;  // GROUP consecutive tile rows walked column by column

template <typename T, int BM, int BN, int STAGES, int CONSUMERS, int GROUP, bool PINGPONG, bool STORE, int TMA_STORE>
__global__ void __launch_bounds__(128 * (CONSUMERS + 1), 1)
    gemm_ws(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
            const __grid_constant__ CUtensorMap map_c, T* C, int M, int N, int K, int ldc, float alpha, float beta) {
  constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
  // Cooperative: the consumers share each tile, BM / CONSUMERS rows each. Ping-pong: each owns whole
  // tiles (the CTA's tiles dealt out in turn), so one's epilogue runs while the other multiplies.
  constexpr int ROWS = PINGPONG ? BM : BM / CONSUMERS;  // rows of a tile one consumer warpgroup owns
  constexpr int SLICES = ROWS / 64;     // its wgmma m64 slices
  static_assert(ROWS % 64 == 0 && BN <= 256 && BM <= 256, "m64 slices, TMA boxes of at most 256 rows");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
  static_assert(!PINGPONG || CONSUMERS == 2, "ping-pong between two consumers");
  // done[c]: consumer c has issued the last k-tile of a tile (ping-pong: the other may start its next).
  const uint32_t full = base + STAGES * STAGE_BYTES, empty = full + 8 * STAGES, done = empty + 8 * STAGES;
  // TMA_STORE: each consumer's rows of C staged here (row-major, unswizzled) for one bulk tensor store,
  // which runs while the consumer goes on to its next tile (beta must be 0: C is not read).
  const uint32_t c_stage = base + STAGES * STAGE_BYTES + 1024;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    prefetch_tensor_map(&map_a);
    prefetch_tensor_map(&map_b);
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(full + 8 * s, 1);                   // the producer's expect-tx, then the bytes
      mbarrier_init(empty + 8 * s, (PINGPONG ? 1 : CONSUMERS) * 4);  // one arrive a consumer warp
    }
    mbarrier_init(done, 4);
    mbarrier_init(done + 8, 4);
    fence_mbarrier_init();
  }
  __syncthreads();
  const int tiles_m = M / BM, tiles_n = N / BN, tiles = tiles_m * tiles_n, ktiles = K / BK;

  if (wg == 0) {  // the producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (t != 0) return;
    int s = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      int tm, tn;
      tile_at<GROUP>(tile, tiles_m, tiles_n, tm, tn);
      for (int kt = 0; kt < ktiles; ++kt) {
        mbarrier_wait(empty + 8 * s, phase ^ 1);  // a fresh barrier's previous phase counts as done
        mbarrier_arrive_expect_tx(full + 8 * s, STAGE_BYTES);
        const uint32_t a = base + s * STAGE_BYTES;
        tma_load_2d(a, &map_a, full + 8 * s, kt * BK, tm * BM);
        tma_load_2d(a + A_BYTES, &map_b, full + 8 * s, kt * BK, tn * BN);
        if (++s == STAGES) s = 0, phase ^= 1;
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int c = wg - 1, warp = t / 32, lane = t % 32;
  float d[SLICES][BN / 2];
  constexpr int TURN = PINGPONG ? CONSUMERS : 1;  // a consumer's tiles: every TURN-th of the CTA's
  for (int i = PINGPONG ? c : 0, tile = blockIdx.x + i * gridDim.x; tile < tiles;
       i += TURN, tile = blockIdx.x + i * gridDim.x) {
    int tm, tn;
    tile_at<GROUP>(tile, tiles_m, tiles_n, tm, tn);
    int previous = -1;
    // Ping-pong: the mainloops take turns, so that a consumer never waits on a stage's barrier more
    // than one phase ahead of it (a parity wait cannot tell phase r from r + 2).
    if (PINGPONG && i > 0) mbarrier_wait(done + 8 * (1 - c), ((i - 1 - (1 - c)) / 2) & 1);
    for (int kt = 0; kt < ktiles; ++kt) {
      const int g = i * ktiles + kt;  // the producer's count of k-tiles: its stage and phase
      const int s = g % STAGES;
      mbarrier_wait(full + 8 * s, (g / STAGES) & 1);
      const uint32_t a = base + s * STAGE_BYTES + (PINGPONG ? 0 : c * ROWS * 128), b = base + s * STAGE_BYTES + A_BYTES;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
        for (int sl = 0; sl < SLICES; ++sl) {
          const uint64_t desc_a = make_desc(a + sl * 64 * 128 + kk * 32, 16, 1024, 1);
          const uint64_t desc_b = make_desc(b + kk * 32, 16, 1024, 1);
          Wgmma<T, BN, false>::run(d[sl], desc_a, desc_b, kt > 0 || kk > 0);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();  // the k-tile before this one is done: its stage goes back
      if (previous >= 0 && lane == 0) mbarrier_arrive(empty + 8 * previous);
      previous = s;
    }
    if (PINGPONG && lane == 0) mbarrier_arrive(done + 8 * c);
    wgmma_wait<0>();
    if (previous >= 0 && lane == 0) mbarrier_arrive(empty + 8 * previous);
#pragma unroll
    for (int sl = 0; sl < SLICES; ++sl) fence_registers(d[sl]);
    // wgmma's accumulator layout: warp w holds rows 16 w .. 16 w + 15 of a slice; d[4 j + 2 h + e] is
    // row lane / 4 + 8 h, column 8 j + 2 (lane % 4) + e.
    const int row0 = tm * BM + (PINGPONG ? 0 : c * ROWS) + warp * 16 + lane / 4, col0 = tn * BN + (lane % 4) * 2;
    if (!STORE) {  // the epilogue's cost: one sum written instead of C (the check fails)
      float sum = 0;
#pragma unroll
      for (int sl = 0; sl < SLICES; ++sl)
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) sum += d[sl][j];
      if (sum == 12345.0f) C[row0] = Convert<T>::from_float(sum);  // keeps every wgmma live
      continue;
    }
    if (TMA_STORE) {
      const uint32_t mine = c_stage + c * ROWS * BN * 2;
      if (t == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // the last store read it
      asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory");
#pragma unroll
      for (int sl = 0; sl < SLICES; ++sl)
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = sl * 64 + warp * 16 + lane / 4 + h * 8, col = j * 8 + (lane % 4) * 2;
            const typename Convert<T>::pair v =
                Convert<T>::from_float2(alpha * d[sl][4 * j + 2 * h], alpha * d[sl][4 * j + 2 * h + 1]);
            // 1: row-major rows of BN (a warp's 8 rows hit the same banks); 2: 64-column blocks of 128-byte
            // rows, 128-byte swizzled (16-byte chunk c of row r at c ^ r % 8): the 8 rows spread over all banks.
            // 3: 2's layout, written out with 16-byte stores by the warpgroup's threads (no C tensor map).
            const uint32_t at = TMA_STORE == 1 ? mine + (r * BN + col) * 2
                                               : mine + (j / 8) * ROWS * 128 + r * 128 + (((j % 8) ^ (r % 8)) << 4) +
                                                     (lane % 4) * 4;
            asm volatile("st.shared.b32 [%0], %1;" ::"r"(at), "r"(*(const uint32_t*)&v));
          }
      if (TMA_STORE == 3) {  // the swizzled stage written out by the warpgroup: a warp stores a row's 512 bytes
        asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory");
        const int row = tm * BM + (PINGPONG ? 0 : c * ROWS);
#pragma unroll 4
        for (int q = t; q < ROWS * BN / 8; q += 128) {
          const int r = q / (BN / 8), cc = q % (BN / 8);
          uint4 v;
          asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                       : "r"(mine + (cc / 8) * ROWS * 128 + r * 128 + (((cc % 8) ^ (r % 8)) << 4)));
          *reinterpret_cast<uint4*>(C + (size_t)(row + r) * ldc + tn * BN + cc * 8) = v;
        }
        continue;
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the bulk copy reads what was written
      asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory");
      if (t == 0) {
        const int row = tm * BM + (PINGPONG ? 0 : c * ROWS);
#pragma unroll
        for (int block = 0; block < (TMA_STORE == 1 ? 1 : BN / 64); ++block)
          asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(&map_c),
                       "r"(tn * BN + block * 64), "r"(row), "r"(mine + block * ROWS * 128)
                       : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
      continue;
    }
#pragma unroll
    for (int sl = 0; sl < SLICES; ++sl)
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          store_pair<T, true>(C, M, N, ldc, row0 + sl * 64 + h * 8, col0 + j * 8, d[sl][4 * j + 2 * h],
                              d[sl][4 * j + 2 * h + 1], alpha, beta, true);
  }
  if (TMA_STORE && t == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // before the block ends
}

// ------------------------------------------------------------------------------------------------
// Host side: tensor maps, the check against cuBLAS, timing in turns.

#undef CHECK  // bench_common.cuh's, on stderr with the steps
#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e = (x);                                                              \
    if (e != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));       \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)
#define CU_CHECK(x)                                                      \
  do {                                                                   \
    CUresult r = (x);                                                    \
    if (r != CUDA_SUCCESS) {                                             \
      printf("%s:%d CUresult %d\n", __FILE__, __LINE__, (int)r);         \
      return 1;                                                          \
    }                                                                    \
  } while (0)

template <typename T> constexpr CUtensorMapDataType map_type();
template <> constexpr CUtensorMapDataType map_type<__half>() { return CU_TENSOR_MAP_DATA_TYPE_FLOAT16; }
template <> constexpr CUtensorMapDataType map_type<__nv_bfloat16>() { return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; }
template <typename T> constexpr cudaDataType_t blas_type();
template <> constexpr cudaDataType_t blas_type<__half>() { return CUDA_R_16F; }
template <> constexpr cudaDataType_t blas_type<__nv_bfloat16>() { return CUDA_R_16BF; }

// A K-major map of a rows x K matrix (K contiguous), boxes of 64 x box_rows, 128-byte swizzle.
template <typename T> CUresult make_map(CUtensorMap* map, const T* p, int rows, int K, int box_rows) {
  cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
  cuuint64_t strides[1] = {(cuuint64_t)K * sizeof(T)};
  cuuint32_t box[2] = {BK, (cuuint32_t)box_rows};
  cuuint32_t elem[2] = {1, 1};
  return cuTensorMapEncodeTiled(map, map_type<T>(), 2, (void*)p, dims, strides, box, elem,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// C's map for the bulk tensor store: boxes of rows x cols, no swizzle, or (swizzled) 128-byte swizzle.
template <typename T>
CUresult make_store_map(CUtensorMap* map, const T* p, int M, int N, int rows, int cols, bool swizzled) {
  cuuint64_t dims[2] = {(cuuint64_t)N, (cuuint64_t)M};
  cuuint64_t strides[1] = {(cuuint64_t)N * sizeof(T)};
  cuuint32_t box[2] = {(cuuint32_t)cols, (cuuint32_t)rows};
  cuuint32_t elem[2] = {1, 1};
  return cuTensorMapEncodeTiled(map, map_type<T>(), 2, (void*)p, dims, strides, box, elem,
                                CU_TENSOR_MAP_INTERLEAVE_NONE,
                                swizzled ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

template <typename T> __global__ void fill(T* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    p[i] = Convert<T>::from_float((float)(h & 0xFFFF) / 32768.0f - 1.0f);
  }
}

// Conversions on the host (Convert's are device functions: a host call of one exits the program).
inline float host_float(__half v) { return __half2float(v); }
inline float host_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// max |x - y| over max |y| (and whether x holds a NaN or inf), on the host.
template <typename T> double rel_diff(const T* x, const T* y, size_t n, bool* bad) {
  std::vector<T> hx(n), hy(n);
  cudaMemcpy(hx.data(), x, n * sizeof(T), cudaMemcpyDeviceToHost);
  cudaMemcpy(hy.data(), y, n * sizeof(T), cudaMemcpyDeviceToHost);
  double worst = 0, scale = 0;
  *bad = false;
  for (size_t i = 0; i < n; ++i) {
    const double a = host_float(hx[i]), b = host_float(hy[i]);
    if (!std::isfinite(a)) *bad = true;
    worst = std::max(worst, std::fabs(a - b));
    scale = std::max(scale, std::fabs(b));
  }
  return worst / scale;
}

struct Timed {
  float ours_us, cublas_us;
};

template <typename T, int BM, int BN, int STAGES, int CONSUMERS, int GROUP, bool PINGPONG, bool STORE = true,
          int TMA_STORE = 0>
int run(const char* dtype, int M, int N, int K, cublasHandle_t blas, int sms, cudaEvent_t e0, cudaEvent_t e1) {
  if (M % BM || N % BN || K % BK) return 0;  // outside this experiment's limits
  T *A, *W, *C, *R;
  CHECK(cudaMalloc(&A, (size_t)M * K * sizeof(T)));
  CHECK(cudaMalloc(&W, (size_t)N * K * sizeof(T)));
  CHECK(cudaMalloc(&C, (size_t)M * N * sizeof(T)));
  CHECK(cudaMalloc(&R, (size_t)M * N * sizeof(T)));
  fill<<<1024, 256>>>(A, (size_t)M * K, 1);
  fill<<<1024, 256>>>(W, (size_t)N * K, 2);
  CUtensorMap map_a, map_b, map_c;
  CU_CHECK(make_map(&map_a, A, M, K, BM));
  CU_CHECK(make_map(&map_b, W, N, K, BN));
  CU_CHECK(make_store_map(&map_c, C, M, N, PINGPONG ? BM : BM / CONSUMERS, TMA_STORE == 2 ? 64 : BN, TMA_STORE == 2));
  // The stages, 1024 to align them, 1024 for the mbarriers, and C's staging where the store is TMA's.
  const size_t c_bytes = TMA_STORE ? (size_t)(PINGPONG ? 2 : 1) * BM * BN * sizeof(T) : 0;
  const size_t smem = (size_t)STAGES * (BM + BN) * BK * sizeof(T) + 2048 + c_bytes;
  auto kernel = gemm_ws<T, BM, BN, STAGES, CONSUMERS, GROUP, PINGPONG, STORE, TMA_STORE>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const float one = 1.0f, zero = 0.0f;
  // cuBLAS, column-major: C^T (N x M) = W (N x K, ld K) x A^T (K x M, ld K).
  auto blas_call = [&](T* out) {
    return cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, W, blas_type<T>(), K, A, blas_type<T>(), K,
                        &zero, out, blas_type<T>(), N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  auto ours = [&]() { kernel<<<sms, 128 * (CONSUMERS + 1), smem>>>(map_a, map_b, map_c, C, M, N, K, N, 1.0f, 0.0f); };
  if (blas_call(R) != CUBLAS_STATUS_SUCCESS) return printf("cuBLAS failed\n"), 1;
  CHECK(cudaMemset(C, 0xFF, (size_t)M * N * sizeof(T)));  // NaN in both dtypes
  ours();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  bool bad;
  const double diff = rel_diff(C, R, (size_t)M * N, &bad);
  const char* verdict = bad || diff > 2e-2 ? "WRONG" : "ok";
  // Timing: rounds of 20 calls each, ours and cuBLAS in turns, the best round of each.
  float best_ours = 1e30f, best_blas = 1e30f;
  for (int round = 0; round < 7; ++round) {
    for (int which = 0; which < 2; ++which) {
      spin<<<1, 1>>>(200000);
      CHECK(cudaEventRecord(e0));
      for (int i = 0; i < 20; ++i) which ? (void)blas_call(R) : ours();
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      (which ? best_blas : best_ours) = std::min(which ? best_blas : best_ours, ms * 1000 / 20);
    }
  }
  const double flop = 2.0 * M * N * K;
  printf("{\"dtype\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"bm\": %d, \"bn\": %d, \"stages\": %d, "
         "\"consumers\": %d, \"group\": %d, \"pingpong\": %d, \"store\": %d, \"tma_store\": %d, \"check\": \"%s\", \"rel_diff\": %.2e, \"ours_us\": %.2f, "
         "\"cublas_us\": %.2f, \"ours_tflops\": %.1f, \"cublas_tflops\": %.1f, \"vs_cublas\": %.3f}\n",
         dtype, M, N, K, BM, BN, STAGES, CONSUMERS, GROUP, (int)PINGPONG, (int)STORE, (int)TMA_STORE, verdict, diff, best_ours, best_blas,
         flop / best_ours / 1e6, flop / best_blas / 1e6, best_blas / best_ours);
  cudaFree(A), cudaFree(W), cudaFree(C), cudaFree(R);
  return 0;
}

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // a line at a time: a hung or failed kernel leaves the earlier rows
  BenchSetup setup;
  CHECK(bench_setup(setup));
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return printf("cublasCreate failed\n"), 1;
  const int sms = setup.prop.multiProcessorCount;
  // 4224 x 4096 in 128 x 256 tiles is 4 whole waves on 132 SMs (4096^2: 3.88)
  const int sizes[][3] = {{4096, 4096, 4096}, {4224, 4096, 4096}, {8192, 8192, 8192}, {4096, 14336, 4096}};
  // EPILOGUES=1: the epilogue and schedule variants of the findings (docs/findings.md); else the kernel
  // as it stands (cooperative, swizzled TMA store) in both dtypes.
  const bool epilogues = getenv("EPILOGUES") != nullptr;
  for (const auto& s : sizes) {
    if (epilogues) {
      run<__half, 128, 256, 4, 2, 8, false>("float16", s[0], s[1], s[2], blas, sms, setup.start, setup.stop);
      run<__half, 128, 256, 3, 2, 8, false, true, 1>("float16", s[0], s[1], s[2], blas, sms, setup.start, setup.stop);
      run<__half, 128, 128, 5, 2, 8, true, true, 1>("float16", s[0], s[1], s[2], blas, sms, setup.start, setup.stop);
      run<__half, 128, 256, 3, 2, 8, false, false>("float16", s[0], s[1], s[2], blas, sms, setup.start, setup.stop);
    }
    run<__half, 128, 256, 3, 2, 8, false, true, 2>("float16", s[0], s[1], s[2], blas, sms, setup.start, setup.stop);
    run<__half, 128, 256, 3, 2, 8, false, true, 3>("float16", s[0], s[1], s[2], blas, sms, setup.start, setup.stop);
    run<__nv_bfloat16, 128, 256, 3, 2, 8, false, true, 2>("bfloat16", s[0], s[1], s[2], blas, sms, setup.start,
                                                          setup.stop);
  }
  return 0;
}
