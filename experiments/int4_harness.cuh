// What the int4 GEMV experiments (int4_async.cu, int4_l2_prefetch.cu, int4_ring.cu) share: one M = 1,
// float16, group-128 symmetric problem of N x K with random codes, scales and x, its float64
// reference, and each variant checked against it (output poisoned with NaN first) and timed as autotune
// times kernels (bench_common.cuh: back to back behind a spin kernel, the codes rotating over 4x the L2).
#pragma once
#include "bench_common.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#define INT4_ARGS                                                                                         \
  const __half *x, const unsigned char *qweight, const __half *scales, const unsigned char *zeros, __half *out, \
      int M, int N, int K, float alpha, float beta

// For every variant v (v.fn, v.block): geometry(v, n, k, sms, grid, shared) gives its launch, and
// print(v, us, gbs, rel_err) writes its line. Returns 1 (after printing why) where CUDA fails. With
// `isolated`, the time is the benchmarks' isolated clock instead of back to back: a plain separator
// kernel before each call, the call launched with programmatic dependent launch (as autotune launches
// it), the separator's own time taken off.
template <typename Variant, typename Geometry, typename Print>
int run_int4_shape(const BenchSetup& setup, std::mt19937& rng, int n, int k, const std::vector<Variant>& variants,
                   Geometry geometry, Print print, bool isolated = false) {
  const int groups = k / 128;
  const size_t code_bytes = (size_t)n * k / 2;
  std::vector<unsigned char> codes(code_bytes);
  std::vector<__half> scale_h((size_t)n * groups), x_h(k);
  std::vector<float> scale_f(scale_h.size()), x_f(k);
  for (auto& b : codes) b = (unsigned char)(rng() & 0xFF);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (size_t i = 0; i < scale_h.size(); ++i)
    scale_f[i] = __half2float(scale_h[i] = __float2half(0.01f + 0.02f * std::fabs(unit(rng))));
  for (int i = 0; i < k; ++i) x_f[i] = __half2float(x_h[i] = __float2half(unit(rng)));
  // float64 reference: y[r] = sum_k x[k] (q[r, k] - 8) s[r, k / 128], even k in the low nibble.
  std::vector<double> ref(n);
  double ref_max = 0.0;
  for (int r = 0; r < n; ++r) {
    double acc = 0.0;
    for (int kk = 0; kk < k; ++kk) {
      const unsigned char byte = codes[(size_t)r * (k / 2) + kk / 2];
      const int q = kk % 2 ? byte >> 4 : byte & 0xF;
      acc += (double)x_f[kk] * (q - 8) * scale_f[(size_t)r * groups + kk / 128];
    }
    ref[r] = acc;
    ref_max = std::max(ref_max, std::fabs(acc));
  }
  unsigned char* d_codes;
  __half *d_x, *d_scales, *d_out;
  CHECK(cudaMalloc(&d_codes, code_bytes));
  CHECK(cudaMalloc(&d_x, k * sizeof(__half)));
  CHECK(cudaMalloc(&d_scales, scale_h.size() * sizeof(__half)));
  CHECK(cudaMalloc(&d_out, n * sizeof(__half)));
  CHECK(cudaMemcpy(d_codes, codes.data(), code_bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_x, x_h.data(), k * sizeof(__half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_scales, scale_h.data(), scale_h.size() * sizeof(__half), cudaMemcpyHostToDevice));
  // Timing reads rotating copies of the codes (4x the L2), filled with one byte: the time does not
  // depend on the values.
  std::vector<unsigned char*> rotating = rotating_buffers<unsigned char>(setup.prop, code_bytes, 0x5A);
  if (rotating.empty()) return 1;
  const double bytes = code_bytes + scale_h.size() * 2.0 + k * 2.0 + n * 2.0;
  for (const Variant& v : variants) {
    dim3 grid;
    size_t shared;
    geometry(v, n, k, setup.prop.multiProcessorCount, grid, shared);
    CHECK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    CHECK(cudaMemset(d_out, 0xFF, n * sizeof(__half)));  // NaN: a row never written fails
    v.fn<<<grid, v.block, shared>>>(d_x, d_codes, d_scales, nullptr, d_out, 1, n, k, 1.0f, 0.0f);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<__half> got(n);
    CHECK(cudaMemcpy(got.data(), d_out, n * sizeof(__half), cudaMemcpyDeviceToHost));
    double err = 0.0;
    for (int r = 0; r < n; ++r) {
      const double y = __half2float(got[r]);
      err = std::isfinite(y) ? std::max(err, std::fabs(y - ref[r])) : INFINITY;
    }
    const auto launch = [&](int i) {
      v.fn<<<grid, v.block, shared>>>(d_x, rotating[i % rotating.size()], d_scales, nullptr, d_out, 1, n, k, 1.0f,
                                       0.0f);
    };
    float us = 0.0f;
    if (isolated) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = grid;
      cfg.blockDim = dim3(v.block);
      cfg.dynamicSmemBytes = shared;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      us = isolated_us(setup, [&](int i) {
        cudaLaunchKernelEx(&cfg, v.fn, (const __half*)d_x, (const unsigned char*)rotating[i % rotating.size()],
                           (const __half*)d_scales, (const unsigned char*)nullptr, d_out, 1, n, k, 1.0f, 0.0f);
      });
    } else {
      us = best_of(launch, setup.start, setup.stop);
    }
    CHECK(cudaGetLastError());
    print(v, us, bytes / us / 1e3, err / ref_max);
    fflush(stdout);
  }
  for (auto* b : rotating) cudaFree(b);
  cudaFree(d_codes);
  cudaFree(d_x);
  cudaFree(d_scales);
  cudaFree(d_out);
  return 0;
}
