// Weight-only 8-bit GEMV and skinny GEMM on tensor cores (M <= 64): the product of q8gemm.cu, with the codes
// turned into 16-bit pairs in registers and multiplied by mma.sync.m16n8k16 (float sums).
//
// On CUDA cores every code meets every row of x in a float FMA, so past a few rows the FMAs, not the
// bytes, set the time (H200, 28672 x 4096 int8: 0.33x torch's float16 at M = 16, 0.09x at M = 64). Here a
// code costs one conversion however many rows of x it meets: an MMA multiplies 16 rows of W by 8 rows of
// x.
//
// Conversions, each exact (|q| <= 127 and e4m3's 4-bit significands fit both 16-bit types):
//   int8 -> float16: q + 128 placed under the exponent of 1024 (one PRMT makes a pair), 1152 subtracted;
//   fp8  -> float16: the hardware's e4m3x2 conversion (sm_89 and newer);
//   bfloat16: through float (bfloat16's 8-bit significand has no room for q + 128 under a fixed exponent).
//
// Fragments (PTX ISA, mma.m16n8k16 .row.col): lane = 4 g + c holds A at rows g and g + 8 and k slots
// {2c, 2c+1, 2c+8, 2c+9}, B (a column: row g of x's tile) at the same k slots, D at rows g, g + 8 and
// columns 2c, 2c + 1. A dot product does not depend on the order of its terms, so the k slots are mapped
// to codes the lane loads whole: lane c of a quad reads a 16-byte piece (16 codes) of rows g and g + 8,
// piece 4 s + c of step s; word j of a piece fills MMA j's slots (codes 4j, 4j+1 at 2c, 2c+1 and 4j+2,
// 4j+3 at 2c+8, 2c+9), so x's matching 16 values are the same 32 contiguous bytes of its row, two 16-byte
// loads through L1, in the order B wants them.
//
// Work: a warp owns TILES tiles of 16 rows of W and XT tiles of 8 rows of x (gridDim.y covers M), or
// with KSPLIT > 1 a part of K of them, KSPLIT warps of a block sharing the rows, their sums added in
// shared memory in a fixed order; each lane asks for UNROLL steps of its pieces before it converts any.
// x is read through L1 (STAGE 0), or (STAGE 1, KSPLIT 1) the block stages each chunk of UNROLL steps of
// its rows of x in shared memory once for all its warps: every warp reads all of x, so on an SM whose
// L1 cannot hold x (64 rows of 4096 are 512 KB) L1 would fetch x from L2 again for every 16 or 32 rows
// of W (H200, 28672 x 4096 at M = 64 through L1: 120 us, 0.53x torch's float16).
// q8gemm_mma_ring keeps RING stages of UNROLL steps in registers instead: before a stage is converted
// and multiplied, the stage RING - 1 ahead is asked for into the slot just emptied, so a warp always has
// RING - 1 stages in flight (the body asks for UNROLL steps, then multiplies them with none in flight).
// At M = 1 an MMA multiplies seven rows of zeros (x's rows past M read row M - 1, never written), yet a
// code still costs one conversion and a quarter of an MMA instead of a float conversion and FMA: the
// CUDA-core kernel issues about three times the instructions a byte.
//
// Preconditions (autotune/ops/q8gemm: space and bind): K % 16 == 0, x, W and out 16-byte aligned,
// compute capability 8.0 or newer (8.9 for fp8).
#pragma once
#include "q8gemm/q8gemm.cu"

namespace at_q8gemm {

constexpr int QUAD = 4;  // pieces a quad of lanes reads per step

// The 4 codes of a word as two pairs of T: (codes 0, 1) and (codes 2, 3), each pair one register.
template <typename T, int KIND> struct Pairs;

template <> struct Pairs<__half, 0> {
  static __device__ __forceinline__ void of(unsigned word, unsigned (&p)[2]) {
    const unsigned biased = word ^ 0x80808080u;  // q + 128 in each byte
    const __half2 bias = __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480));  // 1152
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      // bytes (2j, 0x64, 2j + 1, 0x64): the halves 1024 + q + 128
      const unsigned placed = __byte_perm(biased, 0x64646464u, 0x4140 + 0x0202 * j);
      const __half2 pair = __hsub2(*reinterpret_cast<const __half2*>(&placed), bias);
      p[j] = *reinterpret_cast<const unsigned*>(&pair);
    }
  }
};

template <> struct Pairs<__half, 1> {
  static __device__ __forceinline__ void of(unsigned word, unsigned (&p)[2]) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __half2_raw raw =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> (16 * j)), __NV_E4M3);
      p[j] = *reinterpret_cast<const unsigned*>(&raw);
    }
  }
};

template <int KIND> struct Pairs<__nv_bfloat16, KIND> {
  static __device__ __forceinline__ void of(unsigned word, unsigned (&p)[2]) {
    float f[4];
    Codes<KIND>::of(word, f);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
      p[j] = *reinterpret_cast<const unsigned*>(&pair);
    }
  }
};

// d += A B for 16-bit A and B, float sums.
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same<T, __half>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
#else
  __trap();  // tensor-core MMAs of 16-bit inputs need sm_80; the op's space offers none below
#endif
}

// Where a warp's rows of W start: rows g and g + 8 of each of its tiles (rows past N: the last row,
// read, never written).
template <int TILES>
__device__ __forceinline__ void row_pointers(const uint4* (&rows)[TILES][2], const unsigned char* __restrict__ qweight,
                                             int row0, int g, int N, int K) {
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      rows[t][h] = reinterpret_cast<const uint4*>(qweight + (size_t)min(row0 + 16 * t + 8 * h + g, N - 1) * K);
}

template <int TILES, int XT> __device__ __forceinline__ void zero(float (&acc)[TILES][XT][4]) {
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int i = 0; i < XT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[t][i][e] = 0.0f;
}

// A's registers of one step: the codes of rows g and g + 8 of each tile as pairs of T.
template <typename T, int KIND, int TILES>
__device__ __forceinline__ void convert(const uint4 (&w)[TILES][2], unsigned (&a)[TILES][2][4][2]) {
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned* words = reinterpret_cast<const unsigned*>(&w[t][h]);
#pragma unroll
      for (int j = 0; j < 4; ++j) Pairs<T, KIND>::of(words[j], a[t][h][j]);
    }
}

// acc[t] += A of tile t times B: x's 16 values of the lane's piece in one tile of x.
template <typename T, int TILES, int XT>
__device__ __forceinline__ void multiply(const unsigned (&a)[TILES][2][4][2], const uint4 (&v)[2],
                                         float (&acc)[TILES][XT][4], int i) {
  const unsigned* b = reinterpret_cast<const unsigned*>(v);  // pairs 2j, 2j + 1 for MMA j
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      mma<T>(acc[t][i], a[t][0][j][0], a[t][1][j][0], a[t][0][j][1], a[t][1][j][1], b[2 * j], b[2 * j + 1]);
}

// The product's sums, scaled by the row's scale and alpha, into out (beta: out's old value added).
template <typename T, int TILES, int XT>
__device__ __forceinline__ void store(const float (&acc)[TILES][XT][4], const T* __restrict__ scales,
                                      T* __restrict__ out, int row0, int m0, int M, int N, float alpha, float beta) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 16 * t + 8 * h + g;
      if (row >= N) continue;
      const float scale = alpha * at_common::to_float(scales[row]);
#pragma unroll
      for (int i = 0; i < XT; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int m = m0 + 8 * i + 2 * c + e;
          if (m >= M) continue;
          T* y = out + (size_t)m * N + row;
          const float before = beta != 0.0f ? at_common::to_float(*y) : 0.0f;
          *y = at_common::from_float<T>(scale * acc[t][i][2 * h + e] + beta * before);
        }
    }
}

// A stage of q8gemm_mma_ring: UNROLL steps of the lane's pieces of each tile's rows g and
// g + 8, zeros past the split's end or K (those loads are not made).
template <int UNROLL, int TILES, int POLICY>
__device__ __forceinline__ void fetch(uint4 (&w)[UNROLL][TILES][2], const uint4* const (&rows)[TILES][2], int base,
                                      int end, int pieces, int c) {
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int p = (base + u) * QUAD + c;
    const bool in = base + u < end && p < pieces;
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        w[u][t][h] = in ? at_common::load_stream<POLICY>(rows[t][h] + p) : make_uint4(0u, 0u, 0u, 0u);
  }
}

// acc += the stage's codes times x's matching values, step by step (steps past the split's end skipped).
template <typename T, int KIND, int TILES, int XT, int UNROLL>
__device__ __forceinline__ void multiply_stage(const uint4 (&w)[UNROLL][TILES][2], const uint4* const (&xs)[XT],
                                               float (&acc)[TILES][XT][4], int base, int end, int pieces, int c) {
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    if (base + u >= end) break;  // the same for every lane of the warp
    const int p = (base + u) * QUAD + c;
    unsigned a[TILES][2][4][2];
    convert<T, KIND, TILES>(w[u], a);
#pragma unroll
    for (int i = 0; i < XT; ++i) {
      uint4 v[2] = {make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u)};
      if (p < pieces) {  // the last step's pieces past K: zero codes times zero x
        v[0] = __ldg(xs[i] + 2 * p);
        v[1] = __ldg(xs[i] + 2 * p + 1);
      }
      multiply<T, TILES, XT>(a, v, acc, i);
    }
  }
}

// A K split's sums: every part but the first leaves its sums in shared memory, the first adds them in
// order (deterministic). True for the warp that then holds the sums of rows within N.
template <int TILES, int XT, int KSPLIT, int WARPS, int SUMS>
__device__ __forceinline__ bool add_split_parts(float (&parts)[WARPS][SUMS][32], float (&acc)[TILES][XT][4], int part,
                                                int warp, int lane, bool past_n) {
  if (part != 0) {
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int i = 0; i < XT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) parts[warp][(t * XT + i) * 4 + e][lane] = acc[t][i][e];
  }
  __syncthreads();
  if (part != 0 || past_n) return false;
#pragma unroll
  for (int j = 1; j < KSPLIT; ++j)
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int i = 0; i < XT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[t][i][e] += parts[warp + j][(t * XT + i) * 4 + e][lane];
  return true;
}

// x staged in shared memory a chunk of UNROLL steps at a time (KSPLIT 1): the W loads of a chunk are
// asked for before the block stages x's, so both are in flight together.
template <typename T, int KIND, int XT, int BLOCK, int TILES, int UNROLL, int POLICY>
__device__ __forceinline__ void q8gemm_mma_staged(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                                  const T* __restrict__ scales, T* __restrict__ out, int M, int N,
                                                  int K, float alpha, float beta) {
  constexpr int CHUNK = UNROLL * QUAD * PIECE;  // values of a row of x a chunk
  constexpr int STRIDE = CHUNK + 8;             // 16 bytes apart: rows g and g + 1 in other banks
  constexpr int LOADS = 8 * XT * CHUNK / 8;     // 16-byte loads a chunk of x
  __shared__ __align__(16) T staged[8 * XT][STRIDE];
  launch_dependents();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const int row0 = (blockIdx.x * (BLOCK / 32) + warp) * 16 * TILES;
  const int m0 = blockIdx.y * 8 * XT;
  const int pieces = K / PIECE;
  const int steps = (pieces + QUAD - 1) / QUAD;
  wait_for_prior_grid();  // x and W may be written by the grid before (PDL)
  const bool mine = row0 < N;  // a warp past N stages x with the others, never multiplies
  const uint4* rows[TILES][2];
  row_pointers<TILES>(rows, qweight, row0, g, N, K);
  float acc[TILES][XT][4];
  zero<TILES, XT>(acc);

  for (int base = 0; base < steps; base += UNROLL) {
    uint4 w[UNROLL][TILES][2];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int p = (base + u) * QUAD + c;
      const bool in = mine && p < pieces;
#pragma unroll
      for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          w[u][t][h] = in ? at_common::load_stream<POLICY>(rows[t][h] + p) : make_uint4(0u, 0u, 0u, 0u);
    }
    __syncthreads();  // every warp is done with the chunk before
    for (int index = threadIdx.x; index < LOADS; index += BLOCK) {
      const int r = index / (CHUNK / 8), k = base * QUAD * PIECE + index % (CHUNK / 8) * 8;
      const uint4 v = k < K ? __ldg(reinterpret_cast<const uint4*>(x + (size_t)min(m0 + r, M - 1) * K + k))
                            : make_uint4(0u, 0u, 0u, 0u);
      *reinterpret_cast<uint4*>(&staged[r][index % (CHUNK / 8) * 8]) = v;
    }
    __syncthreads();
    if (!mine) continue;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      unsigned a[TILES][2][4][2];
      convert<T, KIND, TILES>(w[u], a);
#pragma unroll
      for (int i = 0; i < XT; ++i) {
        const uint4* xp = reinterpret_cast<const uint4*>(&staged[8 * i + g][(u * QUAD + c) * PIECE]);
        const uint4 v[2] = {xp[0], xp[1]};  // past K: staged as zeros
        multiply<T, TILES, XT>(a, v, acc, i);
      }
    }
  }
  if (mine) store<T, TILES, XT>(acc, scales, out, row0, m0, M, N, alpha, beta);
}

template <typename T, int KIND, int XT, int BLOCK, int TILES, int UNROLL, int POLICY, int KSPLIT>
__device__ __forceinline__ void q8gemm_mma_body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                                const T* __restrict__ scales, T* __restrict__ out, int M, int N,
                                                int K, float alpha, float beta) {
  static_assert(BLOCK % (32 * KSPLIT) == 0, "whole warps, KSPLIT of them a row group");
  constexpr int GROUPS = BLOCK / 32 / KSPLIT;  // row groups a block
  constexpr int ROWS = 16 * TILES;             // rows of W a warp
  constexpr int SUMS = TILES * XT * 4;         // a lane's sums
  // A split's sums, lane-minor (no bank conflicts), added by the group's first warp in order.
  __shared__ float parts[KSPLIT > 1 ? BLOCK / 32 : 1][KSPLIT > 1 ? SUMS : 1][32];
  launch_dependents();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const int part = warp % KSPLIT;
  const int row0 = (blockIdx.x * GROUPS + warp / KSPLIT) * ROWS;
  const int m0 = blockIdx.y * 8 * XT;
  const int pieces = K / PIECE;
  const int steps = (pieces + QUAD - 1) / QUAD;
  const int per_part = (steps + KSPLIT - 1) / KSPLIT;
  const int first = part * per_part, last = min(steps, first + per_part);
  wait_for_prior_grid();  // x and W may be written by the grid before (PDL)
  if (KSPLIT == 1 && row0 >= N) return;  // (split: every warp reaches the barrier below)

  // Rows past N and M are read (clamped to the last), never written.
  const uint4* rows[TILES][2];
  row_pointers<TILES>(rows, qweight, row0, g, N, K);
  const uint4* xs[XT];
#pragma unroll
  for (int i = 0; i < XT; ++i) xs[i] = reinterpret_cast<const uint4*>(x + (size_t)min(m0 + 8 * i + g, M - 1) * K);

  float acc[TILES][XT][4];
  zero<TILES, XT>(acc);

  const int end = row0 < N ? last : first;  // a split's rows past N: no steps, only the barrier
  for (int base = first; base < end; base += UNROLL) {
    uint4 w[UNROLL][TILES][2];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int p = (base + u) * QUAD + c;
      const bool in = base + u < end && p < pieces;
#pragma unroll
      for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          w[u][t][h] = in ? at_common::load_stream<POLICY>(rows[t][h] + p) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (base + u >= end) break;  // the same for every lane of the warp
      const int p = (base + u) * QUAD + c;
      const bool in = p < pieces;  // the last step's pieces past K: zero codes times zero x
      unsigned a[TILES][2][4][2];  // tile, row g or g + 8, word, pair
      convert<T, KIND, TILES>(w[u], a);
#pragma unroll
      for (int i = 0; i < XT; ++i) {
        uint4 v[2] = {make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u)};
        if (in) {
          v[0] = __ldg(xs[i] + 2 * p);
          v[1] = __ldg(xs[i] + 2 * p + 1);
        }
        multiply<T, TILES, XT>(a, v, acc, i);
      }
    }
  }

  if constexpr (KSPLIT > 1) {
    if (part != 0) {
#pragma unroll
      for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int i = 0; i < XT; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) parts[warp][(t * XT + i) * 4 + e][lane] = acc[t][i][e];
    }
    __syncthreads();
    if (part != 0 || row0 >= N) return;
#pragma unroll
    for (int j = 1; j < KSPLIT; ++j)  // the parts in order: deterministic
#pragma unroll
      for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int i = 0; i < XT; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[t][i][e] += parts[warp + j][(t * XT + i) * 4 + e][lane];
  }

  store<T, TILES, XT>(acc, scales, out, row0, m0, M, N, alpha, beta);
}

// q8gemm_mma_body with a ring of RING stages (x through L1): the same work, rows, split and sums.
template <typename T, int KIND, int XT, int BLOCK, int TILES, int UNROLL, int POLICY, int KSPLIT, int RING>
__device__ __forceinline__ void q8gemm_mma_ring(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                                const T* __restrict__ scales, T* __restrict__ out, int M, int N,
                                                int K, float alpha, float beta) {
  static_assert(BLOCK % (32 * KSPLIT) == 0, "whole warps, KSPLIT of them a row group");
  static_assert(RING >= 2, "two stages at least (one is q8gemm_mma_body)");
  constexpr int GROUPS = BLOCK / 32 / KSPLIT;
  constexpr int ROWS = 16 * TILES;
  constexpr int SUMS = TILES * XT * 4;
  __shared__ float parts[KSPLIT > 1 ? BLOCK / 32 : 1][KSPLIT > 1 ? SUMS : 1][32];
  launch_dependents();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const int part = warp % KSPLIT;
  const int row0 = (blockIdx.x * GROUPS + warp / KSPLIT) * ROWS;
  const int m0 = blockIdx.y * 8 * XT;
  const int pieces = K / PIECE;
  const int steps = (pieces + QUAD - 1) / QUAD;
  const int per_part = (steps + KSPLIT - 1) / KSPLIT;
  const int first = part * per_part, last = min(steps, first + per_part);
  wait_for_prior_grid();  // x and W may be written by the grid before (PDL)
  if (KSPLIT == 1 && row0 >= N) return;  // (split: every warp reaches the barrier below)

  const uint4* rows[TILES][2];
  row_pointers<TILES>(rows, qweight, row0, g, N, K);
  const uint4* xs[XT];
#pragma unroll
  for (int i = 0; i < XT; ++i) xs[i] = reinterpret_cast<const uint4*>(x + (size_t)min(m0 + 8 * i + g, M - 1) * K);
  float acc[TILES][XT][4];
  zero<TILES, XT>(acc);

  const int end = row0 < N ? last : first;  // a split's rows past N: no steps, only the barrier
  constexpr int STAGE = UNROLL;             // steps a stage
  uint4 ring[RING][UNROLL][TILES][2];       // slot i holds stages i, i + RING, ... (compile-time slots)
#pragma unroll
  for (int r = 0; r < RING - 1; ++r) fetch<UNROLL, TILES, POLICY>(ring[r], rows, first + r * STAGE, end, pieces, c);
  for (int s0 = first; s0 < end; s0 += RING * STAGE) {
#pragma unroll
    for (int i = 0; i < RING; ++i) {
      const int s = s0 + i * STAGE;
      if (s >= end) break;
      // Stage s + RING - 1 into the slot of stage s - 1, multiplied last.
      if (s + (RING - 1) * STAGE < end)
        fetch<UNROLL, TILES, POLICY>(ring[(i + RING - 1) % RING], rows, s + (RING - 1) * STAGE, end, pieces, c);
      multiply_stage<T, KIND, TILES, XT, UNROLL>(ring[i], xs, acc, s, end, pieces, c);
    }
  }

  if constexpr (KSPLIT > 1) {
    if (!add_split_parts<TILES, XT, KSPLIT>(parts, acc, part, warp, lane, row0 >= N)) return;
  }

  store<T, TILES, XT>(acc, scales, out, row0, m0, M, N, alpha, beta);
}

}  // namespace at_q8gemm
