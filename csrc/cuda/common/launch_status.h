// What a torch-free CUDA launcher reports back to its (torch-side) host code. No torch includes.
#pragma once

#include <mutex>
#include <set>
#include <utility>

#include <cuda_runtime_api.h>

namespace msa::cuda {

struct LaunchStatus {
  enum class Kind { kOk, kNoKernelImage, kCudaError };
  Kind kind = Kind::kOk;
  cudaError_t error = cudaSuccess;

  static LaunchStatus ok() { return {}; }
  bool is_ok() const { return kind == Kind::kOk; }
};

// Makes `kernel` launchable on the current device: checks that it has machine code for it
// (cudaFuncGetAttributes) and raises its dynamic shared-memory limit to `dynamic_smem` when that exceeds the
// 48 KB default. Done once per (kernel, device) and cached: later launches pay one locked lookup, no driver
// call, no synchronisation.
inline LaunchStatus prepare_kernel(const void* kernel, int dynamic_smem = 0) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> prepared;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  std::lock_guard<std::mutex> lock(mutex);
  if (prepared.count({kernel, device})) return LaunchStatus::ok();
  cudaFuncAttributes attributes;
  err = cudaFuncGetAttributes(&attributes, kernel);
  if (err == cudaErrorInvalidDeviceFunction || err == cudaErrorNoKernelImageForDevice) {
    (void)cudaGetLastError();  // not sticky: clear it so later calls are not blamed
    return {LaunchStatus::Kind::kNoKernelImage, err};
  }
  if (err == cudaSuccess && dynamic_smem > 48 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_smem);
  }
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  prepared.insert({kernel, device});
  return LaunchStatus::ok();
}

// Number of SMs of the current device, read once per device (no synchronisation).
inline LaunchStatus current_sm_count(int& sms) {
  constexpr int kMaxDevices = 64;
  static int cached[kMaxDevices] = {};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  if (device >= kMaxDevices) return {LaunchStatus::Kind::kCudaError, cudaErrorInvalidDevice};
  if (cached[device] == 0) {
    int count = 0;
    err = cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
    cached[device] = count;  // benign race: every writer stores the same value
  }
  sms = cached[device];
  return LaunchStatus::ok();
}

}  // namespace msa::cuda
