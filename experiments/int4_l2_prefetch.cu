// Does asking L2 for a row's next bytes ahead of the register loads lift the int4 GEMV (qgemm.cu,
// M = 1) towards the bandwidth wall? docs/lowbit.md: the tensor-core kernel reads 28672 x 4096 at
// 63% of copy, its warps waiting on their loads, and moving the loads out of registers (cp.async
// rings, bulk copies into shared memory) made it slower. A bulk *prefetch* (cp.async.bulk.prefetch.L2)
// costs one instruction a row and stage, holds no register and no shared memory and is never waited
// on: DRAM gets a deeper queue, and the loads behind it meet L2's latency. AHEAD (below) is how many
// 16-byte pieces past the two register stages each row is asked for (0: none, the shipped code).
//
// Every instance is checked against a float64 product (output poisoned with NaN first) and timed as
// autotune times kernels (bench_common.cuh: back to back behind a spin kernel, the codes rotating over
// 4x the L2), at the H200 sweeps' picks for M = 1, float16, g128 (db/records/nvidia-h200-qgemm.jsonl).
// One JSON object a line. From the repository root on a GPU machine:
//   nvcc -O3 -arch=sm_90 -std=c++17 -I kernels -I kernels/common -o /tmp/int4_l2_prefetch \
//     experiments/int4_l2_prefetch.cu && /tmp/int4_l2_prefetch
#include "int4_harness.cuh"
#include "qgemm/qgemm.cu"

#include <algorithm>
#include <cmath>
#include <random>

// qgemm_body (kernels/qgemm/qgemm.cu) with the prefetch added: AHEAD 0 compiles to the shipped code.
namespace at_qgemm_prefetch {
using namespace at_qgemm;

// Ask L2 for the pieces [from, to) of the warp's rows (lane l < 16 takes row 16 t + l of each tile) with
// one bulk prefetch a row: no register, no shared memory, no wait.
template <int TILES>
__device__ __forceinline__ void prefetch_rows(const uint4* const (&row)[TILES], int lane, int from, int to) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (lane < 16 && to > from) {
#pragma unroll
    for (int t = 0; t < TILES; ++t)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row[t] + from), "r"((to - from) * 16)
                   : "memory");
  }
#endif
}

// AHEAD > 0: each stage also asks L2 for the pieces AHEAD past the two stages in registers (bulk
// prefetches, prefetch_rows), so that the loads behind them wait on L2 rather than DRAM; 0: none.
template <typename T, int MT, int BLOCK, int TILES, int UNROLL, int GROUP, int SYM, int CLUSTER, int POLICY,
          int AHEAD>
__device__ __forceinline__ void body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                           const T* __restrict__ scales, const unsigned char* __restrict__ zeros,
                                           T* __restrict__ out, int M, int N, int K, float alpha, float beta) {
  static_assert(BLOCK % 32 == 0, "whole warps");
  static_assert(GROUP % PIECE == 0, "a 16-byte piece lies inside one group");
  constexpr int WARPS = BLOCK / 32;
  constexpr int ROWS_PER_BLOCK = WARPS * TILES * 16;
  constexpr int XROWS = 8 * MT;  // rows of x a block computes
  extern __shared__ __align__(16) unsigned char x_slice[];
  __shared__ float cluster_part[CLUSTER > 1 ? ROWS_PER_BLOCK * XROWS : 1];

  launch_dependents();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, c = lane % 4;
  const int pieces = K / PIECE;
  const int quads = (pieces + QUAD - 1) / QUAD;
  const int per_split = (quads + CLUSTER - 1) / CLUSTER * QUAD;  // pieces a split covers, a multiple of 4
  const int piece_begin = min(pieces, (int)blockIdx.y * per_split);
  // A split may hold no piece (K split more ways than it has quads): its sums stay zero.
  const int piece_count = min(pieces, piece_begin + per_split) - piece_begin;
  const int row_bytes = x_row_bytes(per_split);
  const int m0 = blockIdx.z * XROWS;
  const int x_rows = min(XROWS, M - m0);  // rows of x staged; MMA columns past them read zeros
  const int groups_per_row = K / GROUP;
  const int tiles = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;  // gridDim.x <= tiles: blocks stride
  auto rows_at = [&](int tile) {
    return rows_of<T, TILES, SYM>(tile * ROWS_PER_BLOCK + warp * TILES * 16, g, N, K, piece_begin, qweight, scales,
                                  zeros, groups_per_row);
  };

  // The weights may be written by the grid before (PDL): wait, then start the first stage's loads
  // before staging x, whose loads they overlap.
  wait_for_prior_grid();
  constexpr int STEP = QUAD * UNROLL;
  Stage<T, UNROLL, TILES, GROUP> first, second;
  Rows<T, TILES> rows = rows_at(blockIdx.x);
  if (piece_count > 0) fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(first, rows, 0, c, piece_begin, piece_count);

  // Stage x[m0 .. m0 + x_rows, the split's pieces] as the pairs (0,4), (1,5), (2,6), (3,7) of each
  // 8 elements; pieces past K (the split's padding to whole quads) hold zeros.
  const int words = per_split * 4;
  for (int i = tid; i < x_rows * words; i += BLOCK) {
    const int m = i / words, word = i % words;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (word < piece_count * 4)
      v = __ldg(reinterpret_cast<const uint4*>(x + (size_t)(m0 + m) * K + (size_t)(piece_begin * 4 + word) * 8));
    uint4 pairs;
    pairs.x = __byte_perm(v.x, v.z, 0x5410);
    pairs.y = __byte_perm(v.x, v.z, 0x7632);
    pairs.z = __byte_perm(v.y, v.w, 0x5410);
    pairs.w = __byte_perm(v.y, v.w, 0x7632);
    *reinterpret_cast<uint4*>(x_slice + m * row_bytes + (word / 4) * PIECE_BYTES + (word % 4) * 16) = pairs;
  }
  __syncthreads();

  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int next = tile + gridDim.x;
    const uint4* prefetch_row[TILES];
    int prefetched = 0;  // pieces of this tile's split asked of L2 (or loaded) so far
    if constexpr (AHEAD > 0) {
#pragma unroll
      for (int t = 0; t < TILES; ++t) {
        const int row = min(tile * ROWS_PER_BLOCK + warp * TILES * 16 + 16 * t + lane % 16, N - 1);
        prefetch_row[t] = reinterpret_cast<const uint4*>(qweight + (size_t)row * (K / 2)) + piece_begin;
      }
    }
    float d[TILES][MT][4];
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int n = 0; n < MT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[t][n][e] = 0.0f;

    // Two stages of registers: the loads of the next UNROLL steps are in flight while these are
    // multiplied; past this tile's last stage, the next tile's first.
    for (int s0 = 0; s0 < per_split && piece_count > 0; s0 += 2 * STEP) {
      if constexpr (AHEAD > 0) {
        const int to = min(piece_count, s0 + 2 * STEP + AHEAD);
        prefetch_rows<TILES>(prefetch_row, lane, max(prefetched, min(piece_count, s0 + 2 * STEP)), to);
        prefetched = max(prefetched, to);
      }
      if (s0 + STEP < per_split)
        fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(second, rows, s0 + STEP, c, piece_begin, piece_count);
      multiply<T, MT, UNROLL, TILES, GROUP>(first, s0, per_split, c, g, x_rows, row_bytes, x_slice, d);
      if (s0 + 2 * STEP < per_split)
        fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(first, rows, s0 + 2 * STEP, c, piece_begin, piece_count);
      else if (next < tiles)
        fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(first, rows_at(next), 0, c, piece_begin, piece_count);
      multiply<T, MT, UNROLL, TILES, GROUP>(second, s0 + STEP, per_split, c, g, x_rows, row_bytes, x_slice, d);
    }

    // d[t][n] holds out rows (m) 8n + 2c, 8n + 2c + 1 at columns (W rows) 16t + g and 16t + g + 8 of the
    // warp's: written out, or left for the cluster's sum.
    const int first_row = tile * ROWS_PER_BLOCK;
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int n = 0; n < MT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int m = 8 * n + 2 * c + (e & 1), row = warp * TILES * 16 + 16 * t + g + 8 * (e >> 1);
          if constexpr (CLUSTER == 1) {
            const size_t at = (size_t)(m0 + m) * N + first_row + row;
            if (m0 + m < M && first_row + row < N) out[at] = finish<T>(d[t][n][e], alpha, beta, out + at);
          } else {
            cluster_part[m * ROWS_PER_BLOCK + row] = d[t][n][e];
          }
        }
    if constexpr (CLUSTER > 1) {
      at_common::cluster_sum<CLUSTER>(cluster_part, XROWS * ROWS_PER_BLOCK, [&](int o, float sum) {
        const int m = m0 + o / ROWS_PER_BLOCK, row = first_row + o % ROWS_PER_BLOCK;
        const size_t at = (size_t)m * N + row;
        if (m < M && row < N) out[at] = finish<T>(sum, alpha, beta, out + at);
      });
    }
    rows = rows_at(next);  // past the last tile: pointers never read
  }
}

}  // namespace at_qgemm_prefetch

#define PASS x, qweight, scales, zeros, out, M, N, K, alpha, beta

template <int BLOCK, int TILES, int UNROLL, int POLICY, int MINB, int AHEAD>
__global__ void __launch_bounds__(BLOCK, MINB) whole_k(INT4_ARGS) {
  at_qgemm_prefetch::body<__half, 1, BLOCK, TILES, UNROLL, 128, 1, 1, POLICY, AHEAD>(PASS);
}
template <int BLOCK, int TILES, int UNROLL, int CLUSTER, int POLICY, int MINB, int AHEAD>
__global__ void __cluster_dims__(1, CLUSTER, 1) __launch_bounds__(BLOCK, MINB) split_k(INT4_ARGS) {
  at_qgemm_prefetch::body<__half, 1, BLOCK, TILES, UNROLL, 128, 1, CLUSTER, POLICY, AHEAD>(PASS);
}

struct Variant {
  int block, tiles, unroll, cluster, policy, min_blocks, persist, ahead;
  void (*fn)(INT4_ARGS);
};

// Each tiling with AHEAD 0 (the shipped code), 8, 16, 32, 64 and 4096 (the whole split at once).
#define AHEADS(B, T, U, P, MB, PS)                                                                       \
  {B, T, U, 1, P, MB, PS, 0, whole_k<B, T, U, P, MB, 0>}, {B, T, U, 1, P, MB, PS, 8, whole_k<B, T, U, P, MB, 8>}, \
      {B, T, U, 1, P, MB, PS, 16, whole_k<B, T, U, P, MB, 16>},                                          \
      {B, T, U, 1, P, MB, PS, 32, whole_k<B, T, U, P, MB, 32>},                                          \
      {B, T, U, 1, P, MB, PS, 64, whole_k<B, T, U, P, MB, 64>},                                          \
      {B, T, U, 1, P, MB, PS, 4096, whole_k<B, T, U, P, MB, 4096>}
#define SPLIT_AHEADS(B, T, U, C, P, MB, PS)                                                              \
  {B, T, U, C, P, MB, PS, 0, split_k<B, T, U, C, P, MB, 0>}, {B, T, U, C, P, MB, PS, 8, split_k<B, T, U, C, P, MB, 8>}, \
      {B, T, U, C, P, MB, PS, 16, split_k<B, T, U, C, P, MB, 16>},                                       \
      {B, T, U, C, P, MB, PS, 32, split_k<B, T, U, C, P, MB, 32>},                                       \
      {B, T, U, C, P, MB, PS, 4096, split_k<B, T, U, C, P, MB, 4096>}

// Launch geometry as autotune/ops/qgemm's launch().
static void geometry(const Variant& v, int n, int k, int sms, dim3& grid, size_t& shared) {
  const int rows = v.block / 32 * v.tiles * 16;
  const int tiles = (n + rows - 1) / rows;
  const int quads = (k / 32 + 3) / 4;
  const int per_split = (quads + v.cluster - 1) / v.cluster * 4;
  grid = dim3(v.persist ? std::min(tiles, v.persist * sms) : tiles, v.cluster, 1);
  shared = at_qgemm::x_row_bytes(per_split);
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  printf("{\"device\": \"%s\", \"sms\": %d, \"l2_bytes\": %d}\n", setup.prop.name, setup.prop.multiProcessorCount,
         setup.prop.l2CacheSize);
  struct Shape {
    int n, k;
    std::vector<Variant> variants;
  };
  // Tall shapes: the picks for 28672x4096 (b128 u2 persist 8 policy 2, 22.58 us; b512 u2 persist 2,
  // 23.82) and 37888x3584 (b256 u2 min_blocks 3 policy 2, 27.31), and deeper stages.
  const std::vector<Variant> tall = {
      AHEADS(128, 1, 2, 2, 1, 8), AHEADS(512, 1, 2, 2, 1, 2), AHEADS(256, 1, 2, 2, 3, 0),
      AHEADS(256, 1, 4, 2, 1, 0), AHEADS(256, 1, 1, 2, 4, 0), AHEADS(128, 1, 4, 1, 1, 4),
  };
  // Wide and small shapes: K split over clusters (3584x18944: b64 u4 c8 persist 4 policy 1 min 8,
  // 15.75 us; 4608x3584: b64 t2 u1 c8 persist 8 policy 2 min 2, 6.99).
  const std::vector<Variant> wide = {
      SPLIT_AHEADS(64, 1, 4, 8, 1, 8, 4),
      SPLIT_AHEADS(64, 2, 1, 8, 2, 2, 8),
      SPLIT_AHEADS(256, 1, 2, 4, 1, 1, 1),
  };
  const std::vector<Shape> shapes = {{28672, 4096, tall}, {37888, 3584, tall}, {3584, 18944, wide},
                                     {4096, 14336, wide}, {4096, 4096, wide},   {4608, 3584, wide}};
  std::mt19937 rng(7);
  for (const Shape& shape : shapes) {
    const int n = shape.n, k = shape.k;
    const auto print = [&](const Variant& v, float us, double gbs, double rel) {
      printf("{\"block\": %d, \"tiles\": %d, \"unroll\": %d, \"cluster\": %d, \"policy\": %d, \"min_blocks\": %d, "
             "\"persist\": %d, \"ahead\": %d, \"n\": %d, \"k\": %d, \"us\": %.2f, \"gbs\": %.0f, \"rel_err\": %.3g, "
             "\"ok\": %s}\n",
             v.block, v.tiles, v.unroll, v.cluster, v.policy, v.min_blocks, v.persist, v.ahead, n, k, us,
             gbs, rel, rel < 2e-3 ? "true" : "false");
    };
    if (run_int4_shape(setup, rng, n, k, shape.variants, geometry, print)) return 1;
  }
  return 0;
}
