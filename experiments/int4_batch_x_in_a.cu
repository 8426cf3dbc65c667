// Probe: the int4 skinny GEMM past 8 rows of x with the roles of kernels/qgemm/qgemm.cu's kernel swapped:
// x is the MMA's A operand (16 rows of x a tile) and the dequantized W its B operand (8 rows of W a tile),
// out[M x N] = alpha * x @ dequant(W)^T + beta * out, in docs/lowbit.md's canonical format.
//
// The idea: qgemm.cu puts 16 rows of W in A and 8 rows of x in B and holds at most 8 tiles of sums a
// thread, so at 64 rows of x each 16-row tile of W meets 8 tiles of x, each loaded from shared memory
// again for every tile of W. Here a warp dequantizes NT tiles of W rows once a step (scaled in registers,
// as F.linear's weight is rounded) and multiplies them by XT tiles of x, each loaded once a step and used
// NT times. It was measured as a kernel of the int4 op's space (`nt` > 0 tiles of W a warp beside
// qgemm.cu's other parameters, all of its configs checked against float64 by the GPU tests) in 32-trial
// sweeps on the H200: slower than qgemm.cu's best on 19 of 24 float16 g128 problems
// (int4_batch_x_in_a_nvidia-h200.txt; docs/lowbit.md says why), so it is not in the package.
//
// Fragments (PTX ISA, mma.m16n8k16 .row.col): lane = 4 g + c holds A (x) at rows g and g + 8, B (W) at
// column (row of W) g, both at the k slots {2c, 2c+1, 2c+8, 2c+9}, and D at rows (of x) g, g+8 and columns
// (rows of W) 2c, 2c+1. The k slots map to the codes a lane has loaded exactly as in qgemm.cu: lane c of a
// quad reads piece 4s + c of its row of W, and word j of the piece gives the pairs (0,4), (1,5), (2,6),
// (3,7) of its 8 codes; x is staged as the same pairs (qgemm.cu's layout), so one 16-byte shared load
// of rows g and g + 8 gives A for two MMAs.
//
// Work: a block of BLOCK / 32 warps owns NT * 8 rows of W a warp and 16 XT rows of x (the grid's z), K
// split over the grid's y into CLUSTER parts added through distributed shared memory. A warp walks its
// split UNROLL steps (of 4 pieces a quad) a stage, RING - 1 stages of loads in flight while one multiplies.
// Not a program: an instance (end of file) compiles with nvcc -arch=sm_90 -std=c++17 -I kernels -I kernels/common.
#pragma once
#include "qgemm/qgemm.cu"

namespace at_qgemm_batch {

using at_qgemm::Codes;
using at_qgemm::PIECE;
using at_qgemm::PIECE_BYTES;
using at_qgemm::QUAD;

// One stage of a thread's loads: UNROLL steps of its piece of each of its NT rows of W, with the
// scale (a T pair) and zero point of each piece's group.
template <typename T, int UNROLL, int NT> struct Stage {
  uint4 w[UNROLL][NT];
  unsigned scale[UNROLL][NT];
  typename Codes<T>::Zero zero[UNROLL][NT];
};

// A thread's rows of W (one in each of its warp's NT tiles) at its split's first piece.
template <typename T, int NT> struct Rows {
  const uint4* w[NT];
  const T* scale[NT];
  const unsigned char* zero[NT];
};

// Issue the loads of the UNROLL steps from piece s0 on. Pieces past the split's end (its padding to
// whole quads) read its last piece again, which meets zero x: no predicate on any load.
template <typename T, int UNROLL, int NT, int GROUP, int SYM, int POLICY>
__device__ __forceinline__ void fetch(Stage<T, UNROLL, NT>& st, const Rows<T, NT>& rows, int s0, int c,
                                      int piece_begin, int piece_count) {
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int piece = min(s0 + u * QUAD + c, piece_count - 1);
    const int group = (piece_begin + piece) * PIECE / GROUP;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      st.w[u][t] = at_qgemm::load_stream<POLICY>(rows.w[t] + piece);
      st.scale[u][t] = at_qgemm::scale_pair<T>(rows.scale[t][group]);
      st.zero[u][t] = Codes<T>::zero(SYM ? 8 : rows.zero[t][group] & 0xF);
    }
  }
}

// d += x times the stage's weights: per word of each piece, the 8 codes of the thread's NT rows of W,
// dequantized and scaled once, against the staged x pairs of rows g and g + 8 of each of the XT tiles.
template <typename T, int XT, int UNROLL, int NT>
__device__ __forceinline__ void multiply(const Stage<T, UNROLL, NT>& st, int s0, int per_split, int c, int g,
                                         int x_rows, int row_bytes, const unsigned char* x_slice,
                                         float (&d)[XT][NT][4]) {
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    if (s0 + u * QUAD >= per_split) break;
    const int piece = s0 + u * QUAD + c;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      unsigned w[NT][4];
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        Codes<T>::of(reinterpret_cast<const unsigned*>(&st.w[u][t])[j], st.zero[u][t], w[t]);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[t][i] = at_qgemm::times<T>(w[t][i], st.scale[u][t]);
      }
      // Every tile's x pairs first, then the first MMA of every (x tile, W tile) and the second after
      // them: the two MMAs of one tile pair add into the same sums, so back to back the second waits
      // out the first's latency.
      uint4 lo[XT], hi[XT];
#pragma unroll
      for (int xt = 0; xt < XT; ++xt) {
        const int m = 16 * xt + g;
        const unsigned char* at = x_slice + piece * PIECE_BYTES + j * 16;
        lo[xt] = m < x_rows ? *reinterpret_cast<const uint4*>(at + m * row_bytes) : make_uint4(0u, 0u, 0u, 0u);
        hi[xt] = m + 8 < x_rows ? *reinterpret_cast<const uint4*>(at + (m + 8) * row_bytes) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int xt = 0; xt < XT; ++xt)
#pragma unroll
        for (int t = 0; t < NT; ++t)
          at_qgemm::mma<T, false>(d[xt][t], lo[xt].x, hi[xt].x, lo[xt].y, hi[xt].y, w[t][0], w[t][1]);
#pragma unroll
      for (int xt = 0; xt < XT; ++xt)
#pragma unroll
        for (int t = 0; t < NT; ++t)
          at_qgemm::mma<T, false>(d[xt][t], lo[xt].z, hi[xt].z, lo[xt].w, hi[xt].w, w[t][2], w[t][3]);
    }
  }
}

template <typename T, int XT, int BLOCK, int NT, int UNROLL, int GROUP, int SYM, int CLUSTER, int POLICY, int RING>
__device__ __forceinline__ void batch_body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                           const T* __restrict__ scales, const unsigned char* __restrict__ zeros,
                                           T* __restrict__ out, int M, int N, int K, float alpha, float beta) {
  static_assert(BLOCK % 32 == 0, "whole warps");
  static_assert(GROUP % PIECE == 0, "a 16-byte piece lies inside one group");
  static_assert(RING >= 2, "two stages of registers at least");
  constexpr int WARPS = BLOCK / 32;
  constexpr int ROWS_PER_BLOCK = WARPS * NT * 8;
  constexpr int XROWS = 16 * XT;
  constexpr int STEP = QUAD * UNROLL;
  extern __shared__ __align__(16) unsigned char x_slice[];
  __shared__ float cluster_part[CLUSTER > 1 ? ROWS_PER_BLOCK * XROWS : 1];

  at_qgemm::launch_dependents();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, c = lane % 4;
  const int pieces = K / PIECE;
  const int quads = (pieces + QUAD - 1) / QUAD;
  const int per_split = (quads + CLUSTER - 1) / CLUSTER * QUAD;  // pieces a split covers, a multiple of 4
  const int piece_begin = min(pieces, (int)blockIdx.y * per_split);
  // A split may hold no piece (K split more ways than it has quads): its sums stay zero.
  const int piece_count = min(pieces, piece_begin + per_split) - piece_begin;
  const int row_bytes = at_qgemm::x_row_bytes(per_split);
  const int m0 = blockIdx.z * XROWS;
  const int x_rows = min(XROWS, M - m0);  // rows of x staged; A rows past them are zeros
  const int groups_per_row = K / GROUP;
  const int first_row = blockIdx.x * ROWS_PER_BLOCK;

  Rows<T, NT> rows;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int row = min(first_row + warp * NT * 8 + 8 * t + g, N - 1);  // rows past N are read, never written
    rows.w[t] = reinterpret_cast<const uint4*>(qweight + (size_t)row * (K / 2)) + piece_begin;
    rows.scale[t] = scales + (size_t)row * groups_per_row;
    rows.zero[t] = SYM ? nullptr : zeros + (size_t)row * groups_per_row;
  }

  // The weights may be written by the grid before (PDL): wait, then ask for the first RING - 1 stages
  // before staging x, whose loads they overlap.
  at_qgemm::wait_for_prior_grid();
  Stage<T, UNROLL, NT> ring[RING];  // slot i holds stages i, i + RING, ...
#pragma unroll
  for (int r = 0; r < RING - 1; ++r)
    if (r * STEP < per_split && piece_count > 0)
      fetch<T, UNROLL, NT, GROUP, SYM, POLICY>(ring[r], rows, r * STEP, c, piece_begin, piece_count);

  // Stage x[m0 .. m0 + x_rows, the split's pieces] as the pairs (0,4), (1,5), (2,6), (3,7) of each
  // 8 elements (qgemm.cu's layout); pieces past K (the split's padding to whole quads) hold zeros.
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

  float d[XT][NT][4];
#pragma unroll
  for (int xt = 0; xt < XT; ++xt)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) d[xt][t][e] = 0.0f;

  // The ring: before stage s is multiplied, stage s + RING - 1 goes into the slot of stage s - 1,
  // which was multiplied last. Slots are compile-time indices: the loop is unrolled RING times.
  for (int s0 = 0; s0 < per_split && piece_count > 0; s0 += RING * STEP) {
#pragma unroll
    for (int i = 0; i < RING; ++i) {
      const int s = s0 + i * STEP;
      if (s >= per_split) break;
      if (s + (RING - 1) * STEP < per_split)
        fetch<T, UNROLL, NT, GROUP, SYM, POLICY>(ring[(i + RING - 1) % RING], rows, s + (RING - 1) * STEP, c,
                                                 piece_begin, piece_count);
      multiply<T, XT, UNROLL, NT>(ring[i], s, per_split, c, g, x_rows, row_bytes, x_slice, d);
    }
  }

  // d[xt][t] holds out rows (of x) 16 xt + g and 16 xt + g + 8 at columns (rows of W) 8 t + 2c and
  // 8 t + 2c + 1 of the warp's: written out, or left for the cluster's sum.
#pragma unroll
  for (int xt = 0; xt < XT; ++xt)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int m = 16 * xt + g + 8 * (e >> 1), row = warp * NT * 8 + 8 * t + 2 * c + (e & 1);
        if constexpr (CLUSTER == 1) {
          const size_t at = (size_t)(m0 + m) * N + first_row + row;
          if (m0 + m < M && first_row + row < N) out[at] = at_qgemm::finish<T>(d[xt][t][e], alpha, beta, out + at);
        } else {
          cluster_part[m * ROWS_PER_BLOCK + row] = d[xt][t][e];
        }
      }
  if constexpr (CLUSTER > 1) {
    at_common::cluster_sum<CLUSTER>(cluster_part, XROWS * ROWS_PER_BLOCK, [&](int o, float sum) {
      const int m = m0 + o / ROWS_PER_BLOCK, row = first_row + o % ROWS_PER_BLOCK;
      const size_t at = (size_t)m * N + row;
      if (m < M && row < N) out[at] = at_qgemm::finish<T>(sum, alpha, beta, out + at);
    });
  }
}

}  // namespace at_qgemm_batch

// One instance (grid: N / (BLOCK / 32 * NT * 8) blocks, CLUSTER, M / (16 XT); x's slice in dynamic shared memory):
//   extern "C" __global__ void __cluster_dims__(1, 4, 1) __launch_bounds__(128, 1) qgemm_batch_<key>(
//       const __half* x, const unsigned char* qweight, const __half* scales, const unsigned char* zeros,
//       __half* out, int M, int N, int K, float alpha, float beta, float* workspace, unsigned int* counters) {
//     at_qgemm_batch::batch_body<__half, 4, 128, 4, 1, 128, 1, 4, 2, 2>(x, qweight, scales, zeros, out, M, N,
//                                                                     K, alpha, beta);
//   }
