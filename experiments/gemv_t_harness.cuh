// What the float16 transposed-GEMV probes share (gemv_t_tiles.cu, gemv_t_tma.cu): a case is one kernel at
// one tiling, launched on (x, A, y, M, N, acc, counters, SMs) with A row-major M x N; time_cases fills A and
// x with random values, checks each case against a float64 product with y poisoned first, and prints its
// time per call on one line per shape (-1: wrong, -2: the launch failed, n/a: N is not whole strips of
// the case's width). acc holds acc_rows x N floats and counters N words, both zero before and after a call.
#pragma once
#include <cuda_fp16.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_common.cuh"

using TransposedRun =
    std::function<cudaError_t(const __half*, const __half*, __half*, int, int, float*, unsigned*, int)>;

struct TransposedCase {
  std::string name;
  int width;  // the case runs where N is a multiple of it
  TransposedRun run;
};

inline int time_cases(const BenchSetup& setup, int m, int n, const std::vector<TransposedCase>& cases, int acc_rows) {
  const size_t bytes = (size_t)m * n * sizeof(__half);
  std::vector<__half*> as = rotating_buffers<__half>(setup.prop, bytes, 0);
  if (as.empty()) return 1;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<__half> a0((size_t)m * n), xh(m);
  for (auto& v : a0) v = __float2half(dist(rng));
  for (auto& v : xh) v = __float2half(dist(rng));
  for (__half* a : as) CHECK(cudaMemcpy(a, a0.data(), bytes, cudaMemcpyHostToDevice));
  std::vector<double> want(n, 0.0);
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) want[c] += (double)__half2float(a0[(size_t)r * n + c]) * __half2float(xh[r]);
  __half *x, *y;
  float* acc;
  unsigned* counters;
  CHECK(cudaMalloc(&x, m * sizeof(__half)));
  CHECK(cudaMalloc(&y, n * sizeof(__half)));
  CHECK(cudaMalloc(&acc, (size_t)acc_rows * n * sizeof(float)));
  CHECK(cudaMalloc(&counters, n * sizeof(unsigned)));
  CHECK(cudaMemset(acc, 0, (size_t)acc_rows * n * sizeof(float)));
  CHECK(cudaMemset(counters, 0, n * sizeof(unsigned)));
  CHECK(cudaMemcpy(x, xh.data(), m * sizeof(__half), cudaMemcpyHostToDevice));
  const int sms = setup.prop.multiProcessorCount;
  printf("float16 %6d x %6d:", m, n);
  for (size_t k = 0; k < cases.size(); ++k) {
    if (n % cases[k].width) {
      printf("%s %s n/a", k ? "," : "", cases[k].name.c_str());
      continue;
    }
    auto call = [&](int i) { cases[k].run(x, as[i % as.size()], y, m, n, acc, counters, sms); };
    float us = -2.0f;
    CHECK(cudaMemset(y, 0xff, n * sizeof(__half)));
    if (cases[k].run(x, as[0], y, m, n, acc, counters, sms) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess) {
      std::vector<__half> got(n);
      CHECK(cudaMemcpy(got.data(), y, n * sizeof(__half), cudaMemcpyDeviceToHost));
      double err = 0, scale = 0;
      for (int c = 0; c < n; ++c) {
        const double g = __half2float(got[c]);
        err = std::isnan(g) ? INFINITY : fmax(err, fabs(g - want[c]));
        scale = fmax(scale, fabs(want[c]));
      }
      us = err / scale < 2e-3 ? best_of(call, setup.start, setup.stop) : -1.0f;
    }
    CHECK(cudaGetLastError());
    printf("%s %s %.2f", k ? "," : "", cases[k].name.c_str(), us);
    fflush(stdout);  // a case that hangs leaves the ones before it on record
  }
  printf("\n");
  fflush(stdout);
  for (__half* a : as) cudaFree(a);
  cudaFree(x), cudaFree(y), cudaFree(acc), cudaFree(counters);
  return 0;
}
