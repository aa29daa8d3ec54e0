// NVFP4 quantize / dequantize kernels. No torch includes. Launchers: nvfp4.cu.
//
// Streaming kernels: every byte is touched once, so the design is about access shape and bytes in flight.
// A thread owns a "part": a whole group, or half a group (kParts = 2: single 16-byte loads of bf16 input or
// stores of bf16 output, the halves meeting through one shuffle for quantize's amax). Each thread issues the
// loads of kU parts before using any, for memory-level parallelism. The defaults come from the H200 sweeps
// in bench/NOTES.md; the launcher exposes the others as benchmark knobs.
#pragma once

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/mma.cuh"
#include "cuda/common/nvfp4.cuh"

namespace msa::nvfp4 {

struct Nvfp4Config {
  static constexpr int kThreads = 256;
  static constexpr int kHalf = kGroup / 2;
};

// A [rows, width] operand with one row stride; groups are numbered row-major.
struct GroupIndex {
  int64_t groups_per_row;
  int64_t row_stride;   // elements of the operand's own type
  int64_t group_width;  // elements per group in the operand (16 values, 8 packed bytes, 1 scale)
  __device__ __forceinline__ int64_t offset(int64_t g) const {
    if (row_stride == groups_per_row * group_width) return g * group_width;  // dense: no division
    return (g / groups_per_row) * row_stride + (g % groups_per_row) * group_width;
  }
};

enum class GlobalScaleMode { kNone, kExactInverse, kDivide };

// Each loop runs over block-uniform batches of kThreads * kU parts, so every lane runs the same number of
// iterations (the pair shuffle needs all lanes). The launcher sizes the grid to cover everything in one batch
// per block: a grid-stride grid larger than what is resident ran in uneven waves (bench/NOTES.md).

// RN(v / 6) without a division: Markstein's correction of v * RN(1/6) is the correctly rounded quotient (no
// underflow matters here: E4M3 flushes everything below 2^-10 anyway); +Inf passes through.
__device__ __forceinline__ float div6_rn(float v) {
  constexpr float kSixth = 0x1.555556p-3f;  // RN(1/6)
  const float q0 = __fmul_rn(v, kSixth);
  const float q = __fmaf_rn(__fmaf_rn(-q0, 6.0f, v), kSixth, q0);
  return v <= FLT_MAX ? q : v;
}

// ---- load 8 inputs as fp32 ---------------------------------------------------------------------------

template <typename T, bool kVectorized>
__device__ __forceinline__ void load_half_group(const T* src, float (&v)[Nvfp4Config::kHalf]) {
  if constexpr (kVectorized && sizeof(T) == 2) {
    const uint4 raw = __ldcs(reinterpret_cast<const uint4*>(src));
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
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
    const float4 a = __ldcs(reinterpret_cast<const float4*>(src));
    const float4 b = __ldcs(reinterpret_cast<const float4*>(src) + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < Nvfp4Config::kHalf; ++i) {
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

// kParts threads share a group (2: each loads one dense 16-byte half; 1: a thread owns the whole group and
// no shuffle is needed); kU parts per thread are loaded before any is used.
template <typename T, bool kVectorized, bool kApplyGlobalScale, int kU, int kParts, bool kHalfEncode>
__global__ void __launch_bounds__(Nvfp4Config::kThreads)
    nvfp4_quantize_kernel(const T* __restrict__ x, GroupIndex x_index, int64_t num_groups, float global_scale,
                          uint32_t* __restrict__ packed, uint8_t* __restrict__ scales) {
  constexpr int kHalf = Nvfp4Config::kHalf, kElems = kGroup / kParts, kWords = kElems / 8;
  // Only the packed-fp16 encoder (bf16 input, G = 1) may skip the correction step; see below.
  constexpr bool kNeedsCorrection = !(kHalfEncode && !MSA_HW_FP4);
  // Per scale code: (s, RN(1/s)), so a group pays one shared-memory load instead of a reciprocal.
  __shared__ float2 scale_and_reciprocal[128];
  if (threadIdx.x < 128) {
    const float s = e4m3_to_float_dev(static_cast<uint8_t>(threadIdx.x));
    scale_and_reciprocal[threadIdx.x] = make_float2(s, __frcp_rn(s));
  }
  __syncthreads();
  const int64_t num_parts = kParts * num_groups;
  for (int64_t first = int64_t(blockIdx.x) * blockDim.x * kU; first < num_parts;
       first += int64_t(gridDim.x) * blockDim.x * kU) {
    float v[kU][kElems];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t h = first + u * blockDim.x + threadIdx.x;
      if (h < num_parts) {
        const T* src = x + x_index.offset(h / kParts) + (h % kParts) * kElems;
#pragma unroll
        for (int k = 0; k < kElems / kHalf; ++k) {
          load_half_group<T, kVectorized>(src + k * kHalf, *reinterpret_cast<float(*)[kHalf]>(&v[u][k * kHalf]));
        }
      } else {
#pragma unroll
        for (int i = 0; i < kElems; ++i) v[u][i] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t h = first + u * blockDim.x + threadIdx.x;
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kElems; ++i) amax = fmax_nan(amax, fabsf(v[u][i]));
      if constexpr (kParts == 2) amax = fmax_nan(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));

      uint32_t words[kWords] = {};
      uint8_t scale_bits;
      if (!(amax <= FLT_MAX)) {
        scale_bits = kE4M3NaN;  // NaN or Inf in the group: NaN scale, zero codes (documented)
      } else {
        scale_bits = float_to_e4m3(div6_rn(kApplyGlobalScale ? __fmul_rn(global_scale, amax) : amax));
        const float2 sr = scale_and_reciprocal[scale_bits];  // scale_bits <= 0x7E: amax is finite, >= 0
        const float s = sr.x, r = sr.y;
        if (s != 0.0f) {
#pragma unroll
          for (int i = 0; i < kElems; i += 2) {
            const float t0 = kApplyGlobalScale ? __fmul_rn(v[u][i], global_scale) : v[u][i];
            const float t1 = kApplyGlobalScale ? __fmul_rn(v[u][i + 1], global_scale) : v[u][i + 1];
            // The packed-fp16 encoder skips the correction step: RN(t * r) is within one fp32 ulp of t / s, and
            // for bf16 t with G = 1, t / s is either exactly a threshold T (then RN16 of anything within an
            // fp32 ulp of T is T) or >= 2^-8 T away from every T. Without the fp16 rounding the skip is wrong:
            // t = 1.25 s can give RN(t * r) = 1.25 + 2^-23 (seen on the H200 with fp16 inputs, 2026-12-02).
            const float q0 = kNeedsCorrection ? div_by_scale(t0, s, r) : __fmul_rn(t0, r);
            const float q1 = kNeedsCorrection ? div_by_scale(t1, s, r) : __fmul_rn(t1, r);
            uint32_t byte;
            if constexpr (kHalfEncode && !MSA_HW_FP4) {
              static_assert(std::is_same_v<T, __nv_bfloat16> && !kApplyGlobalScale, "bf16 input, G = 1 only");
              byte = e2m1x2_from_quotients_bf16in(q0, q1);
            } else {
              byte = e2m1x2_from_quotients(q0, q1, t0, t1);
            }
            words[i / 8] |= byte << (4 * (i % 8));
          }
        }
      }
      if (h < num_parts) {
        if constexpr (kParts == 2) {
          __stcs(packed + h, words[0]);
        } else {
          __stcs(reinterpret_cast<uint2*>(packed) + h, make_uint2(words[0], words[1]));
        }
        if (h % kParts == 0) scales[h / kParts] = scale_bits;
      }
    }
  }
}

// Per E4M3 scale code, the 8 bytes quantize_bf16_group reads with one shared-memory load: .y = RN(1/s);
// .x = s for the hardware-FP4 path (sm_100+, exact division), and on sm_90 the packed u16 constant (4, 4)
// of the software encoder (as an immediate, ptxas rematerialized it once per use; loaded, it stays put).
__device__ __forceinline__ float2 bf16_group_table_entry(uint32_t code) {
  const float s = e4m3_to_float_dev(static_cast<uint8_t>(code));
#if MSA_HW_FP4
  return make_float2(s, __frcp_rn(s));
#else
  return make_float2(__uint_as_float(0x00040004u), __frcp_rn(s));
#endif
}

// fp32 -> E4M3 bits (RN, satfinite; NaN -> 0x7F) in the low byte of a clean u32 (no masking needed).
__device__ __forceinline__ uint32_t e4m3_bits_u32(float v) {
  uint32_t out;
  asm("{\n.reg .b16 pair, zero;\ncvt.rn.satfinite.e4m3x2.f32 pair, %2, %1;\nmov.b16 zero, 0;\n"
      "mov.b32 %0, {pair, zero};\n}"
      : "=r"(out) : "f"(v), "f"(0.0f));
  return out;
}

// max |x| over one group of 16 bf16 (8 packed pairs) as fp32, NaN if any element is NaN. max.NaN.xorsign.abs
// takes the larger magnitude (NaN-propagating) and gives it the XOR of the two input signs: the magnitude is
// exact, the sign is meaningless, so the result goes through fabsf (a free operand modifier where it is used).
__device__ __forceinline__ uint32_t bf16x2_max_abs_nan(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

__device__ __forceinline__ float bf16x16_amax_nan(const uint32_t (&raw)[8]) {
  const uint32_t m = bf16x2_max_abs_nan(bf16x2_max_abs_nan(bf16x2_max_abs_nan(raw[0], raw[1]),
                                                           bf16x2_max_abs_nan(raw[2], raw[3])),
                                        bf16x2_max_abs_nan(bf16x2_max_abs_nan(raw[4], raw[5]),
                                                           bf16x2_max_abs_nan(raw[6], raw[7])));
  uint32_t top;  // the larger lane, in the high half (bf16 -> fp32 is exact), zero low half
  asm("{\n.reg .b16 lo, hi, mx, zero;\nmov.b32 {lo, hi}, %1;\nmax.NaN.xorsign.abs.bf16 mx, lo, hi;\n"
      "mov.b16 zero, 0;\nmov.b32 %0, {zero, mx};\n}"
      : "=r"(top) : "r"(m));
  return fabsf(__uint_as_float(top));
}

// One bf16 group (8 words of raw bf16 pairs) -> 2 words of E2M1 codes and the E4M3 scale (G = 1).
__device__ __forceinline__ void quantize_bf16_group(const uint32_t (&raw)[8], const float2* scale_and_reciprocal,
                                                    uint32_t (&words)[2], uint8_t& scale_bits) {
  float v[kGroup];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    v[2 * i] = __uint_as_float(raw[i] << 16);
    v[2 * i + 1] = __uint_as_float(raw[i] & 0xFFFF0000u);
  }
#if MSA_HW_FP4
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kGroup; ++i) amax = fmax_nan(amax, fabsf(v[i]));
  words[0] = words[1] = 0u;
  scale_bits = kE4M3NaN;  // NaN or Inf in the group: NaN scale, zero codes (documented)
  if (amax <= FLT_MAX) {
    scale_bits = float_to_e4m3(div6_rn(amax));
    const float2 sr = scale_and_reciprocal[scale_bits];
    if (sr.x != 0.0f) {
#pragma unroll
      for (int i = 0; i < kGroup; i += 2) {
        const uint32_t byte = e2m1x2_from_quotients(div_by_scale(v[i], sr.x, sr.y),
                                                    div_by_scale(v[i + 1], sr.x, sr.y), v[i], v[i + 1]);
        words[i / 8] |= byte << (4 * (i % 8));
      }
    }
  }
#else
  // amax on the packed bf16 pairs: exact, >= 0 (+0 for a zero group), NaN if any element is NaN.
  const float amax = bf16x16_amax_nan(raw);
  // RN(amax / 6) as amax * RN(1/6): not always the same fp32 value (10585 of the 32640 finite bf16 amax differ
  // by an ulp), but the same E4M3 rounding for every one of them (checked exhaustively against the exact
  // quotient with a bit-level emulation; the E4M3 ties survive the one-ulp error).
  const bool finite = amax <= FLT_MAX;
  const uint32_t s = e4m3_bits_u32(__fmul_rn(amax, 0x1.555556p-3f));
  const uint32_t sb = finite ? s : kE4M3NaN;  // NaN or Inf in the group: NaN scale, zero codes (documented)
  scale_bits = static_cast<uint8_t>(sb);
  // Encoded unconditionally (no branch): scale 0 (entry r = Inf) and non-finite groups (0x7F: r = NaN) make
  // garbage codes (no traps), replaced by zero codes below. The quotients are RN16(RN32(x * RN(1/s))), the
  // precondition of e2m1x8_from_half2x4_bf16in (exact for bf16 x, G = 1).
  const float2 entry = scale_and_reciprocal[sb];  // sb <= 0x7F: in the table
  const float r = entry.y;
  uint32_t w[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    uint32_t h[4];  // fp16 quotients, elements (j, j + 4) of this word's eight
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __half2 q = __floats2half2_rn(__fmul_rn(v[8 * k + j], r), __fmul_rn(v[8 * k + j + 4], r));
      h[j] = *reinterpret_cast<const uint32_t*>(&q);
    }
    w[k] = e2m1x8_from_half2x4_bf16in(h, __float_as_uint(entry.x));
  }
  const bool encoded = finite && s != 0u;  // scale 0: zero codes
  words[0] = encoded ? w[0] : 0u;
  words[1] = encoded ? w[1] : 0u;
#endif
}

// Bulk-copy variant for dense bf16 input (G = 1; the default there, MSA_NVFP4_QUANTIZE_BULK=0 turns it off): a grid of resident
// blocks; thread 0 streams the input through a ring of kStages shared-memory stages with 1-D bulk async copies
// (cp.async.bulk, completion on an mbarrier), so each block keeps kStages x 8 KB of large requests in flight
// independently of the encode; every thread encodes one group per stage.
struct BulkConfig {
  static constexpr int kThreads = 256;
  static constexpr int kStages = 4;
  static constexpr int kStageBytes = kThreads * kGroup * 2;  // one bf16 group per thread
};

using msa::cuda::smem_u32;

__global__ void __launch_bounds__(BulkConfig::kThreads, 6)
    nvfp4_quantize_bf16_bulk_kernel(const __nv_bfloat16* __restrict__ x, int64_t num_groups,
                                    uint32_t* __restrict__ packed, uint8_t* __restrict__ scales) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using C = BulkConfig;
  __shared__ __align__(128) uint8_t stage_data[C::kStages][C::kStageBytes];
  __shared__ __align__(8) uint64_t full[C::kStages];
  __shared__ float2 scale_and_reciprocal[128];
  if (threadIdx.x < 128) scale_and_reciprocal[threadIdx.x] = bf16_group_table_entry(threadIdx.x);
  const int64_t num_chunks = (num_groups + C::kThreads - 1) / C::kThreads;
  auto issue = [&](int64_t chunk, int stage) {  // thread 0 only
    const int64_t first = chunk * C::kThreads;
    const int64_t left = num_groups - first;
    const uint32_t bytes = static_cast<uint32_t>((left < C::kThreads ? left : C::kThreads) * kGroup * 2);
    const uint32_t bar = smem_u32(&full[stage]);
    msa::cuda::mbar_arrive_expect_tx(bar, bytes);
    msa::cuda::bulk_copy_to_shared(smem_u32(stage_data[stage]), x + first * kGroup, bytes, bar);
  };
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < C::kStages; ++s) {
      msa::cuda::mbar_init(smem_u32(&full[s]), 1);
    }
    msa::cuda::mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      const int64_t chunk = blockIdx.x + int64_t(s) * gridDim.x;
      if (chunk < num_chunks) issue(chunk, s);
    }
  }
  // The ring is walked one pass (kStages chunks) at a time, unrolled, so every stage address is a constant
  // offset; the mbarrier phase flips once per pass. Loop state is incremental: the chunk, this thread's output
  // pointers and `left` = num_groups - this thread's group index (> 0: the group exists).
  int64_t chunk = blockIdx.x;
  const int64_t chunk_step = gridDim.x;
  const int64_t group_step = chunk_step * C::kThreads;
  int64_t left = num_groups - chunk * C::kThreads - threadIdx.x;
  uint2* out = reinterpret_cast<uint2*>(packed) + (num_groups - left);
  uint8_t* out_scale = scales + (num_groups - left);
  for (uint32_t parity = 0;; parity ^= 1u) {
#pragma unroll
    for (int stage = 0; stage < C::kStages; ++stage) {
      if (chunk >= num_chunks) return;  // block-uniform
      const uint32_t bar = smem_u32(&full[stage]);
      asm volatile(
          "{\n.reg .pred done;\nwait_%=:\n"
          "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
          "@!done bra wait_%=;\n}\n" ::"r"(bar), "r"(parity)
          : "memory");
      // Every thread encodes (past the end of the last chunk it reads stale stage bytes: harmless, no traps);
      // only existing groups are stored.
      const uint4* src = reinterpret_cast<const uint4*>(stage_data[stage] + threadIdx.x * kGroup * 2);
      const uint4 lo = src[0], hi = src[1];
      const uint32_t raw[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      uint32_t words[2];
      uint8_t scale_bits;
      quantize_bf16_group(raw, scale_and_reciprocal, words, scale_bits);
      if (left > 0) {
        __stcs(out, make_uint2(words[0], words[1]));
        *out_scale = scale_bits;
      }
      __syncthreads();  // the stage is consumed
      if (threadIdx.x == 0) {
        const int64_t next = chunk + int64_t(C::kStages) * chunk_step;
        if (next < num_chunks) {
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic reads before the async write
          issue(next, stage);
        }
      }
      chunk += chunk_step;
      left -= group_step;
      out += group_step;
      out_scale += group_step;
    }
  }
#endif
}

// ---- dequantize --------------------------------------------------------------------------------------

enum class DequantOut { kE4M3, kBF16, kF32 };

// E4M3 output: one group per thread (8-byte load, 16-byte store). bf16 / fp32 output: half a group per thread,
// so the store is one 16-byte access (bf16) and a warp writes one dense span.
template <DequantOut kOut>
constexpr int kDequantElems = kOut == DequantOut::kE4M3 ? kGroup : Nvfp4Config::kHalf;

template <DequantOut kOut, GlobalScaleMode kMode, bool kVectorized, int kU>
__global__ void __launch_bounds__(Nvfp4Config::kThreads)
    nvfp4_dequantize_kernel(const uint8_t* __restrict__ packed, GroupIndex packed_index,
                            const uint8_t* __restrict__ scales, GroupIndex scale_index, int64_t num_groups,
                            float global_scale, float inverse_global_scale, void* __restrict__ out) {
  constexpr int kElems = kDequantElems<kOut>, kWords = kElems / 8, kParts = kGroup / kElems;
  const int64_t num_parts = kParts * num_groups;
  for (int64_t first = int64_t(blockIdx.x) * blockDim.x * kU; first < num_parts;
       first += int64_t(gridDim.x) * blockDim.x * kU) {
    uint32_t codes[kU][kWords];
    uint8_t scale_bits[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t h = first + u * blockDim.x + threadIdx.x;
#pragma unroll
      for (int w = 0; w < kWords; ++w) codes[u][w] = 0u;
      scale_bits[u] = 0u;
      if (h < num_parts) {
        const int64_t group = h / kParts;
        const uint8_t* src = packed + packed_index.offset(group) + (h % kParts) * (kElems / 2);
        if constexpr (kVectorized && kWords == 2) {
          const uint2 pair = __ldcs(reinterpret_cast<const uint2*>(src));
          codes[u][0] = pair.x;
          codes[u][1] = pair.y;
        } else if constexpr (kVectorized) {
          codes[u][0] = __ldcs(reinterpret_cast<const uint32_t*>(src));
        } else {
#pragma unroll
          for (int i = 0; i < 4 * kWords; ++i) codes[u][i / 4] |= uint32_t(src[i]) << (8 * (i % 4));
        }
        scale_bits[u] = __ldcs(scales + scale_index.offset(group));
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t h = first + u * blockDim.x + threadIdx.x;
      if (h >= num_parts) continue;
      // e2m1 * scale is exact in fp16: at most 6 significant bits, 2^-10 <= |value| <= 2688.
      const __half2 scale = e4m3_to_half2(scale_bits[u]);
      uint32_t prod[4 * kWords];
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
        uint32_t halves[4];
        e2m1x8_to_half2x4(codes[u][w], halves);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const __half2 p = __hmul2(*reinterpret_cast<const __half2*>(&halves[i]), scale);
          prod[4 * w + i] = *reinterpret_cast<const uint32_t*>(&p);
        }
      }
      if constexpr (kOut == DequantOut::kE4M3) {
        uint32_t w4[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) w4[i] = half2_to_e4m3x2(prod[2 * i]) | (half2_to_e4m3x2(prod[2 * i + 1]) << 16);
        __stcs(reinterpret_cast<uint4*>(out) + h, make_uint4(w4[0], w4[1], w4[2], w4[3]));
      } else {
        float f[kElems];
#pragma unroll
        for (int i = 0; i < kElems / 2; ++i) {
          const float2 pair = __half22float2(*reinterpret_cast<const __half2*>(&prod[i]));
          f[2 * i] = pair.x;
          f[2 * i + 1] = pair.y;
        }
#pragma unroll
        for (int i = 0; i < kElems; ++i) {
          if constexpr (kMode == GlobalScaleMode::kExactInverse) f[i] = __fmul_rn(f[i], inverse_global_scale);
          if constexpr (kMode == GlobalScaleMode::kDivide) f[i] = __fdiv_rn(f[i], global_scale);
        }
        if constexpr (kOut == DequantOut::kBF16) {
          uint32_t w4[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const __nv_bfloat162 b = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
            w4[i] = *reinterpret_cast<const uint32_t*>(&b);
          }
          __stcs(reinterpret_cast<uint4*>(out) + h, make_uint4(w4[0], w4[1], w4[2], w4[3]));
        } else {
          float4* dst = reinterpret_cast<float4*>(out) + 2 * h;
          __stcs(dst, make_float4(f[0], f[1], f[2], f[3]));
          __stcs(dst + 1, make_float4(f[4], f[5], f[6], f[7]));
        }
      }
    }
  }
}


}  // namespace msa::nvfp4
