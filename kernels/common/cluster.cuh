// Thread-block clusters on sm_90: the few PTX instructions for pushing partial sums into another
// block's shared memory (distributed shared memory) and for the split cluster barrier that orders
// those pushes. A block may touch another's shared memory only once that block has started, and
// must not exit while others may still write into its own: the callers bracket their pushes with
// the two barrier phases this file offers.
#pragma once
#include <stdint.h>

namespace at_cluster {

__device__ __forceinline__ uint32_t block_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// The address in block `rank`'s shared memory of what `smem` (a shared::cta address) is in ours.
__device__ __forceinline__ uint32_t map_to_rank(uint32_t smem, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem), "r"(rank));
  return r;
}

__device__ __forceinline__ void store(uint32_t addr, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}
__device__ __forceinline__ void store(uint32_t addr, float2 v) {
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(v.x), "f"(v.y) : "memory");
}
__device__ __forceinline__ void store(uint32_t addr, float4 v) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
}

// The cluster barrier in two halves: every thread of every block arrives, then waits until all have.
// arrive() publishes this thread's earlier writes (release) and wait() sees everyone's (acquire);
// arrive_relaxed() orders nothing, for a phase that only says "this block has started".
__device__ __forceinline__ void arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

}  // namespace at_cluster
