// CUDA host code of the NVFP4 ops: checks, row views, output allocation, the launch on the current stream.
// Compiled by the C++ compiler; the kernels and their launch live in nvfp4.cu (no torch there).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/nvfp4_host.h"
#include "cuda/common/cuda_host.h"
#include "cuda/nvfp4/nvfp4_launch.h"
#include "ops.h"

namespace msa {

using nvfp4::ElementType;

std::tuple<at::Tensor, at::Tensor> nvfp4_quantize_cuda(const at::Tensor& x, double global_scale) {
  check_quantize_args(x, global_scale);
  TORCH_CHECK(x.is_cuda(), "msa::nvfp4_quantize: x must be a CUDA tensor here, got ", x.device());
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t width = x.size(-1);
  auto packed = at::empty(with_last_dim(x.sizes(), width / 2), x.options().dtype(at::kByte));
  auto scales = at::empty(with_last_dim(x.sizes(), width / 16), x.options().dtype(at::kFloat8_e4m3fn));
  if (x.numel() == 0) return {packed, scales};
  const RowView in = as_rows(x, width);
  nvfp4::QuantizeArgs args{};
  args.x = in.tensor.data_ptr();
  args.x_type = x.scalar_type() == at::kFloat ? ElementType::kF32
                : x.scalar_type() == at::kBFloat16 ? ElementType::kBF16 : ElementType::kF16;
  args.rows = in.rows;
  args.width = width;
  args.x_row_stride = in.row_stride;
  args.global_scale = static_cast<float>(global_scale);
  args.packed = packed.data_ptr<uint8_t>();
  args.scales = reinterpret_cast<uint8_t*>(scales.data_ptr());
  msa::cuda::check_launch(
      nvfp4::launch_quantize(args, c10::cuda::getCurrentCUDAStream()),
      "msa::nvfp4_quantize");
  return {packed, scales};
}

at::Tensor nvfp4_dequantize_cuda(const at::Tensor& packed, const at::Tensor& scales, at::ScalarType dtype,
                                 double global_scale) {
  const int64_t width = check_dequantize_args(packed, scales, dtype, global_scale);
  TORCH_CHECK(packed.is_cuda(), "msa::nvfp4_dequantize: tensors must be CUDA tensors here, got ", packed.device());
  const c10::cuda::CUDAGuard guard(packed.device());
  auto out = at::empty(with_last_dim(packed.sizes(), width), packed.options().dtype(dtype));
  if (out.numel() == 0) return out;
  const RowView p = as_rows(packed, width / 2);
  const RowView s = as_rows(scales, width / 16);
  nvfp4::DequantizeArgs args{};
  args.packed = p.tensor.data_ptr<uint8_t>();
  args.scales = reinterpret_cast<const uint8_t*>(s.tensor.data_ptr());
  args.rows = p.rows;
  args.width = width;
  args.packed_row_stride = p.row_stride;
  args.scale_row_stride = s.row_stride;
  args.global_scale = static_cast<float>(global_scale);
  args.out_type = dtype == at::kFloat8_e4m3fn ? ElementType::kE4M3
                  : dtype == at::kBFloat16    ? ElementType::kBF16 : ElementType::kF32;
  args.out = out.data_ptr();
  msa::cuda::check_launch(
      nvfp4::launch_dequantize(args, c10::cuda::getCurrentCUDAStream()),
      "msa::nvfp4_dequantize");
  return out;
}

TORCH_LIBRARY_IMPL(msa, CUDA, m) {
  m.impl("nvfp4_quantize", &nvfp4_quantize_cuda);
  m.impl("nvfp4_dequantize", &nvfp4_dequantize_cuda);
}

}  // namespace msa
