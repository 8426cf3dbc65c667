// Weight-only int4 GEMV and skinny GEMM on tensor cores: out[M x N] = alpha * x[M x K] @ dequant(W)^T +
// beta * out, W in nn.Linear's layout (N x K) as docs/lowbit.md's canonical format: unsigned 4-bit codes
// packed two to a byte along K (even k in the low nibble), a scale per group of GROUP codes along K, and
// w = (q - z) * s with z = 8 (SYM) or the low 4 bits of the group's zero byte. x and out are T (__half or
// __nv_bfloat16); products are accumulated in float by mma.sync.m16n8k16.
//
// At M = 1 the weight bytes are the wall: 4 bits a weight let a kernel stream 4x the weights of a
// float16 GEMV in the same time, so the instructions a code must stay well within what an SM issues
// beside its loads (at 4.3 TB/s an H200 SM receives about 33 codes a cycle and issues 128 thread
// instructions). The first tensor-core version spent 15 instructions on 8 codes (3 shifts, 4 LOP3,
// 4 subtracts of the zero, 4 multiplies by the scale) and ran at 44% of DRAM bandwidth with its issue
// slots 46% busy and 16 warps an SM (ncu, 28672 x 4096). Here, for float16, 8 codes cost 1 shift,
// 4 LOP3 (two codes into the halves 1024 + q, or 1024 + 16 q for the high nibble of a byte, exactly),
// 2 subtracts and 2 FMAs (the high nibbles times 1/16, minus 64 + z: exact), and where a group spans a
// whole step of the quad (GROUP a multiple of 128) the MMAs take q - z unscaled and the group's scale
// multiplies their float sums (4 FMAs a step, not 4 multiplies a word). bfloat16's 7-bit mantissa has
// no room for the high nibble in place: its codes are shifted down (3 shifts a word).
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
// a quad) a stage, RING stages of registers in flight. RING 2 asks for one stage while it multiplies the
// other; RING 3 or 4 rotate: before a stage is multiplied, the stage RING - 1 ahead is asked for into
// the slot just emptied, so RING - 1 stages stay in flight while each one multiplies (on the H200 that
// took 28672 x 4096 at M = 1 from 22.8 to 20.0 us, experiments/int4_ring.cu).
// The grid's z covers M in tiles of 8 * MT rows of x; its y splits K into CLUSTER parts, one thread-block
// cluster per row tile, added through distributed shared memory (common.cuh: cluster_sum); its x may hold
// fewer blocks than row tiles (a persistent grid), which then stride over them: x is staged once per block,
// and the last wave is not left mostly empty. The first stage (RING - 1 of a ring) of a block's first tile
// is loaded before x is staged; with RING 2 the first stage of its next tile while the last stage of this
// one is multiplied, so no tile starts with no load in flight (a ring starts each later tile by asking for
// its first stages).
//
// Preconditions (autotune/ops/qgemm: space and bind): K % GROUP == 0, K % 32 == 0, x, W, out 16-byte
// aligned, dynamic shared memory as x_row_bytes below times the rows of x staged.
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

// (a & mask) | magic in one LOP3.
__device__ __forceinline__ unsigned and_or(unsigned a, unsigned mask, unsigned magic) {
  unsigned r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(mask), "r"(magic));
  return r;
}

template <typename T> struct Codes;

// float16: 1024 + q from a low nibble (its ulp is 1), 1024 + 16 q from a high nibble left in place.
template <> struct Codes<__half> {
  typedef __half2 T2;
  // The zero point's two constants as half pairs: 1024 + z, and -(64 + z) (exact: 64..79 in steps of 1/16).
  struct Zero {
    unsigned sub, add;
  };
  static __device__ __forceinline__ Zero zero(int z) {
    return {0x64006400u + (unsigned)z * 0x00010001u, 0xD400D400u + (unsigned)z * 0x00100010u};
  }
  // The 8 codes of a word as pairs (0,4), (1,5), (2,6), (3,7) of q - z.
  static __device__ __forceinline__ void of(unsigned word, Zero z, unsigned (&w)[4]) {
    const unsigned high = word >> 8;
    const __half2 sixteenth = __halves2half2(__ushort_as_half(0x2C00), __ushort_as_half(0x2C00));
    w[0] = as_word(__hsub2(as_pair(and_or(word, 0x000F000Fu, 0x64006400u)), as_pair(z.sub)));
    w[1] = as_word(__hfma2(as_pair(and_or(word, 0x00F000F0u, 0x64006400u)), sixteenth, as_pair(z.add)));
    w[2] = as_word(__hsub2(as_pair(and_or(high, 0x000F000Fu, 0x64006400u)), as_pair(z.sub)));
    w[3] = as_word(__hfma2(as_pair(and_or(high, 0x00F000F0u, 0x64006400u)), sixteenth, as_pair(z.add)));
  }
  static __device__ __forceinline__ T2 as_pair(unsigned v) { return *reinterpret_cast<T2*>(&v); }
  static __device__ __forceinline__ unsigned as_word(T2 v) { return *reinterpret_cast<unsigned*>(&v); }
};

// bfloat16: 128 + q (8 significant bits) from each nibble shifted down to the low four bits.
template <> struct Codes<__nv_bfloat16> {
  typedef __nv_bfloat162 T2;
  struct Zero {
    unsigned sub;
  };
  static __device__ __forceinline__ Zero zero(int z) { return {0x43004300u + (unsigned)z * 0x00010001u}; }
  static __device__ __forceinline__ void of(unsigned word, Zero z, unsigned (&w)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      w[j] = as_word(__hsub2(as_pair(and_or(word >> (4 * j), 0x000F000Fu, 0x43004300u)), as_pair(z.sub)));
  }
  static __device__ __forceinline__ T2 as_pair(unsigned v) { return *reinterpret_cast<T2*>(&v); }
  static __device__ __forceinline__ unsigned as_word(T2 v) { return *reinterpret_cast<unsigned*>(&v); }
};

template <typename T> __device__ __forceinline__ unsigned scale_pair(T s);
template <> __device__ __forceinline__ unsigned scale_pair<__half>(__half s) {
  __half2 p = __half2half2(s);
  return *reinterpret_cast<unsigned*>(&p);
}
template <> __device__ __forceinline__ unsigned scale_pair<__nv_bfloat16>(__nv_bfloat16 s) {
  __nv_bfloat162 p = __bfloat162bfloat162(s);
  return *reinterpret_cast<unsigned*>(&p);
}
template <typename T> __device__ __forceinline__ unsigned times(unsigned w, unsigned s) {
  typedef typename Codes<T>::T2 T2;
  return Codes<T>::as_word(__hmul2(Codes<T>::as_pair(w), Codes<T>::as_pair(s)));
}

// d (+)= A B: ZERO starts from zero rather than d's sums.
template <typename T, bool ZERO>
__device__ __forceinline__ void mma(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const float c0 = ZERO ? 0.0f : d[0], c1 = ZERO ? 0.0f : d[1], c2 = ZERO ? 0.0f : d[2], c3 = ZERO ? 0.0f : d[3];
  if constexpr (std::is_same<T, __half>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c0), "f"(c1), "f"(c2), "f"(c3));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c0), "f"(c1), "f"(c2), "f"(c3));
  }
#else
  __trap();  // tensor-core MMAs of 16-bit inputs need sm_80; the op's space offers none below
#endif
}

// Where a quad's step (4 pieces, 128 codes) lies inside one group, the MMAs take the unscaled q - z and
// the scale multiplies their float sums; smaller groups scale each weight (rounded once to T, as
// F.linear on the dequantized weight has it).
template <int GROUP> constexpr bool scales_after = GROUP % (QUAD * PIECE) == 0;

// One stage of a thread's loads: UNROLL steps of its pieces of rows g and g + 8 of each tile, with their
// groups' scales (floats, or T pairs for small groups) and zero points.
template <typename T, int UNROLL, int TILES, int GROUP> struct Stage {
  uint4 w[UNROLL][TILES][2];
  typename std::conditional<scales_after<GROUP>, float, unsigned>::type scale[UNROLL][TILES][2];
  typename Codes<T>::Zero zero[UNROLL][TILES][2];
};

// The rows a warp reads for one row tile: the codes, scales and zero points of rows g and g + 8 of
// each of its tiles, at the split's first piece.
template <typename T, int TILES> struct Rows {
  const uint4* w[TILES][2];
  const T* scale[TILES][2];
  const unsigned char* zero[TILES][2];
};

template <typename T, int TILES, int SYM>
__device__ __forceinline__ Rows<T, TILES> rows_of(int warp_row, int g, int N, int K, int piece_begin,
                                                  const unsigned char* qweight, const T* scales,
                                                  const unsigned char* zeros, int groups_per_row) {
  Rows<T, TILES> r;
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = min(warp_row + 16 * t + g + 8 * h, N - 1);  // rows past N are read, never written
      r.w[t][h] = reinterpret_cast<const uint4*>(qweight + (size_t)row * (K / 2)) + piece_begin;
      r.scale[t][h] = scales + (size_t)row * groups_per_row;
      r.zero[t][h] = SYM ? nullptr : zeros + (size_t)row * groups_per_row;
    }
  return r;
}

// Issue the loads of the UNROLL steps from piece s0 on. Pieces past the split's end (its padding to
// whole stages) read its last piece again, which meets zero x: no predicate on any load.
template <typename T, int UNROLL, int TILES, int GROUP, int SYM, int POLICY>
__device__ __forceinline__ void fetch(Stage<T, UNROLL, TILES, GROUP>& st, const Rows<T, TILES>& rows, int s0, int c,
                                      int piece_begin, int piece_count) {
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int piece = min(s0 + u * QUAD + c, piece_count - 1);
    const int group = (piece_begin + piece) * PIECE / GROUP;
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        st.w[u][t][h] = load_stream<POLICY>(rows.w[t][h] + piece);
        const T s = rows.scale[t][h][group];
        if constexpr (scales_after<GROUP>)
          st.scale[u][t][h] = to_float(s);
        else
          st.scale[u][t][h] = scale_pair<T>(s);
        st.zero[u][t][h] = Codes<T>::zero(SYM ? 8 : rows.zero[t][h][group] & 0xF);
      }
  }
}

// d += the stage's weights times x: per word of each piece, 8 codes of rows g and g + 8 of each tile
// against the staged x pairs of the MT tiles of 8 rows of x.
template <typename T, int MT, int UNROLL, int TILES, int GROUP>
__device__ __forceinline__ void multiply(const Stage<T, UNROLL, TILES, GROUP>& st, int s0, int per_split, int c,
                                         int g, int x_rows, int row_bytes, const unsigned char* x_slice,
                                         float (&d)[TILES][MT][4]) {
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    if (s0 + u * QUAD >= per_split) break;
    const int piece = s0 + u * QUAD + c;
    float p[TILES][MT][4];  // this step's sums of unscaled weights (scales_after)
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
        Codes<T>::of(reinterpret_cast<const unsigned*>(&st.w[u][t][0])[j], st.zero[u][t][0], lo);
        Codes<T>::of(reinterpret_cast<const unsigned*>(&st.w[u][t][1])[j], st.zero[u][t][1], hi);
        if constexpr (!scales_after<GROUP>) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            lo[i] = times<T>(lo[i], st.scale[u][t][0]);
            hi[i] = times<T>(hi[i], st.scale[u][t][1]);
          }
        }
#pragma unroll
        for (int n = 0; n < MT; ++n) {
          if constexpr (scales_after<GROUP>) {
            if (j == 0)
              mma<T, true>(p[t][n], lo[0], hi[0], lo[1], hi[1], b[n].x, b[n].y);
            else
              mma<T, false>(p[t][n], lo[0], hi[0], lo[1], hi[1], b[n].x, b[n].y);
            mma<T, false>(p[t][n], lo[2], hi[2], lo[3], hi[3], b[n].z, b[n].w);
          } else {
            mma<T, false>(d[t][n], lo[0], hi[0], lo[1], hi[1], b[n].x, b[n].y);
            mma<T, false>(d[t][n], lo[2], hi[2], lo[3], hi[3], b[n].z, b[n].w);
          }
        }
      }
    }
    if constexpr (scales_after<GROUP>) {
#pragma unroll
      for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int n = 0; n < MT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) d[t][n][e] = fmaf(p[t][n][e], st.scale[u][t][e >> 1], d[t][n][e]);
    }
  }
}

template <typename T, int MT, int BLOCK, int TILES, int UNROLL, int GROUP, int SYM, int CLUSTER, int POLICY,
          int RING = 2>
__device__ __forceinline__ void qgemm_body(const T* __restrict__ x, const unsigned char* __restrict__ qweight,
                                           const T* __restrict__ scales, const unsigned char* __restrict__ zeros,
                                           T* __restrict__ out, int M, int N, int K, float alpha, float beta) {
  static_assert(BLOCK % 32 == 0, "whole warps");
  static_assert(GROUP % PIECE == 0, "a 16-byte piece lies inside one group");
  static_assert(RING >= 2, "two stages of registers at least");
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
  // A split may hold no piece (K split more ways than it has quads): its sums stay zero.
  const int piece_count = min(pieces, piece_begin + per_split) - piece_begin;
  const int row_bytes = x_row_bytes(per_split);
  const int m0 = blockIdx.z * XROWS;
  const int x_rows = min(XROWS, M - m0);  // rows of x staged; MMA columns past them read zeros
  const int groups_per_row = K / GROUP;
  const int tiles = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;  // gridDim.x <= tiles: blocks stride
  auto rows_at = [&](int tile) {
    return rows_of<T, TILES, SYM>(tile * ROWS_PER_BLOCK + warp * TILES * 16, g, N, K, piece_begin, qweight, scales,
                                  zeros, groups_per_row);
  };

  // The weights may be written by the grid before (PDL): wait, then start the first stage's loads
  // before staging x, whose loads they overlap.
  wait_for_prior_grid();
  constexpr int STEP = QUAD * UNROLL;
  Stage<T, UNROLL, TILES, GROUP> first, second;   // RING 2
  Stage<T, UNROLL, TILES, GROUP> ring[RING];      // RING > 2, slot i holding stages i, i + RING, ...
  Rows<T, TILES> rows = rows_at(blockIdx.x);
  // A ring's first RING - 1 stages of the tile `rows` points at, those within the split.
  auto start_ring = [&]() {
#pragma unroll
    for (int r = 0; r < RING - 1; ++r)
      if (r * STEP < per_split && piece_count > 0)
        fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(ring[r], rows, r * STEP, c, piece_begin, piece_count);
  };
  if constexpr (RING == 2) {
    if (piece_count > 0) fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(first, rows, 0, c, piece_begin, piece_count);
  } else {
    start_ring();
  }

  // Stage x[m0 .. m0 + x_rows, the split's pieces] as the pairs (0,4), (1,5), (2,6), (3,7) of each
  // 8 elements; pieces past K (the split's padding to whole quads) hold zeros.
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

  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int next = tile + gridDim.x;
    float d[TILES][MT][4];
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int n = 0; n < MT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[t][n][e] = 0.0f;

    if constexpr (RING == 2) {
      // Two stages of registers: the loads of the next UNROLL steps are in flight while these are
      // multiplied; past this tile's last stage, the next tile's first.
      for (int s0 = 0; s0 < per_split && piece_count > 0; s0 += 2 * STEP) {
        if (s0 + STEP < per_split)
          fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(second, rows, s0 + STEP, c, piece_begin, piece_count);
        multiply<T, MT, UNROLL, TILES, GROUP>(first, s0, per_split, c, g, x_rows, row_bytes, x_slice, d);
        if (s0 + 2 * STEP < per_split)
          fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(first, rows, s0 + 2 * STEP, c, piece_begin, piece_count);
        else if (next < tiles)
          fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(first, rows_at(next), 0, c, piece_begin, piece_count);
        multiply<T, MT, UNROLL, TILES, GROUP>(second, s0 + STEP, per_split, c, g, x_rows, row_bytes, x_slice, d);
      }
    } else {
      // The ring: before stage s is multiplied, stage s + RING - 1 goes into the slot of stage s - 1,
      // which was multiplied last. Slots are compile-time indices: the loop is unrolled RING times.
      if (tile != (int)blockIdx.x) start_ring();
      for (int s0 = 0; s0 < per_split && piece_count > 0; s0 += RING * STEP) {
#pragma unroll
        for (int i = 0; i < RING; ++i) {
          const int s = s0 + i * STEP;
          if (s >= per_split) break;
          if (s + (RING - 1) * STEP < per_split)
            fetch<T, UNROLL, TILES, GROUP, SYM, POLICY>(ring[(i + RING - 1) % RING], rows, s + (RING - 1) * STEP, c,
                                                        piece_begin, piece_count);
          multiply<T, MT, UNROLL, TILES, GROUP>(ring[i], s, per_split, c, g, x_rows, row_bytes, x_slice, d);
        }
      }
    }

    // d[t][n] holds out rows (m) 8n + 2c, 8n + 2c + 1 at columns (W rows) 16t + g and 16t + g + 8 of the
    // warp's: written out, or left for the cluster's sum.
    const int first_row = tile * ROWS_PER_BLOCK;
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int n = 0; n < MT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int m = 8 * n + 2 * c + (e & 1), row = warp * TILES * 16 + 16 * t + g + 8 * (e >> 1);
          if constexpr (CLUSTER == 1) {
            const size_t at = (size_t)(m0 + m) * N + first_row + row;
            if (m0 + m < M && first_row + row < N) out[at] = finish<T>(d[t][n][e], alpha, beta, out + at);
          } else {
            cluster_part[m * ROWS_PER_BLOCK + row] = d[t][n][e];
          }
        }
    if constexpr (CLUSTER > 1) {
      at_common::cluster_sum<CLUSTER>(cluster_part, XROWS * ROWS_PER_BLOCK, [&](int o, float sum) {
        const int m = m0 + o / ROWS_PER_BLOCK, row = first_row + o % ROWS_PER_BLOCK;
        const size_t at = (size_t)m * N + row;
        if (m < M && row < N) out[at] = finish<T>(sum, alpha, beta, out + at);
      });
    }
    rows = rows_at(next);  // past the last tile: pointers never read
  }
}

}  // namespace at_qgemm

// One instance, as autotune/ops/qgemm generates it:
//   extern "C" __global__ void __launch_bounds__(256, 2) qgemm_<key>(const __half* x,
//       const unsigned char* qweight, const __half* scales, const unsigned char* zeros, __half* out, int M,
//       int N, int K, float alpha, float beta, float* workspace, unsigned int* counters) {
//     at_qgemm::qgemm_body<__half, 1, 256, 1, 2, 128, 1, 1, 1>(x, qweight, scales, zeros, out, M, N, K, alpha,
//                                                              beta);
//   }
