// Weight-only 8-bit GEMV and skinny GEMM on CUDA cores: out[m][n] = alpha * s[n] * sum_k x[m][k] w(q[n][k])
// + beta * out[m][n], W in nn.Linear's layout (N x K), one byte a weight: KIND 0 an int8 code, KIND 1 an
// OCP float8 e4m3 code (docs/lowbit.md, "8-bit weights"), one scale a row in the activations' dtype.
//
// Work: a warp owns RPW rows of W and MT rows of x (gridDim.y covers M in tiles of MT), or with KSPLIT > 1
// a part of K of them, KSPLIT warps of a block sharing the rows (few rows of long K: whole-row warps on
// 4096 x 14336 ran 22.1 us on an H200, K split in two 17.7); each lane asks for UNROLL 16-byte pieces
// (16 codes) of each of its rows before it multiplies any. A piece's 16 codes become floats once and
// meet each of the MT rows of x, read through L1 (x is small and every warp of the SM reads it): at
// M = 1 the codes' bytes are the wall, so no shared-memory staging, and no tensor cores (an MMA would
// multiply seven columns of zeros).
//
// Numerics: every product is exact in float (an 8-bit integer or a 4-bit-significand float times a
// 16-bit float), sums run in float and the row's scale multiplies the sum once: the float64 reference's
// sum within float accumulation.
//
// Preconditions (autotune/ops/q8gemm: space and bind): K % 16 == 0, x, W and out 16-byte aligned.
#pragma once
#include <cuda_fp8.h>

#include <type_traits>

#include "common.cuh"

namespace at_q8gemm {

constexpr int PIECE = 16;  // codes a 16-byte load holds

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

// The 4 codes of a word as floats.
template <int KIND> struct Codes;

// int8: the byte flipped to q + 128 and placed as the low mantissa bits of 2^23, 2^23 + 128 taken off.
template <> struct Codes<0> {
  static __device__ __forceinline__ void of(unsigned word, float (&f)[4]) {
    const unsigned biased = word ^ 0x80808080u;
#pragma unroll
    for (int j = 0; j < 4; ++j) f[j] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540 + j)) - 8388736.0f;
  }
};

// float8 e4m3: two codes to a half pair in one conversion (sm_89 and newer), each exact in float16.
template <> struct Codes<1> {
  static __device__ __forceinline__ void of(unsigned word, float (&f)[4]) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __half2_raw raw =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> (16 * j)), __NV_E4M3);
      const float2 pair = __half22float2(*reinterpret_cast<const __half2*>(&raw));
      f[2 * j] = pair.x;
      f[2 * j + 1] = pair.y;
    }
  }
};

// 8 activations (one 16-byte load) as floats.
__device__ __forceinline__ void activations(uint4 v, float* f) {
  const unsigned* words = reinterpret_cast<const unsigned*>(&v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 pair = __half22float2(*reinterpret_cast<const __half2*>(&words[j]));
    f[2 * j] = pair.x;
    f[2 * j + 1] = pair.y;
  }
}
__device__ __forceinline__ void activations_bf16(uint4 v, float* f) {
  const unsigned* words = reinterpret_cast<const unsigned*>(&v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 pair = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[j]));
    f[2 * j] = pair.x;
    f[2 * j + 1] = pair.y;
  }
}

template <typename T, int KIND, int MT, int BLOCK, int RPW, int UNROLL, int POLICY, int KSPLIT = 1>
__device__ __forceinline__ void q8gemm_body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                            const T* __restrict__ scales, T* __restrict__ out, int M, int N, int K,
                                            float alpha, float beta) {
  static_assert(BLOCK % (32 * KSPLIT) == 0, "whole warps, KSPLIT of them a row group");
  constexpr int GROUPS = BLOCK / 32 / KSPLIT;  // row groups a block
  // KSPLIT warps share a group's rows, each a part of K, their sums added in shared memory in order.
  __shared__ float parts[KSPLIT > 1 ? BLOCK / 32 : 1][RPW][MT];
  launch_dependents();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int part = warp % KSPLIT;
  const int row0 = (blockIdx.x * GROUPS + warp / KSPLIT) * RPW;
  const int m0 = blockIdx.y * MT;
  const int pieces = K / PIECE;
  const int per_part = (pieces + KSPLIT - 1) / KSPLIT;
  const int first = part * per_part, last = min(pieces, first + per_part);
  wait_for_prior_grid();  // x and W may be written by the grid before (PDL)
  if (KSPLIT == 1 && row0 >= N) return;  // (split: every warp reaches the barrier below)
  const uint4* rows[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r)  // rows past N are read, never written
    rows[r] = reinterpret_cast<const uint4*>(qweight + (size_t)min(row0 + r, N - 1) * K);
  float acc[RPW][MT];
#pragma unroll
  for (int r = 0; r < RPW; ++r)
#pragma unroll
    for (int i = 0; i < MT; ++i) acc[r][i] = 0.0f;

  const int end = row0 < N ? last : first;  // a split's rows past N: no pieces, only the barrier
  for (int base = first; base < end; base += 32 * UNROLL) {
    uint4 w[RPW][UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int p = base + lane + 32 * u;
#pragma unroll
      for (int r = 0; r < RPW; ++r)
        w[r][u] = p < end ? at_common::load_stream<POLICY>(rows[r] + p) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int p = base + lane + 32 * u;
      if (p >= end) break;
      float codes[RPW][PIECE];
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        const unsigned* words = reinterpret_cast<const unsigned*>(&w[r][u]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float f[4];
          Codes<KIND>::of(words[j], f);
#pragma unroll
          for (int b = 0; b < 4; ++b) codes[r][4 * j + b] = f[b];
        }
      }
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int m = m0 + i;
        if (m >= M) break;
        const uint4* xp = reinterpret_cast<const uint4*>(x + (size_t)m * K) + 2 * p;
        float xs[PIECE];
        if constexpr (std::is_same<T, __half>::value) {
          activations(__ldg(xp), xs);
          activations(__ldg(xp + 1), xs + 8);
        } else {
          activations_bf16(__ldg(xp), xs);
          activations_bf16(__ldg(xp + 1), xs + 8);
        }
#pragma unroll
        for (int r = 0; r < RPW; ++r)
#pragma unroll
          for (int c = 0; c < PIECE; ++c) acc[r][i] = fmaf(codes[r][c], xs[c], acc[r][i]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r)
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      float v = acc[r][i];
#pragma unroll
      for (int offset = 16; offset; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
      acc[r][i] = v;
      if (KSPLIT > 1 && lane == 0) parts[warp][r][i] = v;
    }
  if constexpr (KSPLIT > 1) {
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int r = 0; r < RPW; ++r)
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        float v = parts[warp][r][i];
#pragma unroll
        for (int j = 1; j < KSPLIT; ++j) v += parts[warp + j][r][i];  // the parts in order: deterministic
        acc[r][i] = v;
      }
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int row = row0 + r;
    const float scale = row < N ? at_common::to_float(scales[row]) : 0.0f;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const float v = acc[r][i];
      const int m = m0 + i;
      if (lane == 0 && row < N && m < M) {
        T* y = out + (size_t)m * N + row;
        const float before = beta != 0.0f ? at_common::to_float(*y) : 0.0f;
        *y = at_common::from_float<T>(alpha * scale * v + beta * before);
      }
    }
  }
}


// q8gemm_ring_body's stages. A stage is UNROLL pieces of each of the warp's rows a lane (piece
// base + lane + 32 u); past the split's end zeros, not loaded.
template <int RPW, int UNROLL, int POLICY>
__device__ __forceinline__ void fetch_pieces(uint4 (&w)[RPW][UNROLL], const uint4* const (&rows)[RPW], int base,
                                             int end) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int p = base + lane + 32 * u;
#pragma unroll
    for (int r = 0; r < RPW; ++r)
      w[r][u] = p < end ? at_common::load_stream<POLICY>(rows[r] + p) : make_uint4(0u, 0u, 0u, 0u);
  }
}

// acc[r][i] += the stage's codes of row r times row m0 + i of x (q8gemm_body's arithmetic, in its order).
// q8gemm_body keeps its own copy of this loop: called from there, the same arithmetic compiles to other
// machine code for 11 of the 466 shipped H200 trials (scripts/rehash_records.py), which would need timing again.
template <typename T, int KIND, int MT, int RPW, int UNROLL>
__device__ __forceinline__ void multiply_pieces(const uint4 (&w)[RPW][UNROLL], const T* __restrict__ x,
                                                float (&acc)[RPW][MT], int base, int end, int m0, int M, int K) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int p = base + lane + 32 * u;
    if (p >= end) break;
    float codes[RPW][PIECE];
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      const unsigned* words = reinterpret_cast<const unsigned*>(&w[r][u]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float f[4];
        Codes<KIND>::of(words[j], f);
#pragma unroll
        for (int b = 0; b < 4; ++b) codes[r][4 * j + b] = f[b];
      }
    }
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int m = m0 + i;
      if (m >= M) break;
      const uint4* xp = reinterpret_cast<const uint4*>(x + (size_t)m * K) + 2 * p;
      float xs[PIECE];
      if constexpr (std::is_same<T, __half>::value) {
        activations(__ldg(xp), xs);
        activations(__ldg(xp + 1), xs + 8);
      } else {
        activations_bf16(__ldg(xp), xs);
        activations_bf16(__ldg(xp + 1), xs + 8);
      }
#pragma unroll
      for (int r = 0; r < RPW; ++r)
#pragma unroll
        for (int c = 0; c < PIECE; ++c) acc[r][i] = fmaf(codes[r][c], xs[c], acc[r][i]);
    }
  }
}

// q8gemm_body with RING stages of registers rotating: before a stage is multiplied, the stage RING - 1
// ahead is asked for into the slot just emptied, so RING - 1 stages stay in flight while each one
// multiplies (q8gemm_body asks for a stage, then multiplies it with nothing in flight). The same rows,
// split, sums and results. Its sums' ending is q8gemm_body's, written out again: q8gemm_body stays as
// the shipped records were measured with (the ending as a shared function compiles the K split to other
// code there).
template <typename T, int KIND, int MT, int BLOCK, int RPW, int UNROLL, int POLICY, int KSPLIT, int RING>
__device__ __forceinline__ void q8gemm_ring_body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                                 const T* __restrict__ scales, T* __restrict__ out, int M, int N,
                                                 int K, float alpha, float beta) {
  static_assert(BLOCK % (32 * KSPLIT) == 0, "whole warps, KSPLIT of them a row group");
  static_assert(RING >= 2, "two stages at least (one is q8gemm_body)");
  constexpr int GROUPS = BLOCK / 32 / KSPLIT;
  __shared__ float parts[KSPLIT > 1 ? BLOCK / 32 : 1][RPW][MT];
  launch_dependents();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int part = warp % KSPLIT;
  const int row0 = (blockIdx.x * GROUPS + warp / KSPLIT) * RPW;
  const int m0 = blockIdx.y * MT;
  const int pieces = K / PIECE;
  const int per_part = (pieces + KSPLIT - 1) / KSPLIT;
  const int first = part * per_part, last = min(pieces, first + per_part);
  wait_for_prior_grid();  // x and W may be written by the grid before (PDL)
  if (KSPLIT == 1 && row0 >= N) return;
  const uint4* rows[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) rows[r] = reinterpret_cast<const uint4*>(qweight + (size_t)min(row0 + r, N - 1) * K);
  float acc[RPW][MT];
#pragma unroll
  for (int r = 0; r < RPW; ++r)
#pragma unroll
    for (int i = 0; i < MT; ++i) acc[r][i] = 0.0f;

  const int end = row0 < N ? last : first;
  constexpr int STAGE = 32 * UNROLL;  // pieces of a row a stage, the warp's lanes together
  uint4 ring[RING][RPW][UNROLL];      // slot i holds stages i, i + RING, ... (compile-time slots)
#pragma unroll
  for (int r = 0; r < RING - 1; ++r) fetch_pieces<RPW, UNROLL, POLICY>(ring[r], rows, first + r * STAGE, end);
  for (int s0 = first; s0 < end; s0 += RING * STAGE) {
#pragma unroll
    for (int i = 0; i < RING; ++i) {
      const int s = s0 + i * STAGE;
      if (s >= end) break;
      if (s + (RING - 1) * STAGE < end)
        fetch_pieces<RPW, UNROLL, POLICY>(ring[(i + RING - 1) % RING], rows, s + (RING - 1) * STAGE, end);
      multiply_pieces<T, KIND, MT, RPW, UNROLL>(ring[i], x, acc, s, end, m0, M, K);
    }
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r)
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      float v = acc[r][i];
#pragma unroll
      for (int offset = 16; offset; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
      acc[r][i] = v;
      if (KSPLIT > 1 && lane == 0) parts[warp][r][i] = v;
    }
  if constexpr (KSPLIT > 1) {
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int r = 0; r < RPW; ++r)
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        float v = parts[warp][r][i];
#pragma unroll
        for (int j = 1; j < KSPLIT; ++j) v += parts[warp + j][r][i];  // the parts in order: deterministic
        acc[r][i] = v;
      }
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int row = row0 + r;
    const float scale = row < N ? at_common::to_float(scales[row]) : 0.0f;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int m = m0 + i;
      if (lane == 0 && row < N && m < M) {
        T* y = out + (size_t)m * N + row;
        const float before = beta != 0.0f ? at_common::to_float(*y) : 0.0f;
        *y = at_common::from_float<T>(alpha * scale * acc[r][i] + beta * before);
      }
    }
  }
}

}  // namespace at_q8gemm
