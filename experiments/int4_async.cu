// Does a cp.async pipeline lift the int4 GEMV (kernels/qgemm/qgemm.cu) towards the bandwidth wall?
// experiments/int4_access/ showed that the bytes a warp keeps in flight, not qgemm's 8-rows x 64-byte
// access pattern, set the read rate (1, 2 and 4 KiB a warp: 1.89, 2.96, 3.26 TB/s on 28672 x 4096),
// while qgemm holds its loads in registers: two 1 KiB stages at 84 registers, and two 2 KiB stages
// need about 110, which halves the warps an SM. Here each lane copies its own 16-byte pieces with
// cp.async into a ring of STAGES slots in shared memory (no registers held by a load in flight), so a
// warp has up to STAGES - 1 KiB in flight, and reads each piece back when it multiplies it. Everything
// else is qgemm's: the same fragments, dequantization (at_qgemm::Codes), x staged as pairs, scales
// after the MMAs (group 128), K split over a cluster.
//
// A second variant, `bulk`, moves the weights with the Hopper copy engine instead (cp.async.bulk, no
// tensor map): per stage, 16 lanes of a warp each start one copy of its row's next QPS x 64 bytes into
// the warp's ring, completing on the slot's mbarrier; every lane waits on that barrier, reads its 16-byte
// pieces back (rows padded so the two rows a quarter-warp reads lie in other banks) and loads its scales
// when the stage is filled. A load in flight costs no register and one instruction a row and stage.
//
// A third, `simt`, is described where it is defined: no tensor cores, whole rows a warp, deep register loads.
//
// The program checks every variant against a float64 product on the host (output poisoned with NaN
// first) and times it the way autotune times kernels (experiments/bench_common.cuh: back to back behind
// a spin kernel, the weights rotating over 4x the L2), beside qgemm's instances at the H200 sweeps'
// picks for the same shapes (db/records/nvidia-h200-qgemm.jsonl, M = 1, float16, g128). One JSON
// object a line. Build and run from the repository root on a GPU machine:
//   nvcc -O3 -arch=sm_90 -std=c++17 -I kernels -I kernels/common -o /tmp/int4_async \
//     experiments/int4_async.cu && /tmp/int4_async
#include "int4_harness.cuh"
#include "qgemm/qgemm.cu"

#include <algorithm>
#include <cmath>
#include <random>

// What the cp.async and bulk variants share: x staged as qgemm's pairs, one step's MMAs, the output.
namespace at_qgemm_ring {
using namespace at_qgemm;
using at_common::finish;

// x's one row (M = 1) of the split as the pairs qgemm stages, zero past its codes; then a block barrier.
template <typename T, int BLOCK>
__device__ __forceinline__ void stage_x(const T* __restrict__ x, unsigned char* x_slice, int per_split, int piece_begin,
                                        int piece_count) {
  for (int word = threadIdx.x; word < per_split * 4; word += BLOCK) {
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (word < piece_count * 4) v = __ldg(reinterpret_cast<const uint4*>(x + (size_t)(piece_begin * 4 + word) * 8));
    uint4 pairs;
    pairs.x = __byte_perm(v.x, v.z, 0x5410);
    pairs.y = __byte_perm(v.x, v.z, 0x7632);
    pairs.z = __byte_perm(v.y, v.w, 0x5410);
    pairs.w = __byte_perm(v.y, v.w, 0x7632);
    *reinterpret_cast<uint4*>(x_slice + (word / 4) * PIECE_BYTES + (word % 4) * 16) = pairs;
  }
  __syncthreads();
}

// Step k (a quad) of the lane's rows g and g + 8: their 16-byte pieces times x's pairs, into part.
template <typename T>
__device__ __forceinline__ void step_product(float (&part)[4], const uint4& lo_words, const uint4& hi_words,
                                             typename Codes<T>::Zero zero_lo, typename Codes<T>::Zero zero_hi,
                                             const unsigned char* x_slice, int k, int g, int c) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    // B's column g is row g of x: only g = 0 exists at M = 1.
    const uint4 b = g == 0 ? *reinterpret_cast<const uint4*>(x_slice + (k * QUAD + c) * PIECE_BYTES + j * 16)
                           : make_uint4(0u, 0u, 0u, 0u);
    unsigned lo[4], hi[4];
    Codes<T>::of(reinterpret_cast<const unsigned*>(&lo_words)[j], zero_lo, lo);
    Codes<T>::of(reinterpret_cast<const unsigned*>(&hi_words)[j], zero_hi, hi);
    if (j == 0)
      mma<T, true>(part, lo[0], hi[0], lo[1], hi[1], b.x, b.y);
    else
      mma<T, false>(part, lo[0], hi[0], lo[1], hi[1], b.x, b.y);
    mma<T, false>(part, lo[2], hi[2], lo[3], hi[3], b.z, b.w);
  }
}

// The warp's sums into out (summed over the cluster's K splits first where CLUSTER > 1).
template <typename T, int ROWS, int CLUSTER>
__device__ __forceinline__ void write_out(const float (&d)[4], float* cluster_part, T* __restrict__ out, int M, int N,
                                          float alpha, float beta) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const int first_row = blockIdx.x * ROWS;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int m = 2 * c + (e & 1), row = warp * 16 + g + 8 * (e >> 1);
    if constexpr (CLUSTER == 1) {
      const size_t at = (size_t)m * N + first_row + row;
      if (m < M && first_row + row < N) out[at] = finish<T>(d[e], alpha, beta, out + at);
    } else {
      cluster_part[m * ROWS + row] = d[e];
    }
  }
  if constexpr (CLUSTER > 1) {
    at_common::cluster_sum<CLUSTER>(cluster_part, 8 * ROWS, [&](int o, float sum) {
      const int m = o / ROWS, row = first_row + o % ROWS;
      const size_t at = (size_t)m * N + row;
      if (m < M && row < N) out[at] = finish<T>(sum, alpha, beta, out + at);
    });
  }
}
}  // namespace at_qgemm_ring

namespace at_qgemm_async {
using namespace at_qgemm;
using at_common::finish;
using at_common::to_float;

__device__ __forceinline__ void copy16(void* dst, const void* src) {
  const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(src) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// M = 1 (one row of x), one tile of 16 rows of W a warp, one step (4 pieces a quad) a stage. A lane
// reads back only the slots it filled itself, so no barrier is needed between warps or lanes: the
// wait_group orders its own copies, and a slot is refilled only after the LDS that read it was issued
// (asm volatile with a memory clobber keeps that order; the copy lands a DRAM latency later).
template <typename T, int BLOCK, int STAGES, int GROUP, int SYM, int CLUSTER>
__device__ __forceinline__ void body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                     const T* __restrict__ scales, const unsigned char* __restrict__ zeros,
                                     T* __restrict__ out, int M, int N, int K, float alpha, float beta) {
  static_assert(scales_after<GROUP>, "the experiment covers groups of 128 (scales after the MMAs)");
  constexpr int WARPS = BLOCK / 32, ROWS = WARPS * 16;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float cluster_part[CLUSTER > 1 ? ROWS * 8 : 1];
  launch_dependents();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, c = lane % 4;
  uint4* ring = reinterpret_cast<uint4*>(smem) + warp * STAGES * 64;  // [slot][row g, g + 8][lane]
  unsigned char* x_slice = smem + WARPS * STAGES * 1024;
  const int pieces = K / PIECE, quads = (pieces + QUAD - 1) / QUAD;
  const int per_split = (quads + CLUSTER - 1) / CLUSTER * QUAD;
  const int piece_begin = min(pieces, (int)blockIdx.y * per_split);
  const int piece_count = min(pieces, piece_begin + per_split) - piece_begin;
  const int steps = per_split / QUAD;
  const int groups_per_row = K / GROUP;
  const int warp_row = blockIdx.x * ROWS + warp * 16;
  const uint4* w[2];
  const T* s[2];
  const unsigned char* z[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = min(warp_row + g + 8 * h, N - 1);
    w[h] = reinterpret_cast<const uint4*>(qweight + (size_t)row * (K / 2)) + piece_begin;
    s[h] = scales + (size_t)row * groups_per_row;
    z[h] = SYM ? nullptr : zeros + (size_t)row * groups_per_row;
  }
  float scale[STAGES][2];
  typename Codes<T>::Zero zero[STAGES][2];
  // Step `step` into slot `slot` (pieces past the split's end read its last piece: zero x meets them).
  auto issue = [&](int step, int slot) {
    const int piece = min(step * QUAD + c, piece_count - 1);
    const int group = (piece_begin + piece) * PIECE / GROUP;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      copy16(ring + (slot * 2 + h) * 32 + lane, w[h] + piece);
      scale[slot][h] = to_float(s[h][group]);
      zero[slot][h] = Codes<T>::zero(SYM ? 8 : z[h][group] & 0xF);
    }
  };

  wait_for_prior_grid();
  if (piece_count > 0) {
#pragma unroll
    for (int p = 0; p < STAGES - 1; ++p) {
      issue(p, p);
      commit();
    }
  }
  at_qgemm_ring::stage_x<T, BLOCK>(x, x_slice, per_split, piece_begin, piece_count);

  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < steps && piece_count > 0; k0 += STAGES) {
#pragma unroll
    for (int p = 0; p < STAGES; ++p) {
      const int k = k0 + p;
      issue(k + STAGES - 1, (p + STAGES - 1) % STAGES);
      commit();
      wait_groups<STAGES - 1>();  // step k's copies have landed
      if (k < steps) {
        const uint4 lo_words = ring[(p * 2) * 32 + lane], hi_words = ring[(p * 2 + 1) * 32 + lane];
        float part[4];
        at_qgemm_ring::step_product<T>(part, lo_words, hi_words, zero[p][0], zero[p][1], x_slice, k, g, c);
#pragma unroll
        for (int e = 0; e < 4; ++e) d[e] = fmaf(part[e], scale[p][e >> 1], d[e]);
      }
    }
  }
  wait_groups<0>();  // no copy may land after the block has gone

  at_qgemm_ring::write_out<T, ROWS, CLUSTER>(d, cluster_part, out, M, N, alpha, beta);
}
}  // namespace at_qgemm_async

namespace at_qgemm_bulk {
using namespace at_qgemm;
using at_common::finish;
using at_common::to_float;

__device__ __forceinline__ unsigned shared_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void barrier_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void expect_bytes(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(bar))
               : "memory");
}
__device__ __forceinline__ bool landed(unsigned long long* bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

// A stage's row in the ring: QPS x 64 bytes of codes, padded to 64 bytes past a multiple of 128, so
// rows g and g + 1 (a quarter-warp's 16-byte reads) fall on other banks.
__host__ __device__ constexpr int row_stride_of(int qps) { return qps * 64 + (qps % 2 == 0 ? 64 : 0); }
template <int QPS> constexpr int row_stride = row_stride_of(QPS);

// M = 1, one tile of 16 rows a warp, QPS steps (quads) a stage, STAGES slots a warp.
template <typename T, int BLOCK, int STAGES, int QPS, int GROUP, int SYM, int CLUSTER>
__device__ __forceinline__ void body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                     const T* __restrict__ scales, const unsigned char* __restrict__ zeros,
                                     T* __restrict__ out, int M, int N, int K, float alpha, float beta) {
  static_assert(GROUP == QUAD * PIECE, "the experiment covers groups of 128: one scale a row and step");
  static_assert(SYM, "the experiment covers symmetric codes");
  constexpr int WARPS = BLOCK / 32, ROWS = WARPS * 16, STRIDE = row_stride<QPS>, SLOT = 16 * STRIDE;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float cluster_part[CLUSTER > 1 ? ROWS * 8 : 1];
  __shared__ __align__(8) unsigned long long bars[WARPS][STAGES];
  launch_dependents();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, c = lane % 4;
  unsigned char* ring = smem + warp * STAGES * SLOT;
  unsigned char* x_slice = smem + WARPS * STAGES * SLOT;
  const int pieces = K / PIECE, quads = (pieces + QUAD - 1) / QUAD;
  const int per_split = (quads + CLUSTER - 1) / CLUSTER * QUAD;
  const int piece_begin = min(pieces, (int)blockIdx.y * per_split);
  const int piece_count = min(pieces, piece_begin + per_split) - piece_begin;
  const int steps = (piece_count + QUAD - 1) / QUAD;  // quads of this split that hold codes
  const int stages = (steps + QPS - 1) / QPS;
  const int groups_per_row = K / GROUP;
  const int warp_row = blockIdx.x * ROWS + warp * 16;
  // Lane r < 16 copies row r of the warp's tile; every lane reads rows g and g + 8.
  const unsigned char* my_row = qweight + (size_t)min(warp_row + (lane % 16), N - 1) * (K / 2) + piece_begin * 16;
  const T* s[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) s[h] = scales + (size_t)min(warp_row + g + 8 * h, N - 1) * groups_per_row;
  float scale[STAGES][QPS][2];
  const auto zero = Codes<T>::zero(8);

  if (lane == 0) {
#pragma unroll
    for (int slot = 0; slot < STAGES; ++slot) barrier_init(&bars[warp][slot], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  // Stage `stage` into `slot`: the copies, and this lane's scales for its steps.
  auto fill = [&](int stage, int slot) {
    const int first = stage * QPS * QUAD;  // its first piece, within the split
    const unsigned bytes = (unsigned)min(QPS * QUAD, piece_count - first) * 16;
    if (lane == 0) expect_bytes(&bars[warp][slot], 16 * bytes);
    __syncwarp();
    if (lane < 16) bulk_copy(ring + slot * SLOT + lane * STRIDE, my_row + first * 16, bytes, &bars[warp][slot]);
#pragma unroll
    for (int q = 0; q < QPS; ++q) {
      const int group = min(piece_begin + first + q * QUAD, pieces - 1) * PIECE / GROUP;
#pragma unroll
      for (int h = 0; h < 2; ++h) scale[slot][q][h] = to_float(s[h][group]);
    }
  };

  wait_for_prior_grid();
#pragma unroll
  for (int p = 0; p < STAGES - 1; ++p)
    if (p < stages) fill(p, p);
  at_qgemm_ring::stage_x<T, BLOCK>(x, x_slice, per_split, piece_begin, piece_count);

  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int t0 = 0; t0 < stages; t0 += STAGES) {
#pragma unroll
    for (int p = 0; p < STAGES; ++p) {
      const int t = t0 + p;
      if (t >= stages) break;
      if (t + STAGES - 1 < stages) {
        // The slot refilled was read in the previous stage: every lane's reads of it are done (the
        // warp barrier), and ordered before the copy engine's writes (the proxy fence).
        __syncwarp();
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        fill(t + STAGES - 1, (p + STAGES - 1) % STAGES);
      }
      while (!landed(&bars[warp][p], (t / STAGES) & 1)) {
      }
      const unsigned char* slot = ring + p * SLOT;
#pragma unroll
      for (int q = 0; q < QPS; ++q) {
        const int k = t * QPS + q;  // the step (quad) within the split
        if (k >= steps) break;
        const uint4 lo_words = *reinterpret_cast<const uint4*>(slot + g * STRIDE + q * 64 + c * 16);
        const uint4 hi_words = *reinterpret_cast<const uint4*>(slot + (g + 8) * STRIDE + q * 64 + c * 16);
        float part[4];
        at_qgemm_ring::step_product<T>(part, lo_words, hi_words, zero, zero, x_slice, k, g, c);
#pragma unroll
        for (int e = 0; e < 4; ++e) d[e] = fmaf(part[e], scale[p][q][e >> 1], d[e]);
      }
    }
  }

  at_qgemm_ring::write_out<T, ROWS, CLUSTER>(d, cluster_part, out, M, N, alpha, beta);
}
}  // namespace at_qgemm_bulk

// A third variant, `simt`, drops the tensor cores at M = 1: a warp owns RPW whole rows and each lane
// reads its 16-byte pieces (32 codes) of all of them, UNROLL pieces a row, into registers before it
// multiplies any (RPW x UNROLL x 512 bytes a warp in flight: 4 KiB at 4 x 2), dequantizes 8 codes with
// one shift, four LOP3 and two HSUB2 / two HFMA2 (as qgemm's Codes), and multiplies by x with HFMA2.
// x sits in shared memory as pairs (x[k], x[k + 4]) matching the dequantized halves, stored so that
// the 32 lanes' reads of one word index are consecutive (no bank conflict); each x read serves RPW
// rows. ACC = 0 sums a piece's 32 products in half2 before one float add; ACC = 1 adds each word's 8 in
// float (more instructions, float16 F.linear's rounding).
namespace at_qgemm_simt {

__device__ __forceinline__ unsigned lop3_and_or(unsigned a, unsigned mask, unsigned bits) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));  // (a & mask) | bits
  return d;
}

// One 32-bit word of codes (k .. k + 7, even k in the low nibble) times x's pairs for those k.
template <int ACC>
__device__ __forceinline__ void word_product(unsigned codes, const uint4& pairs, __half2& sum, float& acc) {
  const __half2 bias_lo = __halves2half2(__ushort_as_half(0x6408), __ushort_as_half(0x6408));  // 1024 + 8
  const __half2 sixteenth = __halves2half2(__float2half(0.0625f), __float2half(0.0625f));
  const __half2 bias_hi = __halves2half2(__float2half(-72.0f), __float2half(-72.0f));  // 64 + 8
  const unsigned shifted = codes >> 8;
  const unsigned a = lop3_and_or(codes, 0x000F000Fu, 0x64006400u);    // (1024 + q0, 1024 + q4)
  const unsigned b = lop3_and_or(codes, 0x00F000F0u, 0x64006400u);    // (1024 + 16 q1, 1024 + 16 q5)
  const unsigned c = lop3_and_or(shifted, 0x000F000Fu, 0x64006400u);  // (q2, q6)
  const unsigned d = lop3_and_or(shifted, 0x00F000F0u, 0x64006400u);  // (q3, q7) x 16
  const __half2 w0 = __hsub2(*reinterpret_cast<const __half2*>(&a), bias_lo);
  const __half2 w1 = __hfma2(*reinterpret_cast<const __half2*>(&b), sixteenth, bias_hi);
  const __half2 w2 = __hsub2(*reinterpret_cast<const __half2*>(&c), bias_lo);
  const __half2 w3 = __hfma2(*reinterpret_cast<const __half2*>(&d), sixteenth, bias_hi);
  __half2 s = ACC ? __float2half2_rn(0.0f) : sum;
  s = __hfma2(w0, *reinterpret_cast<const __half2*>(&pairs.x), s);
  s = __hfma2(w1, *reinterpret_cast<const __half2*>(&pairs.y), s);
  s = __hfma2(w2, *reinterpret_cast<const __half2*>(&pairs.z), s);
  s = __hfma2(w3, *reinterpret_cast<const __half2*>(&pairs.w), s);
  if (ACC) {
    const float2 f = __half22float2(s);
    acc += f.x + f.y;
  } else {
    sum = s;
  }
}

// M = 1, float16, symmetric g128. Block: BLOCK / 32 warps of RPW rows each; one row of x staged.
template <int BLOCK, int RPW, int UNROLL, int ACC>
__device__ __forceinline__ void body(const __half* __restrict__ x, const unsigned char* __restrict__ qweight,
                                     const __half* __restrict__ scales, __half* __restrict__ out, int N, int K,
                                     float alpha, float beta) {
  extern __shared__ uint4 xs[];  // word j of piece p (x[32p + 8j ...]) at xs[j * pieces + p]
  const int pieces = K / 32;      // 16-byte pieces a row
  for (int i = threadIdx.x; i < K / 8; i += BLOCK) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(x) + i);  // x[8i .. 8i + 7]
    uint4 pairs;
    pairs.x = __byte_perm(v.x, v.z, 0x5410);  // (x0, x4)
    pairs.y = __byte_perm(v.x, v.z, 0x7632);  // (x1, x5)
    pairs.z = __byte_perm(v.y, v.w, 0x5410);  // (x2, x6)
    pairs.w = __byte_perm(v.y, v.w, 0x7632);  // (x3, x7)
    xs[(i % 4) * pieces + i / 4] = pairs;
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * (BLOCK / 32) + threadIdx.x / 32) * RPW;
  if (row0 >= N) return;
  const int groups = K / 128;
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
        w[r][u] = p < pieces && row0 + r < N
                      ? __ldcs(reinterpret_cast<const uint4*>(qweight + (size_t)(row0 + r) * (K / 2)) + p)
                      : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int p = base + lane + 32 * u;
      if (p >= pieces) break;
      uint4 pairs[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) pairs[j] = xs[j * pieces + p];
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        if (row0 + r >= N) break;
        __half2 sum = __float2half2_rn(0.0f);
        float part = 0.0f;
        word_product<ACC>(w[r][u].x, pairs[0], sum, part);
        word_product<ACC>(w[r][u].y, pairs[1], sum, part);
        word_product<ACC>(w[r][u].z, pairs[2], sum, part);
        word_product<ACC>(w[r][u].w, pairs[3], sum, part);
        if (!ACC) {
          const float2 f = __half22float2(sum);
          part = f.x + f.y;
        }
        acc[r] = fmaf(part, __half2float(__ldg(scales + (size_t)(row0 + r) * groups + p / 4)), acc[r]);
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
      out[row0 + r] = __float2half(alpha * v + beta * before);
    }
  }
}
}  // namespace at_qgemm_simt

#define PASS x, qweight, scales, zeros, out, M, N, K, alpha, beta

// qgemm's instances (template <T, MT, BLOCK, TILES, UNROLL, GROUP, SYM, CLUSTER, POLICY>) at the
// H200 sweeps' M = 1 picks, float16 g128; as the op generates them, only a K split has cluster dims.
template <int BLOCK, int TILES, int UNROLL, int POLICY, int MINB>
__global__ void __launch_bounds__(BLOCK, MINB) qgemm_kernel(INT4_ARGS) {
  at_qgemm::qgemm_body<__half, 1, BLOCK, TILES, UNROLL, 128, 1, 1, POLICY>(PASS);
}
template <int BLOCK, int TILES, int UNROLL, int CLUSTER, int POLICY, int MINB>
__global__ void __cluster_dims__(1, CLUSTER, 1) __launch_bounds__(BLOCK, MINB) qgemm_split_kernel(INT4_ARGS) {
  at_qgemm::qgemm_body<__half, 1, BLOCK, TILES, UNROLL, 128, 1, CLUSTER, POLICY>(PASS);
}
template <int BLOCK, int STAGES, int MINB>
__global__ void __launch_bounds__(BLOCK, MINB) async_kernel(INT4_ARGS) {
  at_qgemm_async::body<__half, BLOCK, STAGES, 128, 1, 1>(PASS);
}
template <int BLOCK, int STAGES, int CLUSTER, int MINB>
__global__ void __cluster_dims__(1, CLUSTER, 1) __launch_bounds__(BLOCK, MINB) async_split_kernel(INT4_ARGS) {
  at_qgemm_async::body<__half, BLOCK, STAGES, 128, 1, CLUSTER>(PASS);
}

template <int BLOCK, int RPW, int UNROLL, int ACC, int MINB>
__global__ void __launch_bounds__(BLOCK, MINB) simt_kernel(INT4_ARGS) {
  at_qgemm_simt::body<BLOCK, RPW, UNROLL, ACC>(x, qweight, scales, out, N, K, alpha, beta);
}

template <int BLOCK, int STAGES, int QPS, int MINB>
__global__ void __launch_bounds__(BLOCK, MINB) bulk_kernel(INT4_ARGS) {
  at_qgemm_bulk::body<__half, BLOCK, STAGES, QPS, 128, 1, 1>(PASS);
}
template <int BLOCK, int STAGES, int QPS, int CLUSTER, int MINB>
__global__ void __cluster_dims__(1, CLUSTER, 1) __launch_bounds__(BLOCK, MINB) bulk_split_kernel(INT4_ARGS) {
  at_qgemm_bulk::body<__half, BLOCK, STAGES, QPS, 128, 1, CLUSTER>(PASS);
}

struct Variant {
  const char* kernel;
  int block, tiles, unroll, stages, cluster, policy, min_blocks, persist;
  void (*fn)(INT4_ARGS);
  int qps = 0;  // bulk: steps a stage
  int rpw = 0;  // simt: rows a warp (tiles: pieces a row in flight, unroll: ACC)
};

// Launch geometry as autotune/ops/qgemm's launch() for qgemm; one block a row tile for async and bulk.
static void geometry(const Variant& v, int n, int k, int sms, dim3& grid, size_t& shared) {
  if (v.rpw) {  // simt: a warp a RPW rows, x staged whole
    const int rows = v.block / 32 * v.rpw;
    grid = dim3((n + rows - 1) / rows, 1, 1);
    shared = (size_t)k * 2;
    return;
  }
  const int rows = v.block / 32 * (v.stages ? 1 : v.tiles) * 16;
  const int tiles = (n + rows - 1) / rows;
  const int quads = (k / 32 + 3) / 4;
  const int per_split = (quads + v.cluster - 1) / v.cluster * 4;
  const size_t x_bytes = at_qgemm::x_row_bytes(per_split);
  grid = dim3(v.persist ? std::min(tiles, v.persist * sms) : tiles, v.cluster, 1);
  const size_t slot = v.qps ? (size_t)16 * at_qgemm_bulk::row_stride_of(v.qps) : 1024;
  shared = v.stages ? (size_t)v.block / 32 * v.stages * slot + x_bytes : x_bytes;
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  printf("{\"device\": \"%s\", \"sms\": %d, \"l2_bytes\": %d}\n", setup.prop.name, setup.prop.multiProcessorCount,
         setup.prop.l2CacheSize);
  struct Shape {
    int n, k;
    std::vector<Variant> variants;
  };
  // The sweeps' picks (us on the H200): 28672x4096 b256 t1 u1 c1 p2 o1 (23.1), 37888x3584 b128 t1 u1 c1
  // p2 o2 (24.1), 4096x14336 b64 t2 u1 c8 p0 o3 persist 2 (17.5), 3584x18944 b256 t2 u2 c8 p2 o1 persist 4
  // (17.7); then the cp.async variants.
  std::vector<Variant> wide = {
      {"qgemm", 256, 1, 1, 0, 1, 2, 1, 0, qgemm_kernel<256, 1, 1, 2, 1>},
      {"qgemm", 128, 1, 1, 0, 1, 2, 2, 0, qgemm_kernel<128, 1, 1, 2, 2>},
      {"async", 128, 1, 1, 4, 1, 0, 1, 0, async_kernel<128, 4, 1>},
      {"async", 128, 1, 1, 8, 1, 0, 1, 0, async_kernel<128, 8, 1>},
      {"async", 256, 1, 1, 4, 1, 0, 1, 0, async_kernel<256, 4, 1>},
      {"async", 256, 1, 1, 8, 1, 0, 1, 0, async_kernel<256, 8, 1>},
      {"async", 256, 1, 1, 8, 1, 0, 2, 0, async_kernel<256, 8, 2>},
      {"async", 128, 1, 1, 16, 1, 0, 2, 0, async_kernel<128, 16, 2>},
      {"bulk", 128, 1, 1, 4, 1, 0, 1, 0, bulk_kernel<128, 4, 4, 1>, 4},
      {"bulk", 128, 1, 1, 3, 1, 0, 1, 0, bulk_kernel<128, 3, 8, 1>, 8},
      {"bulk", 256, 1, 1, 4, 1, 0, 1, 0, bulk_kernel<256, 4, 2, 1>, 2},
      {"bulk", 256, 1, 1, 3, 1, 0, 1, 0, bulk_kernel<256, 3, 4, 1>, 4},
      {"bulk", 64, 1, 1, 4, 1, 0, 2, 0, bulk_kernel<64, 4, 4, 2>, 4},
      // simt: tiles = UNROLL (pieces a row in flight), unroll = ACC, rpw = rows a warp
      {"simt", 256, 2, 0, 0, 1, 0, 1, 0, simt_kernel<256, 4, 2, 0, 1>, 0, 4},
      {"simt", 256, 2, 1, 0, 1, 0, 1, 0, simt_kernel<256, 4, 2, 1, 1>, 0, 4},
      {"simt", 256, 4, 0, 0, 1, 0, 1, 0, simt_kernel<256, 2, 4, 0, 1>, 0, 2},
      {"simt", 128, 4, 0, 0, 1, 0, 2, 0, simt_kernel<128, 4, 4, 0, 2>, 0, 4},
      {"simt", 512, 1, 0, 0, 1, 0, 1, 0, simt_kernel<512, 8, 1, 0, 1>, 0, 8},
  };
  std::vector<Variant> narrow = {
      {"qgemm", 64, 2, 1, 0, 8, 0, 3, 2, qgemm_split_kernel<64, 2, 1, 8, 0, 3>},
      {"qgemm", 256, 2, 2, 0, 8, 2, 1, 4, qgemm_split_kernel<256, 2, 2, 8, 2, 1>},
      {"async", 128, 1, 1, 4, 4, 0, 1, 0, async_split_kernel<128, 4, 4, 1>},
      {"async", 128, 1, 1, 8, 4, 0, 1, 0, async_split_kernel<128, 8, 4, 1>},
      {"async", 128, 1, 1, 8, 8, 0, 1, 0, async_split_kernel<128, 8, 8, 1>},
      {"async", 64, 1, 1, 8, 8, 0, 2, 0, async_split_kernel<64, 8, 8, 2>},
      {"bulk", 128, 1, 1, 4, 4, 0, 1, 0, bulk_split_kernel<128, 4, 2, 4, 1>, 2},
      {"bulk", 128, 1, 1, 3, 8, 0, 1, 0, bulk_split_kernel<128, 3, 4, 8, 1>, 4},
      {"bulk", 64, 1, 1, 4, 8, 0, 2, 0, bulk_split_kernel<64, 4, 2, 8, 2>, 2},
      {"simt", 256, 2, 0, 0, 1, 0, 1, 0, simt_kernel<256, 4, 2, 0, 1>, 0, 4},
      {"simt", 256, 4, 0, 0, 1, 0, 1, 0, simt_kernel<256, 2, 4, 0, 1>, 0, 2},
      {"simt", 128, 4, 1, 0, 1, 0, 2, 0, simt_kernel<128, 1, 4, 1, 2>, 0, 1},
      {"simt", 256, 8, 0, 0, 1, 0, 1, 0, simt_kernel<256, 1, 8, 0, 1>, 0, 1},
  };
  const std::vector<Shape> shapes = {{28672, 4096, wide}, {37888, 3584, wide}, {4096, 14336, narrow},
                                     {3584, 18944, narrow}, {4096, 4096, narrow}};
  std::mt19937 rng(7);
  for (const Shape& shape : shapes) {
    const int n = shape.n, k = shape.k;
    const auto print = [&](const Variant& v, float us, double gbs, double rel) {
      printf("{\"kernel\": \"%s\", \"rpw\": %d, \"block\": %d, \"tiles\": %d, \"unroll\": %d, \"stages\": %d, \"qps\": %d, \"cluster\": %d, "
             "\"policy\": %d, \"min_blocks\": %d, \"persist\": %d, \"n\": %d, \"k\": %d, \"us\": %.2f, \"gbs\": %.0f, "
             "\"rel_err\": %.3g, \"ok\": %s}\n",
             v.kernel, v.rpw, v.block, v.tiles, v.unroll, v.stages, v.qps, v.cluster, v.policy, v.min_blocks, v.persist, n, k, us,
             gbs, rel, rel < 2e-3 ? "true" : "false");
    };
    if (run_int4_shape(setup, rng, n, k, shape.variants, geometry, print)) return 1;
  }
  return 0;
}
