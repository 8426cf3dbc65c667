// TMA multicast and cluster-wide mbarriers on sm_90: what a block needs to share its copies with the
// other blocks of its thread-block cluster (gemm_ws.cu). One copy, issued by one block, lands at the
// same shared-memory offset in every block its mask names and counts its bytes on the mbarrier at the
// same offset in each; the blocks give a stage back to every block that writes into it by arriving on
// that block's "empty" mbarrier (a remote arrive through distributed shared memory).
#pragma once
#include <stdint.h>

#include "cluster.cuh"

namespace at_multicast {

// As at_tma::tma_load_2d, into the shared memory of every block of the cluster whose bit is set in
// `mask` (bit r: the block of rank r), each completing on its own mbarrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, uint32_t bar, int c0, int c1,
                                            uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
      : "memory");
}

// One arrival on the mbarrier at `bar`'s offset in the block of rank `rank` (ours included), with the
// default semantics (release at the block's scope), as CUTLASS's cluster barriers arrive; the waits on
// such a barrier stay block-scoped too (at_tma::mbarrier_wait). Arriving with .release.cluster and
// waiting with .acquire.cluster made the ws family 1.3-3.4x slower (docs/findings.md).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar, uint32_t rank) {
  const uint32_t remote = at_cluster::map_to_rank(bar, rank);
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

}  // namespace at_multicast
