// Measured, not shipped: the 8-bit streaming kernel (kernels/q8gemm/q8gemv.cu's M = 1 design) for 2-8
// rows of x. It was in the q8gemm op's space as `stream = 1` up to M = 8 (commit 28ddc99, reverted):
// an H200 sweep of the 16 standard problems at M = 4 and 8 (24 trials, patience 16, its 6-7 seed
// tilings first, then Optuna over both kernels) found its best 1.08-1.38x the tensor-core kernel's time
// at M = 4 and 1.9-2.9x at M = 8 (q8gemv_rows_nvidia-h200.txt: per problem, the best of each kernel in
// that sweep and the shipped best). At M = 4 a code meets four rows of x in four float FMAs, plus its
// widening and x's: the CUDA cores, not the bytes, set the time, where the tensor cores' MMA does the
// multiply-adds for free. To measure it again, put it back under kernels/q8gemm/ and restore the op's
// STREAM_ROWS_FILE, stream constraint, seeds and kernel_source from that commit.
#pragma once
#include "q8gemm/q8gemv.cu"

namespace at_q8gemm {

// A +0.0f built from one word of every code vector a step loaded (gemv.cu: issued_zero): added to the
// sums, it makes every FMA of the step wait for every code load of the step to have been issued.
template <int ROWS, int UNROLL>
__device__ __forceinline__ float codes_issued_zero(const uint4 (&w)[ROWS][UNROLL], int n) {
  unsigned any = 0;
#pragma unroll
  for (int u = 0; u < UNROLL; ++u)
#pragma unroll
    for (int r = 0; r < ROWS; ++r) any |= w[r][u].x;
  return __uint_as_float(any & ((unsigned)n >> 31));
}

// acc[r][i] += the piece of row r times the 16 values of x's row i at that piece (xp[i]: its first
// 16-byte vector), four codes at a time so that only 4 x MT values of x are floats at once.
template <typename T, int KIND, int ROWS, int MT>
__device__ __forceinline__ void multiply_rows(const uint4 (&w)[ROWS], const uint4* const (&xp)[MT],
                                              float (&acc)[ROWS][MT]) {
  uint4 xr[MT][2];
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    xr[i][0] = __ldg(xp[i]);
    xr[i][1] = __ldg(xp[i] + 1);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float xs[MT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const unsigned* words = reinterpret_cast<const unsigned*>(&xr[i][j / 2]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float2 pair;
        if constexpr (std::is_same<T, __half>::value)
          pair = __half22float2(*reinterpret_cast<const __half2*>(&words[2 * (j % 2) + h]));
        else
          pair = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[2 * (j % 2) + h]));
        xs[i][2 * h] = pair.x;
        xs[i][2 * h + 1] = pair.y;
      }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float f[4];
      Codes<KIND>::of(reinterpret_cast<const unsigned*>(&w[r])[j], f);
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int b = 0; b < 4; ++b) acc[r][i] = fmaf(f[b], xs[i][b], acc[r][i]);
    }
  }
}

template <typename T, int KIND, int MT, int BLOCK, int ROWS, int UNROLL, int POLICY, int KSPLIT>
__device__ __forceinline__ void q8gemv_rows_body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                                 const T* __restrict__ scales, T* __restrict__ out, int M, int N,
                                                 int K, float alpha, float beta) {
  constexpr int LANES = 32 * KSPLIT;
  static_assert(BLOCK % LANES == 0, "a block holds whole row groups");
  constexpr int GROUPS = BLOCK / LANES;
  __shared__ float cross[KSPLIT > 1 ? BLOCK / 32 : 1][ROWS][MT];
  const int lane = threadIdx.x % LANES, group = threadIdx.x / LANES;
  const int row0 = (blockIdx.x * GROUPS + group) * ROWS;
  const int m0 = blockIdx.y * MT;
  const int pieces = K / PIECE;
  const uint4* rows[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)  // rows past N read the last row and are never written
    rows[r] = reinterpret_cast<const uint4*>(qweight + (size_t)min(row0 + r, N - 1) * K);
  launch_dependents();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#pragma unroll
  for (int d = 0; d < STREAM_PREFETCH; ++d)
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
      if (lane + d * LANES < pieces) asm volatile("prefetch.global.L2 [%0];" ::"l"(rows[r] + lane + d * LANES) : "memory");
#endif
  wait_for_prior_grid();  // x and out may be written by the grid before (PDL)
  const uint4* xrow[MT];
#pragma unroll
  for (int i = 0; i < MT; ++i)  // rows of x past M read the last row and are never written
    xrow[i] = reinterpret_cast<const uint4*>(x + (size_t)min(m0 + i, M - 1) * K);
  float acc[ROWS][MT];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int i = 0; i < MT; ++i) acc[r][i] = 0.0f;
  int v = lane;
  for (; v + (UNROLL - 1) * LANES < pieces; v += LANES * UNROLL) {
    uint4 w[ROWS][UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) w[r][u] = at_common::load_stream<POLICY>(rows[r] + v + u * LANES);
    const float zero = codes_issued_zero<ROWS, UNROLL>(w, N);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r][0] += zero;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      uint4 piece[ROWS];
      const uint4* xp[MT];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) piece[r] = w[r][u];
#pragma unroll
      for (int i = 0; i < MT; ++i) xp[i] = xrow[i] + 2 * (v + u * LANES);
      multiply_rows<T, KIND, ROWS, MT>(piece, xp, acc);
    }
  }
  for (; v < pieces; v += LANES) {  // fewer than UNROLL steps left
    uint4 piece[ROWS];
    const uint4* xp[MT];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) piece[r] = at_common::load_stream<POLICY>(rows[r] + v);
#pragma unroll
    for (int i = 0; i < MT; ++i) xp[i] = xrow[i] + 2 * v;
    multiply_rows<T, KIND, ROWS, MT>(piece, xp, acc);
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int offset = 16; offset; offset /= 2) acc[r][i] += __shfl_xor_sync(0xFFFFFFFFu, acc[r][i], offset);
  auto write = [&](int r, int i, float sum) {
    const int row = row0 + r, m = m0 + i;
    if (row >= N || m >= M) return;
    T* y = out + (size_t)m * N + row;
    const float before = beta != 0.0f ? at_common::to_float(*y) : 0.0f;
    *y = at_common::from_float<T>(alpha * at_common::to_float(scales[row]) * sum + beta * before);
  };
  if constexpr (KSPLIT > 1) {  // the group's warps added in order: deterministic
    if (threadIdx.x % 32 == 0)
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int i = 0; i < MT; ++i) cross[threadIdx.x / 32][r][i] = acc[r][i];
    __syncthreads();
    if (lane < ROWS * MT) {
      const int r = lane / MT, i = lane % MT;
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < KSPLIT; ++w) s += cross[group * KSPLIT + w][r][i];
      write(r, i, s);
    }
  } else if (lane == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int i = 0; i < MT; ++i) write(r, i, acc[r][i]);
  }
}

}  // namespace at_q8gemm
