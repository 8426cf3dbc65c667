// Where does the 8-bit M = 1 GEMV's time go, next to a plain read? The streaming GEMV
// (kernels/q8gemm/q8gemv.cu) reads int8 4096x14336 in 15.7-16.0 us in the benchmarks' isolated clock; a
// kernel that only reads the same 58.7 MB in short blocks takes 13.8 (experiments/read_floor_isolated.py).
// This probe builds the GEMV up from a read with its structure, in one program and clock:
//   - a warp reads one row (SPLIT 1), or 1/SPLIT of it, lane l taking the 16-byte pieces
//     l + 32 (part + SPLIT i), UNROLL of them in flight a round (every load issued before any is used);
//   - XLOADS 1 adds x's two 16-byte loads a piece (float16, through L1), as the GEMV reads them;
//   - COMPUTE 1 adds the GEMV's arithmetic (codes to floats, x to floats, FMAs) and its sum a row.
// Without COMPUTE the words are XOR-ed so that no load is dead. A split's parts add into a float per row
// (atomicAdd). Timed in the isolated clock (a small plain kernel before each call, its own time taken
// off), the codes rotating over buffers of 4x the L2.
// `flat` is the read floor's shape (blocks of 128 threads
// reading LOADS x 2 KB of the matrix as one flat array) with the GEMV's arithmetic, each warp's sums
// added into their rows; with FINISH the last part of a row to arrive writes it and leaves the sums and
// counts at zero, as a GEMV on a stream or in a CUDA graph must (checked against the row kernel's sums).
// experiments/q8gemv_parts_nvidia-h200.txt is its run on an H200 (docs/lowbit.md: the flat read is
// 0.2-0.4 us faster than a warp a row, and slower once x and the sums are added).
//   nvcc -O3 -arch=sm_90 -std=c++17 -I kernels/common -I kernels -o /tmp/q8parts experiments/q8gemv_parts.cu
//   /tmp/q8parts
#include <cuda_fp16.h>

#include <cmath>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "q8gemm/q8gemv.cu"

namespace probe {

// acc += an int8 piece's 16 codes times x's matching 16 values: the streaming GEMV's own arithmetic.
__device__ __forceinline__ void piece(const uint4& w, const uint4 (&xv)[2], float& acc) {
  const uint4 one[1] = {w};
  float sums[1] = {acc};
  at_q8gemm::multiply_piece<__half, 0, 1>(one, xv, sums);
  acc = sums[0];
}

// One word of every vector a round loaded, masked with n >> 31 (zero for n >= 0, which the compiler
// cannot know): used by the round's first product, it makes every load of the round issued before
// any is used (kernels/q8gemm/q8gemv.cu: issued_zero); without the arithmetic, it keeps the loads live.
template <int LOADS, int XLOADS>
__device__ __forceinline__ unsigned issued_bits(const uint4 (&v)[LOADS], const uint4 (&xr)[LOADS][2], int n) {
  unsigned any = 0;
#pragma unroll
  for (int u = 0; u < LOADS; ++u) any |= v[u].x | (XLOADS ? xr[u][0].x | xr[u][1].x : 0u);
  return any & ((unsigned)n >> 31);
}

template <int UNROLL, int SPLIT, int XLOADS, int COMPUTE>
__global__ void __launch_bounds__(256) parts(const unsigned char* __restrict__ q, const __half* __restrict__ x,
                                             float* __restrict__ out, int N, int K) {
  const int lane = threadIdx.x % 32;
  const int warp = blockIdx.x * 8 + threadIdx.x / 32;
  const int row = warp / SPLIT, part = warp % SPLIT;
  if (row >= N) return;
  const uint4* w = reinterpret_cast<const uint4*>(q + (size_t)row * K);
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  const int pieces = K / 16;
  float acc = 0.0f;
  unsigned bits = 0;
  for (int i = 0;; i += UNROLL) {
    const int first = lane + 32 * (part + SPLIT * i);
    if (first >= pieces) break;
    uint4 v[UNROLL], xr[UNROLL][2];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int p = lane + 32 * (part + SPLIT * (i + u));
      v[u] = p < pieces ? __ldcs(w + p) : make_uint4(0u, 0u, 0u, 0u);
    }
    if (XLOADS) {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int p = lane + 32 * (part + SPLIT * (i + u));
        xr[u][0] = p < pieces ? __ldg(xv + 2 * p) : make_uint4(0u, 0u, 0u, 0u);
        xr[u][1] = p < pieces ? __ldg(xv + 2 * p + 1) : make_uint4(0u, 0u, 0u, 0u);
      }
    }
    const unsigned any = issued_bits<UNROLL, XLOADS>(v, xr, N);
    if (COMPUTE) {
      acc += __uint_as_float(any);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) piece(v[u], xr[u], acc);
    } else {
      bits |= any;
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        bits ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        if (XLOADS) bits ^= xr[u][0].x ^ xr[u][1].w;
      }
    }
  }
  if (!COMPUTE) acc = __uint_as_float(bits & 0x3f800000u);  // a float of the XOR, so the loads are live
#pragma unroll
  for (int o = 16; o; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) {
    if (SPLIT == 1)
      out[row] = acc;
    else
      atomicAdd(out + row, acc);
  }
}

// A warp's sum of `pieces` pieces of `row` into the row's float sum; with FINISH the part that brings
// the row's count of pieces to K / 16 writes the row as a GEMV would (float16, its scale applied) and
// leaves sum and count at zero for the next call (graph-safe). The buffer `out` holds N float sums,
// then N counts, then N float16 results.
template <int FINISH>
__device__ __forceinline__ void add_part(float* out, int N, int K, int row, float acc, int pieces) {
  atomicAdd(out + row, acc);
  if (!FINISH) return;
  unsigned* count = reinterpret_cast<unsigned*>(out + N);
  __half* y = reinterpret_cast<__half*>(out + 2 * N);
  __threadfence();  // the sum is visible before the count says so
  const unsigned before = atomicAdd(count + row, (unsigned)pieces);
  if (before + pieces != (unsigned)(K / 16)) return;
  __threadfence();
  const float sum = atomicExch(out + row, 0.0f);  // every part's sum has arrived: take it, leave zero
  count[row] = 0u;
  y[row] = __float2half(0.001f * sum);  // the row's scale (the probe's codes share one)
}

// The read floor's shape (kernels/measure/read_floor.cu): a block of 128 threads reads LOADS x 2 KB of
// the matrix as one flat array, contiguous, every load issued before any is used; a warp's load is 512
// contiguous bytes, so (K a multiple of 512) of one row. With COMPUTE, a lane's products of a load go
// to the sum of the load's row; the warp adds its sums of each row it met (at most a few a block) and
// adds them into out (atomicAdd; a GEMV would finish a row when its last part arrives).
template <int LOADS, int XLOADS, int COMPUTE, int FINISH>
__global__ void __launch_bounds__(128) flat(const unsigned char* __restrict__ q, const __half* __restrict__ x,
                                            float* __restrict__ out, int N, int K) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long per_row = K / 16, total = (long long)N * per_row;
  const long long base = (long long)blockIdx.x * 128 * LOADS + warp * 32 + lane;
  const uint4* w = reinterpret_cast<const uint4*>(q);
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  uint4 v[LOADS], xr[LOADS][2];
#pragma unroll
  for (int u = 0; u < LOADS; ++u) {
    const long long i = base + 128LL * u;
    v[u] = i < total ? __ldcs(w + i) : make_uint4(0u, 0u, 0u, 0u);
  }
  if (XLOADS) {
#pragma unroll
    for (int u = 0; u < LOADS; ++u) {
      const long long i = base + 128LL * u;
      const int col = (int)(i % per_row);
      xr[u][0] = i < total ? __ldg(xv + 2 * col) : make_uint4(0u, 0u, 0u, 0u);
      xr[u][1] = i < total ? __ldg(xv + 2 * col + 1) : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  const unsigned any = issued_bits<LOADS, XLOADS>(v, xr, N);
  if (!COMPUTE) {
    unsigned bits = any;
#pragma unroll
    for (int u = 0; u < LOADS; ++u) {
      bits ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
      if (XLOADS) bits ^= xr[u][0].x ^ xr[u][1].w;
    }
    if (bits == 0x9E3779B9u) out[0] = 1.0f;  // rare: keeps the loads live
    return;
  }
  // The warp's loads u meet rows row0, row0 + 1, ...: sums by row, added across the warp once a row.
  const long long first = (long long)blockIdx.x * 128 * LOADS + warp * 32;
  const int row0 = (int)(first / per_row);
  float acc = __uint_as_float(any);
  int row = row0, met = 0;  // the row of the sum in hand, and how many of its pieces the warp read
#pragma unroll
  for (int u = 0; u < LOADS; ++u) {
    const long long index = first + 128LL * u;
    if (index >= total) break;  // the same for the whole warp
    const int here = (int)(index / per_row);
    if (here != row) {
#pragma unroll
      for (int o = 16; o; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0 && met) add_part<FINISH>(out, N, K, row, acc, met);
      acc = 0.0f;
      row = here;
      met = 0;
    }
    met += 32;
    piece(v[u], xr[u], acc);
  }
#pragma unroll
  for (int o = 16; o; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0 && met) add_part<FINISH>(out, N, K, row, acc, met);
}

}  // namespace probe

using Kernel = void (*)(const unsigned char*, const __half*, float*, int, int);

struct Variant {
  std::string name;
  Kernel fn;
  int split;        // warps a row (the row kernels)
  int flat_loads;   // 0: a row kernel; else 16-byte loads a thread of the flat kernel
};

#define PART(U, S, X, C) Variant{"u" #U " split" #S " xloads" #X " compute" #C, probe::parts<U, S, X, C>, S, 0}
#define FLAT(L, X, C, F) \
  Variant{"flat loads" #L " xloads" #X " compute" #C " finish" #F, probe::flat<L, X, C, F>, F ? 1 : 2, L}

int run(const BenchSetup& s, int N, int K) {
  const size_t wbytes = (size_t)N * K;
  std::vector<unsigned char*> codes = rotating_buffers<unsigned char>(s.prop, wbytes, 1);
  if (codes.empty()) return 1;
  __half* x;
  float* out;
  CHECK(cudaMalloc(&x, (size_t)K * 2));
  {
    std::vector<__half> hx(K);
    for (int k = 0; k < K; ++k) hx[k] = __float2half((float)((k * 37 % 101) - 50) / 64.0f);
    CHECK(cudaMemcpy(x, hx.data(), (size_t)K * 2, cudaMemcpyHostToDevice));
  }
  std::vector<float> reference, got(N);  // the first variant's sums (a row kernel with the arithmetic)
  CHECK(cudaMalloc(&out, (size_t)N * 12));  // sums, counts and float16 results (the flat kernel's FINISH)
  CHECK(cudaMemset(out, 0, (size_t)N * 12));
  const Variant variants[] = {
      PART(4, 1, 1, 1), PART(4, 1, 0, 0), PART(4, 1, 1, 0), PART(8, 1, 0, 0), PART(8, 1, 1, 0), PART(8, 1, 1, 1),
      PART(4, 2, 0, 0), PART(4, 2, 1, 0), PART(4, 2, 1, 1), PART(4, 4, 0, 0), PART(4, 4, 1, 1), PART(2, 4, 1, 1),
      PART(4, 1, 1, 1), FLAT(8, 0, 0, 0), FLAT(4, 0, 0, 0), FLAT(8, 1, 0, 0), FLAT(8, 1, 1, 0), FLAT(4, 1, 1, 0),
      FLAT(16, 1, 1, 0), FLAT(2, 1, 1, 0), FLAT(8, 1, 1, 1), FLAT(4, 1, 1, 1),
  };
  const double bytes = (double)wbytes + 2.0 * K + 2.0 * N;
  const size_t copies = codes.size();
  for (const Variant& v : variants) {
    const long long pieces = (long long)N * (K / 16);
    const dim3 grid = v.flat_loads ? dim3((unsigned)((pieces + 128 * v.flat_loads - 1) / (128 * v.flat_loads)))
                                   : dim3((N * v.split + 7) / 8);
    const dim3 block(v.flat_loads ? 128 : 256);
    auto zero_sums = [&](int) {
      if (v.split > 1) cudaMemsetAsync(out, 0, (size_t)N * 4);
    };
    auto launch = [&](int i) { v.fn<<<grid, block>>>(codes[i % copies], x, out, N, K); };
    auto call = [&](int i) {
      zero_sums(i);
      launch(i);
    };
    CHECK(cudaMemset(out, 0, (size_t)N * 8));  // sums and counts at zero (FINISH keeps them so)
    call(0);
    CHECK(cudaDeviceSynchronize());
    double diff = 0.0;
    if (v.name.find("finish1") != std::string::npos) {  // y = 0.001 sum; sums and counts left at zero
      std::vector<__half> y(N);
      std::vector<unsigned> left(2 * (size_t)N);
      CHECK(cudaMemcpy(y.data(), out + 2 * N, (size_t)N * 2, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(left.data(), out, (size_t)N * 8, cudaMemcpyDeviceToHost));
      for (int n = 0; n < N; ++n) got[n] = __half2float(y[n]) / 0.001f;
      for (unsigned word : left)
        if (word) diff = INFINITY;  // a sum or count not handed back as zero
    } else if (v.name.find("compute1") != std::string::npos) {
      CHECK(cudaMemcpy(got.data(), out, (size_t)N * 4, cudaMemcpyDeviceToHost));
    }
    if (v.name.find("compute1") != std::string::npos) {
      if (reference.empty()) reference = got;
      double scale = 1e-30;
      for (int n = 0; n < N; ++n) scale = fmax(scale, fabs(reference[n]));
      for (int n = 0; n < N; ++n) diff = fmax(diff, fabs(got[n] - reference[n]) / scale);
    }
    const float us = isolated_us(s, launch, zero_sums);
    CHECK(cudaGetLastError());
    printf("int8 %dx%d  %-32s isolated %7.2f us %6.0f GB/s  rel.diff %.1e\n", N, K, v.name.c_str(), us,
           bytes / us / 1e3, diff);
    fflush(stdout);
  }
  for (auto* c : codes) cudaFree(c);
  cudaFree(x);
  cudaFree(out);
  return 0;
}

int main() {
  BenchSetup s;
  CHECK(bench_setup(s));
  const int shapes[][2] = {{4096, 14336}, {3584, 18944}, {28672, 4096}};
  for (const auto& shape : shapes)
    if (run(s, shape[0], shape[1])) return 1;
  return 0;
}
