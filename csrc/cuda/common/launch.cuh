// One kernel launch on a stream, in thread-block clusters or not, with programmatic dependent launch where it
// is on (launch_status.h's pdl_enabled): the kernel must then call msa::cuda::grid_dependency_wait() before
// touching global memory. For .cu files (cudaLaunchKernelEx's template form). No torch includes.
#pragma once

#include <utility>

#include <cuda_runtime.h>

#include "cuda/common/launch_status.h"

namespace msa::cuda {

// `cluster` CTAs along x per cluster (0: no cluster attribute).
template <typename... Params, typename... Args>
LaunchStatus launch_kernel_clusters(void (*kernel)(Params...), dim3 grid, int threads, int dynamic_smem, int cluster,
                                    cudaStream_t stream, Args&&... args) {
  DeviceInfo device;
  const LaunchStatus known = current_device_info(device);
  if (!known.is_ok()) return known;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = dynamic_smem;
  config.stream = stream;
  cudaLaunchAttribute attributes[2];
  config.attrs = attributes;
  if (cluster > 0) attributes[config.numAttrs++] = cluster_attribute(cluster);
  if (pdl_enabled(device.cc_major)) attributes[config.numAttrs++] = pdl_attribute();
  cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  return LaunchStatus::ok();
}

template <typename... Params, typename... Args>
LaunchStatus launch_kernel(void (*kernel)(Params...), dim3 grid, int threads, int dynamic_smem, cudaStream_t stream,
                           Args&&... args) {
  return launch_kernel_clusters(kernel, grid, threads, dynamic_smem, 0, stream, std::forward<Args>(args)...);
}

}  // namespace msa::cuda
