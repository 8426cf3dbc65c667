// Weight-only int4 skinny GEMM on Hopper's wgmma (sm_90a only), for 16 < M <= 64 rows of x: out[M x N] =
// alpha * x @ dequant(W)^T + beta * out, in qgemm.cu's format and with its dequantization. Past 16 rows
// qgemm.cu's mma.sync kernel is held to one block an SM by x's staged slice and spends its warps' issue
// slots on 16 x 8 tiles whose B fragments each warp loads itself (docs/lowbit.md). Here one
// wgmma.m64nMXk16 a k16 slot multiplies a warpgroup's 64 rows of W, dequantized into registers (A), by
// MX rows of x that the tensor cores read from shared memory (B); experiments/int4_wgmma.cu measured
// the design (M = 64, 28672 x 4096: 59.9 us against qgemm.cu's 86.8 and cuBLAS's float16 62.1).
//
// A's fragments are qgemm.cu's: lane 4 g + c of a warp reads 16-byte pieces (32 codes) of rows g and
// g + 8 of its 16, pieces 4 s + c of step s (128 codes a row); word j of a piece gives the pairs (0,4),
// (1,5), (2,6), (3,7) of (q - z), each times its group's scale (rounded once to T, the weight F.linear
// multiplies by), A of wgmmas 8 s + 2 j and 8 s + 2 j + 1. A dot product does not depend on the order
// of its terms, so x is staged with the same permutation: k slot 2c + e of wgmma 8 s + 2 j + h holds
// x[k] for k = 128 s + 32 c + 8 j + 2 h + 4 e, slot 2c + 8 + e the k one higher. The stage is wgmma's
// K-major 128-byte-swizzled layout: row n of x in a tile of 64 k slots at n * 128 bytes, its 16-byte
// chunk ch at ch ^ (n % 8), tiles MX * 128 bytes apart, k16 slot i of a tile 32 i bytes in.
//
// Work: the grid's y splits K into CLUSTER parts (whole steps; the last may hold fewer, or none), one
// thread-block cluster a tile of 64 WG rows of W; its z covers M in slices of MX rows. Each block stages
// its rows of x over its K part once, then walks tiles gridDim.x apart. A thread's codes come by cp.async
// into its own 32 bytes of RING shared-memory stages, RING - 1 steps ahead (no barrier: a thread reads
// only what it copied), their scales and zero points into registers. With CLUSTER > 1 a tile's partial
// sums go to shared memory (two buffers, alternating), the cluster barrier's arrive follows, and they
// are added across the cluster through distributed shared memory while the next tile's first wgmmas
// run (its wait comes then): the adds overlap the tensor cores instead of stopping them (M = 64,
// 28672 x 4096: 67.3 -> 59.9 us in the experiment).
//
// Preconditions (autotune/ops/qgemm: space and bind): K % 128 == 0, x, W, out 16-byte aligned, dynamic
// shared memory as shared_bytes() below.
#pragma once
#include "cluster.cuh"
#include "qgemm/qgemm.cu"

namespace at_qgemm_wgmma {

using at_common::finish;
using at_qgemm::Codes;

constexpr int STEP = 128;  // codes of a row a step covers: 4 pieces, 8 wgmma k16 slots

// Dynamic shared memory of an instance: x's slice, the partial sums (two buffers in a cluster), the
// codes' stages, and up to 1024 bytes to align the swizzled stage.
__host__ __device__ constexpr int x_bytes(int mx, int per_split) { return mx * per_split * STEP * 2; }
__host__ __device__ constexpr int shared_bytes(int mx, int wg, int cluster, int ring, int per_split) {
  return x_bytes(mx, per_split) + 64 * wg * mx * 4 * (cluster > 1 ? 2 : 1) + ring * 128 * wg * 32 + 1024;
}

__device__ __forceinline__ uint64_t descriptor(uint32_t addr) {
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
__device__ __forceinline__ float4 load_remote(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

#define AT_D4(i) "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define AT_A4 "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])
#define AT_WGMMA(shape, type) "wgmma.mma_async.sync.aligned." shape ".f32." type "." type " "

// d += A B: A (64 x 16) this thread's 4 registers, B (MX x 16, K-major) by descriptor.
template <typename T, int MX> struct Wgmma;
template <typename T> struct Wgmma<T, 16> {
  static __device__ __forceinline__ void run(float (&d)[8], const unsigned (&a)[4], uint64_t b) {
    if constexpr (std::is_same<T, __half>::value)
      asm volatile(AT_WGMMA("m64n16k16", "f16") "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, 1, 1, 1, 0;"
                   : AT_D4(0), AT_D4(4)
                   : AT_A4, "l"(b));
    else
      asm volatile(AT_WGMMA("m64n16k16", "bf16") "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, 1, 1, 1, 0;"
                   : AT_D4(0), AT_D4(4)
                   : AT_A4, "l"(b));
  }
};
#define AT_D16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
template <typename T> struct Wgmma<T, 32> {
  static __device__ __forceinline__ void run(float (&d)[16], const unsigned (&a)[4], uint64_t b) {
    if constexpr (std::is_same<T, __half>::value)
      asm volatile(AT_WGMMA("m64n32k16", "f16") AT_D16 ", {%16,%17,%18,%19}, %20, 1, 1, 1, 0;"
                   : AT_D4(0), AT_D4(4), AT_D4(8), AT_D4(12)
                   : AT_A4, "l"(b));
    else
      asm volatile(AT_WGMMA("m64n32k16", "bf16") AT_D16 ", {%16,%17,%18,%19}, %20, 1, 1, 1, 0;"
                   : AT_D4(0), AT_D4(4), AT_D4(8), AT_D4(12)
                   : AT_A4, "l"(b));
  }
};
#define AT_D32                                                                                            \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27," \
  "%28,%29,%30,%31}"
template <typename T> struct Wgmma<T, 64> {
  static __device__ __forceinline__ void run(float (&d)[32], const unsigned (&a)[4], uint64_t b) {
    if constexpr (std::is_same<T, __half>::value)
      asm volatile(AT_WGMMA("m64n64k16", "f16") AT_D32 ", {%32,%33,%34,%35}, %36, 1, 1, 1, 0;"
                   : AT_D4(0), AT_D4(4), AT_D4(8), AT_D4(12), AT_D4(16), AT_D4(20), AT_D4(24), AT_D4(28)
                   : AT_A4, "l"(b));
    else
      asm volatile(AT_WGMMA("m64n64k16", "bf16") AT_D32 ", {%32,%33,%34,%35}, %36, 1, 1, 1, 0;"
                   : AT_D4(0), AT_D4(4), AT_D4(8), AT_D4(12), AT_D4(16), AT_D4(20), AT_D4(24), AT_D4(28)
                   : AT_A4, "l"(b));
  }
};
#undef AT_D4
#undef AT_A4
#undef AT_WGMMA
#undef AT_D16
#undef AT_D32

template <typename T, int MX, int WG, int CLUSTER, int RING, int GROUP, int SYM>
__device__ __forceinline__ void qgemm_wgmma_body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                                 const T* __restrict__ scales, const unsigned char* __restrict__ zeros,
                                                 T* __restrict__ out, int M, int N, int K, float alpha, float beta) {
  static_assert(MX == 16 || MX == 32 || MX == 64, "wgmma's n: 16, 32 or 64 rows of x");
  static_assert(GROUP % at_qgemm::PIECE == 0 && STEP % GROUP == 0, "a piece lies inside one group");
  static_assert(RING >= 2, "two stages at least");
  constexpr int THREADS = 128 * WG, ROWS = 64 * WG, STAGE_BYTES = THREADS * 32, PART = ROWS * MX;
  extern __shared__ unsigned char smem_raw[];
  // Aligned by an offset from smem_raw, not by rounding a generic address: the compiler then still knows
  // the pointers below address shared memory and emits LDS/STS, not generic loads and stores.
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
  unsigned char* smem = smem_raw + ((1024 - (raw & 1023)) & 1023);
  const uint32_t sx = raw + ((1024 - (raw & 1023)) & 1023);
  const uint64_t x_descriptor = descriptor(sx);

  at_qgemm::launch_dependents();
  const int all_steps = K / STEP, per_split = (all_steps + CLUSTER - 1) / CLUSTER;
  const int step_begin = min(all_steps, (int)blockIdx.y * per_split);
  const int steps = min(all_steps, step_begin + per_split) - step_begin;  // may be 0: sums stay zero
  const int kbase = step_begin * STEP, m0 = blockIdx.z * MX, tid = threadIdx.x;
  const int lane = tid & 31, warp = (tid >> 5) & 3, wg = tid >> 7, g = lane >> 2, c = lane & 3;
  const int wrow = wg * 64 + warp * 16 + g;  // this thread's rows of a tile: wrow and wrow + 8
  const int tiles = (N + ROWS - 1) / ROWS, groups_per_row = K / GROUP;

  float* part = reinterpret_cast<float*>(smem + x_bytes(MX, per_split));
  unsigned char* codes = smem + x_bytes(MX, per_split) + PART * 4 * (CLUSTER > 1 ? 2 : 1);
  const uint32_t my_codes = (uint32_t)__cvta_generic_to_shared(codes) + tid * 16;
  unsigned scale_ring[RING][2];
  typename Codes<T>::Zero zero_ring[RING][2];

  // The tile being asked for, and this thread's two rows of it at its K part's first code. Up to 32 rows
  // of x the rows' pointers are kept, so that a step's loads cost an add each (with the descriptor
  // added to below, a warp's step went from 225 instructions to 175 at MX = 32, and 27 configs ran 1.04x
  // faster, geometric mean); at MX = 64 each step works its addresses out again: kept there, they ran
  // 0.97x over 16 configs (one block an SM either way; why was not found).
  constexpr bool KEEP_ROWS = MX < 64;
  int aimed = 0;
  const unsigned char* row_codes[2];
  const T* row_scales[2];
  const unsigned char* row_zeros[2];
  const auto rows_of = [&](int tile, int h, const unsigned char*& w, const T*& s, const unsigned char*& z) {
    const size_t row = (size_t)min(tile * ROWS + wrow + 8 * h, N - 1);  // rows past N: N - 1, never written
    const int k = kbase + at_qgemm::PIECE * c;
    w = qweight + row * (K / 2) + k / 2;
    s = scales + row * groups_per_row + k / GROUP;
    z = SYM ? zeros : zeros + row * groups_per_row + k / GROUP;
  };
  const auto aim = [&](int tile) {
    aimed = tile;
    if constexpr (KEEP_ROWS) {
#pragma unroll
      for (int h = 0; h < 2; ++h) rows_of(tile, h, row_codes[h], row_scales[h], row_zeros[h]);
    }
  };
  // Step `step` of the aimed tile: this thread's pieces of its two rows into stage `slot`, their scales
  // and zero points into registers.
  const auto ask = [&](int step, int slot) {
    if (step < steps) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const unsigned char *w = KEEP_ROWS ? row_codes[h] : nullptr, *z = KEEP_ROWS ? row_zeros[h] : nullptr;
        const T* s = KEEP_ROWS ? row_scales[h] : nullptr;  // else set by rows_of, not read unset
        if constexpr (!KEEP_ROWS) rows_of(aimed, h, w, s, z);
        copy16(my_codes + slot * STAGE_BYTES + h * THREADS * 16, w + step * (STEP / 2));
        scale_ring[slot][h] = at_qgemm::scale_pair<T>(s[step * (STEP / GROUP)]);
        zero_ring[slot][h] = Codes<T>::zero(SYM ? 8 : z[step * (STEP / GROUP)] & 0xF);
      }
    }
    copies_commit();  // one group a step, empty or not, so that the waits count steps
  };

  // The weights may be written by the grid before (PDL). The first tile's first RING - 1 steps are
  // asked for before x is staged, so their DRAM trips overlap the staging.
  at_qgemm::wait_for_prior_grid();
  int tile = blockIdx.x;
  aim(tile);
#pragma unroll
  for (int r = 0; r < RING - 1; ++r) ask(r, r);

  // x's rows [m0, m0 + MX) over this block's K part, permuted as the A fragments are (rows past M and
  // steps past the part hold zeros). Eight 16-byte loads are in flight before the first is stored (one
  // at a time, the staging was bound by the L2's latency).
  {
    const int chunks = per_split * STEP / 8;
    constexpr int BATCH = 8;
    for (int i0 = tid; i0 < MX * chunks; i0 += BATCH * THREADS) {
      uint4 v[BATCH];
#pragma unroll
      for (int b = 0; b < BATCH; ++b) {
        const int i = i0 + b * THREADS, n = i / chunks, kl = (i - n * chunks) * 8;
        v[b] = i < MX * chunks && m0 + n < M && kl < steps * STEP
                   ? *reinterpret_cast<const uint4*>(x + (size_t)(m0 + n) * K + kbase + kl)
                   : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int b = 0; b < BATCH; ++b) {
        const int i = i0 + b * THREADS, n = i / chunks, kl = (i - n * chunks) * 8;
        if (i >= MX * chunks) break;
        const int s = kl >> 7, cq = (kl >> 5) & 3, j = (kl >> 3) & 3;
        const unsigned words[4] = {__byte_perm(v[b].x, v[b].z, 0x5410), __byte_perm(v[b].x, v[b].z, 0x7632),
                                   __byte_perm(v[b].y, v[b].w, 0x5410), __byte_perm(v[b].y, v[b].w, 0x7632)};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int u = 8 * s + 2 * j + (q >> 1), p = 2 * cq + 8 * (q & 1), e = 16 * (u & 3) + p;
          const int at = (u >> 2) * (MX * 128) + n * 128 + (((e >> 3) ^ (n & 7)) << 4) + (e & 7) * 2;
          *reinterpret_cast<unsigned*>(smem + at) = words[q];
        }
      }
    }
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the tensor cores read what threads wrote
  __syncthreads();

  // Output o4 (four consecutive rows of W, one row of x) of the tile starting at W row `first`.
  const auto write = [&](int first, int o4, float4 v) {
    const int m = m0 + o4 / (ROWS / 4), row = first + (o4 % (ROWS / 4)) * 4;
    if (m >= M) return;
    const float sums[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const size_t at = (size_t)m * N + row + e;
      if (row + e < N) out[at] = finish<T>(sums[e], alpha, beta, out + at);
    }
  };
  // This thread's sums into a partial buffer laid out [row of x][row of W], so that consecutive
  // outputs are consecutive rows of W. D of wgmma: rows wrow, wrow + 8, columns 8 t + 2 c and + 1.
  const auto keep = [&](float* buffer, const float(&d)[MX / 2]) {
#pragma unroll
    for (int t = 0; t < MX / 8; ++t) {
      const int m = 8 * t + 2 * c;
      buffer[m * ROWS + wrow] = d[4 * t + 0];
      buffer[(m + 1) * ROWS + wrow] = d[4 * t + 1];
      buffer[m * ROWS + wrow + 8] = d[4 * t + 2];
      buffer[(m + 1) * ROWS + wrow + 8] = d[4 * t + 3];
    }
  };
  int pending = -1, parity = 0;  // a cluster's tile whose partials (in buffer parity ^ 1) wait to be added
  const auto add_pending = [&]() {
    if constexpr (CLUSTER > 1) {
      if (pending < 0) return;
      at_cluster::wait();  // every block's partials of the pending tile are in
      const uint32_t buffer = (uint32_t)__cvta_generic_to_shared(part + (parity ^ 1) * PART);
      uint32_t from[CLUSTER];
#pragma unroll
      for (int r = 0; r < CLUSTER; ++r) from[r] = at_cluster::map_to_rank(buffer, r);
      for (int o = (int)at_cluster::block_rank() * THREADS + tid; o < PART / 4; o += CLUSTER * THREADS) {
        float4 sum = load_remote(from[0] + o * 16);
#pragma unroll
        for (int r = 1; r < CLUSTER; ++r) {
          const float4 v = load_remote(from[r] + o * 16);
          sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
        }
        write(pending * ROWS, o, sum);
      }
      pending = -1;
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
          ask(s + RING - 1, (r + RING - 1) % RING);
          copies_wait<RING - 1>();  // this step's codes are in
          const uint4 lo = *reinterpret_cast<const uint4*>(codes + r * STAGE_BYTES + tid * 16);
          const uint4 hi = *reinterpret_cast<const uint4*>(codes + r * STAGE_BYTES + THREADS * 16 + tid * 16);
          const unsigned wlo[4] = {lo.x, lo.y, lo.z, lo.w}, whi[4] = {hi.x, hi.y, hi.z, hi.w};
          unsigned frag[8][4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            unsigned a[4], b[4];  // rows wrow and wrow + 8: pairs (0,4), (1,5), (2,6), (3,7) of q - z
            Codes<T>::of(wlo[j], zero_ring[r][0], a);
            Codes<T>::of(whi[j], zero_ring[r][1], b);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              a[i] = at_qgemm::times<T>(a[i], scale_ring[r][0]);
              b[i] = at_qgemm::times<T>(b[i], scale_ring[r][1]);
            }
            frag[2 * j][0] = a[0], frag[2 * j][1] = b[0], frag[2 * j][2] = a[1], frag[2 * j][3] = b[1];
            frag[2 * j + 1][0] = a[2], frag[2 * j + 1][1] = b[2], frag[2 * j + 1][2] = a[3], frag[2 * j + 1][3] = b[3];
          }
          fence();
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const int u = 8 * s + i;
            // The descriptor's address field counts 16 bytes and cannot carry out of shared memory's range.
            Wgmma<T, MX>::run(d, frag[i], x_descriptor + (uint64_t)(((u >> 2) * (MX * 128) + (u & 3) * 32) >> 4));
          }
          commit();
          if (s == 0) add_pending();  // the previous tile's sums, beside this tile's first wgmmas
          wait<1>();
        }
      }
    }
    wait<0>();
    if (steps == 0) add_pending();  // a part with no steps adds its share all the same
    // The next tile's first steps are asked for now, so their loads overlap this tile's sums.
    const int next = tile + gridDim.x;
    if (next < tiles) {
      aim(next);
#pragma unroll
      for (int r = 0; r < RING - 1; ++r) ask(r, r);
    }
    if constexpr (CLUSTER > 1) {
      keep(part + parity * PART, d);
      at_cluster::arrive();
      pending = tile, parity ^= 1;
    } else {
      __syncthreads();  // the previous tile's partials are all written out
      keep(part, d);
      __syncthreads();
      for (int o = tid; o < PART / 4; o += THREADS) write(tile * ROWS, o, reinterpret_cast<const float4*>(part)[o]);
    }
  }
  if constexpr (CLUSTER > 1) {
    add_pending();
    // No block exits (freeing its shared memory) while another still reads its partials.
    at_cluster::arrive();
    at_cluster::wait();
  }
}

}  // namespace at_qgemm_wgmma

// One instance, as autotune/ops/qgemm generates it (sm_90a):
//   extern "C" __global__ void __cluster_dims__(1, 4, 1) __launch_bounds__(256, 1) qgemm_wgmma_<key>(
//       const __half* x, const unsigned char* qweight, const __half* scales, const unsigned char* zeros,
//       __half* out, int M, int N, int K, float alpha, float beta, float* workspace, unsigned int* counters) {
//     at_qgemm_wgmma::qgemm_wgmma_body<__half, 64, 2, 4, 4, 128, 1>(x, qweight, scales, zeros, out, M, N, K,
//                                                                   alpha, beta);
//   }
