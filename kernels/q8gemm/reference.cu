// The float64 reference of the 8-bit weight-only GEMV/GEMM (q8gemm.cu's problem), for the tuning worker:
// ref[m][n] = sum_k x[m][k] * w(q[n][k]) * s[n] and absref the same sum of magnitudes (the scale the
// worker's tolerance is measured against), one warp per output. An e4m3 code is decoded here from its
// bit fields, not by the conversion the kernel uses.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace at_q8gemm_reference {

__device__ __forceinline__ double to_double(__half v) { return (double)__half2float(v); }
__device__ __forceinline__ double to_double(__nv_bfloat16 v) { return (double)__bfloat162float(v); }

// KIND 0: a two's complement int8; KIND 1: OCP float8 e4m3 (bias 7, no infinities; 0x7F/0xFF are NaN).
template <int KIND>
__device__ __forceinline__ double value(unsigned char code) {
  if (KIND == 0) return (double)(signed char)code;
  const int sign = code >> 7, exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return nan("");
  const double magnitude =
      exponent == 0 ? ldexp((double)mantissa, -9) : ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

template <typename T, int KIND>
__device__ void reference(const T* x, const unsigned char* qweight, const T* scales, double* ref, double* absref,
                          int M, int N, int K) {
  const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= (long long)M * N) return;
  const int m = (int)(warp / N), n = (int)(warp % N);
  const double scale = to_double(scales[n]);
  double sum = 0.0, mag = 0.0;
  for (int k = lane; k < K; k += 32) {
    const double term = to_double(x[(size_t)m * K + k]) * value<KIND>(qweight[(size_t)n * K + k]) * scale;
    sum += term;
    mag += fabs(term);
  }
  for (int o = 16; o > 0; o /= 2) {
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
    mag += __shfl_xor_sync(0xFFFFFFFFu, mag, o);
  }
  if (lane == 0) {
    ref[warp] = sum;
    absref[warp] = mag;
  }
}

}  // namespace at_q8gemm_reference

// at_q8gemm_reference_<dtype>_<kind>: one instance per activation dtype and code kind.
#define AT_Q8GEMM_REFERENCE(NAME, T, KIND)                                                                  \
  extern "C" __global__ void NAME(const T* x, const unsigned char* qweight, const T* scales, double* ref,   \
                                  double* absref, int M, int N, int K) {                                   \
    at_q8gemm_reference::reference<T, KIND>(x, qweight, scales, ref, absref, M, N, K);                     \
  }

AT_Q8GEMM_REFERENCE(at_q8gemm_reference_float16_int8, __half, 0)
AT_Q8GEMM_REFERENCE(at_q8gemm_reference_float16_fp8, __half, 1)
AT_Q8GEMM_REFERENCE(at_q8gemm_reference_bfloat16_int8, __nv_bfloat16, 0)
AT_Q8GEMM_REFERENCE(at_q8gemm_reference_bfloat16_fp8, __nv_bfloat16, 1)
