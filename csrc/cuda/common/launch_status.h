// What a torch-free CUDA launcher reports back to its (torch-side) host code. No torch includes.
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <map>
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
  // Past 48 KB of static + dynamic shared memory a kernel must opt in (the attribute caps the dynamic part).
  if (err == cudaSuccess && dynamic_smem + int(attributes.sharedSizeBytes) > 48 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_smem);
  }
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  prepared.insert({kernel, device});
  return LaunchStatus::ok();
}

// A benchmark knob from the environment: its value when it is one of `allowed`, else `fallback`.
inline int env_choice(const char* name, std::initializer_list<int> allowed, int fallback) {
  const char* env = std::getenv(name);
  const int v = env ? std::atoi(env) : fallback;
  for (int a : allowed) {
    if (a == v) return v;
  }
  return fallback;
}

// SM count and compute capability of the current device, read once per device (no synchronisation).
struct DeviceInfo {
  int device = 0;  // the ordinal
  int sms = 0, cc_major = 0, cc_minor = 0;
};

inline LaunchStatus current_device_info(DeviceInfo& info) {
  constexpr int kMaxDevices = 64;
  static DeviceInfo cached[kMaxDevices];
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  if (device >= kMaxDevices) return {LaunchStatus::Kind::kCudaError, cudaErrorInvalidDevice};
  if (cached[device].sms == 0) {
    DeviceInfo d;
    d.device = device;
    err = cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
    cached[device] = d;  // benign race: every writer stores the same value
  }
  info = cached[device];
  return LaunchStatus::ok();
}

// Blocks of `kernel` resident on the current device at once (SMs x blocks per SM at `threads` threads and
// `dynamic_smem` bytes), computed once per (kernel, device) and cached: the grid of the persistent kernels and
// the wave size the split choices aim at. No synchronisation.
inline LaunchStatus resident_blocks(const void* kernel, int threads, int dynamic_smem, int& blocks) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> cache;
  DeviceInfo device;
  const LaunchStatus known = current_device_info(device);
  if (!known.is_ok()) return known;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find({kernel, device.device});
  if (it == cache.end()) {
    int per_sm = 0;
    const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, dynamic_smem);
    if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
    it = cache.emplace(std::make_pair(kernel, device.device), device.sms * per_sm).first;
  }
  blocks = it->second;
  return LaunchStatus::ok();
}

// Launch attribute: clusters of `cluster` CTAs along x.
inline cudaLaunchAttribute cluster_attribute(int cluster) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  return attribute;
}

// Programmatic dependent launch: a kernel launched with this attribute may start while the previous kernel in
// the stream is still running (once that kernel's CTAs have all called allow_dependent_launch, or exited);
// it must call grid_dependency_wait (mma.cuh) before its first global memory access. Hides the launch latency
// between back-to-back kernels (also inside CUDA graphs). Hopper and later; MSA_PDL=0 turns it off (benchmark
// knob), and it is off on older GPUs.
inline bool pdl_enabled(int cc_major) {
  static const int choice = env_choice("MSA_PDL", {0, 1}, 1);
  return choice == 1 && cc_major >= 9;
}
inline cudaLaunchAttribute pdl_attribute() {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  return attribute;
}

// Clusters of `cluster` CTAs of `kernel` resident at once (cudaOccupancyMaxActiveClusters: a cluster must fit
// inside one GPC, so this can be less than resident_blocks / cluster), cached per (kernel, device, cluster).
inline LaunchStatus resident_clusters(const void* kernel, int threads, int dynamic_smem, int cluster, int& clusters) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, std::pair<int, int>>, int> cache;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(kernel, std::make_pair(device, cluster));
  auto it = cache.find(key);
  if (it == cache.end()) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(cluster);
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = dynamic_smem;
    cudaLaunchAttribute attribute = cluster_attribute(cluster);
    config.attrs = &attribute;
    config.numAttrs = 1;
    int n = 0;
    err = cudaOccupancyMaxActiveClusters(&n, kernel, &config);
    if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
    it = cache.emplace(key, n).first;
  }
  clusters = it->second;
  return LaunchStatus::ok();
}

}  // namespace msa::cuda
