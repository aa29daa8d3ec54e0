// What a torch-free CUDA launcher reports back to its (torch-side) host code. No torch includes.
#pragma once

#include <cuda_runtime_api.h>

namespace msa::cuda {

struct LaunchStatus {
  enum class Kind { kOk, kNoKernelImage, kCudaError };
  Kind kind = Kind::kOk;
  cudaError_t error = cudaSuccess;

  static LaunchStatus ok() { return {}; }
  bool is_ok() const { return kind == Kind::kOk; }
};

// Checks that `kernel` has machine code for the current device (cudaFuncGetAttributes, no sync).
inline LaunchStatus kernel_image_status(const void* kernel) {
  cudaFuncAttributes attributes;
  const cudaError_t err = cudaFuncGetAttributes(&attributes, kernel);
  if (err == cudaErrorInvalidDeviceFunction || err == cudaErrorNoKernelImageForDevice) {
    (void)cudaGetLastError();  // not sticky: clear it so later calls are not blamed
    return {LaunchStatus::Kind::kNoKernelImage, err};
  }
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  return LaunchStatus::ok();
}

}  // namespace msa::cuda
