#include "cuda/common/arch_check.h"

#include <mutex>
#include <set>
#include <utility>

#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

#ifndef MSA_CUDA_ARCHS_STR
#define MSA_CUDA_ARCHS_STR "unknown"
#endif

namespace msa::cuda {

void require_kernel_image(const void* kernel, const char* op) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> known_good;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (known_good.count({kernel, device})) return;
  }
  cudaFuncAttributes attributes;
  const cudaError_t err = cudaFuncGetAttributes(&attributes, kernel);
  if (err == cudaErrorInvalidDeviceFunction || err == cudaErrorNoKernelImageForDevice) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
    cudaDeviceProp prop;
    C10_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    TORCH_CHECK(false, op, ": msa_ops has no kernel for this GPU: ", prop.name, " (compute capability ",
                prop.major, ".", prop.minor, "); this build targets MSA_CUDA_ARCHS=\"", MSA_CUDA_ARCHS_STR,
                "\". Rebuild with MSA_CUDA_ARCHS including ", prop.major, ".", prop.minor,
                (prop.major >= 9 ? "a" : ""), ".");
  }
  C10_CUDA_CHECK(err);
  std::lock_guard<std::mutex> lock(mutex);
  known_good.insert({kernel, device});
}

int current_sm_count() {
  constexpr int kMaxDevices = 64;
  static int cached[kMaxDevices] = {};
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "msa_ops supports device indices below ", kMaxDevices);
  if (cached[device] == 0) {
    int count = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    cached[device] = count;  // benign race: every writer stores the same value
  }
  return cached[device];
}

}  // namespace msa::cuda
