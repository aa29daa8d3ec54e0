// Torch-side helpers for the CUDA host code (compiled by the C++ compiler, not nvcc).
#pragma once

#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include "cuda/common/launch_status.h"

#ifndef MSA_CUDA_ARCHS_STR
#define MSA_CUDA_ARCHS_STR "unknown"
#endif

namespace msa::cuda {

// Turns a launcher's status into one clear error: for a missing kernel image, the GPU's name, its compute
// capability and the targets this build has.
inline void check_launch(const LaunchStatus& status, const char* op) {
  if (status.kind == LaunchStatus::Kind::kNoKernelImage) {
    int device = 0;
    cudaDeviceProp prop;
    C10_CUDA_CHECK(cudaGetDevice(&device));
    C10_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    TORCH_CHECK(false, op, ": msa_ops has no kernel for this GPU: ", prop.name, " (compute capability ", prop.major,
                ".", prop.minor, "); this build targets MSA_CUDA_ARCHS=\"", MSA_CUDA_ARCHS_STR,
                "\". Rebuild with MSA_CUDA_ARCHS including ", prop.major, ".", prop.minor,
                (prop.major >= 9 ? "a" : ""), ".");
  }
  if (status.kind == LaunchStatus::Kind::kCudaError) {
    TORCH_CHECK(false, op, ": CUDA error: ", cudaGetErrorString(status.error));
  }
}

}  // namespace msa::cuda
