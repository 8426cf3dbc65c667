// Support kernels for measuring (not tuned): random fill, float64 reference GEMV and GEMM, a
// comparison of a result with its reference on the GPU, and a spin kernel that holds the stream
// while the host queues the launches being timed, so host launch overhead stays out of the
// measured region.
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

// One warp per row, float64 throughout: out = A x and absout = |A| |x| (the error scale). A's rows
// lie lda elements apart, as the GEMV kernels take them.
template <typename T>
__device__ void at_reference(const T* A, const T* x, double* out, double* absout, int M, int N, int lda) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= M) return;
  const T* row = A + (size_t)warp * lda;
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


// float64 GEMM reference, C = A B (row-major A M x K, B K x N): 64 x 64 tiles, 4 x 4 outputs per
// thread, every bound checked. out = A B and absout = |A| |B| (the error scale). Correct, not fast:
// it runs once per verification.
#define AT_REF_TILE 64
#define AT_REF_K 16
// B_NK: B is stored N x K row-major (C = A Bᵀ of a K-contiguous B, an nn.Linear weight's layout).
template <typename T, bool B_NK>
__device__ void at_gemm_reference(const T* A, const T* B, double* out, double* absout, int M, int N, int K) {
  __shared__ double As[AT_REF_K][AT_REF_TILE + 1];
  __shared__ double Bs[AT_REF_K][AT_REF_TILE + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // 256 threads
  const int row0 = blockIdx.y * AT_REF_TILE, col0 = blockIdx.x * AT_REF_TILE;
  double s[4][4] = {}, a[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += AT_REF_K) {
    for (int i = threadIdx.x; i < AT_REF_K * AT_REF_TILE; i += 256) {
      const int kk = i % AT_REF_K, r = i / AT_REF_K;  // A tile, read along k
      const int gr = row0 + r, gk = k0 + kk;
      As[kk][r] = (gr < M && gk < K) ? at_load(A + (size_t)gr * K + gk) : 0.0;
      const int c = i % AT_REF_TILE, kb = i / AT_REF_TILE;  // B tile, read along n
      const int gc = col0 + c, gkb = k0 + kb;
      const size_t b_at = B_NK ? (size_t)gc * K + gkb : (size_t)gkb * N + gc;
      Bs[kb][c] = (gc < N && gkb < K) ? at_load(B + b_at) : 0.0;
    }
    __syncthreads();
    for (int kk = 0; kk < AT_REF_K; ++kk) {
      for (int i = 0; i < 4; ++i) {
        const double av = As[kk][ty + 16 * i];
        for (int j = 0; j < 4; ++j) {
          const double p = av * Bs[kk][tx + 16 * j];
          s[i][j] += p;
          a[i][j] += fabs(p);
        }
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      const int r = row0 + ty + 16 * i, c = col0 + tx + 16 * j;
      if (r < M && c < N) {
        out[(size_t)r * N + c] = s[i][j];
        absout[(size_t)r * N + c] = a[i][j];
      }
    }
  }
}

// Compares got (n values of T) with want = alpha * ref + beta * c0 (c0 may be null when beta = 0):
// an element fails when it is not finite or |got - want| > unit * |want| + acc_tol * scale + abs_floor,
// with scale = |alpha| absref + |beta| |c0|. abs_floor is the spacing of T's subnormals: a result
// that small (float16 below 6.1e-5, say the product of two small inputs where the sum has one term)
// is stored with up to half of it as absolute error however it was computed, far above unit * |want|.
// result: [0] failures, [1] the worst (error / tolerance as float bits << 32 | index), [2] sum of
// (got - ref)^2 and [3] sum of ref^2, as double bits.
template <typename T>
__device__ void at_compare(const T* got, const double* ref, const double* absref, const T* c0, double alpha,
                           double beta, unsigned long long n, double unit, double acc_tol, double abs_floor,
                           unsigned long long* result) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long failures = 0, worst = 0;
  double err2 = 0.0, ref2 = 0.0;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double g = at_load(got + i);
    const double c = c0 ? at_load(c0 + i) : 0.0;
    const double want = alpha * ref[i] + beta * c;
    const double tol = unit * fabs(want) + acc_tol * (fabs(alpha) * absref[i] + fabs(beta) * fabs(c)) + abs_floor;
    const float ratio = isfinite(g) ? (float)(fabs(g - want) / tol) : __int_as_float(0x7f800000);
    if (!(ratio <= 1.0f)) ++failures;
    const unsigned long long key = ((unsigned long long)__float_as_uint(ratio) << 32) | (i & 0xffffffffull);
    worst = key > worst ? key : worst;
    if (isfinite(g)) {
      err2 += (g - want) * (g - want);
      ref2 += want * want;
    }
  }
  for (int o = 16; o > 0; o /= 2) {
    failures += __shfl_xor_sync(0xffffffffu, failures, o);
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, worst, o);
    worst = other > worst ? other : worst;
    err2 += __shfl_xor_sync(0xffffffffu, err2, o);
    ref2 += __shfl_xor_sync(0xffffffffu, ref2, o);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(result, failures);
    atomicMax(result + 1, worst);
    atomicAdd(reinterpret_cast<double*>(result + 2), err2);
    atomicAdd(reinterpret_cast<double*>(result + 3), ref2);
  }
}

#define AT_SUPPORT(NAME, T)                                                                     \
  extern "C" __global__ void at_fill_##NAME(T* out, unsigned long long n, unsigned long long seed) { \
    at_fill<T>(out, n, seed);                                                                   \
  }                                                                                             \
  extern "C" __global__ void at_reference_##NAME(const T* A, const T* x, double* out, double* absout, \
                                                 int M, int N, int lda) {                       \
    at_reference<T>(A, x, out, absout, M, N, lda);                                              \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(256) at_gemm_reference_##NAME(                   \
      const T* A, const T* B, double* out, double* absout, int M, int N, int K) {               \
    at_gemm_reference<T, false>(A, B, out, absout, M, N, K);                                    \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(256) at_gemm_reference_nt_##NAME(                \
      const T* A, const T* B, double* out, double* absout, int M, int N, int K) {               \
    at_gemm_reference<T, true>(A, B, out, absout, M, N, K);                                     \
  }                                                                                             \
  extern "C" __global__ void at_compare_##NAME(const T* got, const double* ref, const double* absref, \
                                               const T* c0, double alpha, double beta,          \
                                               unsigned long long n, double unit, double acc_tol, \
                                               double abs_floor, unsigned long long* result) {  \
    at_compare<T>(got, ref, absref, c0, alpha, beta, n, unit, acc_tol, abs_floor, result);      \
  }

AT_SUPPORT(float32, float)
AT_SUPPORT(float16, __half)
AT_SUPPORT(bfloat16, __nv_bfloat16)
