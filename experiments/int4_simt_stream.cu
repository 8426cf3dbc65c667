// Does the 8-bit streaming GEMV's way of starting lift the CUDA-core int4 GEMV (kernels/qgemm/qgemm_simt.cu,
// M = 1)? The 8-bit GEMV (kernels/q8gemm/q8gemv.cu) reads the big matrices at 95-97% of copy; the int4
// CUDA-core GEMV tops out near 2.2 TB/s (docs/lowbit.md). Two of the 8-bit GEMV's habits the int4 body
// lacks, each a template flag of stream_body below (all off: the shipped body's code):
//   PF      each thread asks L2 for its first PF pieces of each of its rows before griddepcontrol.wait,
//           so that the DRAM trip overlaps the grid before and the x staging (codes are never written by
//           the grid before: an early line is never stale);
//   ISSUED  every load of a round is issued before the round's first product: a +0.0f built from one
//           word of each of the round's pieces, masked with N >> 31, added to the sums (gemv.cu's
//           issued_zero);
//   EARLY   the first round's codes loaded into registers before x is staged (alone, this was slower:
//           docs/lowbit.md; here with PF it starts from L2).
// Every variant is checked against float64 (int4_harness.cuh, output poisoned first) and timed in the
// benchmarks' isolated clock: a plain one-warp separator kernel before each call, ours launched with
// programmatic dependent launch as autotune launches it, the separator's own time taken off; the codes
// rotate over 4x the L2. The shipped body (kind "shipped") runs at the H200 records' CUDA-core tilings,
// the tensor-core picks beside it on their shapes. One JSON object a line. From the repository root:
//   nvcc -O3 -arch=sm_90 -std=c++17 -I kernels -I kernels/common -I experiments -o /tmp/int4_simt_stream \
//     experiments/int4_simt_stream.cu && /tmp/int4_simt_stream
#include "int4_harness.cuh"
#include "qgemm/qgemm_simt.cu"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

using at_qgemm::Codes;
using at_qgemm::PIECE;

template <int BLOCK, int RPW, int UNROLL, int CHAIN, int PF, int ISSUED, int EARLY>
__device__ __forceinline__ void stream_body(const __half* __restrict__ x, const unsigned char* __restrict__ qweight,
                                            const __half* __restrict__ scales, __half* __restrict__ out, int N, int K,
                                            float alpha, float beta) {
  constexpr int GROUP = 128, PIECES_A_GROUP = GROUP / PIECE;
  extern __shared__ uint4 xs[];
  const int pieces = K / PIECE;
  const int groups = K / GROUP;
  const int lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * (BLOCK / 32) + threadIdx.x / 32) * RPW;
  const uint4* rows[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r)  // rows past N read the last row and are never written
    rows[r] = reinterpret_cast<const uint4*>(qweight + (size_t)min(row0 + r, N - 1) * (K / 2));
  at_qgemm::launch_dependents();
#pragma unroll
  for (int d = 0; d < PF; ++d)
#pragma unroll
    for (int r = 0; r < RPW; ++r)
      if (lane + 32 * d < pieces) asm volatile("prefetch.global.L2 [%0];" ::"l"(rows[r] + lane + 32 * d) : "memory");
  at_qgemm::wait_for_prior_grid();
  uint4 first[RPW][UNROLL];
  if constexpr (EARLY) {
#pragma unroll
    for (int r = 0; r < RPW; ++r)
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        first[r][u] = lane + 32 * u < pieces ? __ldcs(rows[r] + lane + 32 * u) : make_uint4(0u, 0u, 0u, 0u);
  }
  const int e = at_qgemm_simt::stage_x<BLOCK>(x, xs, pieces, K);  // as the shipped body stages it
  if (row0 >= N) return;
  const Codes<__half>::Zero zero = Codes<__half>::zero(8);
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
        if (EARLY && base == 0)
          w[r][u] = first[r][u];
        else
          w[r][u] = p < pieces ? __ldcs(rows[r] + p) : make_uint4(0u, 0u, 0u, 0u);
      }
    if constexpr (ISSUED) {
      unsigned bits = 0u;
#pragma unroll
      for (int r = 0; r < RPW; ++r)
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) bits |= w[r][u].x;
      const float issued = __uint_as_float(bits & ((unsigned)N >> 31));  // +0.0f, after every load
#pragma unroll
      for (int r = 0; r < RPW; ++r) acc[r] += issued;
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
        const float piece = at_qgemm_simt::piece_sum<CHAIN>(w[r][u], pairs, zero);
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

// SHIPPED 1: the op's body as its instances call it; else stream_body with the flags.
template <int BLOCK, int RPW, int UNROLL, int MINB, int CHAIN, int SHIPPED, int PF, int ISSUED, int EARLY>
__global__ void __launch_bounds__(BLOCK, MINB) simt(INT4_ARGS) {
  if constexpr (SHIPPED)
    at_qgemm_simt::gemv_body<BLOCK, RPW, UNROLL, 128, 1, CHAIN>(x, qweight, scales, zeros, out, N, K, alpha, beta);
  else
    stream_body<BLOCK, RPW, UNROLL, CHAIN, PF, ISSUED, EARLY>(x, qweight, scales, out, N, K, alpha, beta);
}

// A tensor-core pick of the H200 records, as the op calls it.
template <int BLOCK, int UNROLL, int CLUSTER, int POLICY, int MINB, int RING>
__global__ void __cluster_dims__(1, CLUSTER, 1) __launch_bounds__(BLOCK, MINB) tensor_cores(INT4_ARGS) {
  at_qgemm::qgemm_body<__half, 1, BLOCK, 1, UNROLL, 128, 1, CLUSTER, POLICY, RING>(x, qweight, scales, zeros, out,
                                                                                  M, N, K, alpha, beta);
}

struct Variant {
  int block, rpw, unroll, min_blocks, chain;
  const char* kind;  // "shipped", "pf", "pf+issued", ...
  void (*fn)(INT4_ARGS);
  int cluster = 0, persist = 0, policy = 0, ring = 0;  // cluster > 0: a tensor-core pick
};

static void geometry(const Variant& v, int n, int k, int sms, dim3& grid, size_t& shared) {
  if (v.cluster) {  // as autotune/ops/qgemm's launch()
    const int rows = v.block / 32 * 16;
    const int tiles = (n + rows - 1) / rows;
    const int quads = (k / 32 + 3) / 4;
    const int per_split = (quads + v.cluster - 1) / v.cluster * 4;
    grid = dim3(v.persist ? std::min(tiles, v.persist * sms) : tiles, v.cluster, 1);
    shared = at_qgemm::x_row_bytes(per_split);
    return;
  }
  const int rows = v.block / 32 * v.rpw;
  grid = dim3((n + rows - 1) / rows, 1, 1);
  shared = (size_t)k * 2;
}

#define SIMT(B, R, U, MB, C, S, PF, I, E, KIND) \
  Variant{B, R, U, MB, C, KIND, simt<B, R, U, MB, C, S, PF, I, E>}
// A tiling: the shipped body, then the habits one by one and together.
#define TILING(B, R, U, MB, C)                                                                                    \
  SIMT(B, R, U, MB, C, 1, 0, 0, 0, "shipped"), SIMT(B, R, U, MB, C, 0, 0, 0, 0, "copy"),                        \
      SIMT(B, R, U, MB, C, 0, 2, 0, 0, "pf2"), SIMT(B, R, U, MB, C, 0, 0, 1, 0, "issued"),                      \
      SIMT(B, R, U, MB, C, 0, 2, 1, 0, "pf2+issued"), SIMT(B, R, U, MB, C, 0, 4, 1, 0, "pf4+issued"),           \
      SIMT(B, R, U, MB, C, 0, 2, 1, 1, "pf2+issued+early")
#define TC(B, U, C, P, MB, RING, PS) \
  Variant{B, 0, U, MB, 0, "tensor_cores", tensor_cores<B, U, C, P, MB, RING>, C, PS, P, RING}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  printf("{\"device\": \"%s\", \"sms\": %d, \"l2_bytes\": %d}\n", setup.prop.name, setup.prop.multiProcessorCount,
         setup.prop.l2CacheSize);
  // The H200 records' CUDA-core picks (db/records/nvidia-h200-qgemm.jsonl, float16 g128 M = 1) and two
  // tilings with more warps an SM for the big shapes.
  const std::vector<Variant> simt_variants = {
      TILING(512, 1, 4, 1, 4), TILING(512, 1, 4, 2, 4), TILING(256, 2, 2, 1, 2),
      TILING(256, 2, 4, 1, 4), TILING(256, 2, 2, 2, 4), TILING(128, 1, 4, 4, 4),
  };
  struct Shape {
    int n, k;
    std::vector<Variant> extra;
  };
  const std::vector<Shape> shapes = {
      {4096, 14336, {}},
      {28672, 4096, {TC(128, 2, 1, 2, 1, 3, 8)}},
      {37888, 3584, {TC(128, 1, 1, 2, 1, 3, 8)}},
      {3584, 18944, {TC(256, 1, 8, 2, 1, 3, 0)}},
      {6144, 4096, {}},
      {4096, 4096, {}},
      {3584, 3584, {}},
      {4608, 3584, {TC(128, 1, 8, 1, 3, 3, 4)}},
  };
  std::mt19937 rng(7);
  for (const Shape& shape : shapes) {
    std::vector<Variant> variants = simt_variants;
    variants.insert(variants.end(), shape.extra.begin(), shape.extra.end());
    const auto print = [&](const Variant& v, float us, double gbs, double rel) {
      printf("{\"kind\": \"%s\", \"block\": %d, \"rpw\": %d, \"unroll\": %d, \"min_blocks\": %d, \"chain\": %d, "
             "\"cluster\": %d, \"persist\": %d, \"policy\": %d, \"ring\": %d, \"n\": %d, \"k\": %d, "
             "\"isolated_us\": %.2f, \"gbs\": %.0f, \"rel_err\": %.3g, \"ok\": %s}\n",
             v.kind, v.block, v.rpw, v.unroll, v.min_blocks, v.chain, v.cluster, v.persist, v.policy, v.ring,
             shape.n, shape.k, us, gbs, rel, rel < 2e-3 ? "true" : "false");
    };
    if (run_int4_shape(setup, rng, shape.n, shape.k, variants, geometry, print, true)) return 1;
  }
  return 0;
}
