// Can an 8-bit M = 1 GEMV stream its codes the way our float16 GEMV streams its matrix? The float16
// GEMV (kernels/gemv/gemv.cu) reads 60-135 MB at 96-100% of copy bandwidth; the shipped 8-bit kernel
// (kernels/q8gemm/q8gemm.cu, CUDA cores) reads 59-68 MB at 78-86% (issue 51's goal: 90%). This probe
// times, in one program and one clock, the shipped kernel at its H200 picks beside a GEMV-shaped
// 8-bit kernel written here:
//   - a row group of LANES threads (a warp or several) reads ROWS rows, lane l taking pieces
//     l, l + LANES, ... of each row (16 codes a 16-byte piece), so that one load instruction of a
//     group covers LANES x 16 contiguous bytes; UNROLL steps in flight, x's 32 bytes a piece through L1
//     and shared by the group's ROWS rows;
//   - launched with programmatic dependent launch, each thread asking L2 for its first PREFETCH pieces
//     of each row before griddepcontrol.wait (gemv.cu's prefetch_row_heads);
//   - ORDER 1 issues every load of a step before its first FMA (gemv.cu's issued_zero).
// Timing as the tuner's worker does (bench_common.cuh): launches queued behind a spin kernel, back to
// back, with PDL, the codes rotating over 4x the L2; each variant's output checked against the shipped
// kernel's; each variant also timed in the benchmarks' isolated clock (a small plain kernel before each
// call). `deep` runs the second set: deeper prefetches. Build and run on the GPU machine (or build here
// and carry the binary):
//   nvcc -O3 -arch=sm_90 -std=c++17 -I kernels/common -I kernels -o /tmp/q8gemv experiments/q8gemv_stream.cu
//   /tmp/q8gemv [deep]
#include <cuda_fp16.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "bench_common.cuh"
#include "q8gemm/q8gemm.cu"

namespace probe {

using at_q8gemm::Codes;
using at_q8gemm::PIECE;

template <int ROWS, int UNROLL>
__device__ __forceinline__ float issued_zero(const uint4 (&w)[ROWS][UNROLL], const uint4 (&xv)[UNROLL][2], int n) {
  unsigned any = 0;
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    any |= xv[u][0].x | xv[u][1].x;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) any |= w[r][u].x;
  }
  return __uint_as_float(any & ((unsigned)n >> 31));  // +0.0f the compiler cannot see through
}

template <int KIND, int ROWS>
__device__ __forceinline__ void multiply(const uint4 (&w)[ROWS], const uint4 (&xv)[2], float (&acc)[ROWS]) {
  float xs[PIECE];
  at_q8gemm::activations(xv[0], xs);
  at_q8gemm::activations(xv[1], xs + 8);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const unsigned* words = reinterpret_cast<const unsigned*>(&w[r]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float f[4];
      Codes<KIND>::of(words[j], f);
#pragma unroll
      for (int b = 0; b < 4; ++b) acc[r] = fmaf(f[b], xs[4 * j + b], acc[r]);
    }
  }
}

template <int KIND, int BLOCK, int LANES, int ROWS, int UNROLL, int PREFETCH, int ORDER>
__global__ void __launch_bounds__(BLOCK) q8gemv(const __half* __restrict__ x, const unsigned char* __restrict__ q,
                                                const __half* __restrict__ scales, __half* __restrict__ out, int N,
                                                int K, float alpha, float beta) {
  static_assert(LANES % 32 == 0 && BLOCK % LANES == 0, "groups of whole warps");
  constexpr int GROUPS = BLOCK / LANES, WARPS = LANES / 32;
  __shared__ float cross[BLOCK / 32][ROWS];
  const int lane = threadIdx.x % LANES, group = threadIdx.x / LANES;
  const int row0 = (blockIdx.x * GROUPS + group) * ROWS;
  const int pieces = K / PIECE;
  const uint4* rows[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) rows[r] = reinterpret_cast<const uint4*>(q + (size_t)min(row0 + r, N - 1) * K);
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#pragma unroll
  for (int d = 0; d < PREFETCH; ++d)
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
      if (lane + d * LANES < pieces) asm volatile("prefetch.global.L2 [%0];" ::"l"(rows[r] + lane + d * LANES) : "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
  int v = lane;
  for (; v + (UNROLL - 1) * LANES < pieces; v += LANES * UNROLL) {
    uint4 w[ROWS][UNROLL], xr[UNROLL][2];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) w[r][u] = __ldcs(rows[r] + v + u * LANES);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      xr[u][0] = __ldg(xv + 2 * (v + u * LANES));
      xr[u][1] = __ldg(xv + 2 * (v + u * LANES) + 1);
    }
    if (ORDER) {
      const float zero = issued_zero<ROWS, UNROLL>(w, xr, N);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) acc[r] += zero;
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      uint4 wu[ROWS];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) wu[r] = w[r][u];
      multiply<KIND, ROWS>(wu, xr[u], acc);
    }
  }
  for (; v < pieces; v += LANES) {
    uint4 wu[ROWS], xr[2];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) wu[r] = __ldcs(rows[r] + v);
    xr[0] = __ldg(xv + 2 * v);
    xr[1] = __ldg(xv + 2 * v + 1);
    multiply<KIND, ROWS>(wu, xr, acc);
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int o = 16; o; o /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  if (WARPS > 1) {
    if (threadIdx.x % 32 == 0)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) cross[threadIdx.x / 32][r] = acc[r];
    __syncthreads();
    if (lane >= ROWS) return;
    float s = 0.0f;
    for (int w = 0; w < WARPS; ++w) s += cross[group * WARPS + w][lane];
    const int row = row0 + lane;
    if (row < N) {
      const float before = beta != 0.0f ? __half2float(out[row]) : 0.0f;
      out[row] = __float2half(alpha * __half2float(scales[row]) * s + beta * before);
    }
    return;
  }
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int row = row0 + r;
    if (row >= N) break;
    const float before = beta != 0.0f ? __half2float(out[row]) : 0.0f;
    out[row] = __float2half(alpha * __half2float(scales[row]) * acc[r] + beta * before);
  }
}

// The shipped CUDA-core kernel at one of its tilings (M = 1: mt 1).
template <int KIND, int BLOCK, int RPW, int UNROLL, int KSPLIT>
__global__ void __launch_bounds__(BLOCK) shipped(const __half* x, const unsigned char* q, const __half* scales,
                                                 __half* out, int N, int K, float alpha, float beta) {
  at_q8gemm::q8gemm_body<__half, KIND, 1, BLOCK, RPW, UNROLL, 1, KSPLIT>(x, q, scales, out, 1, N, K, alpha, beta);
}

}  // namespace probe

using Kernel = void (*)(const __half*, const unsigned char*, const __half*, __half*, int, int, float, float);

struct Variant {
  std::string name;
  Kernel fn;
  int block, rows_per_block;
};

#define STREAM(B, L, R, U, P, O)                                                                      \
  Variant{"stream b" #B " lanes" #L " rows" #R " u" #U " pf" #P " order" #O,                         \
          probe::q8gemv<KIND, B, L, R, U, P, O>, B, B / L * R}
#define SHIPPED(B, R, U, S) \
  Variant{"shipped b" #B " rpw" #R " u" #U " ksplit" #S, probe::shipped<KIND, B, R, U, S>, B, B / 32 / S * R}

// Tilings of the first run (`q8gemv`), and the prefetch depths of the second (`q8gemv deep`).
template <int KIND>
std::vector<Variant> variants(bool deep) {
  if (deep)
    return {
        SHIPPED(256, 2, 1, 8), SHIPPED(128, 2, 1, 4), SHIPPED(256, 4, 1, 4), SHIPPED(64, 4, 1, 1),
        STREAM(128, 128, 2, 2, 1, 1),  STREAM(128, 128, 2, 2, 2, 1),  STREAM(128, 128, 2, 2, 3, 1),
        STREAM(128, 128, 2, 2, 4, 1),  STREAM(128, 128, 2, 2, 6, 1),  STREAM(128, 128, 2, 2, 10, 1),
        STREAM(128, 128, 2, 4, 4, 1),  STREAM(128, 128, 2, 4, 10, 1), STREAM(128, 128, 2, 1, 4, 1),
        STREAM(128, 128, 2, 1, 10, 1), STREAM(128, 128, 1, 2, 4, 1),  STREAM(128, 128, 1, 2, 10, 1),
        STREAM(128, 128, 4, 1, 4, 1),  STREAM(128, 128, 4, 2, 4, 1),  STREAM(256, 256, 2, 2, 2, 1),
        STREAM(256, 256, 2, 2, 3, 1),  STREAM(256, 256, 2, 2, 5, 1),  STREAM(256, 128, 2, 2, 4, 1),
        STREAM(128, 64, 2, 2, 4, 1),   STREAM(128, 64, 2, 2, 8, 1),   STREAM(128, 64, 2, 4, 4, 1),
        STREAM(128, 32, 2, 4, 2, 1),   STREAM(128, 32, 2, 4, 4, 1),   STREAM(128, 32, 2, 2, 8, 1),
        STREAM(256, 32, 1, 4, 2, 1),   STREAM(256, 32, 1, 4, 4, 1),   STREAM(256, 64, 2, 4, 4, 1),
    };
  return {
      SHIPPED(256, 2, 1, 8), SHIPPED(128, 2, 1, 4), SHIPPED(256, 4, 1, 8), SHIPPED(256, 4, 1, 4),
      SHIPPED(64, 4, 1, 1),  SHIPPED(128, 4, 2, 4), SHIPPED(64, 2, 1, 1),
      STREAM(128, 128, 2, 4, 1, 1), STREAM(128, 128, 2, 4, 2, 1), STREAM(128, 128, 2, 8, 2, 1),
      STREAM(128, 128, 2, 2, 2, 1), STREAM(128, 128, 1, 8, 2, 1), STREAM(128, 128, 1, 4, 2, 1),
      STREAM(128, 128, 4, 2, 2, 1), STREAM(128, 128, 4, 4, 1, 1), STREAM(128, 128, 2, 4, 0, 1),
      STREAM(128, 128, 2, 4, 2, 0), STREAM(128, 64, 2, 4, 2, 1),  STREAM(128, 64, 2, 8, 2, 1),
      STREAM(128, 64, 1, 8, 2, 1),  STREAM(128, 64, 4, 2, 2, 1),  STREAM(128, 32, 2, 4, 2, 1),
      STREAM(128, 32, 4, 2, 2, 1),  STREAM(128, 32, 2, 2, 1, 1),  STREAM(256, 256, 2, 4, 2, 1),
      STREAM(256, 256, 1, 4, 2, 1), STREAM(256, 128, 2, 4, 2, 1), STREAM(256, 64, 2, 4, 2, 1),
      STREAM(256, 256, 2, 2, 1, 1), STREAM(512, 512, 2, 2, 1, 1), STREAM(512, 256, 2, 4, 2, 1),
      STREAM(64, 64, 2, 4, 2, 1),   STREAM(64, 64, 4, 2, 2, 1),   STREAM(64, 32, 2, 4, 2, 1),
  };
}

template <int KIND>
int run(const BenchSetup& s, int N, int K, const char* kind, bool deep) {
  const size_t wbytes = (size_t)N * K;
  std::vector<unsigned char*> codes = rotating_buffers<unsigned char>(s.prop, wbytes, 0);
  if (codes.empty()) return 1;
  {  // random codes (fp8: finite e4m3 only), one buffer filled and copied to the rest
    std::vector<unsigned char> h(wbytes);
    unsigned state = 12345u;
    for (auto& b : h) {
      state = state * 1664525u + 1013904223u;
      b = (unsigned char)(state >> 24);
      if (KIND == 1 && (b & 0x7f) == 0x7f) b ^= 0x01;
    }
    for (auto* c : codes) CHECK(cudaMemcpy(c, h.data(), wbytes, cudaMemcpyHostToDevice));
  }
  __half *x, *scales, *out;
  CHECK(cudaMalloc(&x, (size_t)K * 2));
  CHECK(cudaMalloc(&scales, (size_t)N * 2));
  CHECK(cudaMalloc(&out, (size_t)N * 2));
  {
    std::vector<__half> hx(K), hs(N);
    for (int k = 0; k < K; ++k) hx[k] = __float2half((float)((k * 37 % 101) - 50) / 64.0f);
    for (int n = 0; n < N; ++n) hs[n] = __float2half(KIND ? 0.01f : 0.001f);
    CHECK(cudaMemcpy(x, hx.data(), (size_t)K * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(scales, hs.data(), (size_t)N * 2, cudaMemcpyHostToDevice));
  }
  std::vector<__half> reference(N), got(N);
  bool have_reference = false;
  const double bytes = (double)wbytes + 2.0 * K + 4.0 * N;
  for (const Variant& v : variants<KIND>(deep)) {
    const dim3 grid((N + v.rows_per_block - 1) / v.rows_per_block), block(v.block);
    CHECK(cudaMemset(out, 0xff, (size_t)N * 2));  // NaN: a row left unwritten shows
    CHECK(launch(v.fn, true, grid, block, (const __half*)x, (const unsigned char*)codes[0], (const __half*)scales,
                 out, N, K, 1.0f, 0.0f));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(got.data(), out, (size_t)N * 2, cudaMemcpyDeviceToHost));
    double worst = 0.0, scale = 1e-30;
    if (!have_reference) {
      reference = got;
      have_reference = true;
    }
    for (int n = 0; n < N; ++n) scale = fmax(scale, fabs((double)__half2float(reference[n])));
    for (int n = 0; n < N; ++n) {
      const double d = fabs((double)__half2float(got[n]) - (double)__half2float(reference[n]));
      worst = std::isnan(d) ? INFINITY : fmax(worst, d);
    }
    const size_t copies = codes.size();
    const auto call = [&](int i) {
      launch(v.fn, true, grid, block, (const __half*)x, (const unsigned char*)codes[i % copies],
             (const __half*)scales, out, N, K, 1.0f, 0.0f);
    };
    const float us = best_of(call, s.start, s.stop);
    // The benchmarks' isolated clock (bench_common.cuh: isolated_us).
    const float isolated = isolated_us(s, call);
    CHECK(cudaGetLastError());
    printf("%s %dx%d  %-42s %8.2f us %7.0f GB/s  isolated %8.2f us  rel.diff %.1e\n", kind, N, K, v.name.c_str(), us,
           bytes / us / 1e3, isolated, worst / scale);
  }
  for (auto* c : codes) cudaFree(c);
  cudaFree(x);
  cudaFree(scales);
  cudaFree(out);
  return 0;
}

int main(int argc, char** argv) {
  BenchSetup s;
  CHECK(bench_setup(s));
  const bool deep = argc > 1 && std::string(argv[1]) == "deep";
  const int shapes[][2] = {{3584, 18944}, {4096, 14336}, {6144, 4096}, {4096, 4096}, {28672, 4096}};
  for (const auto& shape : shapes) {
    if (deep && shape[1] == 4096 && shape[0] != 28672) continue;
    if (run<0>(s, shape[0], shape[1], "int8", deep)) return 1;
    if (run<1>(s, shape[0], shape[1], "fp8", deep)) return 1;
  }
  return 0;
}
