// NVFP4 quantize / dequantize kernels: streaming, one 16-element group per thread per iteration.
// No torch includes. Launchers: nvfp4.cu.
#pragma once

#include <cfloat>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/nvfp4.cuh"

namespace msa::nvfp4 {

struct Nvfp4Config {
  static constexpr int kThreads = 256;
  static constexpr int kBlocksPerSm = 8;  // grid = SMs * this, grid-stride loop over groups
};

// A [rows, width] operand with one row stride; groups are numbered row-major.
struct GroupIndex {
  int64_t groups_per_row;
  int64_t row_stride;  // elements of the operand's own type
  int64_t group_width; // elements per group in the operand (16 values, 8 packed bytes, 1 scale)
  __device__ __forceinline__ int64_t offset(int64_t g) const {
    if (row_stride == groups_per_row * group_width) return g * group_width;  // dense: no division
    return (g / groups_per_row) * row_stride + (g % groups_per_row) * group_width;
  }
};

enum class GlobalScaleMode { kNone, kExactInverse, kDivide };

// ---- load 16 inputs as fp32 --------------------------------------------------------------------------

template <typename T, bool kVectorized>
__device__ __forceinline__ void load_group(const T* src, float (&v)[kGroup]) {
  if constexpr (kVectorized && sizeof(T) == 2) {
    const uint4 a = __ldcs(reinterpret_cast<const uint4*>(src));
    const uint4 b = __ldcs(reinterpret_cast<const uint4*>(src) + 1);
    const uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        v[2 * i] = __uint_as_float(words[i] << 16);
        v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
      } else {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
      }
    }
  } else if constexpr (kVectorized && sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 f = __ldcs(reinterpret_cast<const float4*>(src) + i);
      v[4 * i] = f.x;
      v[4 * i + 1] = f.y;
      v[4 * i + 2] = f.z;
      v[4 * i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      if constexpr (std::is_same_v<T, float>) {
        v[i] = src[i];
      } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        v[i] = __bfloat162float(src[i]);
      } else {
        v[i] = __half2float(src[i]);
      }
    }
  }
}

// ---- quantize ----------------------------------------------------------------------------------------

template <typename T, bool kVectorized, bool kApplyGlobalScale>
__global__ void __launch_bounds__(Nvfp4Config::kThreads)
    nvfp4_quantize_kernel(const T* __restrict__ x, GroupIndex x_index, int64_t num_groups, float global_scale,
                          uint2* __restrict__ packed, uint8_t* __restrict__ scales) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < num_groups; g += stride) {
    float v[kGroup];
    load_group<T, kVectorized>(x + x_index.offset(g), v);

    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kGroup; ++i) amax = fmax_nan(amax, fabsf(v[i]));

    uint32_t words[2] = {0u, 0u};
    uint8_t scale_bits;
    if (!(amax <= FLT_MAX)) {
      scale_bits = kE4M3NaN;  // NaN or Inf in the group: NaN scale, zero codes (documented)
    } else {
      scale_bits = float_to_e4m3(__fdiv_rn(__fmul_rn(global_scale, amax), 6.0f));
      const float s = e4m3_to_float_dev(scale_bits);
      if (s != 0.0f) {
        const float r = __frcp_rn(s);
#pragma unroll
        for (int i = 0; i < kGroup; i += 2) {
          const float t0 = kApplyGlobalScale ? __fmul_rn(v[i], global_scale) : v[i];
          const float t1 = kApplyGlobalScale ? __fmul_rn(v[i + 1], global_scale) : v[i + 1];
          const uint32_t byte = e2m1x2_from_quotients(div_by_scale(t0, s, r), div_by_scale(t1, s, r), t0, t1);
          words[i / 8] |= byte << (4 * (i % 8));
        }
      }
    }
    __stcs(packed + g, make_uint2(words[0], words[1]));
    scales[g] = scale_bits;
  }
}

// ---- dequantize --------------------------------------------------------------------------------------

enum class DequantOut { kE4M3, kBF16, kF32 };

template <DequantOut kOut, GlobalScaleMode kMode, bool kVectorized>
__global__ void __launch_bounds__(Nvfp4Config::kThreads)
    nvfp4_dequantize_kernel(const uint8_t* __restrict__ packed, GroupIndex packed_index,
                            const uint8_t* __restrict__ scales, GroupIndex scale_index, int64_t num_groups,
                            float global_scale, float inverse_global_scale, void* __restrict__ out) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < num_groups; g += stride) {
    const uint8_t* src = packed + packed_index.offset(g);
    uint2 codes;
    if constexpr (kVectorized) {
      codes = __ldcs(reinterpret_cast<const uint2*>(src));
    } else {
      uint32_t w[2] = {0u, 0u};
#pragma unroll
      for (int i = 0; i < 8; ++i) w[i / 4] |= uint32_t(src[i]) << (8 * (i % 4));
      codes = make_uint2(w[0], w[1]);
    }
    const __half2 scale = e4m3_to_half2(__ldcs(scales + scale_index.offset(g)));

    // e2m1 * scale is exact in fp16: at most 6 significant bits, 2^-10 <= |value| <= 2688.
    uint32_t prod[8];
    {
      uint32_t h[4];
      e2m1x8_to_half2x4(codes.x, h);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __half2 p = __hmul2(*reinterpret_cast<const __half2*>(&h[i]), scale);
        prod[i] = *reinterpret_cast<const uint32_t*>(&p);
      }
      e2m1x8_to_half2x4(codes.y, h);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __half2 p = __hmul2(*reinterpret_cast<const __half2*>(&h[i]), scale);
        prod[4 + i] = *reinterpret_cast<const uint32_t*>(&p);
      }
    }

    if constexpr (kOut == DequantOut::kE4M3) {
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) w[i] = half2_to_e4m3x2(prod[2 * i]) | (half2_to_e4m3x2(prod[2 * i + 1]) << 16);
      __stcs(reinterpret_cast<uint4*>(out) + g, make_uint4(w[0], w[1], w[2], w[3]));
    } else {
      float f[kGroup];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float2 pair = __half22float2(*reinterpret_cast<const __half2*>(&prod[i]));
        f[2 * i] = pair.x;
        f[2 * i + 1] = pair.y;
      }
#pragma unroll
      for (int i = 0; i < kGroup; ++i) {
        if constexpr (kMode == GlobalScaleMode::kExactInverse) f[i] = __fmul_rn(f[i], inverse_global_scale);
        if constexpr (kMode == GlobalScaleMode::kDivide) f[i] = __fdiv_rn(f[i], global_scale);
      }
      if constexpr (kOut == DequantOut::kBF16) {
        uint32_t w[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const __nv_bfloat162 b = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
          w[i] = *reinterpret_cast<const uint32_t*>(&b);
        }
        uint4* dst = reinterpret_cast<uint4*>(out) + 2 * g;
        __stcs(dst, make_uint4(w[0], w[1], w[2], w[3]));
        __stcs(dst + 1, make_uint4(w[4], w[5], w[6], w[7]));
      } else {
        float4* dst = reinterpret_cast<float4*>(out) + 4 * g;
#pragma unroll
        for (int i = 0; i < 4; ++i) __stcs(dst + i, make_float4(f[4 * i], f[4 * i + 1], f[4 * i + 2], f[4 * i + 3]));
      }
    }
  }
}

}  // namespace msa::nvfp4
