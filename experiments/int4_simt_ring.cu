// Does a ring of register stages lift the CUDA-core int4 GEMV (kernels/qgemm/qgemm_simt.cu, M = 1)?
// The shipped body asks for RPW x UNROLL pieces, waits for all of them, multiplies them, and only then
// asks for the next: between batches a warp has nothing in flight, and each piece's scale is a load
// issued while it multiplies. Here a ring of RING stages rotates as qgemm.cu's tensor-core ring does:
// before a stage is multiplied, the one RING - 1 ahead is asked for (codes and scales) into the slot
// just emptied, so RING - 1 stages stay in flight while each one multiplies. The numerics are the
// shipped body's (CHAIN 2, x staged as pairs times 2^-e), so the error should match it.
//
// Every instance is checked against a float64 product (output poisoned with NaN first) and timed as
// autotune times kernels (bench_common.cuh), beside the shipped body at the tilings the H200 records
// pick and the tensor-core picks of the three big shapes (ring 0 rows). One JSON object a line. From
// the repository root on a GPU machine:
//   nvcc -O3 -arch=sm_90 -std=c++17 -I kernels -I kernels/common -I experiments -o /tmp/int4_simt_ring \
//     experiments/int4_simt_ring.cu && /tmp/int4_simt_ring
#include "int4_harness.cuh"
#include "qgemm/qgemm_simt.cu"

#include <algorithm>
#include <cmath>
#include <random>

using at_qgemm::Codes;
using at_qgemm::PIECE;

template <int BLOCK, int RPW, int UNROLL, int RING>
__device__ __forceinline__ void ring_body(const __half* __restrict__ x, const unsigned char* __restrict__ qweight,
                                          const __half* __restrict__ scales, __half* __restrict__ out, int N, int K,
                                          float alpha, float beta) {
  constexpr int GROUP = 128, PIECES_A_GROUP = GROUP / PIECE, STEP = 32 * UNROLL;
  extern __shared__ uint4 xs[];
  const int pieces = K / PIECE;
  const int groups = K / GROUP;
  at_qgemm::launch_dependents();
  at_qgemm::wait_for_prior_grid();
  const int e = at_qgemm_simt::stage_x<BLOCK>(x, xs, pieces, K);  // as the shipped body stages it

  const int lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * (BLOCK / 32) + threadIdx.x / 32) * RPW;
  if (row0 >= N) return;
  const Codes<__half>::Zero zero = Codes<__half>::zero(8);
  const uint4* rows[RPW];
  const __half* row_scales[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int row = min(row0 + r, N - 1);  // rows past N are read, never written
    rows[r] = reinterpret_cast<const uint4*>(qweight + (size_t)row * (K / 2));
    row_scales[r] = scales + (size_t)row * groups;
  }
  float acc[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) acc[r] = 0.0f;
  uint4 w[RING][RPW][UNROLL];
  __half s[RING][RPW][UNROLL];
  const int stages = (pieces + STEP - 1) / STEP;
  // Stage `stage` into slot `slot`: its pieces past the row's end are never asked for.
  auto load = [&](int slot, int stage) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int p = stage * STEP + lane + 32 * u;
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        if (p < pieces) {
          w[slot][r][u] = __ldcs(rows[r] + p);
          s[slot][r][u] = __ldg(row_scales[r] + p / PIECES_A_GROUP);
        }
      }
    }
  };
  auto multiply = [&](int slot, int stage) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int p = stage * STEP + lane + 32 * u;
      if (p >= pieces) break;
      uint4 pairs[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) pairs[j] = xs[j * pieces + p];
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        // two products a half before float, as shipped (CHAIN 2)
        const float piece = at_qgemm_simt::piece_sum<2>(w[slot][r][u], pairs, zero);
        acc[r] = fmaf(piece, __half2float(s[slot][r][u]), acc[r]);
      }
    }
  };
#pragma unroll
  for (int j = 0; j < RING - 1; ++j) load(j, j);
  for (int base = 0; base < stages; base += RING) {
#pragma unroll
    for (int j = 0; j < RING; ++j) {
      load((j + RING - 1) % RING, base + j + RING - 1);
      multiply(j, base + j);
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

// ring 0: the shipped body (as the op's instances call it).
template <int BLOCK, int RPW, int UNROLL, int MINB, int RING>
__global__ void __launch_bounds__(BLOCK, MINB) simt(INT4_ARGS) {
  if constexpr (RING == 0)
    at_qgemm_simt::gemv_body<BLOCK, RPW, UNROLL, 128, 1>(x, qweight, scales, zeros, out, N, K, alpha, beta);
  else
    ring_body<BLOCK, RPW, UNROLL, RING>(x, qweight, scales, out, N, K, alpha, beta);
}

// The tensor-core picks of the big shapes (the H200 records), for reference: qgemm.cu as the op calls it.
template <int BLOCK, int UNROLL, int CLUSTER, int POLICY, int MINB, int RING>
__global__ void __cluster_dims__(1, CLUSTER, 1) __launch_bounds__(BLOCK, MINB) tensor_cores(INT4_ARGS) {
  at_qgemm::qgemm_body<__half, 1, BLOCK, 1, UNROLL, 128, 1, CLUSTER, POLICY, RING>(x, qweight, scales, zeros, out,
                                                                                  M, N, K, alpha, beta);
}

struct Variant {
  int block, rpw, unroll, min_blocks, ring;
  void (*fn)(INT4_ARGS);
  int cluster = 0, persist = 0, policy = 0;  // cluster > 0: a tensor-core pick
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

#define SIMT(B, R, U, MB, RING) Variant{B, R, U, MB, RING, simt<B, R, U, MB, RING>}
// The shipped body at a tiling and rings of 2, 3 and 4 stages of it (and of half its unroll).
#define TILING(B, R, U, MB)                                                                           \
  SIMT(B, R, U, MB, 0), SIMT(B, R, U, MB, 2), SIMT(B, R, U, MB, 3), SIMT(B, R, U, MB, 4)
#define TC(B, U, C, P, MB, RING, PS) Variant{B, 0, U, MB, RING, tensor_cores<B, U, C, P, MB, RING>, C, PS, P}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  printf("{\"device\": \"%s\", \"sms\": %d, \"l2_bytes\": %d}\n", setup.prop.name, setup.prop.multiProcessorCount,
         setup.prop.l2CacheSize);
  // The shipped simt picks (3584^2 b512 r1 u4 min 2; 4096^2 and 4096x14336 b256 r2 u4; 6144x4096 b256 r4
  // u2) and smaller stages that a ring may want.
  std::vector<Variant> simt_variants = {
      TILING(512, 1, 4, 2), TILING(256, 2, 4, 1), TILING(256, 4, 2, 1), TILING(128, 4, 4, 2),
      TILING(256, 1, 2, 1), TILING(256, 2, 2, 1), TILING(256, 2, 1, 1), TILING(128, 1, 4, 4),
      TILING(512, 2, 2, 1), TILING(128, 2, 2, 4), TILING(64, 2, 2, 8),  TILING(256, 1, 4, 2),
  };
  struct Shape {
    int n, k;
    std::vector<Variant> extra;
  };
  const std::vector<Shape> shapes = {
      {28672, 4096, {TC(128, 2, 1, 2, 1, 3, 8)}},
      {37888, 3584, {TC(128, 1, 1, 2, 1, 4, 8)}},
      {3584, 18944, {TC(256, 1, 8, 2, 1, 3, 0)}},
      {4096, 14336, {TC(128, 1, 8, 2, 2, 3, 8)}},
      {6144, 4096, {TC(64, 1, 4, 1, 2, 4, 0)}},
      {4096, 4096, {}},
      {3584, 3584, {}},
      {4608, 3584, {TC(128, 1, 8, 1, 3, 3, 4)}},
  };
  std::mt19937 rng(7);
  for (const Shape& shape : shapes) {
    std::vector<Variant> variants = simt_variants;
    variants.insert(variants.end(), shape.extra.begin(), shape.extra.end());
    const auto print = [&](const Variant& v, float us, double gbs, double rel) {
      printf("{\"kernel\": \"%s\", \"block\": %d, \"rpw\": %d, \"unroll\": %d, \"min_blocks\": %d, \"ring\": %d, "
             "\"cluster\": %d, \"persist\": %d, \"policy\": %d, \"n\": %d, \"k\": %d, \"us\": %.2f, \"gbs\": %.0f, "
             "\"rel_err\": %.3g, \"ok\": %s}\n",
             v.cluster ? "tensor_cores" : "simt", v.block, v.rpw, v.unroll, v.min_blocks, v.ring, v.cluster,
             v.persist, v.policy, shape.n, shape.k, us, gbs, rel, rel < 2e-3 ? "true" : "false");
    };
    if (run_int4_shape(setup, rng, shape.n, shape.k, variants, geometry, print)) return 1;
  }
  return 0;
}
