// Weight-only int4 GEMV on CUDA cores, float16: out[N] = alpha * dequant(W) x + beta * out, one row of x
// (M = 1), W in docs/lowbit.md's canonical format (qgemm.cu's header says it). Beside qgemm.cu's tensor-
// core kernels in the same space (autotune/ops/qgemm: rpw > 0 selects this kernel), for the shapes where
// it reads faster: on the H200 it took 4096 x 4096 from 8.0 to 6.6 µs and 4096 x 14336 from 18.1 to
// 14.8 µs, and lost on 28672 x 4096 and 37888 x 3584 (experiments/int4_async.cu, docs/lowbit.md).
//
// Work: a warp owns RPW whole rows; each lane loads its 16-byte pieces (32 codes) of all of them,
// UNROLL pieces a row, into registers before it multiplies any (RPW x UNROLL x 512 bytes a warp in
// flight), as the float16 GEMV holds its loads. No tensor cores at M = 1: an MMA would multiply seven
// columns of zeros. 8 codes become q - z with one shift, four LOP3, two subtracts and two FMAs
// (qgemm.cu's Codes<__half>), as the half pairs (0,4), (1,5), (2,6), (3,7), and meet x staged in shared
// memory as the same pairs, stored so that the 32 lanes' reads of one word index are consecutive (no
// bank conflict); each x read serves RPW rows.
//
// Numerics: CHAIN products (default 2) are summed in each half of a half pair, then in float, with the
// group's scale applied to the piece's float sum. Summing a whole piece's 32 in half first (16 a half)
// measured 2.8x F.linear's error on the H200 (6144 x 4096: 6.9e-4 of max |y| against 2.5e-4), over the
// 2x int4 bound; in a float16 emulation of both (experiments/int4_simt_rounding.py) 16 a half came to
// 1.7-2.3x F.linear's, 4 to 1.3-1.5x, 2 to 1.15-1.45x. So that no half sum can overflow whatever x holds (real activations reach the
// thousands), x is staged times 2^-e, where 2^e bounds max |x| (exact: a power of two), and the float
// sum is multiplied back by 2^e: |q - z| <= 15 and |x 2^-e| < 1 keep a half sum below 60.
//
// Preconditions (autotune/ops/qgemm: space and bind): M = 1, K % GROUP == 0, GROUP % 32 == 0, x, W and
// out 16-byte aligned, dynamic shared memory of 2K bytes (x as pairs).
#pragma once
#include "qgemm/qgemm.cu"

namespace at_qgemm_simt {
using at_qgemm::Codes;

// The largest |x| of the block's x, as its binary exponent e (max |x| < 2^e); 0 for an x of zeros.
template <int BLOCK>
__device__ __forceinline__ int block_exponent(float largest) {
  __shared__ float warp_max[BLOCK / 32];
#pragma unroll
  for (int offset = 16; offset; offset /= 2) largest = fmaxf(largest, __shfl_xor_sync(0xFFFFFFFFu, largest, offset));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = largest;
  __syncthreads();
  largest = 0.0f;
#pragma unroll
  for (int w = 0; w < BLOCK / 32; ++w) largest = fmaxf(largest, warp_max[w]);
  int e = 0;
  frexpf(largest, &e);  // largest = f 2^e, f in [0.5, 1)
  return largest > 0.0f ? e : 0;
}

// x staged in shared memory as pairs (x0, x4), (x1, x5), (x2, x6), (x3, x7) of each 8 (word j of piece p,
// x[32p + 8j ...], at xs[j * pieces + p]), then scaled by 2^-e in place, each thread rescaling the words
// it wrote; returns e, the binary exponent bounding max |x| (block_exponent). Ends with a barrier.
template <int BLOCK>
__device__ __forceinline__ int stage_x(const __half* __restrict__ x, uint4* xs, int pieces, int K) {
  float largest = 0.0f;
  for (int i = threadIdx.x; i < K / 8; i += BLOCK) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(x) + i);
    uint4 pairs;
    pairs.x = __byte_perm(v.x, v.z, 0x5410);
    pairs.y = __byte_perm(v.x, v.z, 0x7632);
    pairs.z = __byte_perm(v.y, v.w, 0x5410);
    pairs.w = __byte_perm(v.y, v.w, 0x7632);
    xs[(i % 4) * pieces + i / 4] = pairs;
    const unsigned* words = reinterpret_cast<const unsigned*>(&v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[j]));
      largest = fmaxf(largest, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
  }
  const int e = block_exponent<BLOCK>(largest);  // its barrier also orders the writes above
  for (int i = threadIdx.x; i < K / 8; i += BLOCK) {
    uint4& pairs = xs[(i % 4) * pieces + i / 4];
    unsigned* words = reinterpret_cast<unsigned*>(&pairs);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[j]));
      const __half2 h = __floats2half2_rn(ldexpf(f.x, -e), ldexpf(f.y, -e));
      words[j] = *reinterpret_cast<const unsigned*>(&h);
    }
  }
  __syncthreads();
  return e;
}

// A 16-byte piece's 32 products with x's staged pairs of the piece, summed in float: the piece's 8 code
// pairs made q - z halves (Codes<__half>), CHAIN products a half summed before each pair is widened.
template <int CHAIN>
__device__ __forceinline__ float piece_sum(const uint4& w, const uint4 (&pairs)[4],
                                           const typename Codes<__half>::Zero& zero) {
  float piece = 0.0f;
  const unsigned* words = reinterpret_cast<const unsigned*>(&w);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    unsigned q[4];
    Codes<__half>::of(words[j], zero, q);
    const unsigned* xj = reinterpret_cast<const unsigned*>(&pairs[j]);
    __half2 sum;
#pragma unroll
    for (int h = 0; h < 4; ++h) {  // the word's pairs, CHAIN products a half summed before float
      const __half2 qh = *reinterpret_cast<const __half2*>(&q[h]);
      const __half2 xh = *reinterpret_cast<const __half2*>(&xj[h]);
      sum = h % CHAIN == 0 ? __hmul2(qh, xh) : __hfma2(qh, xh, sum);
      if (h % CHAIN == CHAIN - 1) {
        const float2 f = __half22float2(sum);
        piece += f.x + f.y;
      }
    }
  }
  return piece;
}

template <int BLOCK, int RPW, int UNROLL, int GROUP, int SYM, int CHAIN = 2>
__device__ __forceinline__ void gemv_body(const __half* __restrict__ x, const unsigned char* __restrict__ qweight,
                                          const __half* __restrict__ scales, const unsigned char* __restrict__ zeros,
                                          __half* __restrict__ out, int N, int K, float alpha, float beta) {
  static_assert(BLOCK % 32 == 0, "whole warps");
  static_assert(GROUP % at_qgemm::PIECE == 0, "a 16-byte piece lies inside one group");
  static_assert(CHAIN == 1 || CHAIN == 2 || CHAIN == 4, "products a half sums before float: 1, 2 or 4");
  constexpr int PIECES_A_GROUP = GROUP / at_qgemm::PIECE;
  extern __shared__ uint4 xs[];  // x as pairs (stage_x)
  const int pieces = K / at_qgemm::PIECE;
  const int groups = K / GROUP;
  at_qgemm::launch_dependents();
  at_qgemm::wait_for_prior_grid();  // x and W may be written by the grid before (PDL)

  const int e = stage_x<BLOCK>(x, xs, pieces, K);

  const int lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * (BLOCK / 32) + threadIdx.x / 32) * RPW;
  if (row0 >= N) return;
  const typename Codes<__half>::Zero symmetric_zero = Codes<__half>::zero(8);
  float acc[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) acc[r] = 0.0f;
  for (int base = 0; base < pieces; base += 32 * UNROLL) {
    uint4 w[RPW][UNROLL];
#pragma unroll
    for (int r = 0; r < RPW; ++r)
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int p = base + lane + 32 * u;
        const int row = min(row0 + r, N - 1);  // rows past N are read, never written
        w[r][u] = p < pieces ? __ldcs(reinterpret_cast<const uint4*>(qweight + (size_t)row * (K / 2)) + p)
                             : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int p = base + lane + 32 * u;
      if (p >= pieces) break;
      uint4 pairs[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) pairs[j] = xs[j * pieces + p];
      const int group = p / PIECES_A_GROUP;
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        const int row = min(row0 + r, N - 1);
        const typename Codes<__half>::Zero zero =
            SYM ? symmetric_zero : Codes<__half>::zero(__ldg(zeros + (size_t)row * groups + group) & 0xF);
        const float piece = piece_sum<CHAIN>(w[r][u], pairs, zero);
        acc[r] = fmaf(piece, __half2float(__ldg(scales + (size_t)row * groups + group)), acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    float v = acc[r];
#pragma unroll
    for (int offset = 16; offset; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    if (lane == 0 && row0 + r < N) {
      const float before = beta != 0.0f ? __half2float(out[row0 + r]) : 0.0f;
      out[row0 + r] = __float2half(alpha * ldexpf(v, e) + beta * before);
    }
  }
}
}  // namespace at_qgemm_simt
