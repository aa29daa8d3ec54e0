// Torch-free launch API of the NVFP4 kernels (implemented in nvfp4.cu, called from nvfp4_host.cpp).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda/common/launch_status.h"

namespace msa::nvfp4 {

enum class ElementType { kF32, kBF16, kF16, kE4M3 };

// x viewed as [rows, width] (unit inner stride, one row stride) -> dense packed [rows, width/2] and
// scales [rows, width/16].
struct QuantizeArgs {
  const void* x;
  ElementType x_type;  // kF32, kBF16 or kF16
  int64_t rows, width, x_row_stride;
  float global_scale;
  uint8_t* packed;
  uint8_t* scales;
};

// packed [rows, width/2] and scales [rows, width/16] (each with its own row stride) -> dense out [rows, width].
struct DequantizeArgs {
  const uint8_t* packed;
  const uint8_t* scales;
  int64_t rows, width, packed_row_stride, scale_row_stride;
  float global_scale;
  ElementType out_type;  // kE4M3, kBF16 or kF32
  void* out;
};

msa::cuda::LaunchStatus launch_quantize(const QuantizeArgs& args, cudaStream_t stream);
msa::cuda::LaunchStatus launch_dequantize(const DequantizeArgs& args, cudaStream_t stream);

}  // namespace msa::nvfp4
