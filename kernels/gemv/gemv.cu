// GEMV kernels: y = alpha * A x + beta * y, A row-major M x N (N is the reduction length) with its
// rows lda >= N elements apart (row r at A + r * lda: a view of some columns of a wider matrix runs in
// place), elements of type T (float, __half, __nv_bfloat16), always accumulated in float.
//
// One template spans the families the tuner searches; its parameters pick the family:
//   LANES == 1          thread-per-row: each thread walks its rows alone (the naive baseline at VEC 1)
//   1 < LANES <= 32     a sub-warp or warp per row group, 32 / LANES groups per warp (shuffle reduce)
//   LANES > 32          several warps per row group (LANES == BLOCK: block-per-row), block reduction
// ROWS rows per group share every x vector a thread loads; UNROLL independent steps keep several
// loads in flight per thread; VEC elements per load (VEC * sizeof(T) <= 16 bytes); XSMEM stages the
// block's slice of x in shared memory instead of reading it through the cache; POLICY picks the load
// path for the streamed matrix (common.cuh: load_stream); ORDER places a step's loads against its FMAs
// (below, at issued_zero).
//
// Split-K: gridDim.y > 1 splits the reduction. With CLUSTER == 1 each block writes float partial sums
// to a workspace; the last block of a row tile to finish (an atomic counter per tile) adds them in
// split order, so the result is deterministic, writes y, and leaves the workspace and counter zero for
// the next launch. With CLUSTER == gridDim.y (sm_90+, declared by the instance with __cluster_dims__)
// the splits of a row tile are one thread-block cluster and add their partials through distributed
// shared memory (common.cuh: cluster_sum): no workspace, no counters. gridDim.x may be smaller than the
// number of row tiles (a persistent grid): blocks stride.
//
// Every instance starts with programmatic_start and gemv_body waits in wait_for_prior_grid (below)
// before its first read: autotune launches GEMVs with programmatic dependent launch on sm_90+, so that
// each call's launch and address setup overlap the end of the call before it.
//
// Preconditions the tuner's constraints and the launcher guarantee: VEC > 1 only when N % VEC == 0,
// lda % VEC == 0 and A, x are 16-byte aligned (the launcher runs scalar loads, VEC 1, for a view
// whose base or row stride breaks 16-byte alignment); XSMEM only when the block's x slice fits the
// dynamic shared memory it is given; PREFETCH 1 only with 16-byte vectors. The tuner measures with
// lda == N.
#pragma once
#include "common.cuh"

namespace at_gemv {

using at_common::finish;
using at_common::load_stream;
using at_common::to_float;

// acc += dot(a, x) over the VEC elements packed in two raw vectors.
template <typename T, int VEC, typename V>
__device__ __forceinline__ float dot_packed(const V& a, const V& x, float acc) {
  const T* ae = reinterpret_cast<const T*>(&a);
  const T* xe = reinterpret_cast<const T*>(&x);
#pragma unroll
  for (int e = 0; e < VEC; ++e) acc = fmaf(to_float(ae[e]), to_float(xe[e]), acc);
  return acc;
}

// The low 32 bits of a raw vector (all of a 2-byte one).
__device__ __forceinline__ unsigned low_word(uint4 v) { return v.x; }
__device__ __forceinline__ unsigned low_word(uint2 v) { return v.x; }
__device__ __forceinline__ unsigned low_word(unsigned v) { return v; }
__device__ __forceinline__ unsigned low_word(unsigned short v) { return v; }

// ORDER: where a step's loads go against its FMAs. ptxas interleaves the loads of an unrolled step
// with the FMAs of the loads before them (sm_90 SASS: loads x0 a0 a1 x1, FMAs on a0, load a2, ...),
// so a thread at UNROLL 4 has about two vectors in flight, not four
// (read in the SASS). ORDER 0 leaves them where ptxas puts them;
// ORDER 1 issues every load of a step before the step's first FMA, by adding to each accumulator a
// +0.0f made of one word of every vector loaded (issued_zero), masked with (unsigned)M >> 31: zero
// for every M >= 0 but unknown to the compiler, so it cannot drop the dependence. Adding +0.0f leaves
// every sum as it was (NaN stays NaN); the cost is an OR per vector and an add per row and step.
// (Loading the next step before this step's FMAs, with two steps of registers, cannot be had this
// way: ptxas sinks those loads below the FMAs again, and a data dependence on them would wait for
// their data, not just their issue. A __threadfence_block() between them keeps the order but waits
// for the loads too: slower on five of six shapes measured on the H200.)
template <int ROWS, int UNROLL, typename V>
__device__ __forceinline__ float issued_zero(const V (&xr)[UNROLL], const V (&ar)[ROWS][UNROLL], int M) {
  unsigned any = 0;
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    any |= low_word(xr[u]);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) any |= low_word(ar[r][u]);
  }
  return __uint_as_float(any & ((unsigned)M >> 31));
}

// Sums each of a lane's R values over the W consecutive lanes of its group (W <= 32, R and W powers
// of two). Instead of reducing every value over every step (R * log2 W shuffles), each of the first
// S = min(log2 W, log2 R) steps hands half of the values to the partner lane and keeps the other
// half: R - R / 2^S + (R / 2^S) * (log2 W - S) shuffles (6 instead of 20 for R = 4, W = 32).
// Afterwards lane l owns rows_owned() = R / 2^S consecutive rows, starting at first_row_owned(l),
// whose sums are v[0 .. R / 2^S); it is their writer when is_row_owner(l).
constexpr int log2_exact(int v) { return v <= 1 ? 0 : 1 + log2_exact(v / 2); }

template <int W, int R> struct RowReduce {
  static constexpr int HALVINGS = log2_exact(W) < log2_exact(R) ? log2_exact(W) : log2_exact(R);
  static constexpr int OWNED = R >> HALVINGS;    // rows a lane owns at the end
  static constexpr int SHARING = W >> HALVINGS;  // lanes that end up with the same rows

  static __device__ __forceinline__ void run(float (&v)[R], int lane) {
#pragma unroll
    for (int step = 0; step < HALVINGS; ++step) {
      const int offset = W >> (step + 1);
      const int half = R >> (step + 1);
      const bool upper = lane & offset;
#pragma unroll
      for (int j = 0; j < half; ++j) {
        const float send = upper ? v[j] : v[j + half];
        const float keep = upper ? v[j + half] : v[j];
        v[j] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
      }
    }
#pragma unroll
    for (int offset = SHARING / 2; offset > 0; offset /= 2)
#pragma unroll
      for (int j = 0; j < OWNED; ++j) v[j] += __shfl_xor_sync(0xffffffffu, v[j], offset);
  }
  // The halving steps kept the upper half where the lane's bit was set: the lane's top HALVINGS
  // bits (within the group), most significant first, number its block of OWNED rows.
  static __device__ __forceinline__ int first_row_owned(int lane) { return (lane % W) / SHARING * OWNED; }
  static __device__ __forceinline__ bool is_row_owner(int lane) { return lane % SHARING == 0; }
};

// The vectors [v_begin, v_end) of each row that this block's split (blockIdx.y of gridDim.y) reduces:
// a whole number of LANES-wide steps per split, so that every lane does the same work.
template <int LANES>
__device__ __forceinline__ void split_range(long long nvec, long long& v_begin, long long& v_end) {
  long long per_split = (nvec + gridDim.y - 1) / gridDim.y;
  per_split = (per_split + LANES - 1) / LANES * LANES;
  v_begin = min(nvec, (long long)blockIdx.y * per_split);
  v_end = min(nvec, v_begin + per_split);
}

// Programmatic dependent launch (sm_90+). launch_dependents lets the next kernel in the stream, when
// it was launched with the PDL attribute, place its blocks once every block of this grid has started;
// the wait (wait_for_prior_grid) holds this grid until the kernel before it has finished and its
// writes are visible. So after the wait everything reads as after an ordinary launch, while the launch,
// block start and address arithmetic of each call overlap the end of the call before: gemv_body waits
// only once its row pointers are set, right before its first load (that setup was about 90 sm_90
// instructions per warp, issued by every warp of the first wave through 4 schedulers per SM; waiting
// after it took 0.5-4% off the configs shipped before for 10 of 11 shapes and made one 21% slower,
// on the H200).
// Nothing before the wait may read memory the kernel before could still write, with one exception
// used here: a prefetch into L2 (PREFETCH) of the block's first rows. Every write lands in L2, so a
// line fetched early is never stale, and the first loads find their lines on chip instead of all
// starting cold after the wait. How much:
//   PREFETCH 1: the row segments of the block's whole first tile, one bulk prefetch per row. Needs
//               16-byte aligned segments whose length is a multiple of 16 bytes: 16-byte vectors
//               give both. Helps matrices of a few MB, costs large ones 2-5 us.
//   PREFETCH 2, 3: each thread's first 1 or 2 vectors of each of its rows in that tile (prefetch_row_heads,
//               below): 4-6% off most shapes of 32 MB and more, 12% slower at 2048^2 (H200,
//               under the shipped tilings).
// Launched without the attribute (or on an older GPU, where this compiles to nothing) it changes nothing.
template <typename T, int BLOCK, int LANES, int VEC, int ROWS, int DEPTH>
__device__ __forceinline__ void prefetch_row_heads(const T* __restrict__ A, int M, int N, int lda) {
  typedef typename at_common::Raw<VEC * sizeof(T)>::type V;
  constexpr int ROWS_PER_BLOCK = BLOCK / LANES * ROWS;
  const int lane = threadIdx.x % LANES;  // the addresses of gemv_body's first tile (see there)
  const int row0 = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / LANES * ROWS;
  long long v_begin, v_end;
  split_range<LANES>(N / VEC, v_begin, v_end);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (row0 + r >= M) break;
    const V* row = reinterpret_cast<const V*>(A + (size_t)(row0 + r) * lda) + v_begin;
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      const long long v = lane + (long long)d * LANES;
      if (v >= v_end - v_begin) break;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(row + v) : "memory");
    }
  }
}

template <typename T, int BLOCK, int LANES, int VEC, int ROWS, int PREFETCH>
__device__ __forceinline__ void programmatic_start(const T* __restrict__ A, int M, int N, int lda) {
  static_assert(PREFETCH != 1 || VEC * sizeof(T) == 16, "bulk prefetches need 16-byte vectors");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (PREFETCH >= 2) prefetch_row_heads<T, BLOCK, LANES, VEC, ROWS, PREFETCH - 1>(A, M, N, lda);
  if (PREFETCH == 1) {
    constexpr int ROWS_PER_BLOCK = BLOCK / LANES * ROWS;
    long long v_begin, v_end;
    split_range<LANES>(N / VEC, v_begin, v_end);
    const unsigned bytes = (unsigned)((v_end - v_begin) * VEC * sizeof(T));
    for (int r = threadIdx.x; r < ROWS_PER_BLOCK && bytes > 0; r += BLOCK) {
      const int row = blockIdx.x * ROWS_PER_BLOCK + r;
      if (row >= M) break;
      const T* segment = A + (size_t)row * lda + v_begin * VEC;
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(segment), "r"(bytes) : "memory");
    }
  }
#endif
}

// Launched plainly (or before sm_90) the wait returns at once.
__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <typename T, int BLOCK, int LANES, int VEC, int UNROLL, int ROWS, int XSMEM, int POLICY, int CLUSTER,
          int ORDER>
__device__ __forceinline__ void gemv_body(const T* __restrict__ A, const T* __restrict__ x,
                                          T* __restrict__ y, int M, int N, int lda, float alpha, float beta,
                                          float* __restrict__ partial,
                                          unsigned int* __restrict__ counters) {
  typedef typename at_common::Raw<VEC * sizeof(T)>::type V;
  static_assert(BLOCK % 32 == 0 && BLOCK % LANES == 0, "a block holds whole row groups and warps");
  static_assert(LANES <= 32 || LANES % 32 == 0, "groups wider than a warp are whole warps");
  constexpr int GROUPS = BLOCK / LANES;
  constexpr int ROWS_PER_BLOCK = GROUPS * ROWS;
  constexpr int WARPS_PER_GROUP = LANES > 32 ? LANES / 32 : 1;
  constexpr int STEP = LANES * UNROLL;
  constexpr int WARP_LANES = LANES < 32 ? LANES : 32;  // lanes of a group inside one warp
  typedef RowReduce<WARP_LANES, ROWS> Reduce;

  extern __shared__ __align__(16) unsigned char x_slice_raw[];
  __shared__ float cross_warp[LANES > 32 ? BLOCK / 32 * ROWS : 1];
  __shared__ float cluster_part[CLUSTER > 1 ? ROWS_PER_BLOCK : 1];
  __shared__ bool last_block;

  const int tid = threadIdx.x;
  const int lane = tid % LANES;
  const int group = tid / LANES;
  const int splits = gridDim.y;
  long long v_begin, v_end;
  split_range<LANES>(N / VEC, v_begin, v_end);

  const V* xv = reinterpret_cast<const V*>(x) + v_begin;
  const V* xs = reinterpret_cast<const V*>(x_slice_raw);
  if (XSMEM) {
    wait_for_prior_grid();
    V* fill = reinterpret_cast<V*>(x_slice_raw);
    for (long long v = tid; v < v_end - v_begin; v += BLOCK) fill[v] = __ldg(xv + v);
    __syncthreads();
  }
  const long long len = v_end - v_begin;

  const int tiles = (M + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int first_row = tile * ROWS_PER_BLOCK;
    const int row0 = first_row + group * ROWS;
    const V* arow[ROWS];
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      // Rows past the end read the last row (always valid memory) and are never written.
      const int row = min(row0 + r, M - 1);
      arow[r] = reinterpret_cast<const V*>(A + (size_t)row * lda) + v_begin;
      acc[r] = 0.0f;
    }
    if (!XSMEM) wait_for_prior_grid();  // once per tile: after the first it returns at once

    long long v = lane;
    for (; v + (UNROLL - 1) * LANES < len; v += STEP) {
      V xr[UNROLL];
      V ar[ROWS][UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) xr[u] = XSMEM ? xs[v + u * LANES] : __ldg(xv + v + u * LANES);
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) ar[r][u] = load_stream<POLICY>(arow[r] + v + u * LANES);
      if (ORDER == 1) {
        const float zero = issued_zero<ROWS, UNROLL>(xr, ar, M);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[r] += zero;
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[r] = dot_packed<T, VEC>(ar[r][u], xr[u], acc[r]);
    }
    for (; v < len; v += LANES) {  // fewer than UNROLL steps left
      const V xr = XSMEM ? xs[v] : __ldg(xv + v);
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        acc[r] = dot_packed<T, VEC>(load_stream<POLICY>(arow[r] + v), xr, acc[r]);
    }
    // The scalar tail N % VEC only exists when VEC == 1 is impossible, which the constraints rule out.

    // Sum over the group's lanes inside each warp; then `emit(r, sum)` is called once for each of
    // the group's rows r, by the thread that holds that row's full sum.
    Reduce::run(acc, lane);
    auto each_row = [&](auto emit) {
      if (LANES <= 32) {
        if (Reduce::is_row_owner(lane)) {
          const int first = Reduce::first_row_owned(lane);
#pragma unroll
          for (int j = 0; j < Reduce::OWNED; ++j) emit(first + j, acc[j]);
        }
        return;
      }
      const int warp = tid / 32;
      if (Reduce::is_row_owner(tid % 32)) {
        const int first = Reduce::first_row_owned(tid % 32);
#pragma unroll
        for (int j = 0; j < Reduce::OWNED; ++j) cross_warp[warp * ROWS + first + j] = acc[j];
      }
      __syncthreads();
      if (lane < ROWS) {  // lane r of the group adds row r over the group's warps
        const int first_warp = group * WARPS_PER_GROUP;
        float s = 0.0f;
        for (int w = 0; w < WARPS_PER_GROUP; ++w) s += cross_warp[(first_warp + w) * ROWS + lane];
        emit(lane, s);
      }
      __syncthreads();  // cross_warp is reused by the next tile
    };

    if (splits == 1) {
      each_row([&](int r, float s) {
        if (row0 + r < M) y[row0 + r] = finish<T>(s, alpha, beta, y + row0 + r);
      });
      continue;
    }

    const int tile_rows = min(ROWS_PER_BLOCK, M - first_row);
    if (CLUSTER > 1) {
      each_row([&](int r, float s) { cluster_part[group * ROWS + r] = s; });
      at_common::cluster_sum<CLUSTER>(cluster_part, tile_rows, [&](int o, float s) {
        y[first_row + o] = finish<T>(s, alpha, beta, y + first_row + o);
      });
      continue;
    }

    each_row([&](int r, float s) {
      if (row0 + r < M) partial[(size_t)blockIdx.y * M + row0 + r] = s;
    });
    __threadfence();  // partials visible device-wide before this block is counted
    __syncthreads();
    if (tid == 0) last_block = atomicAdd(counters + tile, 1u) == (unsigned)(splits - 1);
    __syncthreads();
    if (last_block) {
      // A plain loop, not common.cuh's batched sum_partials: its 32 registers of loads in flight
      // would count against every instance (split is a launch parameter), costing the split-free
      // configs occupancy. The workspace needs no zeroing: every launch overwrites what it reads.
      for (int i = tid; i < tile_rows; i += BLOCK) {
        float s = 0.0f;
        for (int k = 0; k < splits; ++k) s += __ldcg(partial + (size_t)k * M + first_row + i);
        y[first_row + i] = finish<T>(s, alpha, beta, y + first_row + i);
      }
      if (tid == 0) counters[tile] = 0u;
    }
  }
}

}  // namespace at_gemv

// One instance, as the tuner generates it (see autotune/ops/gemv/__init__.py):
//   extern "C" __global__ void __launch_bounds__(256) gemv_<key>(const __half* A, ...) {
//     at_gemv::programmatic_start<__half, 256, 32, 8, 1, 0>(A, M, N, lda);
//     at_gemv::gemv_body<__half, 256, 32, 8, 2, 1, 0, 0, 1, 0>(A, x, y, M, N, lda, alpha, beta, partial,
//                                                              counters);
//   }
