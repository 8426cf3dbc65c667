// Can the tensor cores run the 8-bit M = 1 GEMV as fast as its bytes allow? The streaming CUDA-core GEMV
// (kernels/q8gemm/q8gemv.cu) reads 59-68 MB at 86-88% of copy in the benchmarks' clock, where a kernel that
// only reads the bytes reaches 100% (experiments/read_floor_isolated.py); issue 51's goal is 90%. A code
// costs it about four instructions (a byte permute and a subtraction to make it a float, an FMA, and its
// share of widening x), so its warps spend long stretches issuing arithmetic with no loads in flight. On
// tensor cores a pair of codes costs one permute and one subtraction, and an MMA adds 16 rows' products
// for free; the shipped tensor-core kernel (q8gemm_mma.cu) was 1.05-1.32x the CUDA cores' time at M = 1,
// but it reads x one step at a time inside its multiply loop and splits K into contiguous parts.
//
// `mma_stream` here: a block of WARPS warps owns 16 rows of W; warp w takes the steps w, w + WARPS, ...
// (a step: pieces 4s .. 4s + 3 of rows g and g + 8, one 16-byte piece a lane, as q8gemm_mma.cu maps the
// MMA's k slots to whole pieces), so the block's loads of a round cover WARPS x 64 contiguous bytes of each
// row; every load of a round (W and x) is issued before its first conversion; the first PREFETCH steps of
// each row are asked of L2 before griddepcontrol.wait (PDL), as the streaming GEMV does. The warps' sums
// are added in shared memory in a fixed order. Timed beside the shipped streaming and tensor-core
// kernels at several tilings, in one program and clock (bench_common.cuh's, and the benchmarks' isolated
// clock: a small plain kernel before each call); each output checked against a float64 product.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I kernels/common -I kernels -o /tmp/q8mma experiments/q8gemv_mma.cu
//   /tmp/q8mma
#include <cuda_fp16.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "bench_common.cuh"
#include "q8gemm/q8gemv.cu"

namespace probe {

using at_q8gemm::PIECE;
using at_q8gemm::QUAD;

template <int KIND, int WARPS, int UNROLL, int PREFETCH>
__global__ void __launch_bounds__(WARPS * 32) mma_stream(const __half* __restrict__ x, const unsigned char* __restrict__ q,
                                                         const __half* __restrict__ scales, __half* __restrict__ out,
                                                         int N, int K, float alpha, float beta) {
  __shared__ float parts[WARPS][16];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const int row0 = blockIdx.x * 16;
  const int pieces = K / PIECE, steps = (pieces + QUAD - 1) / QUAD;
  const uint4* rows[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) rows[h] = reinterpret_cast<const uint4*>(q + (size_t)min(row0 + 8 * h + g, N - 1) * K);
  at_q8gemm::launch_dependents();
#pragma unroll
  for (int d = 0; d < PREFETCH; ++d) {
    const int p = (warp + d * WARPS) * QUAD + c;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (p < pieces) asm volatile("prefetch.global.L2 [%0];" ::"l"(rows[h] + p) : "memory");
  }
  at_q8gemm::wait_for_prior_grid();
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int s = warp; s < steps; s += UNROLL * WARPS) {
    uint4 w[UNROLL][2], xr[UNROLL][2];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int p = (s + u * WARPS) * QUAD + c;
      const bool in = s + u * WARPS < steps && p < pieces;
#pragma unroll
      for (int h = 0; h < 2; ++h) w[u][h] = in ? at_common::load_stream<1>(rows[h] + p) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int p = (s + u * WARPS) * QUAD + c;
      const bool in = s + u * WARPS < steps && p < pieces;
      xr[u][0] = in ? __ldg(xv + 2 * p) : make_uint4(0u, 0u, 0u, 0u);
      xr[u][1] = in ? __ldg(xv + 2 * p + 1) : make_uint4(0u, 0u, 0u, 0u);
    }
    // +0.0f built from a word of every load of the round (masked with N >> 31, zero, which the compiler
    // cannot know): added to the sums, it holds every MMA of the round until every load is issued
    // (kernels/q8gemm/q8gemv.cu: issued_zero). Without it ptxas sinks each load to its use.
    unsigned any = 0;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) any |= w[u][0].x | w[u][1].x | xr[u][0].x | xr[u][1].x;
    acc[0] += __uint_as_float(any & ((unsigned)N >> 31));
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      unsigned a[2][4][2];  // row g or g + 8, word, pair
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const unsigned* words = reinterpret_cast<const unsigned*>(&w[u][h]);
#pragma unroll
        for (int j = 0; j < 4; ++j) at_q8gemm::Pairs<__half, KIND>::of(words[j], a[h][j]);
      }
      const unsigned* b = reinterpret_cast<const unsigned*>(xr[u]);
#pragma unroll
      for (int j = 0; j < 4; ++j) at_q8gemm::mma<__half>(acc, a[0][j][0], a[1][j][0], a[0][j][1], a[1][j][1], b[2 * j], b[2 * j + 1]);
    }
  }
  // Column 0 of D (every column holds the same sums): lanes c = 0 hold rows g (acc[0]) and g + 8 (acc[2]).
  if (WARPS > 1) {
    if (c == 0) {
      parts[warp][g] = acc[0];
      parts[warp][g + 8] = acc[2];
    }
    __syncthreads();
    if (warp != 0 || lane >= 16) return;
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < WARPS; ++v) sum += parts[v][lane];
    const int row = row0 + lane;
    if (row < N) {
      const float before = beta != 0.0f ? __half2float(out[row]) : 0.0f;
      out[row] = __float2half(alpha * __half2float(scales[row]) * sum + beta * before);
    }
    return;
  }
  if (c != 0) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h + g;
    if (row >= N) continue;
    const float before = beta != 0.0f ? __half2float(out[row]) : 0.0f;
    out[row] = __float2half(alpha * __half2float(scales[row]) * acc[2 * h] + beta * before);
  }
}

// The shipped streaming GEMV at one of its tilings (policy 1: streamed loads).
template <int KIND, int BLOCK, int ROWS, int UNROLL, int KSPLIT>
__global__ void __launch_bounds__(BLOCK) stream(const __half* x, const unsigned char* q, const __half* scales,
                                                __half* out, int N, int K, float alpha, float beta) {
  at_q8gemm::q8gemv_body<__half, KIND, BLOCK, ROWS, UNROLL, 1, KSPLIT>(x, q, scales, out, N, K, alpha, beta);
}

// The shipped tensor-core kernel at M = 1 (one tile of x, 16 rows a warp), one stage or a ring.
template <int KIND, int BLOCK, int UNROLL, int KSPLIT, int RING>
__global__ void __launch_bounds__(BLOCK) tensor(const __half* x, const unsigned char* q, const __half* scales,
                                                __half* out, int N, int K, float alpha, float beta) {
  if constexpr (RING == 1)
    at_q8gemm::q8gemm_mma_body<__half, KIND, 1, BLOCK, 1, UNROLL, 1, KSPLIT>(x, q, scales, out, 1, N, K, alpha, beta);
  else
    at_q8gemm::q8gemm_mma_ring<__half, KIND, 1, BLOCK, 1, UNROLL, 1, KSPLIT, RING>(x, q, scales, out, 1, N, K, alpha,
                                                                                    beta);
}

}  // namespace probe

using Kernel = void (*)(const __half*, const unsigned char*, const __half*, __half*, int, int, float, float);

struct Variant {
  std::string name;
  Kernel fn;
  int block, rows_per_block;
};

#define MMA_STREAM(W, U, P) \
  Variant{"mma_stream warps" #W " u" #U " pf" #P, probe::mma_stream<KIND, W, U, P>, 32 * W, 16}
#define STREAM(B, R, U, S) \
  Variant{"stream b" #B " rows" #R " u" #U " ksplit" #S, probe::stream<KIND, B, R, U, S>, B, B / 32 / S * R}
#define TENSOR(B, U, S, R) \
  Variant{"tensor b" #B " u" #U " ksplit" #S " ring" #R, probe::tensor<KIND, B, U, S, R>, B, B / 32 / S * 16}

template <int KIND>
std::vector<Variant> variants() {
  return {
      STREAM(256, 1, 4, 1),  STREAM(128, 2, 2, 1),  STREAM(256, 2, 2, 1),  STREAM(128, 1, 4, 1),
      TENSOR(256, 4, 8, 1),  TENSOR(256, 2, 8, 1),  TENSOR(512, 2, 16, 1), TENSOR(256, 2, 8, 2),
      MMA_STREAM(4, 4, 2),   MMA_STREAM(4, 8, 2),   MMA_STREAM(8, 2, 2),   MMA_STREAM(8, 4, 0),
      MMA_STREAM(8, 4, 2),   MMA_STREAM(8, 8, 2),   MMA_STREAM(16, 2, 2),  MMA_STREAM(16, 4, 2),
      MMA_STREAM(16, 4, 0),  MMA_STREAM(32, 2, 2),  MMA_STREAM(32, 4, 2),  MMA_STREAM(2, 8, 2),
  };
}

// A code's value (KIND 0: two's complement int8; 1: float8 e4m3, decoded from its bit fields).
double decode(int kind, unsigned char b) {
  if (kind == 0) return (double)(signed char)b;
  const int sign = b >> 7, exponent = (b >> 3) & 15, mantissa = b & 7;
  const double v = exponent ? std::ldexp(1.0 + mantissa / 8.0, exponent - 7) : std::ldexp(mantissa / 8.0, -6);
  return sign ? -v : v;
}

template <int KIND>
int run(const BenchSetup& s, int N, int K, const char* kind) {
  const size_t wbytes = (size_t)N * K;
  std::vector<unsigned char*> codes = rotating_buffers<unsigned char>(s.prop, wbytes, 0);
  if (codes.empty()) return 1;
  std::vector<unsigned char> h(wbytes);
  unsigned state = 12345u;
  for (auto& b : h) {  // random codes (fp8: finite e4m3 only), one buffer filled and copied to the rest
    state = state * 1664525u + 1013904223u;
    b = (unsigned char)(state >> 24);
    if (KIND == 1 && (b & 0x7f) == 0x7f) b ^= 0x01;
  }
  for (auto* c : codes) CHECK(cudaMemcpy(c, h.data(), wbytes, cudaMemcpyHostToDevice));
  __half *x, *scales, *out;
  CHECK(cudaMalloc(&x, (size_t)K * 2));
  CHECK(cudaMalloc(&scales, (size_t)N * 2));
  CHECK(cudaMalloc(&out, (size_t)N * 2));
  std::vector<__half> hx(K), hs(N), got(N);
  for (int k = 0; k < K; ++k) {
    state = state * 1664525u + 1013904223u;
    hx[k] = __float2half(((int)(state >> 20) % 2001 - 1000) / 700.0f);
  }
  for (int n = 0; n < N; ++n) hs[n] = __float2half(KIND ? 0.01f : 0.001f);
  CHECK(cudaMemcpy(x, hx.data(), (size_t)K * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(scales, hs.data(), (size_t)N * 2, cudaMemcpyHostToDevice));
  std::vector<double> exact(N);  // float64 product, then the scale
  double table[256];
  for (int b = 0; b < 256; ++b) table[b] = decode(KIND, (unsigned char)b);
  double largest = 1e-30;
  for (int n = 0; n < N; ++n) {
    double sum = 0.0;
    const unsigned char* row = h.data() + (size_t)n * K;
    for (int k = 0; k < K; ++k) sum += table[row[k]] * (double)__half2float(hx[k]);
    exact[n] = sum * (double)__half2float(hs[n]);
    largest = fmax(largest, fabs(exact[n]));
  }
  const double bytes = (double)wbytes + 2.0 * K + 4.0 * N;
  for (const Variant& v : variants<KIND>()) {
    const dim3 grid((N + v.rows_per_block - 1) / v.rows_per_block), block(v.block);
    CHECK(cudaMemset(out, 0xff, (size_t)N * 2));  // NaN: a row left unwritten shows
    CHECK(launch(v.fn, true, grid, block, (const __half*)x, (const unsigned char*)codes[0], (const __half*)scales,
                 out, N, K, 1.0f, 0.0f));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(got.data(), out, (size_t)N * 2, cudaMemcpyDeviceToHost));
    double worst = 0.0;
    for (int n = 0; n < N; ++n) {
      const double d = fabs((double)__half2float(got[n]) - exact[n]);
      worst = std::isnan(d) ? INFINITY : fmax(worst, d);
    }
    const size_t copies = codes.size();
    const auto call = [&](int i) {
      launch(v.fn, true, grid, block, (const __half*)x, (const unsigned char*)codes[i % copies],
             (const __half*)scales, out, N, K, 1.0f, 0.0f);
    };
    const float us = best_of(call, s.start, s.stop);
    const float isolated = isolated_us(s, call);
    CHECK(cudaGetLastError());
    printf("%s %dx%d  %-34s %8.2f us %6.0f GB/s  isolated %8.2f us %6.0f GB/s  err %.1e of max|y|\n", kind, N, K,
           v.name.c_str(), us, bytes / us / 1e3, isolated, bytes / isolated / 1e3,
           worst / largest);
    fflush(stdout);
  }
  for (auto* c : codes) cudaFree(c);
  cudaFree(x);
  cudaFree(scales);
  cudaFree(out);
  return 0;
}

int main() {
  BenchSetup s;
  CHECK(bench_setup(s));
  const int shapes[][2] = {{4096, 14336}, {3584, 18944}, {28672, 4096}, {37888, 3584}, {6144, 4096}};
  for (const auto& shape : shapes) {
    if (run<0>(s, shape[0], shape[1], "int8")) return 1;
    if (run<1>(s, shape[0], shape[1], "fp8")) return 1;
  }
  return 0;
}
