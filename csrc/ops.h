// Host declarations of every msa op implementation (CPU and CUDA). Schemas: torch_bindings.cpp.
#pragma once

#include <tuple>

#include <ATen/core/Tensor.h>

namespace msa {

// ---- NVFP4 formats (shared/SPEC.md §2) ----
std::tuple<at::Tensor, at::Tensor> nvfp4_quantize_cpu(const at::Tensor& x, double global_scale);
at::Tensor nvfp4_dequantize_cpu(const at::Tensor& packed, const at::Tensor& scales, at::ScalarType dtype,
                                double global_scale);

#ifdef MSA_WITH_CUDA
std::tuple<at::Tensor, at::Tensor> nvfp4_quantize_cuda(const at::Tensor& x, double global_scale);
at::Tensor nvfp4_dequantize_cuda(const at::Tensor& packed, const at::Tensor& scales, at::ScalarType dtype,
                                 double global_scale);
#endif

}  // namespace msa
