// Kernel choice and launch for NVFP4 quantize / dequantize. No torch: checks, allocation and error
// messages live in nvfp4_host.cpp. The same source is compiled per target in MSA_CUDA_ARCHS; the
// #if MSA_HW_FP4 paths in common/nvfp4.cuh pick software (sm_90a) or hardware (sm_100a+) FP4 conversion.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <utility>
#include <type_traits>

#include "cuda/nvfp4/nvfp4_kernels.cuh"
#include "cuda/nvfp4/nvfp4_launch.h"

namespace msa::nvfp4 {
namespace {

using msa::cuda::LaunchStatus;

// One batch of kThreads * unroll parts per block (a part is half a group, or a whole group for
// dequantize -> E4M3); the kernels loop when a grid would exceed the hardware limit.
int grid_for(int64_t num_parts, int unroll) {
  const int64_t per_block = int64_t(Nvfp4Config::kThreads) * unroll;
  const int64_t needed = (num_parts + per_block - 1) / per_block;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(needed, int64_t(1) << 30)));
}

bool aligned(const void* p, int64_t row_stride_bytes, int64_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0 && row_stride_bytes % alignment == 0;
}

bool is_power_of_two(float v) {
  int exponent = 0;
  return std::frexp(v, &exponent) == 0.5f;
}

template <typename... KernelArgs, typename... Args>
LaunchStatus launch(void (*kernel)(KernelArgs...), int unroll, int64_t num_parts, cudaStream_t stream,
                    Args... args) {
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel));
  if (!ready.is_ok()) return ready;
  kernel<<<grid_for(num_parts, unroll), Nvfp4Config::kThreads, 0, stream>>>(args...);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  return LaunchStatus::ok();
}


// Benchmark knobs for the quantize kernel, read once: MSA_NVFP4_QUANTIZE_UNROLL in {1, 2, 4, 8} (parts per
// thread) and MSA_NVFP4_QUANTIZE_PARTS in {1, 2} (threads per group). Defaults 2 and 1: fastest in the H200
// sweep of 2026-12-02 (bench/NOTES.md).
using msa::cuda::env_choice;

template <typename T, bool kVec, bool kApplyG, int kParts, bool kHalf>
LaunchStatus quantize_parts(int64_t num_groups, cudaStream_t stream, const T* x, GroupIndex index, float g,
                            uint32_t* packed, uint8_t* scales) {
  static const int unroll = env_choice("MSA_NVFP4_QUANTIZE_UNROLL", {1, 2, 4, 8}, 2);
  const int64_t parts = kParts * num_groups;
#define MSA_Q(U) launch(nvfp4_quantize_kernel<T, kVec, kApplyG, U, kParts, kHalf>, U, parts, stream, x, index, \
                                 num_groups, g, packed, scales)
  switch (unroll) {
    case 1: return MSA_Q(1);
    case 2: return MSA_Q(2);
    case 8: return MSA_Q(8);
    default: return MSA_Q(4);
  }
#undef MSA_Q
}

// The bulk-copy kernel over a resident grid (dense bf16 input, 16-byte aligned; sm_90+).
LaunchStatus quantize_bf16_bulk(int64_t num_groups, cudaStream_t stream, const __nv_bfloat16* x, uint32_t* packed,
                                uint8_t* scales) {
  auto kernel = nvfp4_quantize_bf16_bulk_kernel;
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel));
  if (!ready.is_ok()) return ready;
  int resident = 0;
  const LaunchStatus sized =
      msa::cuda::resident_blocks(reinterpret_cast<const void*>(kernel), BulkConfig::kThreads, 0, resident);
  if (!sized.is_ok()) return sized;
  const int64_t chunks = (num_groups + BulkConfig::kThreads - 1) / BulkConfig::kThreads;
  const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(chunks, resident)));
  kernel<<<grid, BulkConfig::kThreads, 0, stream>>>(x, num_groups, packed, scales);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  return LaunchStatus::ok();
}

template <typename T, bool kVec, bool kApplyG>
LaunchStatus quantize_unrolled(int64_t num_groups, cudaStream_t stream, const T* x, GroupIndex index, float g,
                               uint32_t* packed, uint8_t* scales) {
  static const int parts = env_choice("MSA_NVFP4_QUANTIZE_PARTS", {1, 2}, 1);
  // bf16 input with G = 1 (the KV-cache case) may round in packed fp16; MSA_NVFP4_QUANTIZE_HALF2=0 turns it off.
  static const bool half_encode = env_choice("MSA_NVFP4_QUANTIZE_HALF2", {0, 1}, 1) == 1;
  // The bulk-copy kernel for dense bf16 rows with G = 1 (the KV-cache case; sm_90+): the fastest on the H200
  // (bench/NOTES.md, 2026-12-02; it replaced a persistent software-pipelined kernel, 79 % of copy against its 83 %
  // then and 97-99 % since); MSA_NVFP4_QUANTIZE_BULK=0 turns it off.
  static const bool bulk = env_choice("MSA_NVFP4_QUANTIZE_BULK", {0, 1}, 1) == 1;
  if constexpr (std::is_same_v<T, __nv_bfloat16> && !kApplyG && kVec) {
    if (bulk && index.row_stride == index.groups_per_row * index.group_width &&
        reinterpret_cast<uintptr_t>(x) % 16 == 0) {
      return quantize_bf16_bulk(num_groups, stream, x, packed, scales);
    }
  }
  if constexpr (std::is_same_v<T, __nv_bfloat16> && !kApplyG) {
    if (half_encode) {
      if (parts == 1) return quantize_parts<T, kVec, kApplyG, 1, true>(num_groups, stream, x, index, g, packed, scales);
      return quantize_parts<T, kVec, kApplyG, 2, true>(num_groups, stream, x, index, g, packed, scales);
    }
  }
  if (parts == 1) return quantize_parts<T, kVec, kApplyG, 1, false>(num_groups, stream, x, index, g, packed, scales);
  return quantize_parts<T, kVec, kApplyG, 2, false>(num_groups, stream, x, index, g, packed, scales);
}

template <typename T>
LaunchStatus quantize_typed(const QuantizeArgs& a, cudaStream_t stream) {
  const T* x = static_cast<const T*>(a.x);
  const GroupIndex index{a.width / kGroup, a.x_row_stride, kGroup};
  const int64_t num_groups = a.rows * index.groups_per_row;
  const bool vectorized = aligned(x, a.x_row_stride * int64_t(sizeof(T)), 16);
  auto* packed = reinterpret_cast<uint32_t*>(a.packed);
  const float g = a.global_scale;
  if (vectorized && g == 1.0f) return quantize_unrolled<T, true, false>(num_groups, stream, x, index, g, packed, a.scales);
  if (vectorized) return quantize_unrolled<T, true, true>(num_groups, stream, x, index, g, packed, a.scales);
  return quantize_unrolled<T, false, true>(num_groups, stream, x, index, g, packed, a.scales);
}

template <DequantOut kOut, GlobalScaleMode kMode>
LaunchStatus dequantize_mode(const DequantizeArgs& a, cudaStream_t stream) {
  const GroupIndex packed_index{a.width / kGroup, a.packed_row_stride, kGroup / 2};
  const GroupIndex scale_index{a.width / kGroup, a.scale_row_stride, 1};
  const int64_t num_groups = a.rows * packed_index.groups_per_row;
  const float inverse = 1.0f / a.global_scale;  // used only when exact (power-of-two G)
  const int64_t num_parts = num_groups * (kGroup / kDequantElems<kOut>);
  // Parts per thread: benchmark knob MSA_NVFP4_DEQUANT_UNROLL in {1, 2, 4} (read once), default 4.
  static const int unroll = env_choice("MSA_NVFP4_DEQUANT_UNROLL", {1, 2, 4}, 4);
#define MSA_D(VEC, U) launch(nvfp4_dequantize_kernel<kOut, kMode, VEC, U>, U, num_parts, stream, a.packed, \
                                      packed_index, a.scales, scale_index, num_groups, a.global_scale, inverse, a.out)
  if (aligned(a.packed, a.packed_row_stride, kDequantElems<kOut> / 2)) {
    return unroll == 1 ? MSA_D(true, 1) : unroll == 2 ? MSA_D(true, 2) : MSA_D(true, 4);
  }
  return MSA_D(false, 4);
#undef MSA_D
}

template <DequantOut kOut>
LaunchStatus dequantize_typed(const DequantizeArgs& a, cudaStream_t stream) {
  if (kOut == DequantOut::kE4M3 || a.global_scale == 1.0f) {
    return dequantize_mode<kOut, GlobalScaleMode::kNone>(a, stream);
  }
  if (is_power_of_two(a.global_scale)) {
    return dequantize_mode<kOut, GlobalScaleMode::kExactInverse>(a, stream);
  }
  return dequantize_mode<kOut, GlobalScaleMode::kDivide>(a, stream);
}

}  // namespace

LaunchStatus launch_quantize(const QuantizeArgs& args, cudaStream_t stream) {
  switch (args.x_type) {
    case ElementType::kF32: return quantize_typed<float>(args, stream);
    case ElementType::kBF16: return quantize_typed<__nv_bfloat16>(args, stream);
    case ElementType::kF16: return quantize_typed<__half>(args, stream);
    default: return {LaunchStatus::Kind::kCudaError, cudaErrorInvalidValue};
  }
}

LaunchStatus launch_dequantize(const DequantizeArgs& args, cudaStream_t stream) {
  switch (args.out_type) {
    case ElementType::kE4M3: return dequantize_typed<DequantOut::kE4M3>(args, stream);
    case ElementType::kBF16: return dequantize_typed<DequantOut::kBF16>(args, stream);
    case ElementType::kF32: return dequantize_typed<DequantOut::kF32>(args, stream);
    default: return {LaunchStatus::Kind::kCudaError, cudaErrorInvalidValue};
  }
}

}  // namespace msa::nvfp4
