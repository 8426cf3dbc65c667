// Tensor-core GEMM for half and bfloat16 (sm_80+ instructions, built for sm_90 without wgmma):
// C = alpha * A B + beta * C, A row-major M x K, C row-major M x N, float32 accumulation through
// mma.sync.m16n8k16. B is K x N row-major (B(k, n) = B[k * ldb + n]) or, with B_NK, N x K row-major
// (B(k, n) = B[n * ldb + k], K contiguous: an nn.Linear weight, C = A Wᵀ). Rows of A, B and C are
// lda, ldb and ldc elements apart (lda >= K, ldb >= K or N, ldc >= N). beta == 0: C is not read.
//
// Template parameters:
//   T         __half or __nv_bfloat16
//   B_NK      B is stored N x K (mma.sync's native "col" B operand) instead of K x N
//   BM, BN    block tile (rows of C, columns of C); BK the k-depth of one pipeline stage (32 or 64)
//   WM, WN    warp tile: the block has (BM/WM) x (BN/WN) warps, threads = (BM/WM) * (BN/WN) * 32
//   STAGES    shared-memory pipeline depth (2..5): STAGES - 1 k-tiles are in flight while one is used
//   VEC       elements per global->shared copy: 8 (16-byte cp.async.cg), 4 (8-byte cp.async.ca),
//             2 (4-byte cp.async.ca), 1 (synchronous 2-byte loads). Copies run along the rows of A
//             and B: VEC > 1 needs K % VEC == 0 and, for K x N, N % VEC == 0 (VEC divides every row's
//             valid width) and rows of A and B that start 2 * VEC-byte aligned (the launcher runs
//             VEC > 1 only on 16-byte aligned arrays and leading dimensions). VEC 1 works for every
//             shape, pointer and leading dimension.
//   SWIZZLE   block rasterization: SWIZZLE consecutive tile rows are walked column by column, so the
//             blocks resident at one time share a few A and B panels in L2 (1: plain row-major order)
//
// Dynamic shared memory (the Python module mirrors it):
//   SHARED_BYTES = STAGES * (BM * BK + BK * BN) * sizeof(T)
// Stage s holds A's BM x BK tile (row-major, BK elements a row) and B's BK x BN tile (row-major, BN
// a row; ldmatrix.trans gives mma's B fragments) or, with B_NK, B's BN x BK tile (BK a row, laid out
// as A's: plain ldmatrix gives the fragments). Rows are made of 16-byte chunks whose index is XORed
// with the row (see swizzle_chunk), so the eight 16-byte rows one ldmatrix phase reads, and the eight
// chunks that eight consecutive threads write with cp.async, fall in eight different bank groups: no
// padding, no conflicts.
//
// Grid: x = tiles_m * tiles_n (one block per output tile, remapped by SWIZZLE), z = split. With
// split > 1 each z slice reduces a contiguous range of k-tiles; every block stores float partial sums
// to workspace[z][M][N] (rows N apart, whatever ldc is), and the last block of an output tile to
// arrive (one counter per tile) adds the partials in z order (deterministic), zeroes them, applies
// alpha/beta, writes C and resets the counter, so workspace and counters are zero again after every
// launch.
// Workspace: split * M * N floats; counters: tiles_m * tiles_n (only used when split > 1).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace at_gemm_mma {

template <typename T> struct Pair;
template <> struct Pair<__half> {
  typedef __half2 type;
  static __device__ __forceinline__ float2 to_float2(type v) { return __half22float2(v); }
  static __device__ __forceinline__ type from_float2(float a, float b) { return __floats2half2_rn(a, b); }
  static __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }
};
template <> struct Pair<__nv_bfloat16> {
  typedef __nv_bfloat162 type;
  static __device__ __forceinline__ float2 to_float2(type v) { return __bfloat1622float2(v); }
  static __device__ __forceinline__ type from_float2(float a, float b) { return __floats2bfloat162_rn(a, b); }
  static __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
};

template <typename T> struct MmaOp;
template <> struct MmaOp<__half> {
  static __device__ __forceinline__ void run(float* d, const uint32_t* a, const uint32_t* b) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct MmaOp<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float* d, const uint32_t* a, const uint32_t* b) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Asynchronous copy of VEC elements (2 * VEC bytes); src_bytes 0 fills the destination with zeros.
template <int VEC> __device__ __forceinline__ void cp_async(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? VEC * 2 : 0;
  if (VEC == 8) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
  } else if (VEC == 4) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int PENDING> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

__device__ __forceinline__ void st_shared_u16(uint32_t addr, unsigned short v) {
  asm volatile("st.shared.u16 [%0], %1;" ::"r"(addr), "h"(v) : "memory");
}

// Physical 16-byte chunk of logical chunk `chunk` in row `row` of a tile whose rows have CHUNKS chunks.
// Rows of 8+ chunks (128+ bytes): XOR with row % 8, so any 8 consecutive rows at one logical chunk
// hit 8 different 16-byte bank groups. Rows of 4 chunks (64 bytes, BK = 32): two rows share a
// 128-byte bank line, so XOR with (row / 2) % 4; rows r..r+7 then map to slots 4 * (r % 2) + (c ^ ...).
template <int CHUNKS> __device__ __forceinline__ int swizzle_chunk(int row, int chunk) {
  static_assert(CHUNKS == 4 || (CHUNKS >= 8 && CHUNKS % 8 == 0), "rows of 4 or a multiple of 8 chunks");
  return CHUNKS == 4 ? chunk ^ ((row >> 1) & 3) : chunk ^ (row & 7);
}

// Element offset of (row, col) in a swizzled tile with COLS elements a row.
template <int COLS> __device__ __forceinline__ int tile_offset(int row, int col) {
  return row * COLS + swizzle_chunk<COLS / 8>(row, col >> 3) * 8 + (col & 7);
}

// How THREADS threads split a ROWS x COLS tile into VEC-element pieces: TPR threads cover a row
// (or THREADS consecutive pieces of it), RSTEP rows are copied per step. All powers of two.
template <int ROWS, int COLS, int VEC, int THREADS> struct CopyPlan {
  static constexpr int PER_ROW = COLS / VEC;
  static constexpr int TPR = PER_ROW < THREADS ? PER_ROW : THREADS;
  static constexpr int RSTEP = THREADS / TPR;
  static constexpr int CSTEPS = PER_ROW / TPR;
  static constexpr int RITERS = (ROWS + RSTEP - 1) / RSTEP;
  static_assert((PER_ROW & (PER_ROW - 1)) == 0 && (THREADS & (THREADS - 1)) == 0, "powers of two");
  // Several column steps only happen with TPR = THREADS >= 64, so they move by whole groups of
  // 8 chunks, which the XOR swizzle leaves in place (see piece_offset).
  static_assert(CSTEPS == 1 || TPR * VEC % 64 == 0, "column steps of whole 8-chunk groups");
  static __device__ __forceinline__ int row0(int tid) { return tid / TPR; }
  static __device__ __forceinline__ int col0(int tid) { return tid % TPR * VEC; }
};

// Byte offset of the piece (r0 + r, c0 + c) of a thread's copy plan, r and c compile-time constants.
// The swizzle only depends on the row mod 8, so the offset is one of at most 8 per-thread bases
// (r0 + r % 8, c0) plus a constant: the compiler keeps a few registers instead of one per piece.
template <typename T, int COLS>
__device__ __forceinline__ uint32_t piece_offset(uint32_t tile, int r0, int c0, int r, int c) {
  return tile + (tile_offset<COLS>(r0 + r % 8, c0) + (r - r % 8) * COLS + c) * (int)sizeof(T);
}

// Copies this thread's pieces of a ROWS x COLS tile into the swizzled shared tile at byte address
// `tile`. `src` is the thread's first element (r0, c0) in global memory (row stride ld);
// rows_left/cols_left count the valid rows/columns from (r0, c0) on: the rest is zero filled.
// `any` is a valid address for the copies that read nothing.
template <typename T, int ROWS, int COLS, int VEC, int THREADS>
__device__ __forceinline__ void load_tile(uint32_t tile, const T* src, const T* any, size_t ld, int r0, int c0,
                                          int rows_left, int cols_left) {
  typedef CopyPlan<ROWS, COLS, VEC, THREADS> P;
  const bool active = ROWS % P::RSTEP == 0 || r0 < ROWS;  // a tile shorter than one step idles threads
  if (VEC > 1) {
#pragma unroll
    for (int ir = 0; ir < P::RITERS; ++ir)
#pragma unroll
      for (int ic = 0; ic < P::CSTEPS; ++ic) {
        const int r = ir * P::RSTEP, c = ic * P::TPR * VEC;
        // VEC divides the valid width (K or N): a piece is wholly inside or wholly outside.
        const bool valid = active && r < rows_left && c < cols_left;
        if (active) cp_async<VEC>(piece_offset<T, COLS>(tile, r0, c0, r, c), valid ? src + r * ld + c : any, valid);
      }
  } else {
    // No alignment to rely on: plain 2-byte loads. Loads go out in batches of 16 before their stores,
    // so a thread waits for memory once per batch, not once per element (whole tiles would spill).
    // ptxas is free to sink a global load down to its shared store, and did so for the N x K tiles
    // (one wait per element: 2-3x slower); `zero` (0, but ptxas cannot know) makes every store's
    // address depend on the whole batch, so all its loads are issued first.
    constexpr int PIECES = P::RITERS * P::CSTEPS, BATCH = PIECES < 16 ? PIECES : 16;
    static_assert(PIECES % BATCH == 0, "whole batches");
#pragma unroll
    for (int q0 = 0; q0 < PIECES; q0 += BATCH) {
      unsigned short v[BATCH];
#pragma unroll
      for (int b = 0; b < BATCH; ++b) {
        const int r = (q0 + b) / P::CSTEPS * P::RSTEP, c = (q0 + b) % P::CSTEPS * P::TPR;
        const bool valid = active && r < rows_left && c < cols_left;
        v[b] = valid ? __ldg(reinterpret_cast<const unsigned short*>(src + r * ld + c)) : (unsigned short)0;
      }
      uint32_t all = 0, zero;
#pragma unroll
      for (int b = 0; b < BATCH; ++b) all |= v[b];
      asm("shr.u32 %0, %1, 16;" : "=r"(zero) : "r"(all));  // 16-bit values: always 0
#pragma unroll
      for (int b = 0; b < BATCH; ++b) {
        const int r = (q0 + b) / P::CSTEPS * P::RSTEP, c = (q0 + b) % P::CSTEPS * P::TPR;
        if (active) st_shared_u16(piece_offset<T, COLS>(tile, r0, c0, r, c) + zero, v[b]);
      }
    }
  }
}

// One tile of C for this block: (tile_m, tile_n) after the rasterization swizzle.
template <int SWIZZLE>
__device__ __forceinline__ void block_tile(int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
  const int pid = blockIdx.x;
  if (SWIZZLE == 1) {
    tile_m = pid / tiles_n;
    tile_n = pid % tiles_n;
    return;
  }
  const int width = SWIZZLE * tiles_n;  // blocks in one group of SWIZZLE tile rows
  const int first_m = pid / width * SWIZZLE;
  const int rows = min(tiles_m - first_m, SWIZZLE);  // the last group may be shorter
  const int in_group = pid % width;
  tile_m = first_m + in_group % rows;
  tile_n = in_group / rows;
}

// Writes two horizontally adjacent results (row, col) and (row, col + 1), clipped to M x N, rows of C
// ldc apart. `pairs` (N and ldc even, C 4-byte aligned) makes (row, col) 4-byte aligned, col even:
// one 32-bit access.
template <typename T>
__device__ __forceinline__ void store_pair(T* __restrict__ C, int M, int N, size_t ldc, int row, int col, float v0,
                                           float v1, float alpha, float beta, bool pairs) {
  typedef Pair<T> P;
  if (row >= M || col >= N) return;
  T* p = C + (size_t)row * ldc + col;
  float o0 = alpha * v0, o1 = alpha * v1;
  if (pairs) {
    typename P::type* q = reinterpret_cast<typename P::type*>(p);
    if (beta != 0.0f) {  // beta == 0: C is not read (it may hold NaN)
      const float2 old = P::to_float2(*q);
      o0 = fmaf(beta, old.x, o0);
      o1 = fmaf(beta, old.y, o1);
    }
    *q = P::from_float2(o0, o1);
    return;
  }
  if (beta != 0.0f) o0 = fmaf(beta, P::to_float(p[0]), o0);
  p[0] = P::from_float(o0);
  if (col + 1 < N) {
    if (beta != 0.0f) o1 = fmaf(beta, P::to_float(p[1]), o1);
    p[1] = P::from_float(o1);
  }
}

template <typename T, bool B_NK, int BM, int BN, int BK, int WM, int WN, int STAGES, int VEC, int SWIZZLE>
__device__ __forceinline__ void gemm_mma_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                              int M, int N, int K, int lda, int ldb, int ldc, float alpha,
                                              float beta, float* __restrict__ workspace,
                                              unsigned int* __restrict__ counters) {
  static_assert(sizeof(T) == 2, "half or bfloat16");
  static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 16 == 0, "warp tiles of 16x16 blocks");
  static_assert(BK % 32 == 0 && BN % 64 == 0, "rows of 4 or a multiple of 8 16-byte chunks");
  static_assert(STAGES >= 2, "at least double buffering");
  static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "copy widths of 2, 4, 8, 16 bytes");
  constexpr int WARPS_N = BN / WN;
  constexpr int THREADS = (BM / WM) * WARPS_N * 32;
  constexpr int MT = WM / 16;  // m16 tiles a warp holds
  constexpr int NT = WN / 8;   // n8 tiles a warp holds
  constexpr int KSTEPS = BK / 16;
  constexpr int A_STAGE_BYTES = BM * BK * (int)sizeof(T);
  constexpr int B_STAGE_BYTES = BK * BN * (int)sizeof(T);  // K x N: BK rows of BN; N x K: BN rows of BK

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t sA = smem_addr(smem_raw);
  const uint32_t sB = sA + STAGES * A_STAGE_BYTES;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;

  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  int tile_m, tile_n;
  block_tile<SWIZZLE>(tiles_m, tiles_n, tile_m, tile_n);
  const int m0 = tile_m * BM, n0 = tile_n * BN;

  // This split's range of k-tiles (all of them without split-K); it may be empty.
  const int k_tiles_all = (K + BK - 1) / BK;
  const int splits = gridDim.z;
  const int per_split = (k_tiles_all + splits - 1) / splits;
  const int kt_begin = min(k_tiles_all, (int)blockIdx.z * per_split);
  const int k_tiles = min(k_tiles_all, kt_begin + per_split) - kt_begin;

  // Each thread copies the same pieces of every k-tile: its first element walks along A's rows by
  // BK columns and down B by BK rows per tile (with B_NK along B's rows by BK columns, as in A).
  // load_stage is called for k-tiles 0, 1, 2, ... in order, so b_src (and with VEC 1 a_src) steps
  // once per call instead of adding kt * BK * ldb: with lda and ldb apart from K and N the 64x64 warp
  // tiles, at the 255-register limit, otherwise spilled more. Which pointer steps is what measured
  // fastest on an H200 (float16 4096^3 and 1000x1001x999, K x N and N x K).
  typedef CopyPlan<BM, BK, VEC, THREADS> PA;
  typedef CopyPlan<B_NK ? BN : BK, B_NK ? BK : BN, VEC, THREADS> PB;
  const int a_r0 = PA::row0(tid), a_c0 = PA::col0(tid);
  const int b_r0 = PB::row0(tid), b_c0 = PB::col0(tid);
  const T* a_src = A + (size_t)(m0 + a_r0) * lda + (size_t)kt_begin * BK + a_c0;
  const T* b_src = B_NK ? B + (size_t)(n0 + b_r0) * ldb + (size_t)kt_begin * BK + b_c0
                        : B + ((size_t)kt_begin * BK + b_r0) * ldb + n0 + b_c0;
  auto load_stage = [&](int stage, int kt) {
    const int k_left = K - (kt_begin + kt) * BK;  // valid k from this tile's start
    load_tile<T, BM, BK, VEC, THREADS>(sA + stage * A_STAGE_BYTES, a_src + (VEC == 1 ? 0 : (size_t)kt * BK), A,
                                       (size_t)lda, a_r0, a_c0, M - m0 - a_r0, k_left - a_c0);
    if (VEC == 1) a_src += BK;
    if (B_NK) {
      load_tile<T, BN, BK, VEC, THREADS>(sB + stage * B_STAGE_BYTES, b_src, B, (size_t)ldb, b_r0, b_c0,
                                         N - n0 - b_r0, k_left - b_c0);
      b_src += BK;
    } else {
      load_tile<T, BK, BN, VEC, THREADS>(sB + stage * B_STAGE_BYTES, b_src, B, (size_t)ldb, b_r0, b_c0,
                                         k_left - b_r0, N - n0 - b_c0);
      b_src += (size_t)BK * ldb;
    }
  };

  // ldmatrix addressing: lane l supplies row l % 16 and 16-byte chunk l / 16 of a 16 x 16 block.
  // A (x4): matrices = rows 0-7/8-15 x k 0-7, then x k 8-15 -> a0..a3 of mma's A fragment.
  // B (x4.trans, k rows): matrices = k 0-7/8-15 x n 0-7, then x n 8-15 -> b0,b1 of two n8 tiles.
  // B_NK (x4, n rows): lane l supplies row 8 * (l / 16) + l % 8 and chunk (l / 8) % 2, so the
  // matrices are n 0-7 x k 0-7/8-15, then n 8-15 x k 0-7/8-15 -> b0,b1 of two n8 tiles (mma's "col"
  // B fragment is an n8 x k16 block read row by row), each pair in consecutive registers as mma
  // takes it (the A order would need register moves).
  const int ld_row = lane & 15, ld_chunk = lane >> 4;
  const int nk_row = (lane >> 4 << 3) + (lane & 7), nk_chunk = (lane >> 3) & 1;
  auto load_frags = [&](uint32_t (&af)[MT][4], uint32_t (&bf)[NT][2], int stage, int kk) {
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int row = warp_m * WM + i * 16 + ld_row;
      const int off = row * BK + swizzle_chunk<BK / 8>(row, kk * 2 + ld_chunk) * 8;
      ldmatrix_x4(af[i], sA + stage * A_STAGE_BYTES + off * (int)sizeof(T));
    }
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      uint32_t r[4];
      if (B_NK) {
        const int row = warp_n * WN + j * 8 + nk_row;
        const int off = row * BK + swizzle_chunk<BK / 8>(row, kk * 2 + nk_chunk) * 8;
        ldmatrix_x4(r, sB + stage * B_STAGE_BYTES + off * (int)sizeof(T));
      } else {
        const int krow = kk * 16 + ld_row;
        const int chunk = (warp_n * WN + j * 8) / 8 + ld_chunk;
        const int off = krow * BN + swizzle_chunk<BN / 8>(krow, chunk) * 8;
        ldmatrix_x4_trans(r, sB + stage * B_STAGE_BYTES + off * (int)sizeof(T));
      }
      bf[j][0] = r[0];
      bf[j][1] = r[1];
      bf[j + 1][0] = r[2];
      bf[j + 1][1] = r[3];
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // Prologue: STAGES - 1 tiles in flight. Every step commits a group, empty or not, so that
  // "wait until at most STAGES - 2 groups are pending" always means "the next tile has landed".
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  cp_async_wait<STAGES - 2>();
  __syncthreads();

  uint32_t af[2][MT][4], bf[2][NT][2];  // fragments of step kk (being multiplied) and kk + 1 (loading)
  int read_stage = 0, write_stage = STAGES - 1;
  load_frags(af[0], bf[0], 0, 0);
  for (int kt = 0; kt < k_tiles; ++kt) {
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      if (kk == KSTEPS - 1) {
        // Tile kt + 1 must have landed, and every warp must be done with the stage that the
        // next kk == 0 overwrites (read by tile kt - 1) before anyone refills it.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
      }
      load_frags(af[(kk + 1) & 1], bf[(kk + 1) & 1], read_stage, (kk + 1) % KSTEPS);
      if (kk == 0) {
        if (kt + STAGES - 1 < k_tiles) load_stage(write_stage, kt + STAGES - 1);
        cp_async_commit();
        write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) MmaOp<T>::run(acc[i][j], af[kk & 1][i], bf[kk & 1][j]);
    }
  }
  cp_async_wait<0>();  // nothing may land in shared memory after the block exits

  // Accumulator layout of m16n8: c0,c1 at (lane / 4, 2 * (lane % 4) + {0,1}), c2,c3 eight rows lower.
  const int row_base = m0 + warp_m * WM + (lane >> 2);
  const int col_base = n0 + warp_n * WN + (lane & 3) * 2;
  // Pairs of outputs are one 4-byte access when every row of C starts 4-byte aligned (N, ldc even, C
  // aligned). C is checked here, whatever VEC: the launcher falls back to this kernel's VEC 1 configs
  // for views whose pointers or leading dimensions are not aligned.
  const bool even_n = (N & 1) == 0;
  const bool pairs = even_n && (ldc & 1) == 0 && (reinterpret_cast<uintptr_t>(C) & 3) == 0;

  if (splits > 1) {
    // Partials of this split, then the last block of the tile reduces all splits in z order.
    const size_t mn = (size_t)M * N;
    float* mine = workspace + (size_t)blockIdx.z * mn;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row_base + i * 16 + h * 8, col = col_base + j * 8;
          if (row >= M || col >= N) continue;
          float* p = mine + (size_t)row * N + col;
          if (even_n) {  // the workspace is 256-byte aligned
            __stcg(reinterpret_cast<float2*>(p), make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]));
          } else {
            __stcg(p, acc[i][j][2 * h]);
            if (col + 1 < N) __stcg(p + 1, acc[i][j][2 * h + 1]);
          }
        }
    __threadfence();  // partials visible device-wide before this block is counted
    __syncthreads();
    const int tile = tile_m * tiles_n + tile_n;
    const bool last = __syncthreads_or(tid == 0 && atomicAdd(counters + tile, 1u) == (unsigned)(splits - 1));
    if (!last) return;
    __threadfence();
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row_base + i * 16 + h * 8, col = col_base + j * 8;
          if (row >= M || col >= N) continue;
          const bool two = col + 1 < N;
          float s0 = 0.0f, s1 = 0.0f;
          for (int z = 0; z < splits; ++z) {
            float* p = workspace + z * mn + (size_t)row * N + col;
            s0 += __ldcg(p);
            if (two) s1 += __ldcg(p + 1);
            __stcg(p, 0.0f);  // leave the workspace zeroed for the next launch
            if (two) __stcg(p + 1, 0.0f);
          }
          acc[i][j][2 * h] = s0;
          acc[i][j][2 * h + 1] = s1;
        }
    if (tid == 0) counters[tile] = 0u;
  }

#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        store_pair<T>(C, M, N, (size_t)ldc, row_base + i * 16 + h * 8, col_base + j * 8, acc[i][j][2 * h],
                      acc[i][j][2 * h + 1], alpha, beta, pairs);
}

}  // namespace at_gemm_mma

// One instance, as the tuner generates it (see autotune/ops/gemm/mma.py and gemm/shared.py; the
// B_NK instance is named ..._nt and passes true):
//   extern "C" __global__ void __launch_bounds__(256) gemm_mma_<key>(const __half* A, const __half* B,
//       __half* C, int M, int N, int K, int lda, int ldb, int ldc, float alpha, float beta,
//       float* workspace, unsigned int* counters)
//   { at_gemm_mma::gemm_mma_body<__half, false, 128, 256, 32, 64, 64, 4, 8, 8>(A, B, C, M, N, K, lda,
//         ldb, ldc, alpha, beta, workspace, counters); }
