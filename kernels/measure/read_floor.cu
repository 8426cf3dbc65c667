// The read floor of a GEMV (benchmarks only, not tuned): kernels that read a buffer and do nothing
// else. A GEMV must read its whole matrix, so the fastest of these for a matrix's size bounds what any
// GEMV config can take (autotune/bench.py: Bench.read_floor). They start like every tuned GEMV
// (kernels/gemv.cu: programmatic_start), so that launched back to back with programmatic dependent
// launch they overlap the call before alike, and optionally prefetch into L2 before the wait, as the
// GEMV's `prefetch` does: PREFETCH 1 the block's whole chunk (one bulk prefetch), 2 and 3 each
// thread's first 1 or 2 words.
//
// Block b reads the LOADS * blockDim.x 16-byte words from b * LOADS * blockDim.x on, every load of a
// thread issued before any is used, with streaming hints (the matrix is read once). The words are
// XOR-ed together, so no load is dead: with `check` set each thread XORs its part into out[0] (the GPU
// tests compare it with the host's XOR of the buffer, so a floor that skipped bytes would show);
// otherwise a thread writes out[1] only when its XOR has one value.
#include <stdint.h>

template <int LOADS, int PREFETCH>
__device__ __forceinline__ void at_read_words(const uint4* __restrict__ words, unsigned long long count,
                                              unsigned int* __restrict__ out, int check) {
  const unsigned long long base = (unsigned long long)blockIdx.x * blockDim.x * LOADS;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  // PREFETCH 2, 3: each thread's first PREFETCH - 1 words (no more than it loads).
  constexpr int HEADS = PREFETCH < 2 ? 0 : (PREFETCH - 1 < LOADS ? PREFETCH - 1 : LOADS);
#pragma unroll
  for (int u = 0; u < HEADS; ++u) {
    const unsigned long long i = base + (unsigned long long)u * blockDim.x + threadIdx.x;
    if (i < count) asm volatile("prefetch.global.L2 [%0];" ::"l"(words + i) : "memory");
  }
  if (PREFETCH == 1 && threadIdx.x == 0 && base < count) {
    const unsigned long long chunk = (unsigned long long)blockDim.x * LOADS;
    const unsigned long long in_chunk = count - base < chunk ? count - base : chunk;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(words + base), "r"((unsigned)(in_chunk * 16))
                 : "memory");
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  uint4 v[LOADS];
#pragma unroll
  for (int u = 0; u < LOADS; ++u) {
    const unsigned long long i = base + (unsigned long long)u * blockDim.x + threadIdx.x;
    v[u] = i < count ? __ldcs(words + i) : make_uint4(0, 0, 0, 0);
  }
  // A zero at run time (no buffer holds 2^63 words) that ptxas must compute from every load: so it
  // issues all of them before the first XOR instead of interleaving (as kernels/gemv.cu's ORDER does).
  unsigned int acc = 0;
#pragma unroll
  for (int u = 0; u < LOADS; ++u) acc |= v[u].x;
  acc &= 0u - (unsigned int)(count >> 63);
#pragma unroll
  for (int u = 0; u < LOADS; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  if (check) {
    atomicXor(out, acc);
  } else if (acc == 0x9E3779B9u) {  // rare, and harmless: out is the caller's scratch
    out[1] = acc;
  }
}

#define AT_READ_FLOOR(LOADS, PREFETCH)                                                                    \
  extern "C" __global__ void at_read_l##LOADS##_p##PREFETCH(const uint4* words, unsigned long long count, \
                                                            unsigned int* out, int check) {              \
    at_read_words<LOADS, PREFETCH>(words, count, out, check);                                           \
  }

AT_READ_FLOOR(1, 0)
AT_READ_FLOOR(1, 1)
AT_READ_FLOOR(1, 2)
AT_READ_FLOOR(1, 3)
AT_READ_FLOOR(2, 0)
AT_READ_FLOOR(2, 1)
AT_READ_FLOOR(2, 2)
AT_READ_FLOOR(2, 3)
AT_READ_FLOOR(4, 0)
AT_READ_FLOOR(4, 1)
AT_READ_FLOOR(4, 2)
AT_READ_FLOOR(4, 3)
AT_READ_FLOOR(8, 0)
AT_READ_FLOOR(8, 1)
AT_READ_FLOOR(8, 2)
AT_READ_FLOOR(8, 3)
