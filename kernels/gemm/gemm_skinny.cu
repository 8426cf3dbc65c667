// Skinny GEMM on CUDA cores: C = alpha * A B + beta * C with A M x K (M <= 16), B K x N, C M x N,
// all row-major, elements of type T (float, __half, __nv_bfloat16), accumulated in float.
//
// Memory-bound: B is streamed from DRAM once with VEC-wide loads (16 bytes when N allows); A is small
// and read through the cache or staged in shared memory. With M = 1 the same kernel is the transposed
// GEMV y = A^T x (A := x, B := the matrix).
//
// Block: NT threads along N times KW thread groups along K (threadIdx.x = g * NT + c). Thread (g, c)
// owns columns n0 + c*VEC .. +VEC-1 and rows m0 .. m0+MT-1 of C (MT x VEC float accumulators).
// Grid:  blockIdx.x = output tile: m tile = x % mtiles (fastest, so the M tiles that share a slice of
//        B run together and share it through L2), n tile = x / mtiles; blockIdx.y = K split.
//   mtiles = ceil(M / MT), ntiles = ceil(N / (NT*VEC)), gridDim = (mtiles * ntiles, SPLIT, 1).
//
// K: split s gets rows [kb, kb + len): per = ceil(ceil(K / SPLIT) / STEP) * STEP with STEP = KW*UNROLL,
// kb = min(K, s*per), len = min(K - kb, per). Within a split the block walks steps of STEP rows; in a
// step, group g reads rows kb + step*STEP + u*KW + g for u < UNROLL (UNROLL independent 16-byte loads
// per thread). The next step's loads are issued before the current step is computed, so 2*UNROLL
// loads per thread are in flight while it computes. Rows past the split and columns past N load as
// zeros (A as well as B), so tails need no second code path.
//
// A: ACHUNK == 0 reads A[m][k] per step through the read-only cache (all NT lanes of a group read the
// same element: a broadcast). ACHUNK > 0 stages A in shared memory as float, layout [k][MT], in chunks
// of KC = ACHUNK*STEP rows, double-buffered: chunk c+1 is loaded into registers while chunk c is
// computed and stored at its end, one __syncthreads per chunk. The inner loop then reads MT floats
// per k with MT/4 16-byte broadcast loads and does MT*VEC FMAs per converted B vector.
//
// Reduction over the KW groups: shuffles within a warp (NT < 32), then a halving tree through shared
// memory across warps. SPLIT == 1: the NT threads of group 0 write C. CLUSTER > 1 (then
// SPLIT == CLUSTER, and the instance is declared with __cluster_dims__(1, CLUSTER, 1)): they leave
// the block's sums in shared memory and the cluster adds them through distributed shared memory
// (at_common::cluster_sum). Otherwise, SPLIT > 1: they write float partials to
// workspace[(split * M + m) * N + n]; the last block of the tile to arrive (atomic counter per tile,
// counters[blockIdx.x]) sums the partials in a fixed order (deterministic), sets them back to zero,
// writes C and resets its counter, so workspace and counters are zero again after each launch.
//
// Dynamic shared memory (bytes), one buffer reused by the three phases (autotune/ops/gemm_skinny.py
// mirrors it):
//   max( 2 * ACHUNK * KW * UNROLL * MT * 4,                    A chunks, double-buffered (0: none)
//        R > 1 ? (R / 2) * MT * VEC * NT * 4 : 0,              KW tree, R = NT*KW / max(NT, 32)
//        SPLIT > 1 && NT*KW > MT*NT*VEC ? NT*KW * 4 : 0,       split partial sums of the last block
//        CLUSTER > 1 ? MT * NT * VEC * 4 : 0 )                 the block's sums, read by its cluster
// Workspace: SPLIT * M * N floats and mtiles * ntiles counters when SPLIT > 1 and CLUSTER == 1, else
// none.
//
// Preconditions the tuner's constraints guarantee: VEC > 1 only when N % VEC == 0 (B and C rows stay
// VEC-aligned); NT*KW is a multiple of 32 and at most 1024; all sizes are powers of two.
#pragma once
#include "common.cuh"

namespace at_skinny {

using at_common::cluster_sum;
using at_common::finish;
using at_common::load_stream;
using at_common::Raw;
using at_common::sum_partials;
using at_common::to_float;

// One element held as raw bits (so a zero fill needs no T constructor) to float.
template <typename T> __device__ __forceinline__ float raw_to_float(typename Raw<sizeof(T)>::type r);
template <> __device__ __forceinline__ float raw_to_float<float>(unsigned int r) { return __uint_as_float(r); }
template <> __device__ __forceinline__ float raw_to_float<__half>(unsigned short r) {
  return __half2float(__ushort_as_half(r));
}
template <> __device__ __forceinline__ float raw_to_float<__nv_bfloat16>(unsigned short r) {
  return __uint_as_float((unsigned int)r << 16);  // bf16 is the top half of a float
}

// The VEC elements packed in one raw vector, as floats (each B element is converted once).
template <typename T, int VEC, typename V>
__device__ __forceinline__ void unpack(const V& raw, float (&out)[VEC]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < VEC; ++i) out[i] = to_float(e[i]);
}

// MT consecutive floats of shared memory (16-byte aligned when MT >= 4) with the widest loads.
template <int MT> __device__ __forceinline__ void load_row(const float* p, float (&a)[MT]) {
  if (MT % 4 == 0) {
#pragma unroll
    for (int i = 0; i < MT / 4; ++i) {
      const float4 q = reinterpret_cast<const float4*>(p)[i];
      a[4 * i] = q.x;
      a[4 * i + 1] = q.y;
      a[4 * i + 2] = q.z;
      a[4 * i + 3] = q.w;
    }
  } else if (MT == 2) {
    const float2 q = *reinterpret_cast<const float2*>(p);
    a[0] = q.x;
    a[MT - 1] = q.y;
  } else {
    a[0] = p[0];
  }
}

// VEC floats to workspace; the offset is a multiple of VEC (N % VEC == 0), so float4 stores align.
template <int VEC> __device__ __forceinline__ void store_partial(float* p, const float (&v)[VEC]) {
  if (VEC % 4 == 0) {
#pragma unroll
    for (int i = 0; i < VEC / 4; ++i)
      reinterpret_cast<float4*>(p)[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) p[i] = v[i];
  }
}

// A slot of the KW reduction tree holds the E sums of NT threads, interleaved so that consecutive
// threads touch consecutive 16-byte words (no bank conflicts): [E / 4][NT] float4s, or [E][NT] floats.
template <int E, int NT> __device__ __forceinline__ void tree_put(float* slot, int c, const float* v) {
  if (E % 4 == 0) {
#pragma unroll
    for (int i = 0; i < E / 4; ++i)
      reinterpret_cast<float4*>(slot)[i * NT + c] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
  } else {
#pragma unroll
    for (int i = 0; i < E; ++i) slot[i * NT + c] = v[i];
  }
}
template <int E, int NT> __device__ __forceinline__ void tree_add(const float* slot, int c, float* v) {
  if (E % 4 == 0) {
#pragma unroll
    for (int i = 0; i < E / 4; ++i) {
      const float4 q = reinterpret_cast<const float4*>(slot)[i * NT + c];
      v[4 * i] += q.x;
      v[4 * i + 1] += q.y;
      v[4 * i + 2] += q.z;
      v[4 * i + 3] += q.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < E; ++i) v[i] += slot[i * NT + c];
  }
}

template <typename T, int NT, int KW, int VEC, int MT, int UNROLL, int ACHUNK, int POLICY, int CLUSTER>
__device__ __forceinline__ void skinny_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                            int M, int N, int K, float alpha, float beta,
                                            float* __restrict__ workspace, unsigned int* __restrict__ counters) {
  typedef typename Raw<VEC * sizeof(T)>::type V;
  typedef typename Raw<sizeof(T)>::type E;  // one element of A, as raw bits
  constexpr int ASMEM = ACHUNK > 0;
  constexpr int CHUNK = ASMEM ? ACHUNK : 1;
  constexpr int BLOCK = NT * KW;
  constexpr int STEP = KW * UNROLL;                       // rows of B a block reads per step
  constexpr int KC = CHUNK * STEP;                        // rows of A per staged chunk
  constexpr int COLS = NT * VEC;                          // columns of a tile
  constexpr int STAGE = (KC * MT + BLOCK - 1) / BLOCK;    // A elements a thread stages per chunk
  constexpr int SETW = NT < 32 ? 32 : NT;                 // threads between partial sets after shuffles
  constexpr int SETS = BLOCK / SETW;                      // partial sets left for the shared-memory tree
  constexpr int OUT = MT * COLS;                          // outputs of a tile
  constexpr int PARTS = BLOCK > OUT ? BLOCK / OUT : 1;    // threads per output in the split reduction
  static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "a block is whole warps");
  static_assert((NT & (NT - 1)) == 0 && (KW & (KW - 1)) == 0 && (MT & (MT - 1)) == 0, "powers of two");
  static_assert(VEC * sizeof(T) <= 16, "at most 16 bytes per load");

  extern __shared__ __align__(16) float smem[];
  __shared__ bool last_block;

  const int tid = threadIdx.x;
  const int c = tid % NT;  // column thread
  const int g = tid / NT;  // K group
  const int mtiles = (M + MT - 1) / MT;
  const int tile = blockIdx.x;
  const int m0 = (tile % mtiles) * MT;
  const int n0 = (tile / mtiles) * COLS;  // < N; n0 + COLS may not fit an int, so compare offsets
  const bool col_ok = c * VEC < N - n0;
  const size_t col = (size_t)n0 + (size_t)c * VEC;

  // This split's rows [kb, kb + len), a whole number of steps except at the end of K.
  const int splits = gridDim.y;
  long long per = ((long long)K + splits - 1) / splits;
  per = (per + STEP - 1) / STEP * STEP;
  const int kb = (int)min((long long)K, (long long)blockIdx.y * per);
  const unsigned len = (unsigned)min((long long)K - kb, per);
  const int nsteps = (int)((len + STEP - 1) / STEP);

  float acc[MT][VEC];
#pragma unroll
  for (int r = 0; r < MT; ++r)
#pragma unroll
    for (int v = 0; v < VEC; ++v) acc[r][v] = 0.0f;

  // B rows kb + g, advanced a step at a time; relative row offsets are unsigned (len + STEP may pass
  // 2^31 when K is near it).
  const V* bptr = reinterpret_cast<const V*>(B + ((size_t)kb + g) * N + col);
  const size_t ustride = (size_t)KW * N / VEC;    // between a thread's UNROLL loads, in vectors
  const size_t sstride = (size_t)STEP * N / VEC;  // between steps
  const T* abase = A + (size_t)m0 * K + kb;       // A[m0][kb]
  bool row_ok[MT];
#pragma unroll
  for (int r = 0; r < MT; ++r) row_ok[r] = m0 + r < M;

  V bnext[UNROLL];
  E anext[ASMEM ? 1 : UNROLL][MT];  // ASMEM == 0: A elements of the next step
  // Steps below nfull lie wholly inside the split: their loads need no row test.
  const int nfull = (int)(len / STEP);
  auto load_step = [&](int s) {
    const bool whole = s < nfull;  // block-uniform
    const unsigned rr0 = (unsigned)s * STEP + g;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const unsigned rr = rr0 + u * KW;
      const bool in = whole || rr < len;
      V b{};
      if (col_ok && in) b = load_stream<POLICY>(bptr + u * ustride);
      bnext[u] = b;
      if (!ASMEM) {
#pragma unroll
        for (int r = 0; r < MT; ++r) {
          E a = 0;
          if (row_ok[r] && in) a = __ldg(reinterpret_cast<const E*>(abase + (size_t)r * K + rr));
          anext[ASMEM ? 0 : u][r] = a;
        }
      }
    }
    bptr += sstride;
  };

  // ASMEM: chunk ch of A as float into buffer [k][MT]; element i of the chunk is (r = i / KC,
  // kk = i % KC) so that consecutive threads read consecutive k of a row of A (coalesced).
  E staged[ASMEM ? STAGE : 1];
  auto fetch_chunk = [&](int ch) {
#pragma unroll
    for (int j = 0; j < STAGE; ++j) {
      const int i = j * BLOCK + tid;
      const int r = i / KC;
      const unsigned rr = (unsigned)ch * KC + (unsigned)(i % KC);
      E a = 0;
      if (i < KC * MT && m0 + r < M && rr < len) a = __ldg(reinterpret_cast<const E*>(abase + (size_t)r * K + rr));
      staged[j] = a;
    }
  };
  auto store_chunk = [&](int ch) {
    float* buf = smem + (ch & 1) * (KC * MT);
#pragma unroll
    for (int j = 0; j < STAGE; ++j) {
      const int i = j * BLOCK + tid;
      if (i < KC * MT) buf[(i % KC) * MT + i / KC] = raw_to_float<T>(staged[j]);
    }
  };

  load_step(0);
  if (ASMEM) {
    fetch_chunk(0);
    store_chunk(0);
    __syncthreads();
  }

  // Chunks of CHUNK steps (ASMEM == 0: one chunk of all steps); within a chunk the A row pointer
  // just moves on, so a step costs its loads, conversions and FMAs plus a few integer operations.
  constexpr int STEPS_PER_CHUNK = ASMEM ? CHUNK : 0x40000000;
  for (int s = 0, ch = 0; s < nsteps; ++ch) {
    const bool more = ASMEM && nsteps - s > STEPS_PER_CHUNK;  // a next chunk exists (block-uniform)
    if (more) fetch_chunk(ch + 1);
    const int send = more ? s + STEPS_PER_CHUNK : nsteps;
    const float* arow = smem + (ch & 1) * (KC * MT) + g * MT;
#pragma unroll 2
    for (; s < send; ++s, arow += STEP * MT) {
      V bcur[UNROLL];
      E acur[ASMEM ? 1 : UNROLL][MT];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) bcur[u] = bnext[u];
      if (!ASMEM) {
#pragma unroll
        for (int u = 0; u < (ASMEM ? 1 : UNROLL); ++u)
#pragma unroll
          for (int r = 0; r < MT; ++r) acur[u][r] = anext[u][r];
      }
      load_step(s + 1);  // past the split every load is predicated off

#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        float b[VEC];
        unpack<T, VEC>(bcur[u], b);
        float a[MT];
        if (ASMEM) {
          load_row<MT>(arow + u * KW * MT, a);
        } else {
#pragma unroll
          for (int r = 0; r < MT; ++r) a[r] = raw_to_float<T>(acur[ASMEM ? 0 : u][r]);
        }
#pragma unroll
        for (int r = 0; r < MT; ++r)
#pragma unroll
          for (int v = 0; v < VEC; ++v) acc[r][v] = fmaf(a[r], b[v], acc[r][v]);
      }
    }
    if (more) {
      // Everyone finished reading this buffer's previous contents before the last chunk's barrier.
      store_chunk(ch + 1);
      __syncthreads();
    }
  }

  // KW groups -> one: groups sharing a warp by shuffles, then warps by a halving tree.
  if (NT < 32) {
#pragma unroll
    for (int offset = 16; offset >= NT; offset /= 2)
#pragma unroll
      for (int r = 0; r < MT; ++r)
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[r][v] += __shfl_xor_sync(0xffffffffu, acc[r][v], offset);
  }
  if (SETS > 1) {
    const int set = tid / SETW;
    const bool holder = tid % SETW < NT;  // c == tid % SETW for holders
    constexpr int SLOT = MT * VEC * NT;
    if (ASMEM) __syncthreads();  // the tree reuses the A buffers
#pragma unroll 1
    for (int h = SETS / 2; h > 0; h /= 2) {
      if (holder && set >= h && set < 2 * h) {
        tree_put<MT * VEC, NT>(smem + (set - h) * SLOT, c, &acc[0][0]);
      }
      __syncthreads();
      if (holder && set < h) tree_add<MT * VEC, NT>(smem + set * SLOT, c, &acc[0][0]);
      __syncthreads();
    }
  }
  // Threads 0 .. NT-1 (set 0, c == tid) now hold the block's sums.

  if (CLUSTER > 1) {
    // The block's sums to shared memory as [MT][COLS] (its last readers, the A chunks or the tree,
    // are done after the barrier), then across the cluster's splits.
    __syncthreads();
    if (tid < NT) {
#pragma unroll
      for (int r = 0; r < MT; ++r) store_partial<VEC>(smem + r * COLS + c * VEC, acc[r]);
    }
    cluster_sum<CLUSTER>(smem, OUT, [&](int o, float sum) {
      const int r = o / COLS, cn = o % COLS;
      if (m0 + r >= M || cn >= N - n0) return;
      const size_t at = (size_t)(m0 + r) * N + n0 + cn;
      C[at] = finish<T>(sum, alpha, beta, C + at);
    });
    return;
  }

  if (splits == 1) {
    if (tid < NT && col_ok) {
#pragma unroll
      for (int r = 0; r < MT; ++r) {
        if (!row_ok[r]) continue;
        T* out = C + (size_t)(m0 + r) * N + col;
#pragma unroll
        for (int v = 0; v < VEC; ++v) out[v] = finish<T>(acc[r][v], alpha, beta, out + v);
      }
    }
    return;
  }

  const size_t mn = (size_t)M * N;
  if (tid < NT && col_ok) {
    float* part = workspace + (size_t)blockIdx.y * mn + col;
#pragma unroll
    for (int r = 0; r < MT; ++r)
      if (row_ok[r]) store_partial<VEC>(part + (size_t)(m0 + r) * N, acc[r]);
  }
  __threadfence();  // partials visible device-wide before this block is counted
  __syncthreads();
  if (tid == 0) last_block = atomicAdd(counters + tile, 1u) == (unsigned)(splits - 1);
  __syncthreads();
  if (!last_block) return;
  __threadfence();

  // The last block: PARTS threads per output each sum a fixed range of splits, then one adds the
  // PARTS sums in order. The order depends only on SPLIT, never on which block arrived last.
  if (PARTS == 1) {
    for (int o = tid; o < OUT; o += BLOCK) {
      const int r = o / COLS, cn = o % COLS;
      if (m0 + r >= M || cn >= N - n0) continue;
      const size_t at = (size_t)(m0 + r) * N + n0 + cn;
      const float sum = sum_partials(workspace + at, mn, 0, splits);
      C[at] = finish<T>(sum, alpha, beta, C + at);
    }
  } else {
    const int o = tid % OUT, part = tid / OUT;
    const int r = o / COLS, cn = o % COLS;
    const bool ok = m0 + r < M && cn < N - n0;
    const size_t at = (size_t)(m0 + r) * N + n0 + cn;
    const int per_part = (splits + PARTS - 1) / PARTS;
    const int lo = min(splits, part * per_part), hi = min(splits, lo + per_part);
    smem[tid] = ok ? sum_partials(workspace + at, mn, lo, hi) : 0.0f;
    __syncthreads();
    if (tid < OUT && ok) {
      float sum = 0.0f;
#pragma unroll
      for (int q = 0; q < PARTS; ++q) sum += smem[q * OUT + tid];
      C[at] = finish<T>(sum, alpha, beta, C + at);
    }
  }
  if (tid == 0) counters[tile] = 0u;
}

}  // namespace at_skinny

// One instance, as the tuner generates it (see autotune/ops/gemm_skinny.py):
//   extern "C" __global__ void __launch_bounds__(256) gemm_skinny_<key>(const __half* A, const __half* B,
//       __half* C, int M, int N, int K, float alpha, float beta, float* workspace, unsigned int* counters)
//   { at_skinny::skinny_body<__half, 32, 8, 8, 1, 4, 0, 1, 1>(A, B, C, M, N, K, alpha, beta, workspace,
//     counters); }
// with CLUSTER > 1 the declaration also carries __cluster_dims__(1, CLUSTER, 1).
