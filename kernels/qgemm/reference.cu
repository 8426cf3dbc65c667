// The float64 reference of the int4 GEMV/GEMM (qgemm.cu's problem), for the tuning worker:
// ref[m][n] = sum_k x[m][k] * (q[n][k] - z) * s[n][k / GROUP] and absref the same sum of magnitudes (the
// scale the worker's tolerance is measured against), one warp per output. A zero point is the low 4
// bits of its byte, as the kernels read it (the worker fills the bytes at random).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace at_qgemm_reference {

__device__ __forceinline__ double to_double(__half v) { return (double)__half2float(v); }
__device__ __forceinline__ double to_double(__nv_bfloat16 v) { return (double)__bfloat162float(v); }

template <typename T, int GROUP, int SYM>
__device__ void reference(const T* x, const unsigned char* qweight, const T* scales, const unsigned char* zeros,
                          double* ref, double* absref, int M, int N, int K) {
  const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= (long long)M * N) return;
  const int m = (int)(warp / N), n = (int)(warp % N);
  const int groups = K / GROUP;
  double sum = 0.0, mag = 0.0;
  for (int k = lane; k < K; k += 32) {
    const unsigned char byte = qweight[(size_t)n * (K / 2) + k / 2];
    const int q = (k % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    const int z = SYM ? 8 : zeros[(size_t)n * groups + k / GROUP] & 0xF;  // zero points are 4-bit
    const double term = to_double(x[(size_t)m * K + k]) * (double)(q - z) * to_double(scales[(size_t)n * groups + k / GROUP]);
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

}  // namespace at_qgemm_reference

// at_qgemm_reference_<dtype>_g<group>[a]: one instance per activation dtype, group and symmetry.
#define AT_QGEMM_REFERENCE(NAME, T, GROUP, SYM)                                                              \
  extern "C" __global__ void NAME(const T* x, const unsigned char* qweight, const T* scales,                  \
                                  const unsigned char* zeros, double* ref, double* absref, int M, int N,      \
                                  int K) {                                                                    \
    at_qgemm_reference::reference<T, GROUP, SYM>(x, qweight, scales, zeros, ref, absref, M, N, K);           \
  }

AT_QGEMM_REFERENCE(at_qgemm_reference_float16_g32, __half, 32, 1)
AT_QGEMM_REFERENCE(at_qgemm_reference_float16_g64, __half, 64, 1)
AT_QGEMM_REFERENCE(at_qgemm_reference_float16_g128, __half, 128, 1)
AT_QGEMM_REFERENCE(at_qgemm_reference_float16_g32a, __half, 32, 0)
AT_QGEMM_REFERENCE(at_qgemm_reference_float16_g64a, __half, 64, 0)
AT_QGEMM_REFERENCE(at_qgemm_reference_float16_g128a, __half, 128, 0)
AT_QGEMM_REFERENCE(at_qgemm_reference_bfloat16_g32, __nv_bfloat16, 32, 1)
AT_QGEMM_REFERENCE(at_qgemm_reference_bfloat16_g64, __nv_bfloat16, 64, 1)
AT_QGEMM_REFERENCE(at_qgemm_reference_bfloat16_g128, __nv_bfloat16, 128, 1)
AT_QGEMM_REFERENCE(at_qgemm_reference_bfloat16_g32a, __nv_bfloat16, 32, 0)
AT_QGEMM_REFERENCE(at_qgemm_reference_bfloat16_g64a, __nv_bfloat16, 64, 0)
AT_QGEMM_REFERENCE(at_qgemm_reference_bfloat16_g128a, __nv_bfloat16, 128, 0)
