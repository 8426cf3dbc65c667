// Probe: the int4 skinny GEMM past 8 rows of x with the roles of kernels/qgemm/qgemm.cu's kernel swapped:
// x is the MMA's A operand (16 rows of x a tile) and the dequantized W its B operand (8 rows of W a tile),
// out[M x N] = alpha * x @ dequant(W)^T + beta * out, in docs/lowbit.md's canonical format.
//
// The ideas: qgemm.cu puts 16 rows of W in A and 8 rows of x in B, holds at most 8 tiles of sums a thread
// (so at 64 rows of x each 16-row tile of W meets 8 tiles of x, each loaded from shared memory again for
// every tile of W), stages x's whole slice of K before its first multiply, and holds W's codes in
// register stages (past 16 rows of x: one block an SM, docs/lowbit.md). Here a warp dequantizes NT tiles
// of W rows once a step (scaled in registers, as F.linear's weight is rounded) and multiplies them by XT
// tiles of x, each loaded once a step and used NT times; x and W's codes stream through shared memory a
// stage at a time, RING - 1 stages in flight by cp.async (no registers held; each lane copies the pieces
// of W it reads itself, so only x's slots need the block's barrier), the scales in register stages.
//
// Measured as a kernel of the int4 op's space (`nt` > 0 tiles of W a warp beside qgemm.cu's other
// parameters; every sampled config checked against float64 by tests/test_gpu_qgemm.py) in 40-trial sweeps
// on the H200: faster than qgemm.cu's best on 10 of 24 float16 g128 problems (by 2-9%), slower on the
// rest (int4_batch_x_in_a_nvidia-h200.txt, with two earlier versions), so it is not in the package.
//
// Fragments (PTX ISA, mma.m16n8k16 .row.col): lane = 4 g + c holds A (x) at rows g and g + 8, B (W) at
// column (row of W) g, both at the k slots {2c, 2c+1, 2c+8, 2c+9}, and D at rows (of x) g, g+8 and columns
// (rows of W) 2c, 2c+1. The k slots map to the codes a lane has loaded exactly as in qgemm.cu: lane c of a
// quad reads piece 4s + c of its row of W, and word j of the piece gives the pairs (0,4), (1,5), (2,6),
// (3,7) of its 8 codes. x is copied as it is (a 16-byte load per 8 elements, in qgemm.cu's 80-byte piece
// slots, so that the 8 rows and 4 pieces a warp reads share no bank) and put into the same pairs with 4
// byte permutes when loaded.
//
// Work: a block of BLOCK / 32 warps owns NT * 8 rows of W a warp and 16 XT rows of x (the grid's z:
// M / (16 XT)), K split over the grid's y into CLUSTER parts added through distributed shared memory;
// dynamic shared memory RING * (rows of x * x_row_bytes(4 UNROLL) + rows of W * w_row_bytes). A stage is
// UNROLL steps of 4 pieces a quad (128 UNROLL values of K); one barrier a stage hands x's slots over.
// Not a program: an instance (end of file) compiles with nvcc -arch=sm_90 -std=c++17 -I kernels -I kernels/common.
#pragma once
#include "qgemm/qgemm.cu"

namespace at_qgemm_batch {

using at_qgemm::Codes;
using at_qgemm::PIECE;
using at_qgemm::PIECE_BYTES;
using at_qgemm::QUAD;

// 16 bytes from global to shared memory without a register; zeros where !valid (src-size 0).
__device__ __forceinline__ void copy16(void* dst, const void* src, bool valid) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void copies_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int PENDING> __device__ __forceinline__ void copies_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

// The 8 values of x a 16-byte load holds, as the pairs (0,4), (1,5), (2,6), (3,7) the codes come in.
__device__ __forceinline__ uint4 as_pairs(uint4 v) {
  return make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632), __byte_perm(v.y, v.w, 0x5410),
                    __byte_perm(v.y, v.w, 0x7632));
}

// Ask for x's rows m0 .. m0 + x_rows of the STEP pieces from piece s of the split into `slot`: piece p
// of row m at m * row_bytes + p * PIECE_BYTES. Pieces past the split's last (its padding to whole
// stages) are zeros.
template <int BLOCK, int STEP, typename T>
__device__ __forceinline__ void copy_x(unsigned char* slot, const T* x, int m0, int x_rows, int K, int piece_begin,
                                       int piece_count, int s, int row_bytes) {
  constexpr int WORDS = STEP * 4;  // 16-byte words of a row a stage
  for (int i = threadIdx.x; i < x_rows * WORDS; i += BLOCK) {
    const int m = i / WORDS, word = i % WORDS;
    const bool valid = s * 4 + word < piece_count * 4;
    const T* src = valid ? x + (size_t)(m0 + m) * K + (size_t)(piece_begin * 4 + s * 4 + word) * 8 : x;
    copy16(slot + m * row_bytes + (word / 4) * PIECE_BYTES + (word % 4) * 16, src, valid);
  }
}

// One stage of a thread's registers: the scale (a T pair) and zero point of the group of each of its
// UNROLL pieces of each of its NT rows of W (the codes go to shared memory).
template <typename T, int UNROLL, int NT> struct Stage {
  unsigned scale[UNROLL][NT];
  typename Codes<T>::Zero zero[UNROLL][NT];
};

// Bytes between rows of W in a stage's slot: STEP 16-byte pieces, 64 more where that is a multiple of
// 128 (so that rows g and g + 1 of a warp's read share no bank).
template <int STEP> __host__ __device__ constexpr int w_row_bytes() { return STEP * 16 + (STEP * 16 % 128 == 0 ? 64 : 0); }

// A thread's rows of W (one in each of its warp's NT tiles) at its split's first piece.
template <typename T, int NT> struct Rows {
  const uint4* w[NT];
  const T* scale[NT];
  const unsigned char* zero[NT];
};

// Ask for this lane's pieces of the UNROLL steps from piece s0 on, into its rows of the warp's W slot,
// and load their groups' scales and zero points. Pieces past the split's end (its padding to whole
// quads) read its last piece again, which meets zero x: no predicate on any copy.
template <typename T, int UNROLL, int NT, int GROUP, int SYM>
__device__ __forceinline__ void fetch(Stage<T, UNROLL, NT>& st, unsigned char* w_slot, const Rows<T, NT>& rows, int s0,
                                      int g, int c, int piece_begin, int piece_count) {
  constexpr int W_ROW = w_row_bytes<QUAD * UNROLL>();
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int piece = min(s0 + u * QUAD + c, piece_count - 1);
    const int group = (piece_begin + piece) * PIECE / GROUP;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      copy16(w_slot + (8 * t + g) * W_ROW + (u * QUAD + c) * 16, rows.w[t] + piece, true);
      st.scale[u][t] = at_qgemm::scale_pair<T>(rows.scale[t][group]);
      st.zero[u][t] = Codes<T>::zero(SYM ? 8 : rows.zero[t][group] & 0xF);
    }
  }
}

// d += x times the stage's weights: per word of each piece, the 8 codes of the thread's NT rows of W
// (from its own slot rows), dequantized and scaled once, against rows g and g + 8 of x's slot in each
// of the XT tiles, put into pairs as they are loaded.
template <typename T, int XT, int UNROLL, int NT>
__device__ __forceinline__ void multiply(const Stage<T, UNROLL, NT>& st, const unsigned char* w_slot, int s0,
                                         int per_split, int c, int g, int x_rows, int row_bytes,
                                         const unsigned char* x_slot, float (&d)[XT][NT][4]) {
  constexpr int W_ROW = w_row_bytes<QUAD * UNROLL>();
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    if (s0 + u * QUAD >= per_split) break;
    const int piece = u * QUAD + c;  // in the stage's slots
    uint4 codes[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) codes[t] = *reinterpret_cast<const uint4*>(w_slot + (8 * t + g) * W_ROW + piece * 16);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      unsigned w[NT][4];
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        Codes<T>::of(reinterpret_cast<const unsigned*>(&codes[t])[j], st.zero[u][t], w[t]);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[t][i] = at_qgemm::times<T>(w[t][i], st.scale[u][t]);
      }
#pragma unroll
      for (int xt = 0; xt < XT; ++xt) {
        const int m = 16 * xt + g;
        const unsigned char* at = x_slot + piece * PIECE_BYTES + j * 16;
        const uint4 lo = m < x_rows ? as_pairs(*reinterpret_cast<const uint4*>(at + m * row_bytes)) : make_uint4(0u, 0u, 0u, 0u);
        const uint4 hi = m + 8 < x_rows ? as_pairs(*reinterpret_cast<const uint4*>(at + (m + 8) * row_bytes))
                                        : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          at_qgemm::mma<T, false>(d[xt][t], lo.x, hi.x, lo.y, hi.y, w[t][0], w[t][1]);
          at_qgemm::mma<T, false>(d[xt][t], lo.z, hi.z, lo.w, hi.w, w[t][2], w[t][3]);
        }
      }
    }
  }
}

template <typename T, int XT, int BLOCK, int NT, int UNROLL, int GROUP, int SYM, int CLUSTER, int RING>
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
  extern __shared__ __align__(16) unsigned char x_slots[];  // RING stages of x, then RING stages of W
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
  const int row_bytes = at_qgemm::x_row_bytes(STEP);  // a row of x's slot of one stage
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
  // of W (registers) and of x (shared memory, a commit group each, empty past the split).
  at_qgemm::wait_for_prior_grid();
  const int slot_bytes = x_rows * row_bytes;
  constexpr int W_SLOT = ROWS_PER_BLOCK * w_row_bytes<STEP>();  // a stage of the block's rows of W
  // This warp's rows of W in slot i: its own pieces, copied and read by each lane alone (no barrier).
  unsigned char* const w_slots = x_slots + RING * slot_bytes + warp * NT * 8 * w_row_bytes<STEP>();
  Stage<T, UNROLL, NT> ring[RING];  // slot i holds stages i, i + RING, ...
#pragma unroll
  for (int r = 0; r < RING - 1; ++r) {
    if (r * STEP < per_split && piece_count > 0) {
      fetch<T, UNROLL, NT, GROUP, SYM>(ring[r], w_slots + r * W_SLOT, rows, r * STEP, g, c, piece_begin, piece_count);
      copy_x<BLOCK, STEP>(x_slots + r * slot_bytes, x, m0, x_rows, K, piece_begin, piece_count, r * STEP,
                                 row_bytes);
    }
    copies_commit();
  }

  float d[XT][NT][4];
#pragma unroll
  for (int xt = 0; xt < XT; ++xt)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) d[xt][t][e] = 0.0f;

  // Stage s: wait for this thread's copies of its x, then the barrier makes every thread's visible and
  // tells that stage s - 1 is multiplied everywhere, so its slot takes stage s + RING - 1 (x and W);
  // then stage s multiplies. Slots are compile-time indices: the loop is unrolled RING times.
  for (int s0 = 0; s0 < per_split && piece_count > 0; s0 += RING * STEP) {
#pragma unroll
    for (int i = 0; i < RING; ++i) {
      const int s = s0 + i * STEP;
      if (s >= per_split) break;
      copies_wait<RING - 2>();
      __syncthreads();
      const int ahead = s + (RING - 1) * STEP;
      if (ahead < per_split) {
        fetch<T, UNROLL, NT, GROUP, SYM>(ring[(i + RING - 1) % RING], w_slots + ((i + RING - 1) % RING) * W_SLOT, rows,
                                         ahead, g, c, piece_begin, piece_count);
        copy_x<BLOCK, STEP>(x_slots + ((i + RING - 1) % RING) * slot_bytes, x, m0, x_rows, K, piece_begin,
                                   piece_count, ahead, row_bytes);
      }
      copies_commit();
      multiply<T, XT, UNROLL, NT>(ring[i], w_slots + i * W_SLOT, s, per_split, c, g, x_rows, row_bytes,
                                  x_slots + i * slot_bytes, d);
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

// One instance:
//   extern "C" __global__ void __cluster_dims__(1, 4, 1) __launch_bounds__(128, 1) qgemm_batch_probe(
//       const __half* x, const unsigned char* qweight, const __half* scales, const unsigned char* zeros,
//       __half* out, int M, int N, int K, float alpha, float beta, float* workspace, unsigned int* counters) {
//     at_qgemm_batch::batch_body<__half, 4, 128, 4, 1, 128, 1, 4, 2>(x, qweight, scales, zeros, out, M, N,
//                                                                     K, alpha, beta);
//   }
