// Probe: the int4 skinny GEMM (8 < M <= 64 rows of x) on Hopper's wgmma, W in the A operand from
// registers, x in the B operand from shared memory, beside cuBLAS's float16 GEMM on the dequantized
// weight in the same run. qgemm.cu's mma.sync kernel runs 0.74x torch's float16 F.linear at M = 64
// (docs/lowbit.md): each warp spends its issue slots and registers on 16 x 8 tiles whose B fragments
// it loads itself. Here one wgmma.m64nMXk16 a k16 step multiplies a warpgroup's 64 rows of W by all MX
// rows of x, B read by the tensor cores straight from shared memory.
//
// float16, group 128, symmetric (w = (q - 8) s). Each lane dequantizes the A fragments it holds as
// qgemm.cu does: lane 4 g + c reads a 16-byte piece (32 codes) of rows g and g + 8 of its warp's 16, pieces
// 4 s + c of step s (a step: 128 codes a row, one group); word j of a piece gives the half pairs (0,4),
// (1,5), (2,6), (3,7) of (q - 8) s, A of the two wgmmas 8 s + 2 j and 8 s + 2 j + 1. A dot product does
// not depend on the order of its terms, so x is staged with the same permutation: k slot 2c + e of
// wgmma 8 s + 2 j + h holds x[k] for k = 128 s + 32 c + 8 j + 2 h + 4 e, slot 2c + 8 + e the k one
// higher. The stage is wgmma's K-major 128-byte-swizzled layout (as gemm_wgmma.cu's N x K B): row n
// (of x) of a 64-slot tile at n * 128 bytes, 16-byte chunk ch at ch ^ (n % 8), tiles MX * 128 bytes
// apart; the k16 step i of a tile starts 32 i bytes in.
//
// Grid: a persistent x of clusters, each walking tiles of 64 WG rows of W (WG warpgroups a block) with
// the part of x its blocks staged once; y over CL parts of K, added as RED says (above the kernel). A
// thread's codes come by cp.async into its own 32 bytes of RING shared-memory stages, RING - 1 steps
// ahead, their scales into registers. Each variant runs as a block a tile and as one wave of clusters
// walking the tiles (the faster here); one more call notes where each block's time goes (phases_us:
// staging x, its tiles, its sums).
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I kernels/common -o /tmp/int4_wgmma \
//     experiments/int4_wgmma.cu -lcublas   (-DNO_CUBLAS where cuBLAS is not installed: no cuBLAS rows)
//   /tmp/int4_wgmma                 # every (M, N, K) of the probe: a JSON line per variant
//   PROBE_QUICK=1 /tmp/int4_wgmma   # M 16 and 64, two warpgroups, rings of 4, the persistent grid only
#include <cooperative_groups.h>
#ifndef NO_CUBLAS
#include <cublas_v2.h>
#endif
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "../experiments/bench_common.cuh"
#include "common.cuh"

namespace probe {

__device__ __forceinline__ unsigned and_or(unsigned a, unsigned mask, unsigned magic) {
  unsigned r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(mask), "r"(magic));
  return r;
}
__device__ __forceinline__ __half2 pair(unsigned v) { return *reinterpret_cast<__half2*>(&v); }
__device__ __forceinline__ unsigned word(__half2 v) { return *reinterpret_cast<unsigned*>(&v); }

// The 8 codes of a word as pairs (0,4), (1,5), (2,6), (3,7) of (q - 8) s, each rounded once: 1024 + q
// from a low nibble and 1024 + 16 q from a high one left in place, exactly as qgemm.cu makes them.
__device__ __forceinline__ void dequant(unsigned w, __half2 s, unsigned (&out)[4]) {
  const unsigned high = w >> 8;
  const __half2 sub = pair(0x64086408u), add = pair(0xD480D480u), sixteenth = pair(0x2C002C00u);
  out[0] = word(__hmul2(__hsub2(pair(and_or(w, 0x000F000Fu, 0x64006400u)), sub), s));
  out[1] = word(__hmul2(__hfma2(pair(and_or(w, 0x00F000F0u, 0x64006400u)), sixteenth, add), s));
  out[2] = word(__hmul2(__hsub2(pair(and_or(high, 0x000F000Fu, 0x64006400u)), sub), s));
  out[3] = word(__hmul2(__hfma2(pair(and_or(high, 0x00F000F0u, 0x64006400u)), sixteenth, add), s));
}

__device__ __forceinline__ uint64_t make_desc(uint32_t addr) {
  // K-major, 128-byte swizzle: 8-row groups 1024 bytes apart; the leading offset is unused (16).
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(16 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)1 << 62);
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void copy16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void copies_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void copies_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

#define D4(i) "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define A4 "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])
#define ACCUMULATE "r"(1)  // scale-d: d += A B

// d += A B: A (64 x 16, this thread's 4 registers), B by descriptor (MX x 16, K-major).
template <int MX> struct Wgmma;
template <> struct Wgmma<16> {
  static __device__ __forceinline__ void run(float (&d)[8], const unsigned (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}"
        : D4(0), D4(4)
        : A4, "l"(b), ACCUMULATE);
  }
};
template <> struct Wgmma<32> {
  static __device__ __forceinline__ void run(float (&d)[16], const unsigned (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15},"
        " {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}"
        : D4(0), D4(4), D4(8), D4(12)
        : A4, "l"(b), ACCUMULATE);
  }
};
template <> struct Wgmma<64> {
  static __device__ __forceinline__ void run(float (&d)[32], const unsigned (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}"
        : D4(0), D4(4), D4(8), D4(12), D4(16), D4(20), D4(24), D4(28)
        : A4, "l"(b), ACCUMULATE);
  }
};

// RED 0: the CL blocks of a K split are a thread-block cluster adding through distributed shared memory;
// RED 2: the same, but a tile's sums are added while the next tile's first wgmmas run (partials in two
// buffers, the cluster barrier split into its arrive, after a tile, and its wait, in the next one);
// RED 1: they are independent blocks adding into a float workspace (red.global.add), and the last of a
// tile's CL to arrive (a counter a tile) writes the tile out and zeroes its workspace and counter.
template <int MX, int WG, int CL, int RING, int RED>
__global__ void __launch_bounds__(128 * WG) qgemm_wgmma(const __half* __restrict__ x, const unsigned char* __restrict__ qw,
                                                        const __half* __restrict__ scales, __half* __restrict__ y,
                                                        int M, int N, int K, float* __restrict__ ws,
                                                        unsigned* __restrict__ counters, unsigned long long* phases) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~(uintptr_t)1023);
  const uint32_t sx = (uint32_t)__cvta_generic_to_shared(smem);
  const int kb = K / CL, kbase = blockIdx.y * kb, tid = threadIdx.x;
  // With `phases`, thread 0 of each block notes where its time goes (globaltimer, ns): start, x staged,
  // the end of its last tile, and the nanoseconds of its tiles' sums (from the wgmma wait to the write).
  unsigned long long t_start = 0, t_staged = 0, t_sums = 0, t_mark = 0;
  const auto now = []() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  };
  if (phases && tid == 0) t_start = now();
  float* part = reinterpret_cast<float*>(smem + MX * kb * 2);  // after x's stage: 64 WG x MX partial sums
  const int lane = tid & 31, warp = (tid >> 5) & 3, wg = tid >> 7, g = lane >> 2, c = lane & 3;
  const int wrow = wg * 64 + warp * 16 + g;  // this thread's first row of the tile (and wrow + 8)
  const int steps = kb / 128, tiles = N / (64 * WG);

  // A tile's codes of rows wrow and wrow + 8 come step by step (a step: 128 codes a row, one group) into
  // this thread's own 32 bytes of one of RING shared-memory stages, by cp.async, RING - 1 steps ahead;
  // their scales into registers. A thread reads only what it copied, so no barrier is needed.
  const int stage_bytes = 128 * WG * 32;
  float* part2 = part + 64 * WG * MX;  // RED 2: the second partial buffer
  unsigned char* wstage = smem + MX * kb * 2 + 64 * WG * MX * 4 * (RED == 2 ? 2 : 1);
  const uint32_t sw = (uint32_t)__cvta_generic_to_shared(wstage) + tid * 16;
  __half scale_ring[RING][2];
  const auto ask = [&](int tile, int step, int slot) {
    if (step < steps) {
      const size_t row = (size_t)tile * 64 * WG + wrow;
      const unsigned char* code = qw + row * (K / 2) + (kbase + 128 * step + 32 * c) / 2;
      const __half* scale = scales + row * (K / 128) + kbase / 128 + step;
      copy16(sw + slot * stage_bytes, code);
      copy16(sw + slot * stage_bytes + 128 * WG * 16, code + (size_t)8 * (K / 2));
      scale_ring[slot][0] = scale[0];
      scale_ring[slot][1] = scale[(size_t)8 * (K / 128)];
    }
    copies_commit();  // one group a step, empty or not, so that the wait below counts steps
  };
  // The first tile's first RING - 1 steps are asked for before x is staged.
  int tile = blockIdx.x;
  if (tile < tiles) {
#pragma unroll
    for (int r = 0; r < RING - 1; ++r) ask(tile, r, r);
  }

  // x's rows [0, MX) and this block's K part, permuted as the A fragments are (rows >= M zero), staged
  // once: the block walks its tiles of W with it.
  // Eight 16-byte loads of x are in flight before the first is stored (one at a time, the staging was
  // bound by the L2's latency: 14 us for 128 KB a block).
  const int chunks = kb / 8;
  constexpr int BATCH = 8;
  for (int i0 = tid; i0 < MX * chunks; i0 += BATCH * 128 * WG) {
    uint4 v[BATCH];
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      const int i = i0 + b * 128 * WG, n = i / chunks, kl = (i - n * chunks) * 8;
      v[b] = i < MX * chunks && n < M ? *reinterpret_cast<const uint4*>(x + (size_t)n * K + kbase + kl)
                                       : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      const int i = i0 + b * 128 * WG, n = i / chunks, kl = (i - n * chunks) * 8;
      if (i >= MX * chunks) break;
      const int s = kl >> 7, cq = (kl >> 5) & 3, j = (kl >> 3) & 3;
      const unsigned words[4] = {__byte_perm(v[b].x, v[b].z, 0x5410), __byte_perm(v[b].x, v[b].z, 0x7632),
                                 __byte_perm(v[b].y, v[b].w, 0x5410), __byte_perm(v[b].y, v[b].w, 0x7632)};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int u = 8 * s + 2 * j + (q >> 1), p = 2 * cq + 8 * (q & 1);
        const int e = 16 * (u & 3) + p;
        const int off = (u >> 2) * (MX * 128) + n * 128 + (((e >> 3) ^ (n & 7)) << 4) + (e & 7) * 2;
        *reinterpret_cast<unsigned*>(smem + off) = words[q];
      }
    }
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (phases && tid == 0) t_staged = now();

  const auto write_at = [&](int first_row, int o4, float4 v) {
    const int m = o4 / (16 * WG), w = (o4 % (16 * WG)) * 4;
    if (m < M) {
      const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
      uint2 out;
      out.x = *reinterpret_cast<const unsigned*>(&lo);
      out.y = *reinterpret_cast<const unsigned*>(&hi);
      *reinterpret_cast<uint2*>(y + (size_t)m * N + first_row + w) = out;
    }
  };
  int pending = -1, pending_buffer = 0, parity = 0;  // RED 2: the tile whose partials wait to be added
  const auto add_pending = [&]() {
    if constexpr (RED == 2 && CL > 1) {
      if (pending < 0) return;
      const unsigned long long t0 = phases && tid == 0 ? now() : 0;
      asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");  // every block's partials are in
      namespace cg = cooperative_groups;
      cg::cluster_group cluster = cg::this_cluster();
      float* buffer = pending_buffer ? part2 : part;
      const float4* src[CL];
#pragma unroll
      for (int r = 0; r < CL; ++r) src[r] = reinterpret_cast<const float4*>(cluster.map_shared_rank(buffer, r));
      for (int o = (int)cluster.block_rank() * 128 * WG + tid; o < 64 * WG * MX / 4; o += CL * 128 * WG) {
        float4 sum = src[0][o];
#pragma unroll
        for (int r = 1; r < CL; ++r) {
          const float4 v = src[r][o];
          sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
        }
        write_at(pending * 64 * WG, o, sum);
      }
      pending = -1;
      if (phases && tid == 0) t_sums += now() - t0;
    }
  };

  for (; tile < tiles; tile += gridDim.x) {
    float d[MX / 2];
#pragma unroll
    for (int i = 0; i < MX / 2; ++i) d[i] = 0.0f;
    for (int s0 = 0; s0 < steps; s0 += RING) {
#pragma unroll
      for (int r = 0; r < RING; ++r) {
        const int s = s0 + r;
        if (s < steps) {
          ask(tile, s + RING - 1, (r + RING - 1) % RING);
          copies_wait<RING - 1>();  // this step's copies are in
          const uint4 ca = *reinterpret_cast<const uint4*>(wstage + r * stage_bytes + tid * 16);
          const uint4 cb = *reinterpret_cast<const uint4*>(wstage + r * stage_bytes + 128 * WG * 16 + tid * 16);
          const __half2 sa = __half2half2(scale_ring[r][0]), sb = __half2half2(scale_ring[r][1]);
          const unsigned wa[4] = {ca.x, ca.y, ca.z, ca.w}, wb[4] = {cb.x, cb.y, cb.z, cb.w};
          unsigned frag[8][4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            unsigned ra[4], rb[4];
            dequant(wa[j], sa, ra);
            dequant(wb[j], sb, rb);
            frag[2 * j][0] = ra[0], frag[2 * j][1] = rb[0], frag[2 * j][2] = ra[1], frag[2 * j][3] = rb[1];
            frag[2 * j + 1][0] = ra[2], frag[2 * j + 1][1] = rb[2], frag[2 * j + 1][2] = ra[3], frag[2 * j + 1][3] = rb[3];
          }
          fence();
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const int u = 8 * s + i;
            Wgmma<MX>::run(d, frag[i], make_desc(sx + (u >> 2) * (MX * 128) + (u & 3) * 32));
          }
          commit();
          if (s == 0) add_pending();  // the previous tile's sums, beside this tile's first wgmmas
          wait<1>();
        }
      }
    }
    wait<0>();
#pragma unroll
    for (int i = 0; i < MX / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
    if (phases && tid == 0) t_mark = now();
    // The next tile's first steps are asked for now, so their loads overlap this tile's sums.
    const int next = tile + gridDim.x;
    if (next < tiles) {
#pragma unroll
      for (int r = 0; r < RING - 1; ++r) ask(next, r, r);
    }

    const int first_row = tile * 64 * WG;
    constexpr int QUADS = 64 * WG * MX / 4;
    const auto write = [&](int o4, float4 v) {
      const int m = o4 / (16 * WG), w = (o4 % (16 * WG)) * 4;
      if (m < M) {
        const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
        uint2 out;
        out.x = *reinterpret_cast<const unsigned*>(&lo);
        out.y = *reinterpret_cast<const unsigned*>(&hi);
        *reinterpret_cast<uint2*>(y + (size_t)m * N + first_row + w) = out;
      }
    };
    if constexpr (RED == 2 && CL > 1) {
      float* buffer = parity ? part2 : part;
#pragma unroll
      for (int t = 0; t < MX / 8; ++t) {
        const int m = 8 * t + 2 * c;
        buffer[m * (64 * WG) + wrow] = d[4 * t + 0];
        buffer[(m + 1) * (64 * WG) + wrow] = d[4 * t + 1];
        buffer[m * (64 * WG) + wrow + 8] = d[4 * t + 2];
        buffer[(m + 1) * (64 * WG) + wrow + 8] = d[4 * t + 3];
      }
      asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
      pending = tile, pending_buffer = parity, parity ^= 1;
    } else if constexpr (RED == 1 && CL > 1) {
      // D: this thread's rows (wrow, wrow + 8) x columns 8 t + 2 c, + 1 of each n8 block t, added into
      // ws[m][row] (MX x N floats) without waiting.
      float* tile_ws = ws + first_row;
#pragma unroll
      for (int t = 0; t < MX / 8; ++t) {
        const int m = 8 * t + 2 * c;
        atomicAdd(tile_ws + (size_t)m * N + wrow, d[4 * t + 0]);
        atomicAdd(tile_ws + (size_t)(m + 1) * N + wrow, d[4 * t + 1]);
        atomicAdd(tile_ws + (size_t)m * N + wrow + 8, d[4 * t + 2]);
        atomicAdd(tile_ws + (size_t)(m + 1) * N + wrow + 8, d[4 * t + 3]);
      }
      __threadfence();
      __syncthreads();
      __shared__ unsigned arrived;
      if (tid == 0) arrived = atomicAdd(counters + tile, 1u);
      __syncthreads();
      if (arrived == CL - 1) {  // the tile's last part: every other part's sums are in the workspace
        __threadfence();
        for (int o = tid; o < QUADS; o += 128 * WG) {
          const int m = o / (16 * WG), w = (o % (16 * WG)) * 4;
          float4* at = reinterpret_cast<float4*>(tile_ws + (size_t)m * N + w);
          write(o, __ldcg(at));
          __stcg(at, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
        }
        if (tid == 0) counters[tile] = 0;
      }
    } else {
      // D as above into part[m][w] (w the block's row of W), so consecutive outputs are consecutive rows.
      if constexpr (CL == 1) __syncthreads();  // the previous tile's partials are all written out
#pragma unroll
      for (int t = 0; t < MX / 8; ++t) {
        const int m = 8 * t + 2 * c;
        part[m * (64 * WG) + wrow] = d[4 * t + 0];
        part[(m + 1) * (64 * WG) + wrow] = d[4 * t + 1];
        part[m * (64 * WG) + wrow + 8] = d[4 * t + 2];
        part[(m + 1) * (64 * WG) + wrow + 8] = d[4 * t + 3];
      }
      if constexpr (CL == 1) {
        __syncthreads();
        for (int o = tid; o < QUADS; o += 128 * WG) write(o, reinterpret_cast<const float4*>(part)[o]);
      } else {
        // Four outputs a thread at a time: each block of the cluster adds its share of them over every
        // block's partials through distributed shared memory.
        namespace cg = cooperative_groups;
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();  // every block's partials are in
        const float4* src[CL];
#pragma unroll
        for (int r = 0; r < CL; ++r) src[r] = reinterpret_cast<const float4*>(cluster.map_shared_rank(part, r));
        const int stride = CL * 128 * WG;
#pragma unroll 2
        for (int o = (int)cluster.block_rank() * 128 * WG + tid; o < QUADS; o += stride) {
          float4 sum = src[0][o];
#pragma unroll
          for (int r = 1; r < CL; ++r) {
            const float4 v = src[r][o];
            sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
          }
          write(o, sum);
        }
        cluster.sync();  // no block overwrites its partials (or exits) while another still reads them
      }
    }
    if (RED != 2 && phases && tid == 0) t_sums += now() - t_mark;
  }
  if constexpr (RED == 2 && CL > 1) {
    add_pending();
    // No block exits (freeing its shared memory) while another still reads its partials.
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  }
  if (phases && tid == 0) {
    unsigned long long* mine = phases + 4 * (blockIdx.y * gridDim.x + blockIdx.x);
    mine[0] = t_start, mine[1] = t_staged, mine[2] = now(), mine[3] = t_sums;
  }
}

// float64 reference, a thread per output: y[m][n] = sum_k x[m][k] (q[n][k] - 8) s[n][k / 128].
__global__ void reference(const __half* x, const unsigned char* qw, const __half* scales, double* ref, int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N) return;
  double acc = 0.0;
  for (int k = 0; k < K; ++k) {
    const unsigned char byte = qw[(size_t)n * (K / 2) + k / 2];
    const int q = k % 2 ? byte >> 4 : byte & 0xF;
    acc += (double)__half2float(x[(size_t)m * K + k]) * (q - 8) * (double)__half2float(scales[(size_t)n * (K / 128) + k / 128]);
  }
  ref[(size_t)m * N + n] = acc;
}

// The dequantized weight, (q - 8) s rounded to half once: what F.linear (and cuBLAS here) multiplies by.
__global__ void dequantize(const unsigned char* qw, const __half* scales, __half* w, int N, int K) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)N * K) return;
  const size_t n = i / K;
  const int k = (int)(i % K);
  const unsigned char byte = qw[n * (K / 2) + k / 2];
  const int q = k % 2 ? byte >> 4 : byte & 0xF;
  w[i] = __float2half_rn((float)(q - 8) * __half2float(scales[n * (K / 128) + k / 128]));
}

}  // namespace probe

struct Variant {
  const char* name;
  int mx, wg, cl, ring, red;
  void (*fn)(const __half*, const unsigned char*, const __half*, __half*, int, int, int, float*, unsigned*,
             unsigned long long*);
};

#define V(MX, WG, CL, RING) \
  Variant { "wgmma", MX, WG, CL, RING, 0, probe::qgemm_wgmma<MX, WG, CL, RING, 0> }
#define VO(MX, CL, RING) \
  Variant { "wgmma", MX, 2, CL, RING, 2, probe::qgemm_wgmma<MX, 2, CL, RING, 2> }
#define VR(MX, CL) \
  Variant { "wgmma", MX, 2, CL, 4, 1, probe::qgemm_wgmma<MX, 2, CL, 4, 1> }
#define VS(MX, WG)                                                                                    \
  V(MX, WG, 1, 4), V(MX, WG, 2, 4), V(MX, WG, 4, 4), V(MX, WG, 8, 4), V(MX, WG, 1, 6), V(MX, WG, 2, 6), \
      V(MX, WG, 4, 6), V(MX, WG, 8, 6)

int main(int argc, char** argv) {
  BenchSetup setup;
  CHECK(bench_setup(setup));
#ifndef NO_CUBLAS
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    printf("cublasCreate failed\n");
    return 1;
  }
#endif
  const std::vector<Variant> variants = {VS(16, 1), VS(16, 2), VS(32, 1), VS(32, 2), VS(64, 1), VS(64, 2),
                                         V(32, 2, 16, 4), V(64, 2, 16, 4), V(32, 2, 16, 6), V(64, 2, 16, 6),
                                         VR(16, 2), VR(16, 4), VR(16, 8), VR(32, 2), VR(32, 4), VR(32, 8), VR(64, 4), VR(64, 8), VR(64, 16),
                                         VO(16, 2, 4), VO(16, 4, 4), VO(32, 4, 4), VO(64, 2, 4), VO(64, 4, 4), VO(64, 8, 4), VO(64, 16, 4)};
  const int shapes[][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336},
                           {4608, 3584}, {3584, 3584}, {37888, 3584}, {3584, 18944}};
  const int ms[] = {16, 32, 64};
  const bool quick = getenv("PROBE_QUICK") != nullptr;  // M 16 and 64, two warpgroups, rings of 4, persistent
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (const auto& shape : shapes) {
    const int n = shape[0], k = shape[1];
    const size_t code_bytes = (size_t)n * k / 2, groups = (size_t)n * (k / 128);
    std::vector<unsigned char> codes(code_bytes);
    for (auto& b : codes) b = (unsigned char)(rng() & 0xFF);
    std::vector<__half> scale_h(groups), x_h((size_t)64 * k);
    for (auto& s : scale_h) s = __float2half(0.01f + 0.02f * std::fabs(unit(rng)));
    for (auto& v : x_h) v = __float2half(unit(rng));
    unsigned char* d_codes;
    __half *d_x, *d_scales, *d_y, *d_w;
    double* d_ref;
    CHECK(cudaMalloc(&d_codes, code_bytes));
    CHECK(cudaMalloc(&d_scales, groups * 2));
    CHECK(cudaMalloc(&d_x, x_h.size() * 2));
    CHECK(cudaMalloc(&d_y, (size_t)64 * n * 2));
    CHECK(cudaMalloc(&d_w, (size_t)n * k * 2));
    CHECK(cudaMalloc(&d_ref, (size_t)64 * n * 8));
    float* d_ws;  // the atomic K split's workspace and tile counters, zero between calls
    unsigned* d_counters;
    CHECK(cudaMalloc(&d_ws, (size_t)64 * n * 4));
    CHECK(cudaMalloc(&d_counters, (size_t)n / 64 * 4));
    CHECK(cudaMemset(d_ws, 0, (size_t)64 * n * 4));
    CHECK(cudaMemset(d_counters, 0, (size_t)n / 64 * 4));
    CHECK(cudaMemcpy(d_codes, codes.data(), code_bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_scales, scale_h.data(), groups * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_x, x_h.data(), x_h.size() * 2, cudaMemcpyHostToDevice));
    probe::dequantize<<<(unsigned)(((size_t)n * k + 255) / 256), 256>>>(d_codes, d_scales, d_w, n, k);
    probe::reference<<<dim3((n + 127) / 128, 64), 128>>>(d_x, d_codes, d_scales, d_ref, 64, n, k);
    CHECK(cudaDeviceSynchronize());
    std::vector<double> ref((size_t)64 * n);
    CHECK(cudaMemcpy(ref.data(), d_ref, ref.size() * 8, cudaMemcpyDeviceToHost));
    std::vector<unsigned char*> rot_codes = rotating_buffers<unsigned char>(setup.prop, code_bytes, 0x5A);
    std::vector<__half*> rot_w = rotating_buffers<__half>(setup.prop, (size_t)n * k * 2, 0x11);
    if (rot_codes.empty() || rot_w.empty()) return 1;
    for (const int m : ms) {
      if (quick && m == 32) continue;
      double ref_max = 0.0;
      for (size_t i = 0; i < (size_t)m * n; ++i) ref_max = std::max(ref_max, std::fabs(ref[i]));
      const auto error = [&]() -> double {
        std::vector<__half> got((size_t)m * n);
        if (cudaMemcpy(got.data(), d_y, got.size() * 2, cudaMemcpyDeviceToHost) != cudaSuccess) return INFINITY;
        double err = 0.0;
        for (size_t i = 0; i < got.size(); ++i) {
          const double v = __half2float(got[i]);
          err = std::isfinite(v) ? std::max(err, std::fabs(v - ref[i])) : INFINITY;
        }
        return err / ref_max;
      };
      double blas_err = NAN;
#ifndef NO_CUBLAS
      // cuBLAS on the dequantized weight: y (m x n, row-major) = x W^T.
      const float one = 1.0f, zero = 0.0f;
      const auto blas_call = [&](const __half* w) {
        return cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16F, k, d_x, CUDA_R_16F, k, &zero,
                            d_y, CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      };
      CHECK(cudaMemset(d_y, 0xFF, (size_t)m * n * 2));
      if (blas_call(d_w) != CUBLAS_STATUS_SUCCESS) return 1;
      CHECK(cudaDeviceSynchronize());
      blas_err = error();
      const float blas_us = best_of([&](int i) { blas_call(rot_w[i % rot_w.size()]); }, setup.start, setup.stop);
      printf("{\"m\": %d, \"n\": %d, \"k\": %d, \"kernel\": \"cublas_fp16\", \"us\": %.2f, \"rel_err\": %.3g}\n", m, n, k,
             blas_us, blas_err);
#endif
      for (const Variant& v : variants) {
        if (v.mx != m) continue;
        if (quick && (v.ring != 4 || v.wg != 2)) continue;
        if (n % (64 * v.wg) || k % (128 * v.cl)) continue;
        const int bytes = v.mx * (k / v.cl) * 2 + 64 * v.wg * v.mx * 4 * (v.red == 2 ? 2 : 1) + v.ring * 128 * v.wg * 32 + 1024;
        if (bytes > (int)setup.prop.sharedMemPerBlockOptin) {
          printf("{\"m\": %d, \"n\": %d, \"k\": %d, \"kernel\": \"wgmma\", \"mx\": %d, \"wg\": %d, \"cl\": %d, \"ring\": %d, "
                 "\"skipped\": \"%d bytes of shared memory\"}\n",
                 m, n, k, v.mx, v.wg, v.cl, v.ring, bytes);
          continue;
        }
        CHECK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        if (v.cl > 8) CHECK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(n / (64 * v.wg), v.cl, 1);
        config.blockDim = dim3(128 * v.wg, 1, 1);
        config.dynamicSmemBytes = bytes;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 1;
        attr[0].val.clusterDim.y = v.cl;
        attr[0].val.clusterDim.z = 1;
        config.attrs = attr;
        config.numAttrs = v.red == 1 ? 0 : 1;
        // A block a tile, and (where fewer fit at once) as many clusters (or K-split sets of blocks) as
        // fit, each walking its tiles.
        int resident = 0;
        if (v.red == 1) {
          int per_sm = 0;
          CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, v.fn, 128 * v.wg, bytes));
          resident = per_sm * setup.prop.multiProcessorCount / v.cl;
        } else {
          CHECK(cudaOccupancyMaxActiveClusters(&resident, v.fn, &config));
        }
        const int tiles = n / (64 * v.wg);
        for (const int width : {tiles, std::min(tiles, resident)}) {
          if (quick && width == tiles && resident < tiles) continue;
          config.gridDim.x = width;
          const auto launch = [&](const unsigned char* codes_at) {
            return cudaLaunchKernelEx(&config, v.fn, (const __half*)d_x, codes_at, (const __half*)d_scales, d_y, m, n, k,
                                      d_ws, d_counters, (unsigned long long*)nullptr);
          };
          CHECK(cudaMemset(d_y, 0xFF, (size_t)m * n * 2));  // NaN: an output never written fails
          CHECK(launch(d_codes));
          CHECK(cudaDeviceSynchronize());
          const double err = error();
          // Where a block's time goes, in one more call (mean over blocks, microseconds).
          const int blocks = width * v.cl;
          unsigned long long* d_phases;
          CHECK(cudaMalloc(&d_phases, (size_t)blocks * 4 * 8));
          CHECK(cudaLaunchKernelEx(&config, v.fn, (const __half*)d_x, (const unsigned char*)rot_codes[0],
                                   (const __half*)d_scales, d_y, m, n, k, d_ws, d_counters, d_phases));
          CHECK(cudaDeviceSynchronize());
          std::vector<unsigned long long> ph((size_t)blocks * 4);
          CHECK(cudaMemcpy(ph.data(), d_phases, ph.size() * 8, cudaMemcpyDeviceToHost));
          cudaFree(d_phases);
          unsigned long long first = ~0ull;
          for (int b = 0; b < blocks; ++b) first = std::min(first, ph[4 * b]);
          double staged = 0, work = 0, sums = 0, end = 0, start = 0;
          for (int b = 0; b < blocks; ++b) {
            start += (ph[4 * b] - first) / 1e3 / blocks;
            staged += (ph[4 * b + 1] - ph[4 * b]) / 1e3 / blocks;
            work += (ph[4 * b + 2] - ph[4 * b + 1] - ph[4 * b + 3]) / 1e3 / blocks;
            sums += ph[4 * b + 3] / 1e3 / blocks;
            end = std::max(end, (ph[4 * b + 2] - first) / 1e3);
          }
          const float us = best_of([&](int i) { launch(rot_codes[i % rot_codes.size()]); }, setup.start, setup.stop);
          printf("{\"m\": %d, \"n\": %d, \"k\": %d, \"kernel\": \"wgmma\", \"mx\": %d, \"wg\": %d, \"cl\": %d, \"ring\": %d, "
                 "\"red\": %d, \"grid\": %d, \"tiles\": %d, \"us\": %.2f, \"rel_err\": %.3g, \"err_over_cublas\": %.3g, "
                 "\"phases_us\": {\"start\": %.2f, \"stage\": %.2f, \"tiles\": %.2f, \"sums\": %.2f, \"last_end\": %.2f}}\n",
                 m, n, k, v.mx, v.wg, v.cl, v.ring, v.red, width, tiles, us, err, err / blas_err, start, staged, work, sums, end);
          if (resident >= tiles) break;  // one wave already: the second width is the first
        }
        fflush(stdout);
      }
    }
    for (auto* b : rot_codes) cudaFree(b);
    for (auto* b : rot_w) cudaFree(b);
    cudaFree(d_codes), cudaFree(d_scales), cudaFree(d_x), cudaFree(d_y), cudaFree(d_w), cudaFree(d_ref);
    cudaFree(d_ws), cudaFree(d_counters);
  }
  return 0;
}
