// Persistent, warp-specialized tensor-core GEMM for half and bfloat16 on Hopper (sm_90a): C = alpha * A B
// + beta * C with the conventions of gemm_wgmma.cu (A row-major M x K, B K x N or with B_NK N x K, C row-
// major M x N, rows lda, ldb and ldc elements apart, float32 accumulation; beta == 0: C is not read).
// It grew from experiments/gemm_ws.cu, which ran at 0.98-0.99x cuBLAS at 4096^3 on the H200 where the
// wgmma family's block-per-tile kernel runs 0.90x (docs/findings.md).
//
// Template parameters:
//   T       __half or __nv_bfloat16
//   B_NK    B is stored N x K (K-major like A); false: K x N, read MN-major (LayoutB 0 of gemm_wgmma.cu)
//   BM, BN  output tile; two consumer warpgroups share it, BM / 2 rows each (m64 slices) and every
//           column: BM / 128 * BN / 2 accumulators a thread (at most 128)
//   STAGES  shared-memory stages of BK = 64 k (A's and B's 128-byte swizzled boxes, as the TMA writes)
//   GROUP   tile order: GROUP consecutive tile rows walked column by column (block_tile's SWIZZLE)
//   CLUSTER blocks of a thread-block cluster (1 or 2, launched with that cluster shape along x): the
//           blocks of a cluster take CLUSTER vertically adjacent tiles at once, which read the same
//           columns of B, and each loads 1 / CLUSTER of B's stage multicast into all of them
//   SK      0: every tile whole in one block (data-parallel); 1 (CLUSTER 1 only): the data-parallel +
//           stream-K hybrid below, for the last waves
//
// 384 threads, one block an SM, grid = min(tiles, SMs) rounded to whole clusters: cluster q takes the
// tiles of units q, q + clusters, ... (a unit: CLUSTER tiles one above the other, one a block; the
// units walked in GROUP order as tiles are)
//   warpgroup 0, the producer, gives back registers (setmaxnreg.dec 40) and its thread 0 issues the TMA
//     copies of every k-tile of every tile of the block into the ring of stages, each completing on the
//     stage's "full" mbarrier, after waiting for the stage's "empty" one; it runs ahead into the next
//     tile while the consumers write C;
//   warpgroups 1 and 2, the consumers (setmaxnreg.inc 232), wait for a stage, issue their wgmmas of it
//     (both operands from shared memory by descriptor), keep one group in flight and give the stage
//     before back (one arrive a warp, on the empty barrier of every block of the cluster, since each
//     writes into this block's stage: it counts 8 * CLUSTER).
// With CLUSTER > 1 the blocks' barriers are made before any block copies (a cluster barrier), and each
// block's producer stays until every block has given back each of its stages for the last time, so no
// arrive reaches a block that has exited.
// Epilogue with beta == 0: each consumer stages its rows of C (alpha applied, rounded to T) in shared
// memory as 64-column blocks of 128-byte rows, 128-byte swizzled (16-byte chunk c of row r at c ^ r % 8,
// so a warp's 8 rows fall on all 32 banks), then its threads write them out a row's 16-byte chunks at a
// time (one warp a row: coalesced). With beta != 0 each thread writes its accumulators in pairs
// (store_pair: C read, alpha and beta in float, one rounding), as the wgmma family does.
//
// Stream-K (SK 1). With T tiles on P = gridDim.x blocks, whole waves leave the last one partly idle
// (4096^3 in 128 x 256 tiles: 512 tiles, 3.88 waves on 132 SMs). So the first (T / P - 1) * P tiles run
// data-parallel (block b: tiles b, b + P, ...), and the k-tiles of the other R tiles (P <= R < 2P, or
// all T where T < 2P) are dealt out evenly: the R * k_tiles (tile, k-tile) iterations, tile-major, are
// cut into P contiguous ranges, block b's from b * R * k_tiles / P. Each range is at least k_tiles
// long, so a tile is whole in one block or split between two neighbours: block b takes its first
// k-tiles (the "head", at the end of b's range) and block b + 1 the rest (the "tail", at the start of
// b + 1's), and the head's block finishes the tile. The tail's consumers write their float
// accumulators to partial slot b + 1 (each thread its own 16-byte chunks, in the accumulators' order,
// so that the head's same thread reads them back) and raise their flag (a fence, then a release
// store); the head's consumers, done with their k-tiles, wait for it (acquire), add the partial to
// their accumulators (one order: deterministic), zero the partial and the flag, and run the epilogue.
// The tail comes first in its block's range and the head last in its, so the wait is rarely more than
// a poll.
// Every block of the grid is resident at once (grid <= SMs, one block an SM: __launch_bounds__(384, 1)
// and the shared memory), so waiting on another block cannot deadlock.
// Stream-K's scratch is in `counters` (the TMA kernels' `workspace` holds the tensor maps): flag words
// first, 2 a block (one a consumer) rounded up to 32; then P partial slots of BM * BN floats. All of it
// is zero before and after every launch, as for every kernel's counters: a stream's scratch is shared
// by whatever kernels run on it, and a split-K kernel after this one counts on zeroed counters.
// autotune/ops/gemm/ws.py sizes it.
//
// Requirements (autotune/ops/gemm/ws.py): what the wgmma family's TMA instances need (16-byte rows of
// A and B: K % 8 == 0 and, for a K x N B, N % 8 == 0; 16-byte aligned A and B with lda and ldb multiples
// of 8). Tiles past M, N or K are zero filled by the TMA and the stores are bounds checked; C needs
// nothing (16-byte stores where C and ldc allow them, else element by element).
//
// The tensor maps (CUtensorMap, 128 bytes each, made by autotune/gpu/tma.py) are read from global memory
// at `workspace`: A's (boxes of BK x BM) at byte 0, B's at byte 128 (of a K x N B one 64-column atom of BK
// k-rows a box, BN / 64 a stage; of an N x K B a BK x BN box).
//
// Dynamic shared memory (the Python module mirrors it):
//   SHARED_BYTES = STAGES * (BM + BN) * BK * sizeof(T) + 1024 (alignment) + 1024 (mbarriers) + BM * BN * sizeof(T)
#pragma once
#include "gemm_wgmma.cu"
#include "tma_multicast.cuh"

namespace at_ws {

using at_tma::fence_mbarrier_init;
using at_tma::mbarrier_arrive_expect_tx;
using at_tma::mbarrier_init;
using at_tma::mbarrier_wait;
using at_tma::prefetch_tensor_map;
using at_tma::smem_addr;
using at_tma::tma_load_2d;
using at_wgmma::ATOM_BYTES;
using at_wgmma::Convert;
using at_wgmma::fence_registers;
using at_wgmma::LayoutA;
using at_wgmma::LayoutB;
using at_wgmma::make_desc;
using at_wgmma::store_pair;
using at_wgmma::Wgmma;
using at_wgmma::wgmma_commit;
using at_wgmma::wgmma_fence;
using at_wgmma::wgmma_wait;

constexpr int BK = 64;
constexpr int CONSUMERS = 2;
constexpr int PRODUCER_REGISTERS = 40, CONSUMER_REGISTERS = 232;  // 128 * 40 + 256 * 232 <= 65536

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// A barrier of one consumer warpgroup's 128 threads (named barriers 1 and 2; 0 is __syncthreads').
__device__ __forceinline__ void consumer_sync(int consumer) {
  asm volatile("bar.sync %0, 128;" ::"r"(1 + consumer) : "memory");
}

// Tile `tile` of the walk: GROUP consecutive tile rows are walked column by column.
template <int GROUP>
__device__ __forceinline__ void tile_at(int tile, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
  const int width = GROUP * tiles_n;
  const int first_m = tile / width * GROUP;
  const int rows = min(tiles_m - first_m, GROUP);
  const int in_group = tile % width;
  tile_m = first_m + in_group % rows;
  tile_n = in_group / rows;
}

// A block's pieces of work under the data-parallel + stream-K hybrid (see the top of the file;
// CLUSTER 1: a unit is a tile): its data-parallel tiles, then its stream-K segments, piece 0, 1, ...
struct StreamK {
  int dp_tiles, mine, begin, end, k_tiles, pieces;
  __device__ __forceinline__ StreamK(int tiles, int k_tiles_) : k_tiles(k_tiles_) {
    const int blocks = gridDim.x, b = blockIdx.x, waves = tiles / blocks;
    dp_tiles = waves > 1 ? (waves - 1) * blocks : 0;
    mine = dp_tiles > b ? (dp_tiles - b + blocks - 1) / blocks : 0;  // tiles b, b + blocks, ...
    const long long total = (long long)(tiles - dp_tiles) * k_tiles;
    begin = (int)(total * b / blocks), end = (int)(total * (b + 1) / blocks);
    pieces = mine + (end - 1) / k_tiles - begin / k_tiles + 1;  // a range is never empty
  }
  // Piece `piece`: tile `unit`, its k-tiles kb .. ke - 1.
  __device__ __forceinline__ void at(int piece, int& unit, int& kb, int& ke) const {
    if (piece < mine) {
      unit = blockIdx.x + piece * gridDim.x, kb = 0, ke = k_tiles;
      return;
    }
    const int tile = begin / k_tiles + piece - mine;
    kb = piece == mine ? begin - tile * k_tiles : 0, ke = min(k_tiles, end - tile * k_tiles);
    unit = dp_tiles + tile;
  }
};

// Words of `counters` before stream-K's partial slots: a flag per consumer of each block, rounded up
// to 32 words so that the slots start 128-byte aligned.
__device__ __forceinline__ int stream_k_flag_words(int blocks) { return (CONSUMERS * blocks + 31) / 32 * 32; }

__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release(unsigned int* p, unsigned int v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

template <typename T, bool B_NK, int BM, int BN, int STAGES, int GROUP, int CLUSTER, int SK = 0>
__device__ __forceinline__ void gemm_ws_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                             int M, int N, int K, int lda, int ldb, int ldc, float alpha,
                                             float beta, float* __restrict__ workspace,
                                             unsigned int* __restrict__ counters) {
  static_assert(sizeof(T) == 2, "half or bfloat16");
  constexpr int ROWS = BM / CONSUMERS;  // rows of a tile one consumer owns
  constexpr int SLICES = ROWS / 64;     // its m64 slices
  static_assert(ROWS % 64 == 0 && SLICES * BN / 2 <= 128, "m64 slices, at most 128 accumulators a thread");
  static_assert(BN % 64 == 0 && BM <= 256 && BN <= 256, "64-column blocks, TMA boxes of at most 256 rows");
  static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of one or two blocks");
  static_assert(BN / 64 % CLUSTER == 0, "each block of a cluster loads whole 64-column atoms of B");
  static_assert(SK == 0 || (SK == 1 && CLUSTER == 1), "stream-K without clusters");
  constexpr int A_BYTES = BM * BK * (int)sizeof(T), B_BYTES = BN * BK * (int)sizeof(T);
  constexpr int STAGE_BYTES = A_BYTES + B_BYTES;  // a multiple of 1024: every swizzle atom stays aligned
  typedef LayoutA<BK> LA;
  typedef LayoutB<BN, BK, 0> LB;  // a K x N B's stage; an N x K B's is laid out as LA
  constexpr uint32_t B_KSTEP_BYTES = B_NK ? 32 : LB::KSTEP_BYTES;  // one k16 step into B's stage
  (void)lda, (void)ldb, (void)counters;  // lda and ldb live in the tensor maps

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + (ATOM_BYTES - 1)) & ~(uint32_t)(ATOM_BYTES - 1);
  const uint32_t full = base + STAGES * STAGE_BYTES, empty = full + 8 * STAGES;
  const uint32_t c_stage = base + STAGES * STAGE_BYTES + 1024;  // after the mbarriers, 1024-aligned
  const uint32_t rank = CLUSTER > 1 ? at_cluster::block_rank() : 0;
  const void* map_a = workspace;
  const void* map_b = reinterpret_cast<const unsigned char*>(workspace) + at_tma::MAP_BYTES;
  if (threadIdx.x == 0) {
    prefetch_tensor_map(map_a);
    prefetch_tensor_map(map_b);
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(full + 8 * s, 1);                  // the producer's expect-tx, then the bytes
      mbarrier_init(empty + 8 * s, CLUSTER * CONSUMERS * 4);  // one arrive a consumer warp of the cluster
    }
    fence_mbarrier_init();
  }
  if constexpr (CLUSTER > 1) {  // every block's barriers made before any block copies or arrives
    at_cluster::arrive();
    at_cluster::wait();
  } else {
    __syncthreads();
  }
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int units_m = (tiles_m + CLUSTER - 1) / CLUSTER, units = units_m * tiles_n;
  const int cluster = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;
  const int k_tiles = (K + BK - 1) / BK;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;

  if (wg == 0) {  // the producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PRODUCER_REGISTERS));
    if (t != 0) return;
    int s = 0;
    uint32_t phase = 0;
    const StreamK stream_k(units, k_tiles);
    for (int piece = SK ? 0 : cluster; piece < (SK ? stream_k.pieces : units); piece += SK ? 1 : clusters) {
      int unit = piece, kb = 0, ke = k_tiles;
      if constexpr (SK) stream_k.at(piece, unit, kb, ke);
      int unit_m, tile_n;
      tile_at<GROUP>(unit, units_m, tiles_n, unit_m, tile_n);
      const int tile_m = unit_m * CLUSTER + rank;  // past M in the last unit: zero filled, not stored
      for (int kt = kb; kt < ke; ++kt) {
        // A fresh barrier's previous phase counts as done. Every block's consumers give the stage back.
        mbarrier_wait(empty + 8 * s, phase ^ 1);
        const uint32_t bar = full + 8 * s, a = base + s * STAGE_BYTES, b = a + A_BYTES;
        mbarrier_arrive_expect_tx(bar, STAGE_BYTES);  // A's bytes and all of B's, whoever copies them
        tma_load_2d(a, map_a, bar, kt * BK, tile_m * BM);
        if constexpr (CLUSTER > 1) {
          constexpr uint16_t EVERY_BLOCK = (1u << CLUSTER) - 1;
          if constexpr (B_NK) {  // this block's BN / CLUSTER rows of B's box
            constexpr int ROWS_B = BN / CLUSTER;
            at_multicast::tma_load_2d(b + rank * ROWS_B * BK * (int)sizeof(T), map_b, bar, kt * BK,
                                      tile_n * BN + rank * ROWS_B, EVERY_BLOCK);
          } else {  // this block's 64-column atoms
            constexpr int ATOMS = BN / 64 / CLUSTER;
#pragma unroll
            for (int j = rank * ATOMS; j < (rank + 1) * ATOMS; ++j)
              at_multicast::tma_load_2d(b + j * LB::ATOM_STRIDE, map_b, bar, tile_n * BN + 64 * j, kt * BK,
                                        EVERY_BLOCK);
          }
        } else if constexpr (B_NK) {
          tma_load_2d(b, map_b, bar, kt * BK, tile_n * BN);
        } else {
#pragma unroll
          for (int j = 0; j < BN / 64; ++j) tma_load_2d(b + j * LB::ATOM_STRIDE, map_b, bar, tile_n * BN + 64 * j, kt * BK);
        }
        if (++s == STAGES) s = 0, phase ^= 1;
      }
    }
    if constexpr (CLUSTER > 1) {
      // Stay until every block's consumers have given back each stage for the last time: their arrives
      // land in this block's shared memory.
      for (int i = 0; i < STAGES; ++i) {
        mbarrier_wait(empty + 8 * s, phase ^ 1);
        if (++s == STAGES) s = 0, phase ^= 1;
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONSUMER_REGISTERS));
  const int c = wg - 1, warp = t / 32, lane = t % 32;
  // Descriptors of stage 0, k16 step 0: later stages and steps only add to the start address.
  const uint64_t desc_a0 = make_desc(base + c * ROWS * LA::ROW, LA::LEADING, LA::STRIDE, LA::SWIZZLE_MODE);
  const uint64_t desc_b0 = B_NK ? make_desc(base + A_BYTES, LA::LEADING, LA::STRIDE, LA::SWIZZLE_MODE)
                                : make_desc(base + A_BYTES, LB::LEADING, LB::STRIDE, LB::SWIZZLE_MODE);
  const uint32_t mine = c_stage + c * ROWS * BN * (int)sizeof(T);  // this consumer's staging of C
  // 16-byte stores of C: C 16-byte aligned and its rows a multiple of 8 elements apart.
  const bool vectors = (reinterpret_cast<uintptr_t>(C) & 15) == 0 && (ldc & 7) == 0;
  const bool pairs = (reinterpret_cast<uintptr_t>(C) & 3) == 0 && (!B_NK || (ldc & 1) == 0);
  float d[SLICES][BN / 2];
  int s = 0;
  uint32_t phase = 0;
  // Gives stage `stage` back to the producer of every block that writes into it.
  auto give_back = [&](int stage) {
    if (lane != 0) return;
    if constexpr (CLUSTER > 1) {
#pragma unroll
      for (uint32_t r = 0; r < CLUSTER; ++r) at_multicast::mbarrier_arrive(empty + 8 * stage, r);
    } else {
      mbarrier_arrive(empty + 8 * stage);
    }
  };
  const StreamK stream_k(units, k_tiles);
  for (int piece = SK ? 0 : cluster; piece < (SK ? stream_k.pieces : units); piece += SK ? 1 : clusters) {
    int unit = piece, kb = 0, ke = k_tiles;  // SK 0: each unit whole
    if constexpr (SK) stream_k.at(piece, unit, kb, ke);
    int unit_m, tile_n;
    tile_at<GROUP>(unit, units_m, tiles_n, unit_m, tile_n);
    const int tile_m = unit_m * CLUSTER + rank;
    int previous = -1;
    for (int kt = kb; kt < ke; ++kt) {
      mbarrier_wait(full + 8 * s, phase);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
        for (int sl = 0; sl < SLICES; ++sl) {
          const uint32_t a_off = s * STAGE_BYTES + sl * 64 * LA::ROW + kk * 32;
          const uint32_t b_off = s * STAGE_BYTES + kk * B_KSTEP_BYTES;
          Wgmma<T, BN, !B_NK>::run(d[sl], desc_a0 + (a_off >> 4), desc_b0 + (b_off >> 4), kt > kb || kk > 0);
        }
      wgmma_commit();
      wgmma_wait<1>();  // the k-tile before this one is done: its stage goes back to the producer
      if (previous >= 0) give_back(previous);
      previous = s;
      if (++s == STAGES) s = 0, phase ^= 1;
    }
    wgmma_wait<0>();
    if (previous >= 0) give_back(previous);
#pragma unroll
    for (int sl = 0; sl < SLICES; ++sl) fence_registers(d[sl]);

    if constexpr (SK) {
      // Partial slot `slot`: this consumer's half, its accumulators 4 at a time, thread t's chunk j at
      // 16-byte word j * 128 + t (a warp's stores coalesce).
      constexpr int CHUNKS = SLICES * BN / 8;  // 16-byte chunks of accumulators a thread
      float4* const slots = reinterpret_cast<float4*>(counters + stream_k_flag_words(gridDim.x));
      if (kb > 0) {  // a tail (it runs to k_tiles): the block before holds the head and finishes the tile
        float4* out = slots + ((size_t)blockIdx.x * CONSUMERS + c) * CHUNKS * 128 + t;
#pragma unroll
        for (int sl = 0; sl < SLICES; ++sl)
#pragma unroll
          for (int j = 0; j < BN / 8; ++j)
            __stcg(out + (sl * BN / 8 + j) * 128,
                   make_float4(d[sl][4 * j], d[sl][4 * j + 1], d[sl][4 * j + 2], d[sl][4 * j + 3]));
        __threadfence();  // every thread's partial is visible before the flag says so
        consumer_sync(c);
        if (t == 0) store_release(counters + CONSUMERS * blockIdx.x + c, 1u);
        continue;
      }
      if (ke < k_tiles) {  // a head: the next block holds the tail
        unsigned int* flag = counters + CONSUMERS * (blockIdx.x + 1) + c;
        if (t == 0) {
          while (load_acquire(flag) == 0u) {
          }
          *flag = 0u;  // zero for the next launch (the tail's block raises it once a launch)
          __threadfence();
        }
        consumer_sync(c);  // the others read the partial after the acquire
        float4* in = slots + ((size_t)(blockIdx.x + 1) * CONSUMERS + c) * CHUNKS * 128 + t;
#pragma unroll
        for (int sl = 0; sl < SLICES; ++sl)
#pragma unroll
          for (int j = 0; j < BN / 8; ++j) {
            const float4 v = __ldcg(in + (sl * BN / 8 + j) * 128);
            __stcg(in + (sl * BN / 8 + j) * 128, make_float4(0.0f, 0.0f, 0.0f, 0.0f));  // zero for the next kernel
            d[sl][4 * j] += v.x, d[sl][4 * j + 1] += v.y, d[sl][4 * j + 2] += v.z, d[sl][4 * j + 3] += v.w;
          }
      }
    }

    // Accumulator layout of wgmma m64nN (f32): warp w holds rows 16 w .. 16 w + 15 of a slice;
    // d[4 j + 2 h + e] is (16 w + lane / 4 + 8 h, 8 j + 2 (lane % 4) + e).
    const int row0 = tile_m * BM + c * ROWS, col0 = tile_n * BN;
    if (beta != 0.0f) {
#pragma unroll
      for (int sl = 0; sl < SLICES; ++sl)
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            store_pair<T, !B_NK>(C, M, N, ldc, row0 + sl * 64 + warp * 16 + lane / 4 + h * 8,
                                 col0 + j * 8 + (lane % 4) * 2, d[sl][4 * j + 2 * h], d[sl][4 * j + 2 * h + 1],
                                 alpha, beta, pairs);
      continue;
    }
    consumer_sync(c);  // every thread of this consumer is done reading the previous tile's staging
#pragma unroll
    for (int sl = 0; sl < SLICES; ++sl)
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = sl * 64 + warp * 16 + lane / 4 + h * 8;
          const typename Convert<T>::pair v =
              Convert<T>::from_float2(alpha * d[sl][4 * j + 2 * h], alpha * d[sl][4 * j + 2 * h + 1]);
          const uint32_t at = mine + (j / 8) * ROWS * 128 + r * 128 + (((j % 8) ^ (r % 8)) << 4) + (lane % 4) * 4;
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(at), "r"(*reinterpret_cast<const uint32_t*>(&v)) : "memory");
        }
    consumer_sync(c);
    for (int q = t; q < ROWS * BN / 8; q += 128) {  // a warp writes 32 chunks of one row
      const int r = q / (BN / 8), chunk = q % (BN / 8);
      const int row = row0 + r, col = col0 + chunk * 8;
      if (row >= M || col >= N) continue;
      const uint32_t at = mine + (chunk / 8) * ROWS * 128 + r * 128 + (((chunk % 8) ^ (r % 8)) << 4);
      T* out = C + (size_t)row * ldc + col;
      if (vectors && col + 8 <= N) {
        uint4 v;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(at)
                     : "memory");
        *reinterpret_cast<uint4*>(out) = v;
      } else {
        for (int e = 0; e < 8 && col + e < N; ++e) {
          unsigned short bits;
          asm volatile("ld.shared.u16 %0, [%1];" : "=h"(bits) : "r"(at + 2 * e) : "memory");
          out[e] = *reinterpret_cast<const T*>(&bits);
        }
      }
    }
  }
}

}  // namespace at_ws

// One instance, as the tuner generates it (see autotune/ops/gemm/ws.py; B_NK true and "_nt" at the end
// of the name for an N x K B):
//   extern "C" __global__ void __launch_bounds__(384, 1) gemm_ws_<key>(const __half* A, const __half* B,
//       __half* C, int M, int N, int K, int lda, int ldb, int ldc, float alpha, float beta,
//       float* workspace, unsigned int* counters)
//   { at_ws::gemm_ws_body<__half, true, 128, 256, 3, 8, 2>(A, B, C, M, N, K, lda, ldb, ldc, alpha, beta,
//                                                         workspace, counters); }
