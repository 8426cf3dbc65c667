// Skinny GEMM on CUDA cores: C = alpha * A B + beta * C with A M x K (M <= 16), C M x N, and B either
// K x N (B_NK false) or N x K (B_NK true: C = A W^T with W := B, an nn.Linear's weight), all row-major
// with runtime leading dimensions: row i of A at A + i*lda (lda >= K), of C at C + i*ldc (ldc >= N), of
// B at B + i*ldb (ldb >= N, or >= K for N x K); elements of type T (float, __half, __nv_bfloat16),
// accumulated in float. Rows with gaps between them (a view of some columns of a wider matrix) run in
// place: every address is a row times its ld (in size_t) plus a column.
//
// Memory-bound: B is streamed from DRAM once with VEC-wide loads (16 bytes when the rows allow); A is
// small and read through the cache or staged in shared memory. With M = 1 the same kernel, K x N, is
// the transposed GEMV y = A^T x (A := x, B := the matrix). The K x N path is described first; the
// N x K path (skinny_nk, below) keeps the template's parameter names with meanings that fit W's rows.
//
// K x N. Block: NT threads along N times KW thread groups along K (threadIdx.x = g * NT + c). Thread
// (g, c) owns columns n0 + c*VEC .. +VEC-1 and rows m0 .. m0+MT-1 of C (MT x VEC float accumulators).
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
// workspace[(split * M + m) * N + n] (dense: N apart, whatever ldc is); the last block of the tile to
// arrive (atomic counter per tile, counters[blockIdx.x]) sums the partials in a fixed order
// (deterministic), sets them back to zero, writes C and resets its counter, so workspace and counters
// are zero again after each launch (reduce_splits).
//
// N x K. Each C[m][n] is the dot product of A's row m and W's row n, both contiguous along K: a GEMV
// over W with M right-hand vectors. Block: NT row groups of KW lanes (threadIdx.x = g * KW + l; KW <= 32,
// so a group is part of one warp), group g owning the UNROLL rows n0 + g*UNROLL .. +UNROLL-1 of W and
// each thread MT x UNROLL float accumulators. A tile is ROWS = NT*UNROLL columns of C by MT rows:
//   mtiles = ceil(M / MT), ntiles = ceil(N / (NT*UNROLL)), gridDim = (mtiles * ntiles, SPLIT, 1), m
//   tiles fastest as above. K splits as above with STEP = KW*VEC elements of K.
// In step s lane l loads the VEC elements at kb + s*STEP + l*VEC of each of its UNROLL rows of W (KW*16
// contiguous bytes of each row per group), the next whole step's UNROLL loads issued before the
// current step is computed, then the same VEC elements of each of A's MT rows through L1 (__ldg; the
// groups sharing a warp read the same addresses: one broadcast), each A vector used for UNROLL rows of
// W. Rows past M or N read row M-1 or N-1 (valid memory) and are never written; only the split's last
// step, where it is partial, tests its loads (vectors past the split read as zeros). ACHUNK is 0.
// Reduction over the KW lanes of a group by shuffles (GroupReduce: halving, each lane ends owning
// some sums); then as above: C written by the owners (SPLIT == 1), the block's sums as [MT][ROWS] in
// shared memory for the cluster (CLUSTER > 1), or partials to the workspace and reduce_splits.
//
// Dynamic shared memory (bytes), one buffer reused by the phases (autotune/ops/gemm/skinny.py mirrors
// it). K x N:
//   max( 2 * ACHUNK * KW * UNROLL * MT * 4,                    A chunks, double-buffered (0: none)
//        R > 1 ? (R / 2) * MT * VEC * NT * 4 : 0,              KW tree, R = NT*KW / max(NT, 32)
//        SPLIT > 1 && NT*KW > MT*NT*VEC ? NT*KW * 4 : 0,       split partial sums of the last block
//        CLUSTER > 1 ? MT * NT * VEC * 4 : 0 )                 the block's sums, read by its cluster
// N x K:
//   max( SPLIT > 1 && NT*KW > MT*NT*UNROLL ? NT*KW * 4 : 0,    split partial sums of the last block
//        CLUSTER > 1 ? MT * NT * UNROLL * 4 : 0 )              the block's sums, read by its cluster
// Workspace: SPLIT * M * N floats and mtiles * ntiles counters when SPLIT > 1 and CLUSTER == 1, else
// none.
//
// Preconditions the tuner's constraints and the launcher guarantee: VEC > 1 only when the rows VEC
// loads run along (B's and C's for K x N: N % VEC == 0; A's and W's for N x K: K % VEC == 0) hold whole
// vectors, and only when A, B, C start 16-byte aligned and lda, ldb, ldc are multiples of
// 16 / sizeof(T) (the launcher runs the config with VEC = 1 otherwise), so every row starts
// VEC-aligned; NT*KW is a multiple of 32 and at most 1024; all sizes are powers of two.
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

// Split-K through the workspace, after each block has stored its partial sums of the tile at
// workspace[(split * M + m) * N + n]: the last block of the tile to arrive (atomic counter per tile,
// counters[tile]) sums the partials in a fixed order (deterministic), sets them back to zero, writes C
// and resets its counter, so workspace and counters are zero again after each launch. The tile is
// rows m0 .. m0+OUT/COLS-1 and columns n0 .. n0+COLS-1 of C; smem holds BLOCK floats when BLOCK > OUT.
template <typename T, int BLOCK, int OUT, int COLS>
__device__ __forceinline__ void reduce_splits(T* __restrict__ C, int M, int N, int ldc, int m0, int n0, float alpha,
                                              float beta, float* __restrict__ workspace,
                                              unsigned int* __restrict__ counters, int tile, int splits,
                                              float* smem) {
  constexpr int PARTS = BLOCK > OUT ? BLOCK / OUT : 1;  // threads per output in the split reduction
  __shared__ bool last_block;
  const int tid = threadIdx.x;
  const size_t mn = (size_t)M * N;
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
      T* out = C + (size_t)(m0 + r) * ldc + n0 + cn;
      *out = finish<T>(sum, alpha, beta, out);
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
      T* out = C + (size_t)(m0 + r) * ldc + n0 + cn;
      *out = finish<T>(sum, alpha, beta, out);
    }
  }
  if (tid == 0) counters[tile] = 0u;
}

// K x N: B(k, n) = B[k * ldb + n]. Block, grid, K walk, A staging and reductions as in the header.
template <typename T, int NT, int KW, int VEC, int MT, int UNROLL, int ACHUNK, int POLICY, int CLUSTER>
__device__ __forceinline__ void skinny_kn(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                          int M, int N, int K, int lda, int ldb, int ldc, float alpha, float beta,
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
  static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "a block is whole warps");
  static_assert((NT & (NT - 1)) == 0 && (KW & (KW - 1)) == 0 && (MT & (MT - 1)) == 0, "powers of two");
  static_assert(VEC * sizeof(T) <= 16, "at most 16 bytes per load");

  extern __shared__ __align__(16) float smem[];

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
  const V* bptr = reinterpret_cast<const V*>(B + ((size_t)kb + g) * ldb + col);
  const size_t ustride = (size_t)KW * ldb / VEC;    // between a thread's UNROLL loads, in vectors
  const size_t sstride = (size_t)STEP * ldb / VEC;  // between steps
  const T* abase = A + (size_t)m0 * lda + kb;       // A[m0][kb]
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
          if (row_ok[r] && in) a = __ldg(reinterpret_cast<const E*>(abase + (size_t)r * lda + rr));
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
      if (i < KC * MT && m0 + r < M && rr < len) a = __ldg(reinterpret_cast<const E*>(abase + (size_t)r * lda + rr));
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
      const size_t at = (size_t)(m0 + r) * ldc + n0 + cn;
      C[at] = finish<T>(sum, alpha, beta, C + at);
    });
    return;
  }

  if (splits == 1) {
    if (tid < NT && col_ok) {
#pragma unroll
      for (int r = 0; r < MT; ++r) {
        if (!row_ok[r]) continue;
        T* out = C + (size_t)(m0 + r) * ldc + col;
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
  reduce_splits<T, BLOCK, OUT, COLS>(C, M, N, ldc, m0, n0, alpha, beta, workspace, counters, tile, splits, smem);
}

// Sums each of a lane's E values over the W consecutive lanes of its group (W <= 32, E and W powers
// of two), as gemv.cu's RowReduce: each of the first S = min(log2 W, log2 E) steps hands half of the
// values to the partner lane and keeps the other half, so E - E / 2^S + (E / 2^S) * (log2 W - S)
// shuffles instead of E * log2 W. Afterwards lane l holds the sums of the OWNED = E / 2^S values
// first(l) .. first(l) + OWNED - 1 in v[0 .. OWNED), and is their writer when owner(l).
constexpr int log2_exact(int v) { return v <= 1 ? 0 : 1 + log2_exact(v / 2); }

template <int W, int E> struct GroupReduce {
  static constexpr int HALVINGS = log2_exact(W) < log2_exact(E) ? log2_exact(W) : log2_exact(E);
  static constexpr int OWNED = E >> HALVINGS;    // values a lane owns at the end
  static constexpr int SHARING = W >> HALVINGS;  // lanes that end up with the same values

  static __device__ __forceinline__ void run(float (&v)[E], int lane) {
#pragma unroll
    for (int step = 0; step < HALVINGS; ++step) {
      const int offset = W >> (step + 1);
      const int half = E >> (step + 1);
      const bool upper = lane & offset;
      // A constant trip count, so that this loop unrolls before the step loop (which makes `half`
      // a constant): with `j < half` as its bound it stayed a loop, and v went to local memory.
#pragma unroll
      for (int j = 0; j < E / 2; ++j) {
        if (j >= half) break;
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
  // bits (within the group), most significant first, number its block of OWNED values.
  static __device__ __forceinline__ int first(int lane) { return (lane % W) / SHARING * OWNED; }
  static __device__ __forceinline__ bool owner(int lane) { return lane % SHARING == 0; }
};

// N x K (B_NK): W := B, W(n, k) = B[n * ldb + k], C = A W^T. Each output C[m][n] is the dot product
// of two rows contiguous along K, A's row m and W's row n: a GEMV over W with M right-hand vectors.
// The template parameters keep the family's names (see the header): NT row groups of KW lanes
// (threadIdx.x = g * KW + l: the lanes of a group are consecutive threads of one warp), each group
// owning UNROLL consecutive rows of W, so a tile is ROWS = NT * UNROLL columns of C by MT rows.
// Lane l reads VEC elements (16 bytes when K allows) at k = kb + s * STEP + l * VEC of each of its
// UNROLL rows in step s (STEP = KW * VEC), the next step's UNROLL loads issued before the current step
// is computed (2 * UNROLL loads in flight), then the same k of each of the MT rows of A through L1
// (__ldg: every group of the block reads the same A, and the groups sharing a warp read the same
// addresses, one broadcast), each A vector used for UNROLL rows of W. Rows past M or N read row
// M - 1 or N - 1 (valid memory) and are never written; vectors past the split's end load as zeros.
template <typename T, int NT, int KW, int VEC, int MT, int UNROLL, int POLICY, int CLUSTER>
__device__ __forceinline__ void skinny_nk(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                          int M, int N, int K, int lda, int ldb, int ldc, float alpha, float beta,
                                          float* __restrict__ workspace, unsigned int* __restrict__ counters) {
  typedef typename Raw<VEC * sizeof(T)>::type V;
  constexpr int R = UNROLL;         // rows of W per group
  constexpr int BLOCK = NT * KW;
  constexpr int STEP = KW * VEC;    // elements of K a block reads per step
  constexpr int ROWS = NT * R;      // rows of W (columns of C) per tile
  constexpr int OUT = MT * ROWS;    // outputs of a tile
  constexpr int E = MT * R;         // sums a thread accumulates
  typedef GroupReduce<KW, E> Reduce;
  static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "a block is whole warps");
  static_assert(KW <= 32, "a group's lanes share a warp");
  static_assert((NT & (NT - 1)) == 0 && (KW & (KW - 1)) == 0 && (MT & (MT - 1)) == 0 && (R & (R - 1)) == 0,
                "powers of two");
  static_assert(VEC * sizeof(T) <= 16, "at most 16 bytes per load");

  extern __shared__ __align__(16) float smem[];

  const int tid = threadIdx.x;
  const int lane = tid % KW;
  const int grp = tid / KW;
  const int mtiles = (M + MT - 1) / MT;
  const int tile = blockIdx.x;
  const int m0 = (tile % mtiles) * MT;
  const int n0 = (tile / mtiles) * ROWS;  // < N; n0 + ROWS may not fit an int, so compare offsets
  const int g0 = grp * R;                 // the group's first row, relative to n0

  // This split's range [kb, kb + len) of K, a whole number of steps except at the end of K. K + splits
  // and per + STEP stay below 2^32, so unsigned arithmetic serves (a 64-bit division is a call, and
  // ptxas saves registers to the stack around it).
  const unsigned splits = gridDim.y;
  unsigned per = ((unsigned)K + splits - 1) / splits;
  per = (per + STEP - 1) / STEP * STEP;
  const int kb = (int)min((unsigned long long)K, (unsigned long long)blockIdx.y * per);
  const unsigned len = min((unsigned)(K - kb), per);
  const int nsteps = (int)((len + STEP - 1) / STEP);
  const int nfull = (int)(len / STEP);  // steps wholly inside the split: their loads need no test
  const unsigned lk = (unsigned)lane * VEC;

  // Each thread's pointers into W's UNROLL rows and A's MT rows at its lane's first vector of the
  // split, moved on a step at a time (loads at a pointer plus a constant: one 64-bit add per row and
  // step; indexing from row bases instead cost four integer instructions per load of A).
  const V* wp[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const long long row = min((long long)n0 + g0 + r, (long long)N - 1);
    wp[r] = reinterpret_cast<const V*>(B + (size_t)row * ldb + kb + lk);
  }
  const V* ap[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) ap[m] = reinterpret_cast<const V*>(A + (size_t)min(m0 + m, M - 1) * lda + kb + lk);

  float acc[MT][R];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;

  // One step: the UNROLL vectors of W (as loaded) times the MT vectors of A at ap; `in` false (past
  // the split, in its last step only) reads A as zeros.
  auto compute = [&](const V (&wv)[R], bool in) {
    float w[R][VEC];
#pragma unroll
    for (int r = 0; r < R; ++r) unpack<T, VEC>(wv[r], w[r]);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      V raw{};
      if (in) raw = __ldg(ap[m]);
      float a[VEC];
      unpack<T, VEC>(raw, a);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[m][r] = fmaf(a[v], w[r][v], acc[m][r]);
    }
  };

  // Whole steps (s < nfull) need no tests but whether a next whole step exists (block-uniform; when
  // none does, wnext keeps stale values that are never used).
  V wnext[R];
  if (nfull > 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) wnext[r] = load_stream<POLICY>(wp[r]);
  }
#pragma unroll 2
  for (int s = 0; s < nfull; ++s) {
    V wcur[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      wcur[r] = wnext[r];
      wp[r] += KW;
    }
    if (s + 1 < nfull) {
#pragma unroll
      for (int r = 0; r < R; ++r) wnext[r] = load_stream<POLICY>(wp[r]);
    }
    compute(wcur, true);
#pragma unroll
    for (int m = 0; m < MT; ++m) ap[m] += KW;
  }
  if (nsteps > nfull) {  // the split's last, partial step: lanes past its end read zeros
    const bool in = (unsigned)nfull * STEP + lk < len;
    V wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      V w{};
      if (in) w = load_stream<POLICY>(wp[r]);
      wv[r] = w;
    }
    compute(wv, in);
  }

  // The KW lanes of each group -> one owner per sum; value j is (m, r) = (j / R, j % R).
  float sums[E];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) sums[m * R + r] = acc[m][r];
  Reduce::run(sums, lane);
  auto each_sum = [&](auto emit) {
    if (!Reduce::owner(lane)) return;
    const int first = Reduce::first(lane);
#pragma unroll
    for (int j = 0; j < Reduce::OWNED; ++j) emit((first + j) / R, g0 + (first + j) % R, sums[j]);
  };

  if (CLUSTER > 1) {
    // The block's sums to shared memory as [MT][ROWS] (every slot has one owner), then across the
    // cluster's splits.
    each_sum([&](int m, int n, float sum) { smem[m * ROWS + n] = sum; });
    cluster_sum<CLUSTER>(smem, OUT, [&](int o, float sum) {
      const int m = o / ROWS, n = o % ROWS;
      if (m0 + m >= M || n >= N - n0) return;
      T* out = C + (size_t)(m0 + m) * ldc + n0 + n;
      *out = finish<T>(sum, alpha, beta, out);
    });
    return;
  }

  if (splits == 1) {
    each_sum([&](int m, int n, float sum) {
      if (m0 + m >= M || n >= N - n0) return;
      T* out = C + (size_t)(m0 + m) * ldc + n0 + n;
      *out = finish<T>(sum, alpha, beta, out);
    });
    return;
  }

  float* part = workspace + (size_t)blockIdx.y * M * N;
  each_sum([&](int m, int n, float sum) {
    if (m0 + m < M && n < N - n0) part[(size_t)(m0 + m) * N + n0 + n] = sum;
  });
  reduce_splits<T, BLOCK, OUT, ROWS>(C, M, N, ldc, m0, n0, alpha, beta, workspace, counters, tile, splits, smem);
}

// The instances' entry: B_NK picks the layout of B (ACHUNK is 0 for N x K, which reads A through L1).
template <typename T, bool B_NK, int NT, int KW, int VEC, int MT, int UNROLL, int ACHUNK, int POLICY, int CLUSTER>
__device__ __forceinline__ void skinny_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                            int M, int N, int K, int lda, int ldb, int ldc, float alpha, float beta,
                                            float* __restrict__ workspace, unsigned int* __restrict__ counters) {
  if constexpr (B_NK) {
    static_assert(ACHUNK == 0, "N x K reads A through L1");
    skinny_nk<T, NT, KW, VEC, MT, UNROLL, POLICY, CLUSTER>(A, B, C, M, N, K, lda, ldb, ldc, alpha, beta, workspace,
                                                           counters);
  } else {
    skinny_kn<T, NT, KW, VEC, MT, UNROLL, ACHUNK, POLICY, CLUSTER>(A, B, C, M, N, K, lda, ldb, ldc, alpha, beta,
                                                                   workspace, counters);
  }
}

}  // namespace at_skinny

// One instance, as the tuner generates it (see autotune/ops/gemm/skinny.py; B_NK true for N x K):
//   extern "C" __global__ void __launch_bounds__(256) gemm_skinny_<key>(const __half* A, const __half* B,
//       __half* C, int M, int N, int K, int lda, int ldb, int ldc, float alpha, float beta,
//       float* workspace, unsigned int* counters)
//   { at_skinny::skinny_body<__half, false, 32, 8, 8, 1, 4, 0, 1, 1>(A, B, C, M, N, K, lda, ldb, ldc,
//     alpha, beta, workspace, counters); }
// with CLUSTER > 1 the declaration also carries __cluster_dims__(1, CLUSTER, 1).
