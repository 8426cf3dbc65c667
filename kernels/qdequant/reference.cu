// The float64 reference of an int4 weight's dequantization (dequant.cu's problem), for the tuning
// worker: ref[n][k] = (q[n][k] - z) * s[n][k / GROUP] and absref its magnitude, a thread per value. A
// zero point is the low 4 bits of its byte, as the kernels read it (the worker fills the bytes at random).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace at_qdequant_reference {

__device__ __forceinline__ double to_double(__half v) { return (double)__half2float(v); }
__device__ __forceinline__ double to_double(__nv_bfloat16 v) { return (double)__bfloat162float(v); }

template <typename T, int GROUP, int SYM>
__device__ void reference(const unsigned char* qweight, const T* scales, const unsigned char* zeros, double* ref,
                          double* absref, int N, int K) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)N * K) return;
  const long long n = i / K;
  const int k = (int)(i % K);
  const unsigned char byte = qweight[n * (K / 2) + k / 2];
  const int q = (k % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  const long long group = n * (K / GROUP) + k / GROUP;
  const int z = SYM ? 8 : zeros[group] & 0xF;
  const double value = (double)(q - z) * to_double(scales[group]);
  ref[i] = value;
  absref[i] = fabs(value);
}

}  // namespace at_qdequant_reference

// at_qdequant_reference_<dtype>_g<group>[a]: one instance per activation dtype, group and symmetry.
#define AT_QDEQUANT_REFERENCE(NAME, T, GROUP, SYM)                                                           \
  extern "C" __global__ void NAME(const unsigned char* qweight, const T* scales, const unsigned char* zeros,   \
                                  double* ref, double* absref, int N, int K) {                                \
    at_qdequant_reference::reference<T, GROUP, SYM>(qweight, scales, zeros, ref, absref, N, K);              \
  }

AT_QDEQUANT_REFERENCE(at_qdequant_reference_float16_g32, __half, 32, 1)
AT_QDEQUANT_REFERENCE(at_qdequant_reference_float16_g64, __half, 64, 1)
AT_QDEQUANT_REFERENCE(at_qdequant_reference_float16_g128, __half, 128, 1)
AT_QDEQUANT_REFERENCE(at_qdequant_reference_float16_g32a, __half, 32, 0)
AT_QDEQUANT_REFERENCE(at_qdequant_reference_float16_g64a, __half, 64, 0)
AT_QDEQUANT_REFERENCE(at_qdequant_reference_float16_g128a, __half, 128, 0)
AT_QDEQUANT_REFERENCE(at_qdequant_reference_bfloat16_g32, __nv_bfloat16, 32, 1)
AT_QDEQUANT_REFERENCE(at_qdequant_reference_bfloat16_g64, __nv_bfloat16, 64, 1)
AT_QDEQUANT_REFERENCE(at_qdequant_reference_bfloat16_g128, __nv_bfloat16, 128, 1)
AT_QDEQUANT_REFERENCE(at_qdequant_reference_bfloat16_g32a, __nv_bfloat16, 32, 0)
AT_QDEQUANT_REFERENCE(at_qdequant_reference_bfloat16_g64a, __nv_bfloat16, 64, 0)
AT_QDEQUANT_REFERENCE(at_qdequant_reference_bfloat16_g128a, __nv_bfloat16, 128, 0)
