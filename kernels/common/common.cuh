// Device helpers shared by the kernel families that stream a matrix once and reduce split-K partials
// (gemv.cu, gemm_skinny.cu, gemm_skinny_tc.cu). A family that includes this file is hashed together
// with it (autotune/core/fingerprint.py follows local includes), so editing it stales that family's
// records, unless scripts/rehash_records.py shows every stored instance compiles to the same cubin.
#pragma once
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace at_common {

// Raw vectors of 16, 8, 4 and 2 bytes: what one load moves.
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

// Loads of a matrix that is read exactly once: keeping it out of L1 (and early out of L2) leaves the
// caches to the small operand and the partials; which path is fastest depends on the card, so it is
// tuned. 0: read-only cache, 1: evict-first streaming, 2: no L1 allocation with a 256-byte L2 prefetch.
template <int POLICY> __device__ __forceinline__ uint4 load_stream(const uint4* p) {
  if (POLICY == 1) return __ldcs(p);
  if (POLICY == 2) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
  }
  return __ldg(p);
}
template <int POLICY> __device__ __forceinline__ uint2 load_stream(const uint2* p) {
  if (POLICY == 1) return __ldcs(p);
  if (POLICY == 2) {
    uint2 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0,%1}, [%2];"
                 : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
  }
  return __ldg(p);
}
template <int POLICY> __device__ __forceinline__ unsigned int load_stream(const unsigned int* p) {
  if (POLICY == 1) return __ldcs(p);
  if (POLICY == 2) {
    unsigned int r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
  }
  return __ldg(p);
}
template <int POLICY> __device__ __forceinline__ unsigned short load_stream(const unsigned short* p) {
  if (POLICY == 1) return __ldcs(p);
  if (POLICY == 2) {
    unsigned short r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u16 %0, [%1];" : "=h"(r) : "l"(p));
    return r;
  }
  return __ldg(p);
}

// alpha * acc + beta * C_old with BLAS semantics: beta == 0 means C is not read, so whatever it held
// (even NaN) cannot leak in.
template <typename T> __device__ __forceinline__ T finish(float acc, float alpha, float beta, const T* c_old) {
  float out = alpha * acc;
  if (beta != 0.0f) out = fmaf(beta, to_float(*c_old), out);
  return from_float<T>(out);
}

// Sum of the partials p[lo*stride], ..., p[(hi-1)*stride] in that order, zeroing each after reading it
// (a split-K workspace must be zero again after the launch). Loads run a batch ahead of the adds, so
// two batches are in flight: the reduction costs about (hi - lo) / (2 * BATCH) L2 round trips.
__device__ __forceinline__ float sum_partials(float* p, size_t stride, int lo, int hi) {
  constexpr int BATCH = 16;
  float s = 0.0f;
  float v[BATCH];
#pragma unroll
  for (int j = 0; j < BATCH; ++j) v[j] = lo + j < hi ? __ldcg(p + (size_t)(lo + j) * stride) : 0.0f;
  for (int k = lo; k < hi; k += BATCH) {
    float w[BATCH];
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int at = k + BATCH + j;
      w[j] = at < hi ? __ldcg(p + (size_t)at * stride) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < BATCH; ++j)
      if (k + j < hi) __stcg(p + (size_t)(k + j) * stride, 0.0f);
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      s += v[j];  // past hi v[j] is 0: s + 0 == s
      v[j] = w[j];
    }
  }
  return s;
}

// Split-K inside a thread-block cluster (sm_90+): the CLUSTER blocks of a cluster are the splits of
// one output tile, and each has left its `count` partial sums in shared memory at `part` (the same
// offset in every block). Block r of the cluster adds outputs r*blockDim.x + tid, stepping by
// CLUSTER*blockDim.x, reading the CLUSTER blocks' partials through distributed shared memory in rank
// order (deterministic), and hands each sum to write(o, sum). No workspace, counters or second pass:
// the partials never leave the GPCs' shared memory.
// Clusters exist from sm_90 on: for older targets (an A100, an L40S) the body is left out, and no
// instance calls it there, since the tuner's spaces offer CLUSTER > 1 only where clusters run.
template <int CLUSTER, typename Write>
__device__ __forceinline__ void cluster_sum(float* part, int count, Write write) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's partials are written and visible cluster-wide
  const float* src[CLUSTER];
#pragma unroll
  for (int r = 0; r < CLUSTER; ++r) src[r] = cluster.map_shared_rank(part, r);
  const int step = CLUSTER * (int)blockDim.x;
  for (int o = (int)cluster.block_rank() * (int)blockDim.x + (int)threadIdx.x; o < count; o += step) {
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) s += src[r][o];
    write(o, s);
  }
  cluster.sync();  // no block exits (freeing its shared memory) while another still reads it
#endif
}

}  // namespace at_common
