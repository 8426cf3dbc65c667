// Weight-only 8-bit GEMV (M = 1) streamed the way the float16 GEMV streams its matrix: out[n] = alpha *
// s[n] * sum_k x[k] w(q[n][k]) + beta * out[n], the codes and scales as in q8gemm.cu (KIND 0 int8,
// KIND 1 float8 e4m3, one scale a row in the activations' dtype).
//
// Work: a row group of LANES = 32 x KSPLIT threads reads ROWS rows, lane l taking the 16-byte pieces
// l, l + LANES, ... of each, so that one load instruction of the group covers LANES x 16 contiguous
// bytes of a row (q8gemm.cu's split warps each read their own part of K instead); each lane asks for
// UNROLL pieces of every row before it multiplies any, and x's 32 bytes a piece (through L1) serve the
// group's ROWS rows. As in kernels/gemv/gemv.cu: the grid launches with programmatic dependent launch
// and each thread asks L2 for its first PREFETCH pieces of each row before griddepcontrol.wait (the
// codes are never written by the kernel before, so an early line is never stale), and every load of a
// step is issued before the step's first FMA (issued_zero). Written after a probe on an H200
// (experiments/q8gemv_stream.cu): at untuned tilings 2-13% faster than the shipped CUDA-core picks of
// all ten M = 1 problems it ran.
//
// Numerics as in q8gemm.cu: exact products, float sums, the row's scale applied once.
//
// Preconditions (autotune/ops/q8gemm: space and bind): M == 1, K % 16 == 0, x, W and out 16-byte aligned.
#pragma once
#include "q8gemm/q8gemm_mma.cu"

namespace at_q8gemm {

constexpr int STREAM_PREFETCH = 2;  // pieces of each row a thread asks L2 for before the wait

// A +0.0f built from one word of every vector a step loaded, masked with n >> 31 (zero for n >= 0,
// which the compiler cannot know): added to the sums, it makes every FMA of the step wait for every
// load of the step to have been issued (gemv.cu: issued_zero).
template <int ROWS, int UNROLL>
__device__ __forceinline__ float issued_zero(const uint4 (&w)[ROWS][UNROLL], const uint4 (&xv)[UNROLL][2], int n) {
  unsigned any = 0;
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    any |= xv[u][0].x | xv[u][1].x;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) any |= w[r][u].x;
  }
  return __uint_as_float(any & ((unsigned)n >> 31));
}

// acc[r] += the piece of row r times x's 16 values of that piece.
template <typename T, int KIND, int ROWS>
__device__ __forceinline__ void multiply_piece(const uint4 (&w)[ROWS], const uint4 (&xv)[2], float (&acc)[ROWS]) {
  float xs[PIECE];
  if constexpr (std::is_same<T, __half>::value) {
    activations(xv[0], xs);
    activations(xv[1], xs + 8);
  } else {
    activations_bf16(xv[0], xs);
    activations_bf16(xv[1], xs + 8);
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const unsigned* words = reinterpret_cast<const unsigned*>(&w[r]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float f[4];
      Codes<KIND>::of(words[j], f);
#pragma unroll
      for (int b = 0; b < 4; ++b) acc[r] = fmaf(f[b], xs[4 * j + b], acc[r]);
    }
  }
}

template <typename T, int KIND, int BLOCK, int ROWS, int UNROLL, int POLICY, int KSPLIT>
__device__ __forceinline__ void q8gemv_body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                            const T* __restrict__ scales, T* __restrict__ out, int N, int K,
                                            float alpha, float beta) {
  constexpr int LANES = 32 * KSPLIT;
  static_assert(BLOCK % LANES == 0, "a block holds whole row groups");
  constexpr int GROUPS = BLOCK / LANES;
  __shared__ float cross[KSPLIT > 1 ? BLOCK / 32 : 1][ROWS];
  const int lane = threadIdx.x % LANES, group = threadIdx.x / LANES;
  const int row0 = (blockIdx.x * GROUPS + group) * ROWS;
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
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
  int v = lane;
  for (; v + (UNROLL - 1) * LANES < pieces; v += LANES * UNROLL) {
    uint4 w[ROWS][UNROLL], xr[UNROLL][2];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) w[r][u] = at_common::load_stream<POLICY>(rows[r] + v + u * LANES);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      xr[u][0] = __ldg(xv + 2 * (v + u * LANES));
      xr[u][1] = __ldg(xv + 2 * (v + u * LANES) + 1);
    }
    const float zero = issued_zero<ROWS, UNROLL>(w, xr, N);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] += zero;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      uint4 piece[ROWS];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) piece[r] = w[r][u];
      multiply_piece<T, KIND, ROWS>(piece, xr[u], acc);
    }
  }
  for (; v < pieces; v += LANES) {  // fewer than UNROLL steps left
    uint4 piece[ROWS], xr[2];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) piece[r] = at_common::load_stream<POLICY>(rows[r] + v);
    xr[0] = __ldg(xv + 2 * v);
    xr[1] = __ldg(xv + 2 * v + 1);
    multiply_piece<T, KIND, ROWS>(piece, xr, acc);
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int offset = 16; offset; offset /= 2) acc[r] += __shfl_xor_sync(0xFFFFFFFFu, acc[r], offset);
  auto write = [&](int row, float sum) {
    if (row >= N) return;
    const float before = beta != 0.0f ? at_common::to_float(out[row]) : 0.0f;
    out[row] = at_common::from_float<T>(alpha * at_common::to_float(scales[row]) * sum + beta * before);
  };
  if constexpr (KSPLIT > 1) {  // the group's warps added in order: deterministic
    if (threadIdx.x % 32 == 0)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) cross[threadIdx.x / 32][r] = acc[r];
    __syncthreads();
    if (lane < ROWS) {
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < KSPLIT; ++w) s += cross[group * KSPLIT + w][lane];
      write(row0 + lane, s);
    }
  } else if (lane == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) write(row0 + r, acc[r]);
  }
}

}  // namespace at_q8gemm
