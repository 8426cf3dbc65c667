// The tensor memory accelerator (TMA) and mbarriers on sm_90: the few PTX instructions the families
// that fill shared-memory stages with bulk tensor copies share (gemm_wgmma.cu, gemm_skinny_tc.cu).
// A copy's source is named by a CUtensorMap made on the host (autotune/tma.py) and read by the kernel
// from global memory; it completes on an mbarrier in shared memory, counting the bytes it delivers.
#pragma once
#include <stdint.h>

namespace at_tma {

constexpr int MAP_BYTES = 128;  // sizeof(CUtensorMap): a kernel's maps lie this far apart (A's, then B's)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// mbarrier and bulk tensor copy (TMA) helpers. An mbarrier here counts one arrival (thread 0's
// expect-tx) plus the bytes the copies of its stage deliver; its phase flips when both are in.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialized mbarriers visible to the copy engine (the async proxy) and the other threads
// (with the barrier that follows).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Spins until the mbarrier's phase with this parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Copies the box at (c0, c1) (innermost coordinate first, in elements) of the tensor `map` describes
// into shared memory at dst, swizzled as the map says, and adds its bytes to mbarrier bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// Thread 0 of a block, before its first copy: prefetches the two tensor maps at `maps` and makes
// STAGES mbarriers of one arrival each at `bars` (8 bytes apart); a __syncthreads after it
// publishes them to the block.
template <int STAGES> __device__ __forceinline__ void start_pipeline(const void* maps, uint32_t bars) {
  prefetch_tensor_map(maps);
  prefetch_tensor_map(static_cast<const unsigned char*>(maps) + MAP_BYTES);
#pragma unroll
  for (int s = 0; s < STAGES; ++s) mbarrier_init(bars + 8 * s, 1);
  fence_mbarrier_init();
}

}  // namespace at_tma
