// Weight-only int4 GEMV and skinny GEMM on tensor cores: out[M x N] = alpha * x[M x K] @ dequant(W)^T +
// beta * out, W in nn.Linear's layout (N x K) as docs/lowbit.md's canonical format: unsigned 4-bit codes
// packed two to a byte along K (even k in the low nibble), a scale per group of GROUP codes along K, and
// w = (q - z) * s with z = 8 (SYM) or the low 4 bits of the group's zero byte. x and out are T (__half or
// __nv_bfloat16); products are accumulated in float by mma.sync.m16n8k16.
//
// At M = 1 the weight bytes are the wall: 4 bits a weight let a kernel stream 4x the weights of a
// float16 GEMV in the same time, so the per-weight instructions must stay within what an SM issues
// beside the loads (at 4.3 TB/s an H200 SM receives about 33 codes a cycle). On CUDA cores with float
// math (a byte permute, a subtract and an FMA a code, x from shared memory) the first version issued
// about 3.4 instructions a code and read 4 bytes of x from shared memory a code: 55% of copy bandwidth.
// Here 8 codes cost 3 shifts, 4 LOP3 (each makes two codes into the halves 1024 + q, or 128 + q for
// bfloat16, exactly), 4 subtracts of the zero and 4 multiplies by the scale (the weight rounded once to
// T, as F.linear on the dequantized weight has it), and two tensor-core MMAs that take all of x's rows
// of a tile of 8 at once: about 2.3 instructions a code, the same for M = 1 and M = 8.
//
// Fragments (PTX ISA, mma.m16n8k16 .row.col): lane = 4 g + c holds A at rows g and g + 8 and the MMA's
// k slots {2c, 2c+1, 2c+8, 2c+9}, B (x, column = row m of x) at column g and the same k slots, and D at
// rows g, g+8 and columns 2c, 2c+1. A dot product does not depend on the order of its terms, so the k
// slots are mapped to the codes the lane has loaded: lane c of a quad reads 16 bytes (a piece of 32
// codes) of rows g and g + 8, pieces 4s + c of step s; word j of a piece gives the half pairs (codes 0,4),
// (1,5), (2,6), (3,7) of its 8, which fill A for two MMAs, and x is staged in shared memory as the same
// pairs, so one 16-byte shared load gives B for both.
//
// Work: a warp owns TILES tiles of 16 rows of W and walks the block's K range, UNROLL steps (of 4 pieces
// a quad) in flight. The grid's z covers M in tiles of 8 * MT rows of x; its y splits K into CLUSTER
// parts, one thread-block cluster per row tile, added through distributed shared memory (common.cuh:
// cluster_sum); its x may hold fewer blocks than row tiles (a persistent grid), which then stride over
// them: x is staged once per block, and the last wave is not left mostly empty.
//
// Preconditions (autotune/ops/qgemm: space and bind): K % GROUP == 0, K % 32 == 0, x, W, out 16-byte
// aligned, dynamic shared memory as x_slice_bytes below.
#pragma once
#include "common.cuh"

namespace at_qgemm {

using at_common::finish;
using at_common::load_stream;
using at_common::to_float;

constexpr int PIECE = 32;          // codes a 16-byte load holds
constexpr int QUAD = 4;            // pieces a quad of lanes reads per step
constexpr int PIECE_BYTES = 80;    // a piece's x pairs in shared memory (64 bytes) and a 16-byte gap

__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Bytes between rows of x's staged slice: pieces * 80 rounded so that rows g and g + 1 of an MMA's
// 8 land 64 bytes apart modulo 128 (their 16-byte loads then share no bank with the other quad's).
__host__ __device__ __forceinline__ int x_row_bytes(int pieces) { return (pieces * PIECE_BYTES + 127) / 128 * 128 + 64; }

template <typename T> struct Pair;
template <> struct Pair<__half> {
  static constexpr unsigned MAGIC = 0x64006400u;  // the halves 1024.0, 1024.0: 1024 + q exactly
  static constexpr float OFFSET = 1024.0f;
  typedef __half2 type;
};
template <> struct Pair<__nv_bfloat16> {
  static constexpr unsigned MAGIC = 0x43004300u;  // 128.0 in bfloat16: 128 + q exactly (8 significant bits)
  static constexpr float OFFSET = 128.0f;
  typedef __nv_bfloat162 type;
};

template <typename T2> __device__ __forceinline__ T2 as_pair(unsigned v) { return *reinterpret_cast<T2*>(&v); }
template <typename T2> __device__ __forceinline__ unsigned as_word(T2 v) { return *reinterpret_cast<unsigned*>(&v); }

template <typename T> __device__ __forceinline__ typename Pair<T>::type pair_of(float v);
template <> __device__ __forceinline__ __half2 pair_of<__half>(float v) { return __float2half2_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat162 pair_of<__nv_bfloat16>(float v) { return __float2bfloat162_rn(v); }

// The weights of one word's 8 codes as T pairs (codes 0,4), (1,5), (2,6), (3,7): ((OFFSET + q) - (OFFSET +
// z)) * s, the subtraction exact, the product rounded once.
template <typename T>
__device__ __forceinline__ void dequant_word(unsigned word, typename Pair<T>::type zero, typename Pair<T>::type scale,
                                             unsigned (&w)[4]) {
  typedef typename Pair<T>::type T2;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const unsigned codes = ((word >> (4 * j)) & 0x000F000Fu) | Pair<T>::MAGIC;
    w[j] = as_word(__hmul2(__hsub2(as_pair<T2>(codes), zero), scale));
  }
}

template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (sizeof(T) == 2 && Pair<T>::MAGIC == 0x64006400u) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
#else
  __trap();  // tensor-core MMAs of 16-bit inputs need sm_80; the op's space offers none below
#endif
}

// One stage of a thread's loads: UNROLL steps of its pieces of rows g and g + 8 of each tile, with
// their groups' scales and zero points as T pairs.
template <typename T, int UNROLL, int TILES> struct Stage {
  uint4 w[UNROLL][TILES][2];
  typename Pair<T>::type scale[UNROLL][TILES][2], zero[UNROLL][TILES][2];
};

// Issue the loads of the UNROLL steps from piece s0 on (pieces past the split's end load zero codes,
// which meet zero x).
template <typename T, int UNROLL, int TILES, int GROUP, int SYM, int POLICY>
__device__ __forceinline__ void fetch(Stage<T, UNROLL, TILES>& st, int s0, int c, int piece_begin, int piece_count,
                                      const uint4* (&wrow)[TILES][2], const T* (&srow)[TILES][2],
                                      const unsigned char* (&zrow)[TILES][2]) {
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int piece = s0 + u * QUAD + c;
    const int group = (piece_begin + max(0, min(piece, piece_count - 1))) * PIECE / GROUP;
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        st.w[u][t][h] = piece < piece_count ? load_stream<POLICY>(wrow[t][h] + piece) : make_uint4(0u, 0u, 0u, 0u);
        st.scale[u][t][h] = pair_of<T>(to_float(srow[t][h][group]));
        st.zero[u][t][h] = pair_of<T>(Pair<T>::OFFSET + (SYM ? 8.0f : (float)(zrow[t][h][group] & 0xF)));
      }
  }
}

// d += the stage's weights times x: per word of each piece, 8 codes of rows g and g + 8 of each tile
// against the staged x pairs of the MT tiles of 8 rows of x.
template <typename T, int MT, int UNROLL, int TILES>
__device__ __forceinline__ void multiply(const Stage<T, UNROLL, TILES>& st, int s0, int per_split, int c, int g,
                                         int x_rows, int row_bytes, const unsigned char* x_slice,
                                         float (&d)[TILES][MT][4]) {
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    if (s0 + u * QUAD >= per_split) break;
    const int piece = s0 + u * QUAD + c;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint4 b[MT];
#pragma unroll
      for (int n = 0; n < MT; ++n) {
        const int m = 8 * n + g;
        b[n] = m < x_rows ? *reinterpret_cast<const uint4*>(x_slice + m * row_bytes + piece * PIECE_BYTES + j * 16)
                          : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int t = 0; t < TILES; ++t) {
        unsigned lo[4], hi[4];  // rows g and g + 8
        dequant_word<T>(reinterpret_cast<const unsigned*>(&st.w[u][t][0])[j], st.zero[u][t][0], st.scale[u][t][0], lo);
        dequant_word<T>(reinterpret_cast<const unsigned*>(&st.w[u][t][1])[j], st.zero[u][t][1], st.scale[u][t][1], hi);
#pragma unroll
        for (int n = 0; n < MT; ++n) {
          mma<T>(d[t][n], lo[0], hi[0], lo[1], hi[1], b[n].x, b[n].y);
          mma<T>(d[t][n], lo[2], hi[2], lo[3], hi[3], b[n].z, b[n].w);
        }
      }
    }
  }
}

template <typename T, int MT, int BLOCK, int TILES, int UNROLL, int GROUP, int SYM, int CLUSTER, int POLICY>
__device__ __forceinline__ void qgemm_body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                           const T* __restrict__ scales, const unsigned char* __restrict__ zeros,
                                           T* __restrict__ out, int M, int N, int K, float alpha, float beta) {
  typedef typename Pair<T>::type T2;
  static_assert(BLOCK % 32 == 0, "whole warps");
  static_assert(GROUP % PIECE == 0, "a 16-byte piece lies inside one group");
  constexpr int WARPS = BLOCK / 32;
  constexpr int ROWS_PER_BLOCK = WARPS * TILES * 16;
  constexpr int XROWS = 8 * MT;  // rows of x a block computes
  extern __shared__ __align__(16) unsigned char x_slice[];
  __shared__ float cluster_part[CLUSTER > 1 ? ROWS_PER_BLOCK * XROWS : 1];

  launch_dependents();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, c = lane % 4;
  const int pieces = K / PIECE;
  const int quads = (pieces + QUAD - 1) / QUAD;
  const int per_split = (quads + CLUSTER - 1) / CLUSTER * QUAD;  // pieces a split covers, a multiple of 4
  const int piece_begin = min(pieces, (int)blockIdx.y * per_split);
  const int piece_count = min(pieces, piece_begin + per_split) - piece_begin;
  const int row_bytes = x_row_bytes(per_split);
  const int m0 = blockIdx.z * XROWS;
  const int x_rows = min(XROWS, M - m0);  // rows of x staged; MMA columns past them read zeros
  const int groups_per_row = K / GROUP;

  // Stage x[m0 .. m0 + x_rows, the split's pieces] as the pairs (0,4), (1,5), (2,6), (3,7) of each
  // 8 elements; pieces past K (the split's padding to whole quads) hold zeros.
  wait_for_prior_grid();
  const int words = per_split * 4;
  for (int i = tid; i < x_rows * words; i += BLOCK) {
    const int m = i / words, word = i % words;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (word < piece_count * 4)
      v = __ldg(reinterpret_cast<const uint4*>(x + (size_t)(m0 + m) * K + (size_t)(piece_begin * 4 + word) * 8));
    uint4 pairs;
    pairs.x = __byte_perm(v.x, v.z, 0x5410);
    pairs.y = __byte_perm(v.x, v.z, 0x7632);
    pairs.z = __byte_perm(v.y, v.w, 0x5410);
    pairs.w = __byte_perm(v.y, v.w, 0x7632);
    *reinterpret_cast<uint4*>(x_slice + m * row_bytes + (word / 4) * PIECE_BYTES + (word % 4) * 16) = pairs;
  }
  __syncthreads();

  const int tiles = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // gridDim.x <= tiles: blocks stride
    const int warp_row = tile * ROWS_PER_BLOCK + warp * TILES * 16;
    const uint4* wrow[TILES][2];
    const T* srow[TILES][2];
    const unsigned char* zrow[TILES][2];
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = min(warp_row + 16 * t + g + 8 * h, N - 1);  // rows past N are read, never written
        wrow[t][h] = reinterpret_cast<const uint4*>(qweight + (size_t)row * (K / 2)) + piece_begin;
        srow[t][h] = scales + (size_t)row * groups_per_row;
        zrow[t][h] = SYM ? nullptr : zeros + (size_t)row * groups_per_row;
      }
    float d[TILES][MT][4];
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int n = 0; n < MT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[t][n][e] = 0.0f;

    // Two stages of registers: the loads of the next UNROLL steps are in flight while these are
    // multiplied (a single stage leaves a thread with no load in flight while it computes).
    constexpr int STEP = QUAD * UNROLL;
    Stage<T, UNROLL, TILES> first, second;
    fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(first, 0, c, piece_begin, piece_count, wrow, srow, zrow);
    for (int s0 = 0; s0 < per_split; s0 += 2 * STEP) {
      fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(second, s0 + STEP, c, piece_begin, piece_count, wrow, srow, zrow);
      multiply<T, MT, UNROLL, TILES>(first, s0, per_split, c, g, x_rows, row_bytes, x_slice, d);
      fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(first, s0 + 2 * STEP, c, piece_begin, piece_count, wrow, srow, zrow);
      multiply<T, MT, UNROLL, TILES>(second, s0 + STEP, per_split, c, g, x_rows, row_bytes, x_slice, d);
    }

    // d[t][n] holds out rows (m) 8n + 2c, 8n + 2c + 1 at columns (W rows) 16t + g and 16t + g + 8.
    if (CLUSTER == 1) {
#pragma unroll
      for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int n = 0; n < MT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int m = m0 + 8 * n + 2 * c + (e & 1), row = warp_row + 16 * t + g + 8 * (e >> 1);
            const size_t at = (size_t)m * N + row;
            if (m < M && row < N) out[at] = finish<T>(d[t][n][e], alpha, beta, out + at);
          }
      continue;
    }
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int n = 0; n < MT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int m = 8 * n + 2 * c + (e & 1), row = warp * TILES * 16 + 16 * t + g + 8 * (e >> 1);
          cluster_part[m * ROWS_PER_BLOCK + row] = d[t][n][e];
        }
    const int first_row = tile * ROWS_PER_BLOCK;
    at_common::cluster_sum<CLUSTER>(cluster_part, XROWS * ROWS_PER_BLOCK, [&](int o, float sum) {
      const int m = m0 + o / ROWS_PER_BLOCK, row = first_row + o % ROWS_PER_BLOCK;
      const size_t at = (size_t)m * N + row;
      if (m < M && row < N) out[at] = finish<T>(sum, alpha, beta, out + at);
    });
  }
}

}  // namespace at_qgemm

// One instance, as autotune/ops/qgemm generates it:
//   extern "C" __global__ void __launch_bounds__(256) qgemm_<key>(const __half* x, const unsigned char* qweight,
//       const __half* scales, const unsigned char* zeros, __half* out, int M, int N, int K, float alpha,
//       float beta, float* workspace, unsigned int* counters) {
//     at_qgemm::qgemm_body<__half, 1, 256, 1, 2, 128, 1, 1, 1>(x, qweight, scales, zeros, out, M, N, K, alpha,
//                                                              beta);
//   }
