// GEMV kernels: y = alpha * A x + beta * y, A row-major M x N (N is the reduction length),
// elements of type T (float, __half, __nv_bfloat16), always accumulated in float.
//
// One template spans the families the tuner searches; its parameters pick the family:
//   LANES == 1          thread-per-row: each thread walks its rows alone (the naive baseline at VEC 1)
//   1 < LANES <= 32     a sub-warp or warp per row group, 32 / LANES groups per warp (shuffle reduce)
//   LANES > 32          several warps per row group (LANES == BLOCK: block-per-row), block reduction
// ROWS rows per group share every x vector a thread loads; UNROLL independent steps keep several
// loads in flight per thread; VEC elements per load (VEC * sizeof(T) <= 16 bytes); XSMEM stages the
// block's slice of x in shared memory instead of reading it through the cache; POLICY picks the load
// path for the streamed matrix (0: read-only cache, 1: evict-first streaming, 2: no L1 allocation with
// a 256-byte L2 prefetch).
//
// Split-K: gridDim.y > 1 splits the reduction. Each block writes float partial sums to a workspace;
// the last block of a row tile to finish (an atomic counter per tile) adds them in split order, so the
// result is deterministic, writes y and resets the counter, leaving the workspace clean for the next
// launch. gridDim.x may be smaller than the number of row tiles (a persistent grid): blocks stride.
//
// Preconditions the tuner's constraints guarantee: VEC > 1 only when N % VEC == 0 and A, x are
// 16-byte aligned; XSMEM only when the block's x slice fits the dynamic shared memory it is given.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace at_gemv {

template <int BYTES> struct Raw;
template <> struct Raw<16> { typedef uint4 type; };
template <> struct Raw<8> { typedef uint2 type; };
template <> struct Raw<4> { typedef unsigned int type; };
template <> struct Raw<2> { typedef unsigned short type; };

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Streamed-matrix loads. The matrix is read once, so keeping it out of L1 (and early out of L2)
// leaves the caches to x; which variant is fastest depends on the card, so it is a tuning parameter.
template <int POLICY> __device__ __forceinline__ uint4 load_a(const uint4* p) {
  if (POLICY == 1) return __ldcs(p);
  if (POLICY == 2) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
  }
  return __ldg(p);
}
template <int POLICY> __device__ __forceinline__ uint2 load_a(const uint2* p) {
  if (POLICY == 1) return __ldcs(p);
  if (POLICY == 2) {
    uint2 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0,%1}, [%2];"
                 : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
  }
  return __ldg(p);
}
template <int POLICY> __device__ __forceinline__ unsigned int load_a(const unsigned int* p) {
  if (POLICY == 1) return __ldcs(p);
  if (POLICY == 2) {
    unsigned int r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
  }
  return __ldg(p);
}
template <int POLICY> __device__ __forceinline__ unsigned short load_a(const unsigned short* p) {
  if (POLICY == 1) return __ldcs(p);
  if (POLICY == 2) {
    unsigned short r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u16 %0, [%1];" : "=h"(r) : "l"(p));
    return r;
  }
  return __ldg(p);
}

// acc += dot(a, x) over the VEC elements packed in two raw vectors.
template <typename T, int VEC, typename V>
__device__ __forceinline__ float dot_packed(const V& a, const V& x, float acc) {
  const T* ae = reinterpret_cast<const T*>(&a);
  const T* xe = reinterpret_cast<const T*>(&x);
#pragma unroll
  for (int e = 0; e < VEC; ++e) acc = fmaf(to_float(ae[e]), to_float(xe[e]), acc);
  return acc;
}

// Sum over the LANES consecutive lanes of a group (LANES <= 32, a power of two).
template <int LANES> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = LANES / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T>
__device__ __forceinline__ T finish(float acc, float alpha, float beta, const T* y_old) {
  // BLAS semantics: beta == 0 means y is not read, so whatever y held (even NaN) cannot leak in.
  float out = alpha * acc;
  if (beta != 0.0f) out = fmaf(beta, to_float(*y_old), out);
  return from_float<T>(out);
}

template <typename T, int BLOCK, int LANES, int VEC, int UNROLL, int ROWS, int XSMEM, int POLICY>
__device__ __forceinline__ void gemv_body(const T* __restrict__ A, const T* __restrict__ x,
                                          T* __restrict__ y, int M, int N, float alpha, float beta,
                                          float* __restrict__ partial,
                                          unsigned int* __restrict__ counters) {
  typedef typename Raw<VEC * sizeof(T)>::type V;
  static_assert(BLOCK % 32 == 0 && BLOCK % LANES == 0, "a block holds whole row groups and warps");
  static_assert(LANES <= 32 || LANES % 32 == 0, "groups wider than a warp are whole warps");
  constexpr int GROUPS = BLOCK / LANES;
  constexpr int ROWS_PER_BLOCK = GROUPS * ROWS;
  constexpr int WARPS_PER_GROUP = LANES > 32 ? LANES / 32 : 1;
  constexpr int STEP = LANES * UNROLL;

  extern __shared__ __align__(16) unsigned char x_slice_raw[];
  __shared__ float cross_warp[LANES > 32 ? BLOCK / 32 * ROWS : 1];
  __shared__ bool last_block;

  const int tid = threadIdx.x;
  const int lane = tid % LANES;
  const int group = tid / LANES;
  const long long nvec = N / VEC;
  const int splits = gridDim.y;
  // Each split gets a whole number of LANES-wide steps so that every lane does the same work.
  long long per_split = (nvec + splits - 1) / splits;
  per_split = (per_split + LANES - 1) / LANES * LANES;
  const long long v_begin = min(nvec, (long long)blockIdx.y * per_split);
  const long long v_end = min(nvec, v_begin + per_split);

  const V* xv = reinterpret_cast<const V*>(x) + v_begin;
  const V* xs = reinterpret_cast<const V*>(x_slice_raw);
  if (XSMEM) {
    V* fill = reinterpret_cast<V*>(x_slice_raw);
    for (long long v = tid; v < v_end - v_begin; v += BLOCK) fill[v] = __ldg(xv + v);
    __syncthreads();
  }
  const long long len = v_end - v_begin;

  const int tiles = (M + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int row0 = tile * ROWS_PER_BLOCK + group * ROWS;
    const V* arow[ROWS];
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      // Rows past the end read the last row (always valid memory) and are never written.
      const int row = min(row0 + r, M - 1);
      arow[r] = reinterpret_cast<const V*>(A + (size_t)row * N) + v_begin;
      acc[r] = 0.0f;
    }

    long long v = lane;
    for (; v + (UNROLL - 1) * LANES < len; v += STEP) {
      V xr[UNROLL];
      V ar[ROWS][UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) xr[u] = XSMEM ? xs[v + u * LANES] : __ldg(xv + v + u * LANES);
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) ar[r][u] = load_a<POLICY>(arow[r] + v + u * LANES);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[r] = dot_packed<T, VEC>(ar[r][u], xr[u], acc[r]);
    }
    for (; v < len; v += LANES) {  // fewer than UNROLL steps left
      const V xr = XSMEM ? xs[v] : __ldg(xv + v);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) acc[r] = dot_packed<T, VEC>(load_a<POLICY>(arow[r] + v), xr, acc[r]);
    }
    // The scalar tail N % VEC only exists when VEC == 1 is impossible, which the constraints rule out.

#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = group_sum<(LANES < 32 ? LANES : 32)>(acc[r]);
    bool writer = lane == 0;
    if (LANES > 32) {
      const int warp = tid / 32;
      if (tid % 32 == 0) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) cross_warp[warp * ROWS + r] = acc[r];
      }
      __syncthreads();
      if (lane == 0) {
        const int first_warp = group * WARPS_PER_GROUP;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          float s = 0.0f;
          for (int w = 0; w < WARPS_PER_GROUP; ++w) s += cross_warp[(first_warp + w) * ROWS + r];
          acc[r] = s;
        }
      }
      __syncthreads();  // cross_warp is reused by the next tile
    }

    if (splits == 1) {
      if (writer) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
          if (row0 + r < M) y[row0 + r] = finish<T>(acc[r], alpha, beta, y + row0 + r);
      }
      continue;
    }

    if (writer) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        if (row0 + r < M) partial[(size_t)blockIdx.y * M + row0 + r] = acc[r];
    }
    __threadfence();  // partials visible device-wide before this block is counted
    __syncthreads();
    if (tid == 0) last_block = atomicAdd(counters + tile, 1u) == (unsigned)(splits - 1);
    __syncthreads();
    if (last_block) {
      const int first_row = tile * ROWS_PER_BLOCK;
      for (int i = tid; i < ROWS_PER_BLOCK && first_row + i < M; i += BLOCK) {
        float s = 0.0f;
        for (int k = 0; k < splits; ++k) s += __ldcg(partial + (size_t)k * M + first_row + i);
        y[first_row + i] = finish<T>(s, alpha, beta, y + first_row + i);
      }
      if (tid == 0) counters[tile] = 0u;
    }
  }
}

}  // namespace at_gemv

// One instance, as the tuner generates it (see autotune/ops/gemv.py):
//   extern "C" __global__ void __launch_bounds__(256) gemv_<key>(const __half* A, ...)
//   { at_gemv::gemv_body<__half, 256, 32, 8, 2, 1, 0, 0>(A, x, y, M, N, alpha, beta, partial, counters); }
