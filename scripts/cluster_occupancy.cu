// How many clusters of 1/2/4/8 CTAs (256 threads, one CTA per SM by shared memory) fit on the GPU at once.
// nvcc -O2 -arch=sm_90a scripts/cluster_occupancy.cu -o /tmp/occ && /tmp/occ (H200, 2026-12-03: 132 / 66 / 30 / 15)
#include <cstdio>
#include <cuda_runtime.h>
__global__ void __launch_bounds__(256, 1) dummy(int x) {
  extern __shared__ char s[];
  if (x == 12345) s[threadIdx.x] = 0;
}
int main() {
  int smems[] = {60 * 1024, 100 * 1024, 129088, 143424, 200 * 1024};
  for (int smem : smems) {
    cudaFuncSetAttribute(dummy, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    for (int cs = 1; cs <= 8; cs *= 2) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(1024 * cs);
      cfg.blockDim = dim3(256);
      cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = cs; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr; cfg.numAttrs = 1;
      int n = -1;
      cudaError_t e = cudaOccupancyMaxActiveClusters(&n, dummy, &cfg);
      printf("smem %6d cluster %d: max active clusters %d (%d CTAs) %s\n", smem, cs, n, n * cs, cudaGetErrorString(e));
    }
  }
}
