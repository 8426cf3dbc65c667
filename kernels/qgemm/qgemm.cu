// Weight-only int4 GEMV and skinny GEMM: out[M x N] = alpha * x[M x K] @ dequant(W)^T + beta * out, W in
// nn.Linear's layout (N x K) as docs/lowbit.md's canonical format: unsigned 4-bit codes packed two to a
// byte along K (even k in the low nibble), a scale per group of GROUP codes along K, and
// w = (q - z) * s with z = 8 (SYM) or the group's integer zero (one byte per group). x and out are T
// (__half or __nv_bfloat16); everything is accumulated in float.
//
// At M = 1 the weight bytes are the wall: 4 bits a weight let a kernel stream 4x the weights of a
// float16 GEMV in the same time, so the per-weight arithmetic must stay within what an SM issues
// beside the loads. Each code becomes a float by one byte permute into 2^23's mantissa (0x4B0000qq is
// 2^23 + q exactly) and one subtract of 2^23 + z (exact: small integers), then one FMA with x, which
// the block has staged as float in shared memory. (q - z) * x is exact in float, so this is the
// float16 F.linear on the dequantized weight without its rounding of w to float16.
//
// Work: a group of LANES lanes owns ROWS rows of W; lane l reads 16-byte pieces (32 codes, inside one
// group since GROUP >= 32) l, l + LANES, ... of the block's K range, ROWS * UNROLL of them in flight.
// The grid's z covers M in tiles of MT rows of x (every row of W read once per tile); its y splits K
// into CLUSTER parts, one thread-block cluster per row tile, added through distributed shared memory
// (common.cuh: cluster_sum). x's slice is staged with a gap of 4 floats after every 32 (a piece's) so
// that the 16-byte shared loads of 8 lanes, 128 bytes apart, fall in different banks.
//
// Preconditions (autotune/ops/qgemm: space and bind): K % GROUP == 0, x, W, out 16-byte aligned, the
// shared slice (MT * K / CLUSTER / 32 * 36 floats) within what the launch gives.
#pragma once
#include "common.cuh"

namespace at_qgemm {

using at_common::finish;
using at_common::load_stream;
using at_common::to_float;

constexpr int PIECE = 32;        // codes per 16-byte load
constexpr int PIECE_FLOATS = 36;  // a piece's x in shared memory, with its 4-float gap

__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The float 2^23 + q of byte `b` of `codes` (each byte holding one code below 16).
template <int B> __device__ __forceinline__ float magic(unsigned codes) {
  return __int_as_float(__byte_perm(codes, 0x4B000000u, 0x7540 + B));
}

// The float (q - zero) of each of a word's 8 codes, in k order (even k in the low nibbles).
__device__ __forceinline__ void dequant_word(unsigned word, float bias, float (&d)[8]) {
  const unsigned even = word & 0x0F0F0F0Fu;        // codes 0, 2, 4, 6
  const unsigned odd = (word >> 4) & 0x0F0F0F0Fu;  // codes 1, 3, 5, 7
  d[0] = magic<0>(even) - bias;
  d[1] = magic<0>(odd) - bias;
  d[2] = magic<1>(even) - bias;
  d[3] = magic<1>(odd) - bias;
  d[4] = magic<2>(even) - bias;
  d[5] = magic<2>(odd) - bias;
  d[6] = magic<3>(even) - bias;
  d[7] = magic<3>(odd) - bias;
}

// part[r][m] += sum over word W (of 4) of each row's piece of (q - zero) * x[m][k]: x's 8 floats for
// each m are loaded once and shared by the rows (holding a whole piece of x for every m instead
// would take 32 * MT registers).
template <int MT, int ROWS, int W>
__device__ __forceinline__ void dot_word(const uint4 (&w)[ROWS], const float (&bias)[ROWS], const float* xs,
                                         int x_stride, float (&part)[ROWS][MT]) {
  float4 lo[MT], hi[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    lo[m] = *reinterpret_cast<const float4*>(xs + m * x_stride + 8 * W);
    hi[m] = *reinterpret_cast<const float4*>(xs + m * x_stride + 8 * W + 4);
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    float d[8];
    dequant_word(reinterpret_cast<const unsigned*>(&w[r])[W], bias[r], d);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float s = part[r][m];
      s = fmaf(d[0], lo[m].x, s);
      s = fmaf(d[1], lo[m].y, s);
      s = fmaf(d[2], lo[m].z, s);
      s = fmaf(d[3], lo[m].w, s);
      s = fmaf(d[4], hi[m].x, s);
      s = fmaf(d[5], hi[m].y, s);
      s = fmaf(d[6], hi[m].z, s);
      s = fmaf(d[7], hi[m].w, s);
      part[r][m] = s;
    }
  }
}

// Sum of v over the LANES lanes of a group (LANES divides 32: groups never span warps).
template <int LANES> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = LANES / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

template <typename T, int MT, int BLOCK, int LANES, int ROWS, int UNROLL, int GROUP, int SYM, int CLUSTER, int POLICY>
__device__ __forceinline__ void qgemm_body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                           const T* __restrict__ scales, const unsigned char* __restrict__ zeros,
                                           T* __restrict__ out, int M, int N, int K, float alpha, float beta) {
  static_assert(BLOCK % 32 == 0 && 32 % LANES == 0, "lane groups lie inside warps");
  static_assert(GROUP % PIECE == 0, "a 16-byte piece lies inside one group");
  constexpr int ROWS_PER_BLOCK = BLOCK / LANES * ROWS;
  extern __shared__ __align__(16) float x_slice[];
  __shared__ float cluster_part[CLUSTER > 1 ? MT * ROWS_PER_BLOCK : 1];

  launch_dependents();
  const int tid = threadIdx.x;
  const int lane = tid % LANES;
  const int group = tid / LANES;
  const int pieces = K / PIECE;
  const int per_split = (pieces + CLUSTER - 1) / CLUSTER;
  const int piece_begin = min(pieces, (int)blockIdx.y * per_split);
  const int piece_count = min(pieces, piece_begin + per_split) - piece_begin;
  const int x_stride = per_split * PIECE_FLOATS;  // floats between rows of the staged slice
  const int m0 = blockIdx.z * MT;
  const int groups_per_row = K / GROUP;

  // Stage x[m0 .. m0 + MT, the split's K range] as float, 8 elements (16 bytes) a load; rows past M are 0.
  wait_for_prior_grid();
  const int eights = piece_count * (PIECE / 8);
  for (int i = tid; i < MT * eights; i += BLOCK) {
    const int m = i / eights, e = i % eights;
    const int k = piece_begin * PIECE + e * 8;
    uint4 raw = make_uint4(0u, 0u, 0u, 0u);
    if (m0 + m < M) raw = __ldg(reinterpret_cast<const uint4*>(x + (size_t)(m0 + m) * K + k));
    const T* v = reinterpret_cast<const T*>(&raw);
    float* dst = x_slice + m * x_stride + (e / 4) * PIECE_FLOATS + (e % 4) * 8;
#pragma unroll
    for (int j = 0; j < 8; ++j) dst[j] = to_float(v[j]);
  }
  __syncthreads();

  const int row0 = blockIdx.x * ROWS_PER_BLOCK + group * ROWS;
  const uint4* wrow[ROWS];
  const T* srow[ROWS];
  const unsigned char* zrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int row = min(row0 + r, N - 1);  // rows past N read the last row and are never written
    wrow[r] = reinterpret_cast<const uint4*>(qweight + (size_t)row * (K / 2)) + piece_begin;
    srow[r] = scales + (size_t)row * groups_per_row;
    zrow[r] = SYM ? nullptr : zeros + (size_t)row * groups_per_row;
  }
  float acc[ROWS][MT];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;

  for (int p = lane; p < piece_count; p += LANES * UNROLL) {
    uint4 w[UNROLL][ROWS];
    float scale[UNROLL][ROWS], bias[UNROLL][ROWS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int piece = p + u * LANES;
      const int g = (piece_begin + min(piece, piece_count - 1)) * PIECE / GROUP;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        w[u][r] = piece < piece_count ? load_stream<POLICY>(wrow[r] + piece) : make_uint4(0u, 0u, 0u, 0u);
        scale[u][r] = to_float(srow[r][g]);
        bias[u][r] = 8388608.0f + (SYM ? 8.0f : (float)zrow[r][g]);
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int piece = p + u * LANES;
      if (piece >= piece_count) break;  // pieces past the end hold no codes
      const float* xs = x_slice + piece * PIECE_FLOATS;
      float part[ROWS][MT];
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int m = 0; m < MT; ++m) part[r][m] = 0.0f;
      dot_word<MT, ROWS, 0>(w[u], bias[u], xs, x_stride, part);
      dot_word<MT, ROWS, 1>(w[u], bias[u], xs, x_stride, part);
      dot_word<MT, ROWS, 2>(w[u], bias[u], xs, x_stride, part);
      dot_word<MT, ROWS, 3>(w[u], bias[u], xs, x_stride, part);
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int m = 0; m < MT; ++m) acc[r][m] = fmaf(part[r][m], scale[u][r], acc[r][m]);
    }
  }

#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = group_sum<LANES>(acc[r][m]);

  if (CLUSTER == 1) {
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const size_t o = (size_t)(m0 + m) * N + row0 + r;
          if (row0 + r < N && m0 + m < M) out[o] = finish<T>(acc[r][m], alpha, beta, out + o);
        }
    }
    return;
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int m = 0; m < MT; ++m) cluster_part[m * ROWS_PER_BLOCK + group * ROWS + r] = acc[r][m];
  }
  const int first_row = blockIdx.x * ROWS_PER_BLOCK;
  at_common::cluster_sum<CLUSTER>(cluster_part, MT * ROWS_PER_BLOCK, [&](int o, float s) {
    const int m = o / ROWS_PER_BLOCK, row = first_row + o % ROWS_PER_BLOCK;
    const size_t at = (size_t)(m0 + m) * N + row;
    if (row < N && m0 + m < M) out[at] = finish<T>(s, alpha, beta, out + at);
  });
}

}  // namespace at_qgemm

// One instance, as autotune/ops/qgemm generates it:
//   extern "C" __global__ void __launch_bounds__(256) qgemm_<key>(const __half* x, const unsigned char* qweight,
//       const __half* scales, const unsigned char* zeros, __half* out, int M, int N, int K, float alpha,
//       float beta, float* workspace, unsigned int* counters) {
//     at_qgemm::qgemm_body<__half, 1, 256, 8, 2, 2, 128, 1, 1, 1>(x, qweight, scales, zeros, out, M, N, K,
//                                                                 alpha, beta);
//   }
