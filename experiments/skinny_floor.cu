// Where does skinny_tc lose at 16 x 4096 x 4096 (issue 5's one steady loss: 14.4 us, cuBLAS 14.0)?
// Reading its B (4096 x 4096 float16, 32 MB) alone takes 9.8 us in the best flat grid
// (experiments/read_floor_grids.cu, on the H200). These read-only kernels stream the same matrix in skinny_tc's
// decomposition, timed like read_floor_grids.cu (launches queued behind a spin kernel, back to back,
// inputs rotating over 4x the L2), so that the gap splits into what the decomposition costs, what
// the GEMM's arithmetic and A's fragments add, and (the real kernel's time less these) the rest:
//   flat       grid-stride 16-byte loads over the whole matrix
//   strip      skinny_tc's pattern: 64 column tiles x SPLIT row ranges, KW warps a block, warp wk
//              reads the 16-row slices wk, wk + KW, ... of its range, lane (g, t) rows 4t..4t+3 and
//              bytes 16g..16g+15 of the tile, UNROLL slices in flight; with a cluster of SPLIT
//              blocks along the ranges (as skinny_tc reduces its splits), each block ends with the
//              cluster barrier
//   strip+mma  strip with skinny_tc's 8 mma.sync a slice on what it reads (A's fragments loaded or
//              constant), no reduction
//   row        256-column tiles x SPLIT ranges, each warp reads 512 contiguous bytes of a row
// Every load is evict-first (__ldcs), as in the tuned kernels; the XOR of all words is written so
// that no load is dead. Build and run on the GPU machine:
//   nvcc -O3 -arch=sm_90 -o /tmp/skinny_floor experiments/skinny_floor.cu && /tmp/skinny_floor
#include <cooperative_groups.h>

#include <vector>

#include "bench_common.cuh"

constexpr int K = 4096, N = 4096;            // rows, columns (float16)
constexpr size_t ROW_BYTES = (size_t)N * 2;  // 8 KB
constexpr size_t BYTES = (size_t)K * ROW_BYTES;

// blockIdx.x: 64-column tile, blockIdx.y: row range of K / gridDim.y rows.
template <int KW, int UNROLL, bool CLUSTER>
__global__ void strip(const char* __restrict__ b, unsigned* __restrict__ out) {
  const int lane = threadIdx.x % 32, wk = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int rows = K / gridDim.y, r0 = blockIdx.y * rows;
  const char* base = b + (size_t)blockIdx.x * 128 + 16 * g + (size_t)(r0 + 4 * t) * ROW_BYTES;
  unsigned acc = 0;
  for (int s = wk * UNROLL; s < rows / 16; s += KW * UNROLL) {
    uint4 v[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        v[u][i] = __ldcs(reinterpret_cast<const uint4*>(base + (size_t)((s + u) * 16 + i) * ROW_BYTES));
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc ^= v[u][i].x ^ v[u][i].y ^ v[u][i].z ^ v[u][i].w;
  }
  if (CLUSTER) cooperative_groups::this_cluster().sync();
  if (acc == 0x12345678u) out[0] = acc;
}

// strip, plus skinny_tc's arithmetic on what it reads: each 16-row slice's 8 mma.m16n8k16 (B pairs
// packed with byte permutes), A's fragment loaded from a 16 x K matrix (LOAD_A) or held constant.
template <int KW, int UNROLL, bool LOAD_A>
__global__ void strip_mma(const char* __restrict__ b, const uint2* __restrict__ a, unsigned* __restrict__ out) {
  const int lane = threadIdx.x % 32, wk = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int rows = K / gridDim.y, r0 = blockIdx.y * rows;
  const char* base = b + (size_t)blockIdx.x * 128 + 16 * g + (size_t)(r0 + 4 * t) * ROW_BYTES;
  // A as uint2 words: row r's k .. k+3 at a[(r * K + k) / 4].
  const uint2* a0 = a + ((size_t)g * K + r0 + 4 * t) / 4;
  const uint2* a1 = a + ((size_t)(g + 8) * K + r0 + 4 * t) / 4;
  float acc[8][4] = {};
  unsigned ac[4] = {0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};
  for (int s = wk * UNROLL; s < rows / 16; s += KW * UNROLL) {
    uint4 v[UNROLL][4];
    unsigned af[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        v[u][i] = __ldcs(reinterpret_cast<const uint4*>(base + (size_t)((s + u) * 16 + i) * ROW_BYTES));
      if (LOAD_A) {
        const uint2 x = __ldg(a0 + (s + u) * 4), y = __ldg(a1 + (s + u) * 4);
        af[u][0] = x.x, af[u][1] = y.x, af[u][2] = x.y, af[u][3] = y.y;
      } else {
#pragma unroll
        for (int r = 0; r < 4; ++r) af[u][r] = ac[r];
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        unsigned w[4];  // word j / 2 of each of the lane's 4 rows
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = reinterpret_cast<const unsigned*>(&v[u][i])[j / 2];
        const unsigned sel = j % 2 ? 0x7632u : 0x5410u;
        const unsigned b0 = __byte_perm(w[0], w[1], sel), b1 = __byte_perm(w[2], w[3], sel);
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
            : "r"(af[u][0]), "r"(af[u][1]), "r"(af[u][2]), "r"(af[u][3]), "r"(b0), "r"(b1));
      }
  }
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
  if (sum == 1234.5f) out[0] = 1u;  // keeps the mmas alive
}

// blockIdx.x: 256-column tile (512 bytes: one warp-wide 16-byte load), blockIdx.y: row range.
template <int KW, int UNROLL>
__global__ void row(const char* __restrict__ b, unsigned* __restrict__ out) {
  const int lane = threadIdx.x % 32, wk = threadIdx.x / 32;
  const int rows = K / gridDim.y, r0 = blockIdx.y * rows;
  const char* base = b + (size_t)blockIdx.x * 512 + 16 * lane + (size_t)r0 * ROW_BYTES;
  unsigned acc = 0;
  for (int r = wk * UNROLL; r < rows; r += KW * UNROLL) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = __ldcs(reinterpret_cast<const uint4*>(base + (size_t)(r + u) * ROW_BYTES));
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// A strip launch with its row ranges in clusters of `split` blocks.
template <int KW, int UNROLL>
cudaError_t strip_in_clusters(int split, const char* b, unsigned* out) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(N / 64, split, 1);
  config.blockDim = dim3(32 * KW, 1, 1);
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 1;
  attribute.val.clusterDim.y = split;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, strip<KW, UNROLL, true>, b, out);
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  const cudaDeviceProp& prop = setup.prop;
  cudaEvent_t start = setup.start, stop = setup.stop;
  unsigned* out = setup.out;
  const std::vector<char*> bufs = rotating_buffers<char>(prop, BYTES, 0x3c);
  if (bufs.empty()) return 1;
  const int copies = (int)bufs.size();
  auto buf = [&](int i) { return bufs[i % copies]; };
  printf("%s, %d SMs: reading 4096 x 4096 float16 (32 MB), %d copies rotating\n", prop.name,
         prop.multiProcessorCount, copies);
  auto report = [&](const char* name, float us) {
    printf("%-44s %7.2f us  %6.0f GB/s\n", name, us, BYTES / (us * 1e3));
  };
  const int sms = prop.multiProcessorCount;
  report("flat 8/SM x 256 x 4 loads", best_of([&](int i) { read_flat<4><<<8 * sms, 256>>>((const uint4*)buf(i), BYTES / 16, out); }, start, stop));
  report("flat 2/SM x 1024 x 4 loads", best_of([&](int i) { read_flat<4><<<2 * sms, 1024>>>((const uint4*)buf(i), BYTES / 16, out); }, start, stop));
  // skinny_tc's tuned tiling: 64 tiles x 8 splits of 4 warps, two slices a warp in flight.
  report("strip kw4 u2 split8 (512 blocks)", best_of([&](int i) { strip<4, 2, false><<<dim3(64, 8), 128>>>(buf(i), out); }, start, stop));
  report("strip kw4 u2 split8 in clusters of 8", best_of([&](int i) { strip_in_clusters<4, 2>(8, buf(i), out); }, start, stop));
  report("strip kw4 u1 split8 (512 blocks)", best_of([&](int i) { strip<4, 1, false><<<dim3(64, 8), 128>>>(buf(i), out); }, start, stop));
  report("strip kw4 u4 split8 (512 blocks)", best_of([&](int i) { strip<4, 4, false><<<dim3(64, 8), 128>>>(buf(i), out); }, start, stop));
  report("strip kw8 u2 split8 (512 blocks)", best_of([&](int i) { strip<8, 2, false><<<dim3(64, 8), 256>>>(buf(i), out); }, start, stop));
  report("strip kw4 u2 split16 (1024 blocks)", best_of([&](int i) { strip<4, 2, false><<<dim3(64, 16), 128>>>(buf(i), out); }, start, stop));
  report("strip kw4 u2 split4 (256 blocks)", best_of([&](int i) { strip<4, 2, false><<<dim3(64, 4), 128>>>(buf(i), out); }, start, stop));
  report("strip kw4 u2 split4 in clusters of 4", best_of([&](int i) { strip_in_clusters<4, 2>(4, buf(i), out); }, start, stop));
  uint2* a;  // A: 16 x 4096 float16
  CHECK(cudaMalloc(&a, 16 * K * 2));
  CHECK(cudaMemset(a, 0x3c, 16 * K * 2));  // nonzero: never time on zeros
  report("strip+mma, A constant, kw4 u2 split8", best_of([&](int i) { strip_mma<4, 2, false><<<dim3(64, 8), 128>>>(buf(i), a, out); }, start, stop));
  report("strip+mma, A loaded, kw4 u2 split8", best_of([&](int i) { strip_mma<4, 2, true><<<dim3(64, 8), 128>>>(buf(i), a, out); }, start, stop));
  report("strip+mma, A loaded, kw4 u1 split8", best_of([&](int i) { strip_mma<4, 1, true><<<dim3(64, 8), 128>>>(buf(i), a, out); }, start, stop));
  report("strip+mma, A loaded, kw8 u1 split8", best_of([&](int i) { strip_mma<8, 1, true><<<dim3(64, 8), 256>>>(buf(i), a, out); }, start, stop));
  report("strip+mma, A loaded, kw4 u2 split16", best_of([&](int i) { strip_mma<4, 2, true><<<dim3(64, 16), 128>>>(buf(i), a, out); }, start, stop));
  report("row kw4 u4 split32 (512 blocks)", best_of([&](int i) { row<4, 4><<<dim3(16, 32), 128>>>(buf(i), out); }, start, stop));
  report("row kw8 u4 split16 (256 blocks)", best_of([&](int i) { row<8, 4><<<dim3(16, 16), 256>>>(buf(i), out); }, start, stop));
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  return 0;
}
