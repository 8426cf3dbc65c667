// Tensor-core GEMM for half and bfloat16 on Hopper (sm_90a: wgmma.mma_async, built for sm_90a only):
// C = alpha * A B + beta * C, A row-major M x K, B row-major K x N (or with B_NK N x K: an nn.Linear's
// weight, C = A W^T), C row-major M x N, rows lda, ldb and ldc elements apart (runtime arguments);
// float32 accumulation through wgmma.m64nNk16 with both operands read from shared memory by descriptors.
// beta == 0: C is not read (it may hold NaN).
//
// Template parameters:
//   T         __half or __nv_bfloat16
//   B_NK      B is stored N x K (K contiguous), read as K-major: its stage is laid out like A's and
//             wgmma reads it untransposed (imm-trans-b = 0); false: K x N, MN-major (see below)
//   BM, BN    block tile (rows of C, columns of C); BN is also the N of every wgmma (64, 128, 256)
//   BK        k-depth of a stage: 64 (A's rows are 128 bytes: 128-byte swizzle) or 32 (64-byte rows:
//             64-byte swizzle; half the shared memory a stage, so twice the stages fit)
//   WGS       warpgroups (1 or 2), threads = 128 * WGS. Warpgroup g owns rows [g * BM / WGS, (g + 1) *
//             BM / WGS) of the tile as BM / WGS / 64 wgmma m64 slices; every thread holds
//             BM / WGS / 64 * BN / 2 float accumulators (at most 128, or registers spill)
//   STAGES    shared-memory stages (3..9): STAGES - 2 k-tiles are loading while one is multiplied and
//             the wgmma of the previous one may still be reading its own stage
//   SWIZZLE   block rasterization: SWIZZLE consecutive tile rows are walked column by column, so the
//             blocks resident at one time share a few A and B panels in L2 (1: plain row-major order)
//   LAYOUT    how a K x N B's stage is laid out and described to wgmma (see LayoutB); the GPU check
//             (scripts/check_wgmma.py) runs every variant, the tuner only the one expected correct.
//             B_NK needs 0 (its stage has the one layout, A's)
//   TMA       how stages are filled: 0 by every thread's cp.async (16 bytes each), 1 by the tensor
//             memory accelerator (cp.async.bulk.tensor, issued by one thread, completing on an
//             mbarrier per stage); TMA needs LAYOUT 0, whose bytes are what its 128-byte swizzle writes
//
// Requirements the Python side checks (autotune/ops/gemm/wgmma.py, and the launcher at run time): the
// rows of A and B are 16-byte pieces, K % 8 == 0 and, for a K x N B, N % 8 == 0 (an N x K B's rows are
// K long: any N); A and B 16-byte aligned with lda and ldb multiples of 8, so every 16-byte piece of a
// row of A or B is wholly inside or wholly outside the matrix; pieces outside (M, N and K tails) are
// zero filled by cp.async (src-size 0), or by the TMA, which fills every element outside the tensor
// with zeros. C needs nothing (pairs of outputs become one 32-bit access where C and ldc allow it).
//
// TMA instances read two tensor maps (CUtensorMap, 128 bytes each, made on the host by
// cuTensorMapEncodeTiled: autotune/ops/tma.py) from global memory at `workspace`: A's (a box of BK x BM,
// swizzled like A's stage) at byte 0 and B's at byte 128: a box of 64 x BK (one 64-column atom) of a
// K x N B, or of BK x BN (the whole stage, swizzled like A's) of an N x K B. The maps hold A's and B's
// addresses and row pitches (lda, ldb), so the caller writes them for the arrays it passes; the kernel
// itself reads lda and ldb only when copying with cp.async.
//
// Dynamic shared memory (the Python module mirrors it):
//   SHARED_BYTES = STAGES * (BM * BK + BK * BN) * sizeof(T) + 1024 (+ 8 * STAGES with TMA: mbarriers)
// The 1024 bytes let the kernel round its base up to 1024: a 128-byte swizzle repeats every 8 rows of
// 128 bytes and the hardware swizzles on address bits, so every 8-row atom must start 1024-aligned.
//
// A's stage (K-major, the canonical swizzled K-major layouts of wgmma): row r of the tile (BK
// elements, 2 * BK bytes) at byte r * 2 * BK. BK 64: 128-byte swizzle, 16-byte chunk c stored at
// c ^ (r % 8); BK 32: 64-byte swizzle, chunk c at c ^ ((r / 2) % 4) (the XOR takes address bits 7-8,
// and two 64-byte rows share a 128-byte line). A descriptor names 8-row groups 16 * BK bytes apart
// (stride byte offset); the leading byte offset is unused because one wgmma reads 16 k (32 bytes),
// inside one swizzled row. The k16 step kk starts 32 * kk bytes in.
//
// An N x K B's stage (B_NK) is K-major like A's, with BN rows in place of BM: the same swizzle, chunk
// placement, descriptor and k16 steps; its copies run along K (16-byte chunks of B's rows) as A's do.
//
// A K x N B's stage is MN-major (N contiguous, as B is in memory): wgmma reads it transposed
// (imm-trans-b = 1, allowed for 16-bit types). LAYOUT 0 and 1 store it as the canonical
// 128-byte-swizzled MN-major layout: BN / 64 column blocks ("atoms") of 64 columns, each BK k-rows of
// 128 bytes, chunk c of k-row r at chunk c ^ (r % 8). LAYOUT 2 and 3 store it unswizzled
// ("interleaved"): core matrices of 8 k x 8 n (128 contiguous bytes, k-row r % 8 at 16 * (r % 8)),
// n-groups 128 bytes apart, k-groups BN * 16.
// Which descriptor field holds which distance is where sources disagree in wording; see LayoutB.
//
// cp.async pipeline (TMA 0; one block per output tile, every thread both loads and multiplies):
//   iteration kt: wait for this thread's copies of tile kt, fence.proxy.async (cp.async writes are
//   generic-proxy writes; wgmma reads shared memory through the async proxy), __syncthreads (everyone's
//   copies; and every warpgroup has passed wgmma.wait_group 1 of iteration kt - 1, so the wgmmas of tile
//   kt - 2 are done), issue the copies of tile kt + STAGES - 2 into the stage tile kt - 2 used, then
//   wgmma.fence, the wgmmas of tile kt, commit, and wgmma.wait_group 1 (tile kt - 1 done), so one
//   group of wgmmas is always queued behind the running one across the barrier.
//
// TMA pipeline: thread 0 fills all STAGES stages up front (an expect-tx arrive and the copies of a
// tile on the stage's "full" mbarrier). Iteration kt: wait for full[kt % STAGES] (phase kt / STAGES),
// wgmma.fence, the wgmmas of tile kt, commit, wgmma.wait_group 1 (tile kt - 1 done in this warpgroup),
// __syncthreads (in every warpgroup), then thread 0 refills tile kt - 1's stage with tile
// kt - 1 + STAGES. So STAGES - 1 tiles are loading while one is multiplied, and no thread issues
// per-byte copy instructions.
//
// Grid: x = tiles_m * tiles_n (one block per output tile, remapped by SWIZZLE). No split-K, so the
// workspace and counters arguments are unused.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "tma.cuh"

namespace at_wgmma {

using at_tma::mbarrier_arrive_expect_tx;
using at_tma::mbarrier_wait;
using at_tma::smem_addr;
using at_tma::tma_load_2d;

constexpr int ROW_BYTES = 128;    // bytes of one k-row of a B atom (and of A's rows when BK = 64)
constexpr int ATOM_BYTES = 1024;  // 8 rows of 128 bytes: the period of the 128-byte swizzle

template <typename T> struct Convert;
template <> struct Convert<__half> {
  typedef __half2 pair;
  static __device__ __forceinline__ float2 to_float2(pair v) { return __half22float2(v); }
  static __device__ __forceinline__ pair from_float2(float a, float b) { return __floats2half2_rn(a, b); }
  static __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }
};
template <> struct Convert<__nv_bfloat16> {
  typedef __nv_bfloat162 pair;
  static __device__ __forceinline__ float2 to_float2(pair v) { return __bfloat1622float2(v); }
  static __device__ __forceinline__ pair from_float2(float a, float b) { return __floats2bfloat162_rn(a, b); }
  static __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
};

// ---------------------------------------------------------------------------------------------------
// wgmma.mma_async.m64nNk16.f32 with A and B from shared memory (descriptors), A K-major, B MN-major
// (imm-trans-b 1: TRANS_B, B stored K x N) or K-major like A (imm-trans-b 0: B stored N x K, B_NK):
// d += A B when scale_d != 0, d = A B when it is 0. The accumulators are "+f" operands of every wgmma,
// so the compiler keeps them in the same registers from the first wgmma to the last.
#define AT_WGMMA_D8(i)                                                                              \
  "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), \
      "+f"(d[(i) + 6]), "+f"(d[(i) + 7])

// m64n64k16: 32 float accumulators a thread.
#define AT_WGMMA_N64(PTX_AB, IMM_TRANS_B)                                                            \
  asm volatile(                                                                         \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                    \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32" PTX_AB " {"                        \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "        \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
        "}, %32, %33, p, 1, 1, 0, " IMM_TRANS_B ";\n}\n"                                              \
        : AT_WGMMA_D8(0), AT_WGMMA_D8(8), AT_WGMMA_D8(16), AT_WGMMA_D8(24)              \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// m64n128k16: 64 float accumulators a thread.
#define AT_WGMMA_N128(PTX_AB, IMM_TRANS_B)                                                             \
  asm volatile(                                                                           \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                      \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32" PTX_AB " {"                         \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"  \
        "}, %64, %65, p, 1, 1, 0, " IMM_TRANS_B ";\n}\n"                                                \
        : AT_WGMMA_D8(0), AT_WGMMA_D8(8), AT_WGMMA_D8(16), AT_WGMMA_D8(24),               \
          AT_WGMMA_D8(32), AT_WGMMA_D8(40), AT_WGMMA_D8(48), AT_WGMMA_D8(56)              \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// m64n256k16: 128 float accumulators a thread.
#define AT_WGMMA_N256(PTX_AB, IMM_TRANS_B)                                                                           \
  asm volatile(                                                                                         \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                   \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32" PTX_AB " {"                                       \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                        \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "              \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "              \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "              \
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "              \
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "              \
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "  \
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
        "}, %128, %129, p, 1, 1, 0, " IMM_TRANS_B ";\n}\n"                                                            \
        : AT_WGMMA_D8(0), AT_WGMMA_D8(8), AT_WGMMA_D8(16), AT_WGMMA_D8(24),                             \
          AT_WGMMA_D8(32), AT_WGMMA_D8(40), AT_WGMMA_D8(48), AT_WGMMA_D8(56),                           \
          AT_WGMMA_D8(64), AT_WGMMA_D8(72), AT_WGMMA_D8(80), AT_WGMMA_D8(88),                           \
          AT_WGMMA_D8(96), AT_WGMMA_D8(104), AT_WGMMA_D8(112), AT_WGMMA_D8(120)                         \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))

template <typename T, int N, bool TRANS_B> struct Wgmma;
#define AT_WGMMA_RUN(CT, PTX_AB, N, MACRO)                                                    \
  template <bool TRANS_B> struct Wgmma<CT, N, TRANS_B> {                                    \
    static __device__ __forceinline__ void run(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, \
                                               int scale_d) {                               \
      if constexpr (TRANS_B)                                                                \
        MACRO(PTX_AB, "1");                                                                 \
      else                                                                                  \
        MACRO(PTX_AB, "0");                                                                 \
    }                                                                                       \
  };
AT_WGMMA_RUN(__half, ".f16.f16", 64, AT_WGMMA_N64)
AT_WGMMA_RUN(__nv_bfloat16, ".bf16.bf16", 64, AT_WGMMA_N64)
AT_WGMMA_RUN(__half, ".f16.f16", 128, AT_WGMMA_N128)
AT_WGMMA_RUN(__nv_bfloat16, ".bf16.bf16", 128, AT_WGMMA_N128)
AT_WGMMA_RUN(__half, ".f16.f16", 256, AT_WGMMA_N256)
AT_WGMMA_RUN(__nv_bfloat16, ".bf16.bf16", 256, AT_WGMMA_N256)
#undef AT_WGMMA_RUN
#undef AT_WGMMA_N64
#undef AT_WGMMA_N128
#undef AT_WGMMA_N256
#undef AT_WGMMA_D8

// Orders the warpgroup's earlier register and shared-memory accesses before the wgmmas that follow.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most PENDING committed wgmma groups of this warpgroup are still running.
template <int PENDING> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
}

// Keeps the compiler from moving reads or writes of these registers across a wgmma wait or fence: the
// wgmma asm statements name the accumulators, the wait does not.
template <int COUNT> __device__ __forceinline__ void fence_registers(float (&d)[COUNT]) {
#pragma unroll
  for (int i = 0; i < COUNT; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Makes this thread's completed generic-proxy writes to shared memory (cp.async's) visible to later
// async-proxy reads (wgmma's operands); a barrier after it extends that to the other threads' wgmmas.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }


// 16-byte asynchronous copy; valid == false reads nothing and fills the destination with zeros.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int PENDING> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

// Shared-memory matrix descriptor of wgmma (PTX ISA, "matrix descriptor"): bits 0-13 start address,
// 16-29 leading byte offset, 32-45 stride byte offset (all three in 16-byte units), 62-63 swizzle
// (0 none, 1 128-byte, 2 64-byte). Base offset (bits 49-51) stays 0: every swizzle atom starts
// aligned to its own size (stages are multiples of 4 KiB from a 1024-aligned base).
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t leading, uint32_t stride, uint32_t swizzle) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((leading >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((stride >> 4) & 0x3FFF) << 32) | ((uint64_t)swizzle << 62);
}

// A's stage: BM rows of BK elements, K-major, swizzled over 2 * BK bytes (see the top of the file).
template <int BK> struct LayoutA {
  static_assert(BK == 32 || BK == 64, "rows of 64 or 128 bytes");
  static constexpr int ROW = BK * 2;  // bytes of a row
  // 8-row groups apart (stride byte offset). The leading byte offset is not used by swizzled K-major
  // layouts whose k16 step fits in one swizzled row: 16 bytes, as CUTLASS sets it.
  static constexpr uint32_t STRIDE = 8 * ROW, LEADING = 16;
  static constexpr uint32_t SWIZZLE_MODE = BK == 64 ? 1 : 2;  // 128-byte, 64-byte
  // Byte offset of 16-byte chunk c of row r.
  static __device__ __forceinline__ int chunk_offset(int r, int c) {
    return r * ROW + ((BK == 64 ? c ^ (r & 7) : c ^ ((r >> 1) & 3)) << 4);
  }
};

// A K x N B's stage: BK k-rows of BN elements, MN-major (N contiguous). An N x K B's is LayoutA's.
//  LAYOUT 0: 128-byte swizzle; leading byte offset = distance of 64-column atoms (BK * 128 bytes),
//            stride byte offset = distance of 8-k-row groups (1024). This is the MN-major canonical
//            layout of the PTX ISA's and CUTLASS's tables (cute make_gmma_desc<Major::MN>, SW128:
//            ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO))): expected correct.
//  LAYOUT 1: the same bytes, the two offsets swapped (in case the MN-major meaning is the other way).
//  LAYOUT 2: no swizzle ("interleave"): core matrices of 8 k-rows x 16 bytes; stride byte offset =
//            distance of 8-column groups (128), leading byte offset = distance of 8-k-row groups
//            (BN * 16): CUTLASS's INTERLEAVE MN-major ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO)).
//  LAYOUT 3: LAYOUT 2's bytes, the two offsets swapped.
// Unswizzled stages take bank conflicts on the cp.async writes (a warp's chunks of one k-row are 128
// bytes apart); they are a fallback that tells the descriptor fields apart, not a fast path.
template <int BN, int BK, int LAYOUT> struct LayoutB {
  static_assert(LAYOUT >= 0 && LAYOUT <= 3, "LAYOUT 0..3");
  static constexpr bool SWIZZLED = LAYOUT < 2;
  static constexpr bool SWAPPED = LAYOUT % 2 == 1;
  static constexpr uint32_t ATOM_STRIDE = BK * ROW_BYTES;  // swizzled: one 64-column atom
  static constexpr uint32_t KGROUP = SWIZZLED ? ATOM_BYTES : BN * 16;  // distance of 8-k-row groups
  static constexpr uint32_t NSPAN = SWIZZLED ? ATOM_STRIDE : 128;  // distance of column atoms / groups
  static constexpr uint32_t LEADING_RAW = SWIZZLED ? NSPAN : KGROUP;
  static constexpr uint32_t STRIDE_RAW = SWIZZLED ? KGROUP : NSPAN;
  static constexpr uint32_t LEADING = SWAPPED ? STRIDE_RAW : LEADING_RAW;
  static constexpr uint32_t STRIDE = SWAPPED ? LEADING_RAW : STRIDE_RAW;
  static constexpr uint32_t SWIZZLE_MODE = SWIZZLED ? 1 : 0;
  static constexpr uint32_t KSTEP_BYTES = 2 * KGROUP;  // one k16 step: two 8-k-row groups

  // Byte offset of the 16-byte chunk cn (columns 8 cn .. 8 cn + 7) of k-row k.
  static __device__ __forceinline__ int chunk_offset(int k, int cn) {
    if (SWIZZLED) return (cn >> 3) * (int)ATOM_STRIDE + k * ROW_BYTES + (((cn & 7) ^ (k & 7)) << 4);
    return (k >> 3) * (int)KGROUP + cn * 128 + ((k & 7) << 4);
  }
};

// One tile of C for this block: (tile_m, tile_n) after the rasterization swizzle.
template <int SWIZZLE>
__device__ __forceinline__ void block_tile(int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
  const int pid = blockIdx.x;
  if (SWIZZLE == 1) {
    tile_m = pid / tiles_n;
    tile_n = pid % tiles_n;
    return;
  }
  const int width = SWIZZLE * tiles_n;  // blocks in one group of SWIZZLE tile rows
  const int first_m = pid / width * SWIZZLE;
  const int rows = min(tiles_m - first_m, SWIZZLE);  // the last group may be shorter
  const int in_group = pid % width;
  tile_m = first_m + in_group % rows;
  tile_n = in_group / rows;
}

// Writes (row, col) and (row, col + 1) of C (rows ldc elements apart). col is even; with EVEN_N (N % 8
// == 0, as a K x N B needs) both are inside when the first is, otherwise (an N x K B, any N) col + 1 may
// be N and is then not written. `pairs` (C 4-byte aligned, ldc even) makes the two one 32-bit access.
template <typename T, bool EVEN_N>
__device__ __forceinline__ void store_pair(T* __restrict__ C, int M, int N, int ldc, int row, int col, float v0,
                                           float v1, float alpha, float beta, bool pairs) {
  typedef Convert<T> P;
  if (row >= M || col >= N) return;
  T* p = C + (size_t)row * ldc + col;
  float o0 = alpha * v0, o1 = alpha * v1;
  const bool second = EVEN_N || col + 1 < N;
  if (pairs && second) {
    typename P::pair* q = reinterpret_cast<typename P::pair*>(p);
    if (beta != 0.0f) {  // beta == 0: C is not read (it may hold NaN)
      const float2 old = P::to_float2(*q);
      o0 = fmaf(beta, old.x, o0);
      o1 = fmaf(beta, old.y, o1);
    }
    *q = P::from_float2(o0, o1);
    return;
  }
  if (beta != 0.0f) {
    o0 = fmaf(beta, P::to_float(p[0]), o0);
    if (second) o1 = fmaf(beta, P::to_float(p[1]), o1);
  }
  p[0] = P::from_float(o0);
  if (second) p[1] = P::from_float(o1);
}

template <typename T, bool B_NK, int BM, int BN, int BK, int WGS, int STAGES, int SWIZZLE, int LAYOUT, int TMA>
__device__ __forceinline__ void gemm_wgmma_body(const T* __restrict__ A, const T* __restrict__ B,
                                                T* __restrict__ C, int M, int N, int K, int lda, int ldb, int ldc,
                                                float alpha, float beta, float* __restrict__ workspace,
                                                unsigned int* __restrict__ counters) {
  static_assert(sizeof(T) == 2, "half or bfloat16");
  static_assert(WGS == 1 || WGS == 2, "one or two warpgroups");
  static_assert(BM % (64 * WGS) == 0, "each warpgroup owns whole m64 slices");
  static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma N of 64, 128 or 256");
  static_assert(STAGES >= 3, "one stage loading, one multiplied, one held by the wgmma in flight");
  static_assert(TMA == 0 || TMA == 1, "cp.async (0) or the tensor memory accelerator (1)");
  static_assert(TMA == 0 || LAYOUT == 0, "the TMA writes B's stage in LAYOUT 0 (128-byte swizzled atoms)");
  static_assert(!B_NK || LAYOUT == 0, "an N x K B has one stage layout, A's (LAYOUT names K x N variants)");
  constexpr int THREADS = 128 * WGS;
  constexpr int WG_M = BM / WGS;  // rows of the tile a warpgroup owns
  constexpr int MT = WG_M / 64;   // its m64 slices
  constexpr int NACC = BN / 2;    // accumulators of one m64nBN slice per thread
  static_assert(MT * NACC <= 128, "at most 128 accumulators a thread");
  constexpr int A_STAGE_BYTES = BM * BK * (int)sizeof(T);
  constexpr int B_STAGE_BYTES = BK * BN * (int)sizeof(T);
  typedef LayoutA<BK> LA;
  typedef LayoutB<BN, BK, LAYOUT> LB;  // B's stage when B is K x N; when N x K (B_NK) it is laid out as LA
  constexpr uint32_t B_KSTEP_BYTES = B_NK ? 32 : LB::KSTEP_BYTES;  // one k16 step into B's stage
  (void)counters;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t sA = (smem_addr(smem_raw) + (ATOM_BYTES - 1)) & ~(uint32_t)(ATOM_BYTES - 1);
  const uint32_t sB = sA + STAGES * A_STAGE_BYTES;  // stage sizes are multiples of 4 KiB: still aligned

  const int tid = threadIdx.x;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  int tile_m, tile_n;
  block_tile<SWIZZLE>(tiles_m, tiles_n, tile_m, tile_n);
  const int m0 = tile_m * BM, n0 = tile_n * BN;
  const int k_tiles = (K + BK - 1) / BK;

  // Descriptors of stage 0, k16 step 0: later stages and steps only add to the start address (the
  // 14-bit field cannot carry: shared addresses stay below 256 KiB).
  const int wg = tid / 128;
  const uint64_t desc_a0 = make_desc(sA + wg * WG_M * LA::ROW, LA::LEADING, LA::STRIDE, LA::SWIZZLE_MODE);
  const uint64_t desc_b0 = B_NK ? make_desc(sB, LA::LEADING, LA::STRIDE, LA::SWIZZLE_MODE)
                                : make_desc(sB, LB::LEADING, LB::STRIDE, LB::SWIZZLE_MODE);

  float acc[MT][NACC];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NACC; ++j) acc[i][j] = 0.0f;

  // The wgmmas of one stage, committed as one group; then wait until the group before it is done.
  auto multiply = [&](int stage) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const uint32_t a_off = stage * A_STAGE_BYTES + i * 64 * LA::ROW + kk * 32;
        const uint32_t b_off = stage * B_STAGE_BYTES + kk * B_KSTEP_BYTES;
        Wgmma<T, BN, !B_NK>::run(acc[i], desc_a0 + (a_off >> 4), desc_b0 + (b_off >> 4), 1);
      }
    wgmma_commit();
    wgmma_wait<1>();
  };

  if constexpr (TMA == 1) {
    const void* map_a = workspace;
    const void* map_b = reinterpret_cast<const unsigned char*>(workspace) + at_tma::MAP_BYTES;
    const uint32_t full = sB + STAGES * B_STAGE_BYTES;  // STAGES mbarriers of 8 bytes
    if (tid == 0) at_tma::start_pipeline<STAGES>(workspace, full);
    __syncthreads();
    // Thread 0 only: tile kt into `stage`, A's box and B's (BN / 64 atoms of a K x N B, one BN x BK
    // box of an N x K B), all on the stage's mbarrier.
    auto load_stage = [&](int stage, int kt) {
      const uint32_t bar = full + 8 * stage;
      mbarrier_arrive_expect_tx(bar, A_STAGE_BYTES + B_STAGE_BYTES);
      tma_load_2d(sA + stage * A_STAGE_BYTES, map_a, bar, kt * BK, m0);
      if constexpr (B_NK) {
        tma_load_2d(sB + stage * B_STAGE_BYTES, map_b, bar, kt * BK, n0);
      } else {
#pragma unroll
        for (int j = 0; j < BN / 64; ++j)
          tma_load_2d(sB + stage * B_STAGE_BYTES + j * LB::ATOM_STRIDE, map_b, bar, n0 + 64 * j, kt * BK);
      }
    };
    if (tid == 0)
      for (int s = 0; s < STAGES && s < k_tiles; ++s) load_stage(s, s);

    int stage = 0, previous = STAGES - 1;
    uint32_t phase = 0;
    for (int kt = 0; kt < k_tiles; ++kt) {
      mbarrier_wait(full + 8 * stage, phase);
      multiply(stage);
      // Tile kt - 1 is done in this warpgroup; after the barrier, in every one: its stage is free.
      if (kt >= 1 && kt - 1 + STAGES < k_tiles) {
        __syncthreads();
        if (tid == 0) load_stage(previous, kt - 1 + STAGES);
      }
      previous = stage;
      stage = stage == STAGES - 1 ? 0 : stage + 1;
      phase ^= stage == 0;
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < MT; ++i) fence_registers(acc[i]);
  } else {
    // Copy plan: thread tid copies 16-byte chunk tid % CPR of rows tid / CPR + i * (THREADS / CPR),
    // where a row has CPR chunks (A: BK / 8; B: BN / 8 of a k-row, or with B_NK BK / 8 of an n-row, as
    // A's). CPR consecutive threads read one contiguous row segment of global memory; THREADS is a
    // multiple of CPR, so a thread's chunk is fixed.
    constexpr int B_ROWS = B_NK ? BN : BK;  // rows of B's tile in memory order
    constexpr int A_CPR = BK / 8, A_RSTEP = THREADS / A_CPR, A_ITERS = BM / A_RSTEP;
    constexpr int B_CPR = B_NK ? BK / 8 : BN / 8, B_RSTEP = THREADS / B_CPR, B_ITERS = B_ROWS / B_RSTEP;
    static_assert(THREADS % B_CPR == 0 && BM % A_RSTEP == 0 && B_ROWS % B_RSTEP == 0, "whole passes");
    const int a_c = tid % A_CPR, a_r0 = tid / A_CPR;
    const int b_c = tid % B_CPR, b_r0 = tid / B_CPR;
    const T* a_src = A + (size_t)(m0 + a_r0) * lda + a_c * 8;  // row a_r0, chunk a_c of k-tile 0
    // K x N: k-row b_r0, chunk b_c of k-tile 0; N x K: n-row n0 + b_r0, chunk b_c of k-tile 0.
    const T* b_src = B_NK ? B + (size_t)(n0 + b_r0) * ldb + b_c * 8 : B + (size_t)b_r0 * ldb + n0 + b_c * 8;
    const int a_rows_left = M - m0 - a_r0;  // valid rows from a_r0 on
    const int b_rows_left = N - n0 - b_r0;  // N x K: valid n-rows from b_r0 on
    const bool b_col_ok = n0 + b_c * 8 < N;  // K x N

    auto load_stage = [&](int stage, int kt) {
      const int k0 = kt * BK;
      const uint32_t a_dst = sA + stage * A_STAGE_BYTES;
      const bool a_k_ok = k0 + a_c * 8 < K;
#pragma unroll
      for (int i = 0; i < A_ITERS; ++i) {
        const int r = a_r0 + i * A_RSTEP;
        const bool valid = a_k_ok && i * A_RSTEP < a_rows_left;
        cp_async16(a_dst + LA::chunk_offset(r, a_c), valid ? a_src + (size_t)i * A_RSTEP * lda + k0 : A, valid);
      }
      const uint32_t b_dst = sB + stage * B_STAGE_BYTES;
      if constexpr (B_NK) {
        const bool b_k_ok = k0 + b_c * 8 < K;
#pragma unroll
        for (int i = 0; i < B_ITERS; ++i) {
          const int r = b_r0 + i * B_RSTEP;
          const bool valid = b_k_ok && i * B_RSTEP < b_rows_left;
          cp_async16(b_dst + LA::chunk_offset(r, b_c), valid ? b_src + (size_t)i * B_RSTEP * ldb + k0 : B, valid);
        }
      } else {
#pragma unroll
        for (int i = 0; i < B_ITERS; ++i) {
          const int k = b_r0 + i * B_RSTEP;
          const bool valid = b_col_ok && k0 + k < K;
          cp_async16(b_dst + LB::chunk_offset(k, b_c), valid ? b_src + (size_t)(k0 + i * B_RSTEP) * ldb : B, valid);
        }
      }
    };

    // Prologue: STAGES - 2 tiles in flight. Every step commits a group, empty or not, so that "at
    // most STAGES - 3 groups pending" always means "tile kt has landed".
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
      if (s < k_tiles) load_stage(s, s);
      cp_async_commit();
    }

    int read_stage = 0, write_stage = STAGES - 2;
    for (int kt = 0; kt < k_tiles; ++kt) {
      cp_async_wait<STAGES - 3>();
      fence_proxy_async();
      __syncthreads();
      // The stage of tile kt - 2 is free (see the pipeline note at the top): refill it first, so the
      // copies are out while the wgmmas of tile kt - 1 still run.
      if (kt + STAGES - 2 < k_tiles) load_stage(write_stage, kt + STAGES - 2);
      cp_async_commit();
      write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
      multiply(read_stage);
      read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < MT; ++i) fence_registers(acc[i]);
    cp_async_wait<0>();  // only empty groups can be left; nothing may land after the block exits
  }

  // Accumulator layout of wgmma m64nN (f32): warp w of the warpgroup holds rows 16 w .. 16 w + 15;
  // acc[4 j + 2 h + e] is (16 w + lane / 4 + 8 h, 8 j + 2 (lane % 4) + e).
  const int lane = tid & 31, warp = (tid >> 5) & 3;
  const int row_base = m0 + wg * WG_M + warp * 16 + (lane >> 2);
  const int col_base = n0 + (lane & 3) * 2;
  // Pairs as one 32-bit access: C 4-byte aligned and, for an N x K B (N, and so ldc, may be odd: the
  // tuner measures rows ldc = N apart), ldc even. A K x N B comes with N % 8 == 0 and ldc % 8 == 0
  // (the launcher runs this family only on 16-byte rows).
  const bool pairs = (reinterpret_cast<uintptr_t>(C) & 3) == 0 && (!B_NK || (ldc & 1) == 0);
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        store_pair<T, !B_NK>(C, M, N, ldc, row_base + i * 64 + h * 8, col_base + j * 8, acc[i][4 * j + 2 * h],
                             acc[i][4 * j + 2 * h + 1], alpha, beta, pairs);
}

}  // namespace at_wgmma

// One instance, as the tuner generates it (see autotune/ops/gemm/wgmma.py; B_NK true and "_nt" at the
// end of the name for an N x K B):
//   extern "C" __global__ void __launch_bounds__(256, 1) gemm_wgmma_<key>(const __half* A, const __half* B,
//       __half* C, int M, int N, int K, int lda, int ldb, int ldc, float alpha, float beta,
//       float* workspace, unsigned int* counters)
//   { at_wgmma::gemm_wgmma_body<__half, false, 128, 256, 64, 2, 4, 8, 0, 1>(A, B, C, M, N, K, lda, ldb, ldc,
//                                                                           alpha, beta, workspace, counters); }
