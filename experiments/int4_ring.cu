// Does a ring of register stages lift the int4 GEMV (qgemm.cu, M = 1) towards the bandwidth wall?
// qgemm kept two stages of UNROLL steps in registers and asked for one while it multiplied the other, so
// a warp had between one and two stages in flight. A ring of RING stages rotates: before a stage is
// multiplied, the one RING - 1 ahead is asked for into the slot just emptied, so RING - 1 stages stay in
// flight while each one multiplies (RING 3 of one step: 2-3 KiB a warp in 80 registers, where two stages
// of two steps hold 2-4 KiB in 117). It was tried here first, as a copy of qgemm_body; it is now
// qgemm_body's RING (the op's `ring`), which this file instantiates (`int4_ring_nvidia-h200.jsonl` was
// taken with the copy, the same loop).
//
// Every instance is checked against a float64 product (output poisoned with NaN first) and timed as
// autotune times kernels (bench_common.cuh: back to back behind a spin kernel, the codes rotating over
// 4x the L2), beside the two-stage instance of the same tiling (`ring` 0). One JSON object a line. From
// the repository root on a GPU machine:
//   nvcc -O3 -arch=sm_90 -std=c++17 -I kernels -I kernels/common -o /tmp/int4_ring \
//     experiments/int4_ring.cu && /tmp/int4_ring
#include "int4_harness.cuh"
#include "qgemm/qgemm.cu"

#include <algorithm>
#include <cmath>
#include <random>

#define PASS x, qweight, scales, zeros, out, M, N, K, alpha, beta

// ring 0: qgemm's two stages (RING 2), as the shipped records run it.
template <int BLOCK, int TILES, int UNROLL, int POLICY, int MINB, int RING>
__global__ void __launch_bounds__(BLOCK, MINB) whole_k(INT4_ARGS) {
  at_qgemm::qgemm_body<__half, 1, BLOCK, TILES, UNROLL, 128, 1, 1, POLICY, RING == 0 ? 2 : RING>(PASS);
}
template <int BLOCK, int TILES, int UNROLL, int CLUSTER, int POLICY, int MINB, int RING>
__global__ void __cluster_dims__(1, CLUSTER, 1) __launch_bounds__(BLOCK, MINB) split_k(INT4_ARGS) {
  at_qgemm::qgemm_body<__half, 1, BLOCK, TILES, UNROLL, 128, 1, CLUSTER, POLICY, RING == 0 ? 2 : RING>(PASS);
}

struct Variant {
  int block, tiles, unroll, cluster, policy, min_blocks, persist, ring;
  void (*fn)(INT4_ARGS);
};

// Each tiling as qgemm runs it at UNROLL 1 and 2 (ring 0), and as rings of 3, 4 and 6 one-step stages
// and of 3 two-step stages.
#define RINGS(B, T, P, MB, PS)                                                                               \
  {B, T, 1, 1, P, MB, PS, 0, whole_k<B, T, 1, P, MB, 0>}, {B, T, 2, 1, P, MB, PS, 0, whole_k<B, T, 2, P, MB, 0>},   \
      {B, T, 1, 1, P, MB, PS, 3, whole_k<B, T, 1, P, MB, 3>}, {B, T, 1, 1, P, MB, PS, 4, whole_k<B, T, 1, P, MB, 4>}, \
      {B, T, 1, 1, P, MB, PS, 6, whole_k<B, T, 1, P, MB, 6>}, {B, T, 2, 1, P, MB, PS, 3, whole_k<B, T, 2, P, MB, 3>}
#define SPLIT_RINGS(B, T, C, P, MB, PS)                                                                      \
  {B, T, 1, C, P, MB, PS, 0, split_k<B, T, 1, C, P, MB, 0>}, {B, T, 2, C, P, MB, PS, 0, split_k<B, T, 2, C, P, MB, 0>}, \
      {B, T, 1, C, P, MB, PS, 3, split_k<B, T, 1, C, P, MB, 3>},                                              \
      {B, T, 1, C, P, MB, PS, 4, split_k<B, T, 1, C, P, MB, 4>},                                              \
      {B, T, 2, C, P, MB, PS, 3, split_k<B, T, 2, C, P, MB, 3>}

// Launch geometry as autotune/ops/qgemm's launch().
static void geometry(const Variant& v, int n, int k, int sms, dim3& grid, size_t& shared) {
  const int rows = v.block / 32 * v.tiles * 16;
  const int tiles = (n + rows - 1) / rows;
  const int quads = (k / 32 + 3) / 4;
  const int per_split = (quads + v.cluster - 1) / v.cluster * 4;
  grid = dim3(v.persist ? std::min(tiles, v.persist * sms) : tiles, v.cluster, 1);
  shared = at_qgemm::x_row_bytes(per_split);
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
  // Tall shapes: the tilings of the H200 picks for 28672x4096 (b128 persist 8 policy 2; b512 persist 2)
  // and 37888x3584 (b256 min_blocks 3), and b256 min_blocks 4.
  const std::vector<Variant> tall = {
      RINGS(128, 1, 2, 1, 8), RINGS(512, 1, 2, 1, 2), RINGS(256, 1, 2, 3, 0), RINGS(256, 1, 2, 4, 0),
      RINGS(128, 1, 2, 2, 0),
  };
  // Wide and small shapes: K split over clusters (3584x18944: b64 c8 persist 4 policy 1 min 8;
  // 4608x3584: b64 t2 c8 persist 8 policy 2 min 2).
  const std::vector<Variant> wide = {
      SPLIT_RINGS(64, 1, 8, 1, 8, 4),
      SPLIT_RINGS(64, 2, 8, 2, 2, 8),
      SPLIT_RINGS(256, 1, 4, 1, 1, 1),
  };
  const std::vector<Shape> shapes = {{28672, 4096, tall}, {37888, 3584, tall}, {3584, 18944, wide},
                                     {4096, 14336, wide}, {4096, 4096, wide},   {4608, 3584, wide}};
  std::mt19937 rng(7);
  for (const Shape& shape : shapes) {
    const int n = shape.n, k = shape.k;
    const auto print = [&](const Variant& v, float us, double gbs, double rel) {
      printf("{\"block\": %d, \"tiles\": %d, \"unroll\": %d, \"cluster\": %d, \"policy\": %d, \"min_blocks\": %d, "
             "\"persist\": %d, \"ring\": %d, \"n\": %d, \"k\": %d, \"us\": %.2f, \"gbs\": %.0f, \"rel_err\": %.3g, "
             "\"ok\": %s}\n",
             v.block, v.tiles, v.unroll, v.cluster, v.policy, v.min_blocks, v.persist, v.ring, n, k, us,
             gbs, rel, rel < 2e-3 ? "true" : "false");
    };
    if (run_int4_shape(setup, rng, n, k, shape.variants, geometry, print)) return 1;
  }
  return 0;
}
