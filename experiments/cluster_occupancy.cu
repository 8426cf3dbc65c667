// How many thread-block clusters of 1, 2 and 4 blocks a GPU holds at once, for blocks shaped as the ws
// GEMM family's (384 threads, one block an SM by its shared memory): a persistent kernel launched with
// more clusters than this runs the rest as a second, mostly empty wave. The SMs of a cluster share a
// GPC, so a GPU whose GPCs hold odd numbers of usable SMs holds fewer than SMs / size clusters.
//   nvcc -O2 -arch=sm_90 -o /tmp/cluster_occupancy experiments/cluster_occupancy.cu && /tmp/cluster_occupancy
#include <cstdio>

__global__ void one_block_an_sm(float* out) {
  extern __shared__ float scratch[];
  scratch[threadIdx.x] = threadIdx.x;
  if (out) out[blockIdx.x] = scratch[threadIdx.x];
}

int main() {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int shared = 200 * 1024;  // more than half an SM's: one block an SM
  cudaFuncSetAttribute(one_block_an_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
  for (int size : {1, 2, 4}) {
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = size, attribute.val.clusterDim.y = 1, attribute.val.clusterDim.z = 1;
    config.gridDim = dim3(size * 64), config.blockDim = dim3(384), config.dynamicSmemBytes = shared;
    config.attrs = &attribute, config.numAttrs = 1;
    int clusters = 0;
    const cudaError_t status = cudaOccupancyMaxActiveClusters(&clusters, one_block_an_sm, &config);
    if (status != cudaSuccess) {
      std::printf("cluster %d: %s\n", size, cudaGetErrorString(status));
      return 1;
    }
    std::printf("%d SMs: %d clusters of %d blocks at once (%d blocks)\n", sms, clusters, size, clusters * size);
  }
  return 0;
}
