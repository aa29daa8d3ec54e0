// Torch-side helpers for the CUDA host code (compiled by the C++ compiler, not nvcc).
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include "cuda/common/launch_status.h"

#ifndef MSA_CUDA_ARCHS_STR
#define MSA_CUDA_ARCHS_STR "unknown"
#endif

namespace msa::cuda {

// True when every row of `t` (all dims but the last) starts on an `alignment`-byte boundary, so kernels may
// load rows with vectors of that width.
inline bool rows_aligned(const at::Tensor& t, int64_t alignment) {
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % alignment != 0) return false;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) {
    if (t.size(d) > 1 && (t.stride(d) * t.element_size()) % alignment != 0) return false;
  }
  return true;
}

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
