// The transposed GEMV (y = Aᵀx, A row-major M x N, float16) read as the plain GEMV reads its matrix: whole
// rows, so a block's loads cover one contiguous stretch of A. The narrow family (kernels/gemv/gemv_t_narrow.cu)
// reads strips of 16-256 columns, 32-512 bytes of each row, and the matrices of 64 MB and more reach only
// 75-90% of their read floor with it (docs/findings.md, transposed GEMV).
//   rows<UNROLL>: a block is a grid of team x teams threads (blockDim.x x blockDim.y); each thread owns
//   one 16-byte word of 8 columns of its band of the columns (blockIdx.x; one band where a row's words
//   fit a team) and a team reads a row of the band at once; the teams walk the block's part of the rows
//   (blockIdx.y) with UNROLL rows in flight each, the first UNROLL prefetched into L2 before
//   griddepcontrol.wait. The teams' sums are added in shared memory. One part: the block writes y. Several:
//   every block adds its column sums into acc with vector atomics (float4, sm_90) and the last part of
//   a band to finish (a counter) writes y and zeroes acc and its counter.
// Beside it, narrow at the shipped picks' tilings, the family's wide body (kernels/gemv/gemv_t_wide.cu: the
// same reads, the shares added in order by the last block of a band) and the flat read of the same bytes
// (its best grid), every kernel checked against a float64 product with y poisoned first. Argument `wide`:
// the short-and-wide and mid-size shapes over many tilings; none: the first run's shapes and tilings.
//   nvcc -O3 -arch=sm_90 -I kernels -I kernels/common -I experiments -o /tmp/gemv_t_rows experiments/gemv_t_rows.cu
#include <cuda.h>
#include <cuda_fp16.h>

#include <string>
#include <vector>

#include "gemv/gemv_t_wide.cu"
#include "gemv_t_harness.cuh"

constexpr int VEC = 8;  // halves a 16-byte word
constexpr int WORKSPACE_ROWS = 160;  // acc's rows: the wide body's shares of the rows write one each

template <int UNROLL>
__global__ void __launch_bounds__(1024)
    rows(const __half* __restrict__ x, const __half* __restrict__ A, __half* __restrict__ y, int M, int N,
         int rows_per, float* __restrict__ acc, unsigned* __restrict__ counters) {
  extern __shared__ float sums[];  // [teams][team * VEC]
  __shared__ bool last;
  const int team = blockDim.x, teams = blockDim.y, words = N / VEC;
  const int word0 = blockIdx.x * team;                     // the band's first word
  const int band_words = min(team, words - word0);
  // A thread past the band's last word reads its last word again: its sums are never stored, and no
  // branch keeps it out of the loop (the lean narrow kernel's way).
  const int word = word0 + min((int)threadIdx.x, band_words - 1);
  const int begin = blockIdx.y * rows_per, end = min(M, begin + rows_per);
  const uint4* a = reinterpret_cast<const uint4*>(A) + word;
  int r = begin + threadIdx.y;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#pragma unroll
  for (int u = 0; u < UNROLL; ++u)
    if (r + u * teams < end) asm volatile("prefetch.global.L2 [%0];" ::"l"(a + (size_t)(r + u * teams) * words));
  asm volatile("griddepcontrol.wait;" ::: "memory");
  float s[VEC] = {};
  for (; r + (UNROLL - 1) * teams < end; r += UNROLL * teams) {
    uint4 w[UNROLL];
    float xr[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      w[u] = __ldcs(a + (size_t)(r + u * teams) * words);
      xr[u] = __half2float(__ldg(x + r + u * teams));
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const __half2* h = reinterpret_cast<const __half2*>(&w[u]);
#pragma unroll
      for (int e = 0; e < VEC / 2; ++e) {
        const float2 f = __half22float2(h[e]);
        s[2 * e] = fmaf(f.x, xr[u], s[2 * e]);
        s[2 * e + 1] = fmaf(f.y, xr[u], s[2 * e + 1]);
      }
    }
  }
  for (; r < end; r += teams) {
    const uint4 w = __ldcs(a + (size_t)r * words);
    const float xr = __half2float(__ldg(x + r));
    const __half2* h = reinterpret_cast<const __half2*>(&w);
#pragma unroll
    for (int e = 0; e < VEC / 2; ++e) {
      const float2 f = __half22float2(h[e]);
      s[2 * e] = fmaf(f.x, xr, s[2 * e]);
      s[2 * e + 1] = fmaf(f.y, xr, s[2 * e + 1]);
    }
  }
  const int cols = team * VEC, band_cols = band_words * VEC, col0 = word0 * VEC;
  float* mine = sums + threadIdx.y * cols + threadIdx.x * VEC;
#pragma unroll
  for (int e = 0; e < VEC; e += 4) *reinterpret_cast<float4*>(mine + e) = make_float4(s[e], s[e + 1], s[e + 2], s[e + 3]);
  __syncthreads();
  const int tid = threadIdx.y * team + threadIdx.x, threads = team * teams;
  // Each thread adds the teams' sums of 4 columns at a time.
  for (int c = 4 * tid; c < band_cols; c += 4 * threads) {
    float4 t = *reinterpret_cast<const float4*>(sums + c);
    for (int k = 1; k < teams; ++k) {
      const float4 v = *reinterpret_cast<const float4*>(sums + k * cols + c);
      t.x += v.x, t.y += v.y, t.z += v.z, t.w += v.w;
    }
    if (gridDim.y == 1) {
      *reinterpret_cast<__half2*>(y + col0 + c) = __floats2half2_rn(t.x, t.y);
      *reinterpret_cast<__half2*>(y + col0 + c + 2) = __floats2half2_rn(t.z, t.w);
    } else {
      atomicAdd(reinterpret_cast<float4*>(acc + col0 + c), t);
    }
  }
  if (gridDim.y == 1) return;
  __threadfence();
  __syncthreads();
  if (tid == 0) last = atomicAdd(counters + blockIdx.x, 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int c = 4 * tid; c < band_cols; c += 4 * threads) {
    const float4 t = __ldcg(reinterpret_cast<const float4*>(acc + col0 + c));
    *reinterpret_cast<__half2*>(y + col0 + c) = __floats2half2_rn(t.x, t.y);
    *reinterpret_cast<__half2*>(y + col0 + c + 2) = __floats2half2_rn(t.z, t.w);
    __stcg(reinterpret_cast<float4*>(acc + col0 + c), make_float4(0.f, 0.f, 0.f, 0.f));
  }
  if (tid == 0) counters[blockIdx.x] = 0u;
}

// bands: bands of the columns (a team is a band's words); threads: a block's threads at most (teams of
// the team's size fill it); per_sm: blocks an SM over bands x parts (parts of whole rows).
template <int UNROLL>
TransposedCase rows_case(int bands, int threads, int per_sm) {
  auto kernel = rows<UNROLL>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
  return {"rows u" + std::to_string(UNROLL) + " b" + std::to_string(bands) + " t" + std::to_string(threads) + " x" +
              std::to_string(per_sm),
          VEC,  // every band's last word may be its only one
          [kernel, bands, threads, per_sm](const __half* x, const __half* a, __half* y, int m, int n, float* acc,
                                           unsigned* counters, int sms) {
            const int words = n / VEC, team = (words + bands - 1) / bands;
            if (team > threads) return cudaErrorInvalidValue;
            const int teams = threads / team;
            const int parts = std::max(1, std::min(m / teams, (per_sm * sms + bands / 2) / bands));
            const int rows_per = (m + parts - 1) / parts;
            const int used = (m + rows_per - 1) / rows_per;
            const size_t smem = (size_t)teams * team * VEC * sizeof(float);
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(bands, used);
            cfg.blockDim = dim3(team, teams);
            cfg.dynamicSmemBytes = smem;
            cudaLaunchAttribute pdl[1];
            pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            pdl[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = pdl;
            cfg.numAttrs = 1;
            return cudaLaunchKernelEx(&cfg, kernel, x, a, y, m, n, rows_per, acc, counters);
          }};
}

// The family's wide body (kernels/gemv/gemv_t_wide.cu) at one tiling, launched as narrow.py launches it:
// its shares of the rows added in order by the last block of a band, not by atomics.
template <int BLOCK, int UNROLL>
__global__ void __launch_bounds__(BLOCK)
    wide(const __half* x, const __half* A, __half* y, int one, int N, int M, int lda, int ldb, int ldc,
         float* workspace, unsigned* counters) {
  at_wide::wide_body<__half, false, BLOCK, VEC, UNROLL>(x, A, y, one, N, M, lda, ldb, ldc, 1.0f, 0.0f, workspace,
                                                        counters);
}

template <int BLOCK, int UNROLL>
TransposedCase wide_case(int bands, int per_sm) {
  auto kernel = wide<BLOCK, UNROLL>;
  return {"wide u" + std::to_string(UNROLL) + " b" + std::to_string(bands) + " t" + std::to_string(BLOCK) + " x" +
              std::to_string(per_sm),
          VEC,
          [kernel, bands, per_sm](const __half* x, const __half* a, __half* y, int m, int n, float* acc,
                                  unsigned* counters, int sms) {
            const int words = n / VEC, team = (words + bands - 1) / bands;
            if (team > BLOCK) return cudaErrorInvalidValue;
            const int grid_x = (words + team - 1) / team, teams = BLOCK / team;
            const int most = std::max(1, m / (teams * UNROLL));
            const int splits = per_sm ? std::max(1, std::min(most, (per_sm * sms + grid_x / 2) / grid_x)) : 1;
            if (splits > WORKSPACE_ROWS) return cudaErrorInvalidValue;
            return launch(kernel, true, dim3(grid_x, splits), dim3(team * teams), x, a, y, 1, n, m, m, n, n, acc,
                          counters);
          }};
}

// The flat read of m x n halves, its best of three grids, on its own rotating buffers.
float flat_read_us(const BenchSetup& setup, int m, int n) {
  const size_t bytes = (size_t)m * n * sizeof(__half), n16 = bytes / 16;
  std::vector<uint4*> bufs = rotating_buffers<uint4>(setup.prop, bytes, 1);
  float best = 1e30f;
  for (int per_sm : {4, 8, 16}) {
    const int blocks = per_sm * setup.prop.multiProcessorCount;
    auto call = [&](int i) { launch(read_flat<4>, true, dim3(blocks), dim3(256), (const uint4*)bufs[i % bufs.size()], n16, setup.out); };
    best = std::min(best, best_of(call, setup.start, setup.stop));
  }
  for (uint4* b : bufs) cudaFree(b);
  return best;
}

int main(int argc, char** argv) {
  BenchSetup setup;
  CHECK(bench_setup(setup));
  std::vector<TransposedCase> cases = {
      family_case<1024, 64, 8, 4, 0>(0),   // the short-and-wide picks (2304 x 9216)
      family_case<1024, 128, 4, 8, 0>(1),  // 28672 x 4096's pick
      family_case<1024, 128, 4, 8, 1>(2),  // the lean picks (4096 x 11008, 131072 x 256)
  };
  // `wide`: the short-and-wide shapes, over many tilings; otherwise the first run's.
  const bool wide = argc > 1 && std::string(argv[1]) == "wide";
  if (wide) {
    for (int bands : {2, 4, 8, 12}) {
      cases.push_back(wide_case<1024, 4>(bands, 2));
      cases.push_back(wide_case<1024, 4>(bands, 1));
      cases.push_back(wide_case<512, 4>(bands, 2));
    }
    for (int bands : {1, 2, 3, 4, 6, 8, 12, 16})
      for (int threads : {512, 1024})
        for (int per_sm : {1, 2}) {
          cases.push_back(rows_case<4>(bands, threads, per_sm));
          cases.push_back(rows_case<8>(bands, threads, per_sm));
        }
  } else {
    for (auto c : {rows_case<4>(1, 1024, 1), rows_case<8>(1, 1024, 1), rows_case<4>(1, 1024, 2),
                   rows_case<8>(1, 512, 2), rows_case<4>(1, 512, 4), rows_case<8>(2, 1024, 1),
                   rows_case<4>(2, 512, 2), rows_case<8>(4, 512, 2), rows_case<4>(4, 1024, 1),
                   rows_case<16>(1, 1024, 1), rows_case<4>(8, 256, 4)})
      cases.push_back(c);
  }
  const std::vector<std::pair<int, int>> first = {
      {131072, 256}, {65536, 1024}, {8192, 4096}, {14336, 4096}, {28672, 4096}, {4096, 11008}, {4096, 8192},
      {4096, 14336}, {18432, 2304}, {16384, 3072}, {7168, 5120}, {27648, 5120}, {5120, 13824}, {2304, 9216}};
  const std::vector<std::pair<int, int>> short_wide = {
      {2304, 9216}, {1536, 8960}, {2048, 10944}, {5120, 5120}, {6144, 5120}, {4544, 4544}, {4672, 4544},
      {4096, 4096}, {6144, 4096}, {8192, 4096}, {2048, 2048}, {1024, 1024}, {17920, 1536}, {4096, 11008},
      {4544, 18176}, {5120, 13824}, {4096, 8192}, {3584, 18944}};
  for (auto [m, n] : wide ? short_wide : first) {
    if (time_cases(setup, m, n, cases, WORKSPACE_ROWS)) return 1;
    printf("float16 %6d x %6d: flat read %.2f\n", m, n, flat_read_us(setup, m, n));
    fflush(stdout);
  }
  return 0;
}
