// Host launchers for the NVFP4 kernels: checks, row views, kernel choice, launch on the current stream.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/nvfp4_host.h"
#include "cuda/common/arch_check.h"
#include "cuda/nvfp4/nvfp4_kernels.cuh"
#include "ops.h"

namespace msa {
namespace {

using namespace msa::nvfp4;

int grid_for(int64_t num_groups) {
  const int sms = msa::cuda::current_sm_count();
  const int64_t needed = (num_groups + Nvfp4Config::kThreads - 1) / Nvfp4Config::kThreads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(needed, int64_t(sms) * Nvfp4Config::kBlocksPerSm)));
}

bool aligned(const void* p, int64_t row_stride_bytes, int64_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0 && row_stride_bytes % alignment == 0;
}

bool is_power_of_two(float v) {
  int exponent = 0;
  return std::frexp(v, &exponent) == 0.5f;
}

template <typename Kernel, typename... Args>
void launch(Kernel kernel, const char* op, int64_t num_groups, Args... args) {
  msa::cuda::require_kernel_image(reinterpret_cast<const void*>(kernel), op);
  kernel<<<grid_for(num_groups), Nvfp4Config::kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(args...);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, typename TorchT>
void quantize_launch(const RowView& in, int64_t width, float global_scale, at::Tensor& packed, at::Tensor& scales) {
  const T* x = reinterpret_cast<const T*>(in.tensor.data_ptr<TorchT>());
  const GroupIndex index{width / kGroup, in.row_stride, kGroup};
  const int64_t num_groups = in.rows * index.groups_per_row;
  const bool vectorized = aligned(x, in.row_stride * int64_t(sizeof(T)), 16);
  auto* packed_ptr = reinterpret_cast<uint2*>(packed.data_ptr());
  auto* scales_ptr = reinterpret_cast<uint8_t*>(scales.data_ptr());
  const char* op = "msa::nvfp4_quantize";
  const bool apply_g = global_scale != 1.0f;
  if (vectorized && !apply_g) {
    launch(nvfp4_quantize_kernel<T, true, false>, op, num_groups, x, index, num_groups, global_scale, packed_ptr, scales_ptr);
  } else if (vectorized) {
    launch(nvfp4_quantize_kernel<T, true, true>, op, num_groups, x, index, num_groups, global_scale, packed_ptr, scales_ptr);
  } else {
    launch(nvfp4_quantize_kernel<T, false, true>, op, num_groups, x, index, num_groups, global_scale, packed_ptr, scales_ptr);
  }
}

template <DequantOut kOut>
void dequantize_launch(const RowView& p, const RowView& s, int64_t width, float global_scale, at::Tensor& out) {
  const auto* packed = p.tensor.data_ptr<uint8_t>();
  const auto* scales = reinterpret_cast<const uint8_t*>(s.tensor.data_ptr());
  const GroupIndex packed_index{width / kGroup, p.row_stride, kGroup / 2};
  const GroupIndex scale_index{width / kGroup, s.row_stride, 1};
  const int64_t num_groups = p.rows * packed_index.groups_per_row;
  const bool vectorized = aligned(packed, p.row_stride, 8);
  void* out_ptr = out.data_ptr();
  const char* op = "msa::nvfp4_dequantize";
  const float inverse = 1.0f / global_scale;
  constexpr auto kNone = GlobalScaleMode::kNone;
  constexpr auto kInverse = GlobalScaleMode::kExactInverse;
  constexpr auto kDivide = GlobalScaleMode::kDivide;
  const auto mode = (kOut == DequantOut::kE4M3 || global_scale == 1.0f) ? kNone
                    : is_power_of_two(global_scale)                      ? kInverse
                                                                         : kDivide;
#define MSA_DEQUANT_LAUNCH(MODE, VEC)                                                                          \
  launch(nvfp4_dequantize_kernel<kOut, MODE, VEC>, op, num_groups, packed, packed_index, scales, scale_index, \
         num_groups, global_scale, inverse, out_ptr)
  if (mode == kNone) {
    if (vectorized) MSA_DEQUANT_LAUNCH(kNone, true); else MSA_DEQUANT_LAUNCH(kNone, false);
  } else if (mode == kInverse) {
    if (vectorized) MSA_DEQUANT_LAUNCH(kInverse, true); else MSA_DEQUANT_LAUNCH(kInverse, false);
  } else {
    if (vectorized) MSA_DEQUANT_LAUNCH(kDivide, true); else MSA_DEQUANT_LAUNCH(kDivide, false);
  }
#undef MSA_DEQUANT_LAUNCH
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> nvfp4_quantize_cuda(const at::Tensor& x, double global_scale) {
  check_quantize_args(x, global_scale);
  TORCH_CHECK(x.is_cuda(), "msa::nvfp4_quantize: x must be a CUDA tensor here, got ", x.device());
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t width = x.size(-1);
  auto packed = at::empty(with_last_dim(x.sizes(), width / 2), x.options().dtype(at::kByte));
  auto scales = at::empty(with_last_dim(x.sizes(), width / kGroup), x.options().dtype(at::kFloat8_e4m3fn));
  if (x.numel() == 0) return {packed, scales};
  const RowView in = as_rows(x, width);
  const float g = static_cast<float>(global_scale);
  switch (x.scalar_type()) {
    case at::kFloat: quantize_launch<float, float>(in, width, g, packed, scales); break;
    case at::kBFloat16: quantize_launch<__nv_bfloat16, at::BFloat16>(in, width, g, packed, scales); break;
    case at::kHalf: quantize_launch<__half, at::Half>(in, width, g, packed, scales); break;
    default: TORCH_CHECK(false, "unreachable");
  }
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
  const RowView s = as_rows(scales, width / kGroup);
  const float g = static_cast<float>(global_scale);
  switch (dtype) {
    case at::kFloat8_e4m3fn: dequantize_launch<DequantOut::kE4M3>(p, s, width, g, out); break;
    case at::kBFloat16: dequantize_launch<DequantOut::kBF16>(p, s, width, g, out); break;
    case at::kFloat: dequantize_launch<DequantOut::kF32>(p, s, width, g, out); break;
    default: TORCH_CHECK(false, "unreachable");
  }
  return out;
}

TORCH_LIBRARY_IMPL(msa, CUDA, m) {
  m.impl("nvfp4_quantize", &nvfp4_quantize_cuda);
  m.impl("nvfp4_dequantize", &nvfp4_dequantize_cuda);
}

}  // namespace msa
