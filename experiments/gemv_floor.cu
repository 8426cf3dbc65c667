// Where does the tuned GEMV lose to a plain read on a 64 MB matrix (issue 3: >= 90% of copy
// bandwidth on every shape of 64 MB or more; float16 4096 x 8192 took 18.2 us, a flat read 16.9)?
// The same 64 MB is read in the GEMV's decomposition and in others, timed like our kernels
// (bench_common.cuh: launches back to back behind a spin kernel, buffers rotating over 4x the L2):
//   flat       grid-stride 16-byte loads over the whole matrix (read_floor_grids.cu's best grids)
//   rows       the shipped GEMV's pattern without its arithmetic: groups of 128 lanes, ROWS rows a
//              group, each lane BATCH 16-byte loads of each row in flight (lane-strided), XOR
//   rows, persistent   the same groups in few large blocks that loop over the row tiles, so that
//              the requests in flight cover a contiguous window of the matrix
//   gemv       the real kernel (kernels/gemv/gemv.cu) at the shipped config and variants of it
//   gemv_tc, gemv_tc_bulk   sketches of a GEMV on tensor cores, fed from registers or by bulk
//              copies into shared memory (see each kernel)
// Every GEMV row is checked (y must equal A x afterwards), and the sketches once more on random data
// against a float64 reference.
// Build and run on the GPU machine:
//   nvcc -O3 -arch=sm_90 -I kernels/common -o /tmp/gemv_floor experiments/gemv_floor.cu && /tmp/gemv_floor
#include <cuda_fp16.h>

#include <cmath>
#include <vector>

#include "bench_common.cuh"
#include "../kernels/gemv/gemv.cu"
#include "../kernels/common/tma.cuh"

constexpr int M = 4096, N = 8192;                     // float16
constexpr size_t ROW16 = (size_t)N * 2 / 16;          // 16-byte words a row
constexpr size_t BYTES = (size_t)M * N * 2;

// A group of 128 lanes per ROWS rows; the block holds BLOCK / 128 groups; tiles of ROWS rows a
// group, blocks striding over them (gridDim.x smaller than the tile count: persistent). Each lane
// reads its ROW16 / 128 words of each row, BATCH at a time per row (ROWS * BATCH loads in flight).
template <int BLOCK, int ROWS, int BATCH>
__global__ void rows(const uint4* __restrict__ a, unsigned* __restrict__ out) {
  constexpr int GROUPS = BLOCK / 128;
  constexpr int PER = (int)(ROW16 / 128);
  static_assert(PER % BATCH == 0, "whole batches");
  const int lane = threadIdx.x % 128, group = threadIdx.x / 128;
  unsigned acc = 0;
  for (int tile = blockIdx.x * GROUPS + group; tile * ROWS < M; tile += gridDim.x * GROUPS) {
    const uint4* base = a + (size_t)tile * ROWS * ROW16 + lane;
    for (int s = 0; s < PER; s += BATCH) {
      uint4 v[ROWS][BATCH];
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int u = 0; u < BATCH; ++u) v[r][u] = __ldcs(base + r * ROW16 + (s + u) * 128);
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int u = 0; u < BATCH; ++u) acc ^= v[r][u].x ^ v[r][u].y ^ v[r][u].z ^ v[r][u].w;
    }
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// The real GEMV: at_gemv::gemv_body<__half, BLOCK, LANES, VEC, UNROLL, ROWS, XSMEM, POLICY, 1, 0>.
template <int BLOCK, int LANES, int UNROLL, int ROWS, int XSMEM, int POLICY>
__global__ void __launch_bounds__(BLOCK) gemv(const __half* A, const __half* x, __half* y, float* partial,
                                               unsigned* counters) {
  at_gemv::gemv_body<__half, BLOCK, LANES, 8, UNROLL, ROWS, XSMEM, POLICY, 1, 0>(A, x, y, M, N, N, 1.0f, 0.0f, partial,
                                                                              counters);
}

// D += A B for one mma.m16n8k16 with float16 inputs and float accumulators (registers in the PTX
// ISA's fragment order).
__device__ __forceinline__ void mma(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The tensor-core sketches' end: column 0 of each warp's D (rows g and g + 8 of the block's 16, in
// lanes t = 0) summed over the block's KW warps into y.
template <int KW>
__device__ __forceinline__ void write_rows(float (&part)[KW][16], float row_g, float row_g8, __half* y, int row0) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  if (lane % 4 == 0) {
    part[w][lane / 4] = row_g;
    part[w][lane / 4 + 8] = row_g8;
  }
  __syncthreads();
  if (threadIdx.x < 16) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < KW; ++i) s += part[i][threadIdx.x];
    y[row0 + threadIdx.x] = __float2half_rn(s);
  }
}

// A GEMV on tensor cores, float16 (a sketch to measure, not a tuned family): the math of the CUDA-core
// kernel (8 conversions and 8 FMAs per 16-byte load, x converted again per row group) becomes one
// mma.sync.m16n8k16 per 16-byte load. A block of KW warps owns 16 rows; warp w takes the 32-column
// chunks w, w + KW, ... of them, UNROLL chunks in flight. Lane (g, t) loads the 8 columns
// 32c + 8t .. 32c + 8t + 7 of rows g and g + 8 and of x; the mma's k slots 2t, 2t+1, 2t+8, 2t+9 stand
// for 4 of them (any relabelling of k applied to A and x alike leaves the dot products unchanged),
// two mmas a chunk. x fills every column of the mma's B, so column 0 of D (lanes t = 0) holds the
// rows' sums. N % 32 == 0 and M % 16 == 0 here.
template <int KW, int UNROLL>
__global__ void __launch_bounds__(32 * KW) gemv_tc(const __half* __restrict__ A, const __half* __restrict__ x,
                                                    __half* __restrict__ y) {
  __shared__ float part[KW][16];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * 16;
  const uint4* p0 = reinterpret_cast<const uint4*>(A + (size_t)(row0 + g) * N) + t;
  const uint4* p1 = reinterpret_cast<const uint4*>(A + (size_t)(row0 + g + 8) * N) + t;
  const uint4* xp = reinterpret_cast<const uint4*>(x) + t;
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  constexpr int CHUNKS = N / 32;
  for (int c = w; c < CHUNKS; c += KW * UNROLL) {
    uint4 a0[UNROLL], a1[UNROLL], xv[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int at = (c + u * KW) * 4;  // 16-byte words: a chunk is 4 of them a row
      const bool in = c + u * KW < CHUNKS;
      a0[u] = in ? __ldcs(p0 + at) : uint4{};
      a1[u] = in ? __ldcs(p1 + at) : uint4{};
      xv[u] = in ? __ldg(xp + at) : uint4{};
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      mma(d, a0[u].x, a1[u].x, a0[u].y, a1[u].y, xv[u].x, xv[u].y);
      mma(d, a0[u].z, a1[u].z, a0[u].w, a1[u].w, xv[u].z, xv[u].w);
    }
  }
  write_rows<KW>(part, d[0], d[2], y, row0);
}

// The tensor-core sketch fed from shared memory: STAGES stages of 16 rows x BK columns, each row piece
// (BK * 2 bytes, contiguous in A) one bulk copy (cp.async.bulk, no tensor map) completing on the
// stage's mbarrier; rows padded to BK * 2 + 16 bytes so that ldmatrix's 8 row addresses fall in
// different banks. x's piece comes with the stage as a 17th row (read from global memory in every
// step instead, its loads were 74% of the stalls under Nsight). The KW warps share a stage's BK / 16
// k16 steps, alternating two accumulators. Lanes 0..16 of warp 0 issue a stage's 17 copies after
// lane 0 set its byte count.
template <int KW, int BK, int STAGES>
__global__ void __launch_bounds__(32 * KW) gemv_tc_bulk(const __half* __restrict__ A, const __half* __restrict__ x,
                                                         __half* __restrict__ y) {
  using namespace at_tma;
  constexpr int PITCH = BK * 2 + 16;  // bytes a row of a stage
  constexpr int STAGE_BYTES = 17 * PITCH;
  constexpr int TILES = N / BK;
  extern __shared__ __align__(128) unsigned char stages[];
  __shared__ __align__(8) uint64_t full[STAGES];
  __shared__ float part[KW][16];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, t = lane % 4;
  const int row0 = blockIdx.x * 16;
  const uint32_t base = smem_addr(stages), bars = smem_addr(full);
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbarrier_init(bars + 8 * s, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  auto load = [&](int stage, int tile) {  // warp 0
    const uint32_t bar = bars + 8 * stage;
    if (lane == 0) mbarrier_arrive_expect_tx(bar, 17 * BK * 2);
    __syncwarp();
    if (lane < 17) {
      const __half* src = (lane < 16 ? A + (size_t)(row0 + lane) * N : x) + (size_t)tile * BK;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       base + stage * STAGE_BYTES + lane * PITCH),
                   "l"(src), "n"(BK * 2), "r"(bar)
                   : "memory");
    }
  };
  if (w == 0)
    for (int s = 0; s < STAGES && s < TILES; ++s) load(s, s);
  float d[2][4] = {};
  // ldmatrix x4: lane l gives row (l % 8) + 8 (l / 8 % 2), 16-byte column chunk l / 16 of the step.
  const int lrow = (lane & 7) + 8 * ((lane >> 3) & 1), lchunk = lane >> 4;
  int stage = 0;
  uint32_t phase = 0;
  for (int tile = 0; tile < TILES; ++tile) {
    mbarrier_wait(bars + 8 * stage, phase);
    const uint32_t sa = base + stage * STAGE_BYTES;
#pragma unroll
    for (int step = w; step < BK / 16; step += KW) {
      unsigned a[4];
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                   : "r"(sa + lrow * PITCH + step * 32 + lchunk * 16));
      const unsigned* xw = reinterpret_cast<const unsigned*>(stages + stage * STAGE_BYTES + 16 * PITCH + step * 32);
      const unsigned b0 = xw[t], b1 = xw[t + 4];
      mma(d[(step / KW) % 2], a[0], a[1], a[2], a[3], b0, b1);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // our reads before the next copies
    __syncthreads();
    if (w == 0 && tile + STAGES < TILES) load(stage, tile + STAGES);
    stage = stage == STAGES - 1 ? 0 : stage + 1;
    phase ^= stage == 0;
  }
  write_rows<KW>(part, d[0][0] + d[1][0], d[0][2] + d[1][2], y, row0);
}

// Launches gemv_tc_bulk<KW, BK, STAGES> on A with its dynamic shared memory.
template <int KW, int BK, int STAGES>
void bulk(const __half* A, const __half* x, __half* y) {
  constexpr int SMEM = STAGES * 17 * (BK * 2 + 16);
  static bool ready = false;
  if (!ready) {
    cudaFuncSetAttribute(gemv_tc_bulk<KW, BK, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    ready = true;
  }
  gemv_tc_bulk<KW, BK, STAGES><<<M / 16, 32 * KW, SMEM>>>(A, x, y);
}

int main() {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  const cudaDeviceProp& prop = setup.prop;
  const int sms = prop.multiProcessorCount;
  cudaEvent_t start = setup.start, stop = setup.stop;
  unsigned* out = setup.out;
  // 0x3c3c (about 1.06) in every float16: never time on zeros.
  const std::vector<uint4*> bufs = rotating_buffers<uint4>(prop, BYTES, 0x3c);
  if (bufs.empty()) return 1;
  const int copies = (int)bufs.size();
  __half *x, *y;
  CHECK(cudaMalloc(&x, N * 2));
  CHECK(cudaMemset(x, 0x3c, N * 2));
  CHECK(cudaMalloc(&y, M * 2));
  auto buf = [&](int i) { return bufs[i % copies]; };
  auto mat = [&](int i) { return reinterpret_cast<const __half*>(bufs[i % copies]); };
  printf("%s, %d SMs: y = A x, A %d x %d float16 (64 MB), %d copies rotating\n", prop.name, sms, M, N, copies);
  auto report = [&](const char* name, float us) { printf("%-52s %7.2f us  %6.0f GB/s\n", name, us, BYTES / (us * 1e3)); };

  // After a GEMV variant's timing its y must still be A x: every element of A and x is 0x3c3c
  // (about 1.06), so every y is N * v^2, rounded to float16.
  __half_raw raw;
  raw.x = 0x3c3c;
  const float v = __half2float(__half(raw)), want = __half2float(__float2half((float)N * v * v));
  std::vector<__half> host(M);
  auto report_gemv = [&](const char* name, float us) {
    report(name, us);
    if (cudaMemcpy(host.data(), y, M * 2, cudaMemcpyDeviceToHost) != cudaSuccess) return;
    int wrong = 0;
    for (int i = 0; i < M; ++i) wrong += __half2float(host[i]) != want;
    if (wrong) printf("  WRONG: %d of %d elements of y differ from %.1f\n", wrong, M, want);
  };

  const size_t n16 = BYTES / 16;
  report("flat 2/SM x 1024 x 4 loads", best_of([&](int i) { read_flat<4><<<2 * sms, 1024>>>(buf(i), n16, out); }, start, stop));
  report("flat 1/SM x 1024 x 8 loads", best_of([&](int i) { read_flat<8><<<sms, 1024>>>(buf(i), n16, out); }, start, stop));
  report("flat 8/SM x 256 x 4 loads", best_of([&](int i) { read_flat<4><<<8 * sms, 256>>>(buf(i), n16, out); }, start, stop));
  report("flat 16/SM x 128 x 8 loads", best_of([&](int i) { read_flat<8><<<16 * sms, 128>>>(buf(i), n16, out); }, start, stop));

  // The shipped pattern: 2048 blocks of 128 threads, 2 rows each, 4 loads a row in flight (8 words a
  // lane a row: two batches).
  report("rows 128 thr x 2 rows, batch 4 (2048 blocks)", best_of([&](int i) { rows<128, 2, 4><<<M / 2, 128>>>(buf(i), out); }, start, stop));
  report("rows 128 thr x 2 rows, batch 8 (2048 blocks)", best_of([&](int i) { rows<128, 2, 8><<<M / 2, 128>>>(buf(i), out); }, start, stop));
  report("rows 128 thr x 1 row, batch 8 (4096 blocks)", best_of([&](int i) { rows<128, 1, 8><<<M, 128>>>(buf(i), out); }, start, stop));
  report("rows 128 thr x 4 rows, batch 2 (1024 blocks)", best_of([&](int i) { rows<128, 4, 2><<<M / 4, 128>>>(buf(i), out); }, start, stop));
  report("rows 1024 thr x 2 rows, batch 4, 2/SM persistent", best_of([&](int i) { rows<1024, 2, 4><<<2 * sms, 1024>>>(buf(i), out); }, start, stop));
  report("rows 1024 thr x 2 rows, batch 2, 2/SM persistent", best_of([&](int i) { rows<1024, 2, 2><<<2 * sms, 1024>>>(buf(i), out); }, start, stop));
  report("rows 1024 thr x 1 row, batch 4, 2/SM persistent", best_of([&](int i) { rows<1024, 1, 4><<<2 * sms, 1024>>>(buf(i), out); }, start, stop));
  report("rows 512 thr x 2 rows, batch 4, 4/SM persistent", best_of([&](int i) { rows<512, 2, 4><<<4 * sms, 512>>>(buf(i), out); }, start, stop));
  report("rows 128 thr x 2 rows, batch 4, 16/SM persistent", best_of([&](int i) { rows<128, 2, 4><<<16 * sms, 128>>>(buf(i), out); }, start, stop));

  // The real kernel. Shipped: block 128, lanes 128, vec 8, unroll 4, rows 2, policy 1 (evict-first).
  report_gemv("gemv shipped (128/128 u4 r2 p1, 2048 blocks)", best_of([&](int i) { gemv<128, 128, 4, 2, 0, 1><<<M / 2, 128>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  CHECK(cudaFuncSetAttribute(gemv<128, 128, 4, 2, 1, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, N * 2));
  report_gemv("gemv shipped, x in shared memory", best_of([&](int i) { gemv<128, 128, 4, 2, 1, 1><<<M / 2, 128, N * 2>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 128/128 u8 r1 (one batch of 8, 4096 blocks)", best_of([&](int i) { gemv<128, 128, 8, 1, 0, 1><<<M, 128>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 128/128 u8 r1 policy 2", best_of([&](int i) { gemv<128, 128, 8, 1, 0, 2><<<M, 128>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 256/256 u4 r1 (one batch of 4, 4096 blocks)", best_of([&](int i) { gemv<256, 256, 4, 1, 0, 1><<<M, 256>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 256/256 u4 r2 (one batch of 8 a thread)", best_of([&](int i) { gemv<256, 256, 4, 2, 0, 1><<<M / 2, 256>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  // The tensor-core sketch: 256 blocks of 16 rows.
  report_gemv("gemv_tc kw4 u4 (256 blocks of 16 rows)", best_of([&](int i) { gemv_tc<4, 4><<<M / 16, 128>>>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc kw8 u2", best_of([&](int i) { gemv_tc<8, 2><<<M / 16, 256>>>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc kw8 u4", best_of([&](int i) { gemv_tc<8, 4><<<M / 16, 256>>>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc kw16 u2", best_of([&](int i) { gemv_tc<16, 2><<<M / 16, 512>>>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc kw16 u4", best_of([&](int i) { gemv_tc<16, 4><<<M / 16, 512>>>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc kw32 u2", best_of([&](int i) { gemv_tc<32, 2><<<M / 16, 1024>>>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc kw32 u1", best_of([&](int i) { gemv_tc<32, 1><<<M / 16, 1024>>>(mat(i), x, y); }, start, stop));
  // Fed from shared memory by bulk copies: 256 blocks of 16 rows.
  report_gemv("gemv_tc_bulk kw4 bk256 6 stages", best_of([&](int i) { bulk<4, 256, 6>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc_bulk kw4 bk256 10 stages", best_of([&](int i) { bulk<4, 256, 10>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc_bulk kw4 bk512 4 stages", best_of([&](int i) { bulk<4, 512, 4>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc_bulk kw4 bk512 6 stages", best_of([&](int i) { bulk<4, 512, 6>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc_bulk kw8 bk512 6 stages", best_of([&](int i) { bulk<8, 512, 6>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc_bulk kw4 bk1024 3 stages", best_of([&](int i) { bulk<4, 1024, 3>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc_bulk kw16 bk512 4 stages", best_of([&](int i) { bulk<16, 512, 4>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc_bulk kw16 bk1024 3 stages", best_of([&](int i) { bulk<16, 1024, 3>(mat(i), x, y); }, start, stop));
  report_gemv("gemv_tc_bulk kw8 bk1024 6 stages", best_of([&](int i) { bulk<8, 1024, 6>(mat(i), x, y); }, start, stop));
  report_gemv("gemv 512/128 u4 r2, persistent 4/SM", best_of([&](int i) { gemv<512, 128, 4, 2, 0, 1><<<4 * sms, 512>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 512/128 u4 r1, persistent 4/SM", best_of([&](int i) { gemv<512, 128, 4, 1, 0, 1><<<4 * sms, 512>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 512/128 u8 r1, persistent 4/SM", best_of([&](int i) { gemv<512, 128, 8, 1, 0, 1><<<4 * sms, 512>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 256/128 u4 r2, persistent 8/SM", best_of([&](int i) { gemv<256, 128, 4, 2, 0, 1><<<8 * sms, 256>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 512/256 u4 r1, persistent 4/SM", best_of([&](int i) { gemv<512, 256, 4, 1, 0, 1><<<4 * sms, 512>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 512/64 u4 r2, persistent 4/SM", best_of([&](int i) { gemv<512, 64, 4, 2, 0, 1><<<4 * sms, 512>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 512/128 u4 r2, persistent 2/SM", best_of([&](int i) { gemv<512, 128, 4, 2, 0, 1><<<2 * sms, 512>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 1024/128 u4 r2, persistent 2/SM", best_of([&](int i) { gemv<1024, 128, 4, 2, 0, 1><<<2 * sms, 1024>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 1024/128 u2 r2, persistent 2/SM", best_of([&](int i) { gemv<1024, 128, 2, 2, 0, 1><<<2 * sms, 1024>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 1024/128 u4 r1, persistent 2/SM", best_of([&](int i) { gemv<1024, 128, 4, 1, 0, 1><<<2 * sms, 1024>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  report_gemv("gemv 1024/1024 u1 r2, persistent 2/SM", best_of([&](int i) { gemv<1024, 1024, 1, 2, 0, 1><<<2 * sms, 1024>>>(mat(i), x, y, nullptr, nullptr); }, start, stop));
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  // A constant matrix cannot catch a wrong relabelling of k or of the rows: the tensor-core sketch
  // and the shipped kernel once more on random data, against a float64 reference.
  std::vector<__half> ha((size_t)M * N), hx(N);
  unsigned seed = 12345;
  auto next = [&]() { seed = seed * 1664525u + 1013904223u; return (seed >> 8) * (2.0f / 16777216.0f) - 1.0f; };
  for (auto& e : ha) e = __float2half(next());
  for (auto& e : hx) e = __float2half(next());
  CHECK(cudaMemcpy(bufs[0], ha.data(), BYTES, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(x, hx.data(), N * 2, cudaMemcpyHostToDevice));
  std::vector<double> ref(M, 0.0);
  for (int r = 0; r < M; ++r)
    for (int k = 0; k < N; ++k) ref[r] += (double)__half2float(ha[(size_t)r * N + k]) * __half2float(hx[k]);
  auto worst = [&](const char* name) {
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpy(host.data(), y, M * 2, cudaMemcpyDeviceToHost) != cudaSuccess) return;
    double e = 0;
    for (int r = 0; r < M; ++r) e = fmax(e, fabs(__half2float(host[r]) - ref[r]) / (1.0 + fabs(ref[r])));
    printf("random data, %-28s worst |y - ref| / (1 + |ref|) = %.1e\n", name, e);
  };
  gemv_tc<8, 4><<<M / 16, 256>>>(mat(0), x, y);
  worst("gemv_tc kw8 u4");
  gemv_tc<16, 2><<<M / 16, 512>>>(mat(0), x, y);
  worst("gemv_tc kw16 u2");
  bulk<4, 512, 6>(mat(0), x, y);
  worst("gemv_tc_bulk kw4 bk512 6");
  bulk<8, 1024, 6>(mat(0), x, y);
  worst("gemv_tc_bulk kw8 bk1024 6");
  gemv<128, 128, 4, 2, 0, 1><<<M / 2, 128>>>(mat(0), x, y, nullptr, nullptr);
  worst("gemv shipped");
  return 0;
}
