// Support kernels for measuring (not tuned): random fill, float64 reference GEMV, and a spin kernel
// that holds the stream while the host queues the launches being timed, so host launch overhead
// stays out of the measured region.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ unsigned long long at_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void at_spin(unsigned long long nanoseconds) {
  const unsigned long long start = at_globaltimer();
  while (at_globaltimer() - start < nanoseconds) __nanosleep(1000);
}

// splitmix64: a counter-based generator, so every element is independent of launch geometry.
__device__ __forceinline__ unsigned long long at_mix(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ void at_store(float* p, float v) { *p = v; }
__device__ __forceinline__ void at_store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void at_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ double at_load(const float* p) { return (double)*p; }
__device__ __forceinline__ double at_load(const __half* p) { return (double)__half2float(*p); }
__device__ __forceinline__ double at_load(const __nv_bfloat16* p) { return (double)__bfloat162float(*p); }

// Uniform values in [-1, 1): never zeros, so unwritten or mis-indexed outputs show.
template <typename T>
__device__ void at_fill(T* out, unsigned long long n, unsigned long long seed) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const unsigned long long bits = at_mix(seed * 0xD1B54A32D192ED03ull + i) >> 40;  // 24 bits
    at_store(out + i, (float)bits * (1.0f / 8388608.0f) - 1.0f);
  }
}

// One warp per row, float64 throughout: out = A x and absout = |A| |x| (the error scale).
template <typename T>
__device__ void at_reference(const T* A, const T* x, double* out, double* absout, int M, int N) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= M) return;
  const T* row = A + (size_t)warp * N;
  double s = 0.0, a = 0.0;
  for (int j = lane; j < N; j += 32) {
    const double p = at_load(row + j) * at_load(x + j);
    s += p;
    a += fabs(p);
  }
  for (int o = 16; o > 0; o /= 2) {
    s += __shfl_xor_sync(0xffffffffu, s, o);
    a += __shfl_xor_sync(0xffffffffu, a, o);
  }
  if (lane == 0) {
    out[warp] = s;
    absout[warp] = a;
  }
}

#define AT_SUPPORT(NAME, T)                                                                     \
  extern "C" __global__ void at_fill_##NAME(T* out, unsigned long long n, unsigned long long seed) { \
    at_fill<T>(out, n, seed);                                                                   \
  }                                                                                             \
  extern "C" __global__ void at_reference_##NAME(const T* A, const T* x, double* out, double* absout, \
                                                 int M, int N) {                                \
    at_reference<T>(A, x, out, absout, M, N);                                                   \
  }

AT_SUPPORT(float32, float)
AT_SUPPORT(float16, __half)
AT_SUPPORT(bfloat16, __nv_bfloat16)
