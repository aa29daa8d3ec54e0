// NVFP4 device codecs. No torch includes.
//
// Hopper (sm_90a) has no FP4 instructions: E2M1 is decoded with byte permutes (two PRMTs look up the
// fp16 high byte of 4 magnitudes at once) and encoded with fp32 magic-number rounding. Blackwell
// (sm_100a+) uses cvt.rn.f16x2.e2m1x2 and cvt.rn.satfinite.e2m1x2.f32 (compiled, not run by us).
// Every path here is bit-identical to msa/nvfp4_codec.h and to msa_ops/formats.py.
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "msa/nvfp4_codec.h"

#if defined(__CUDA_ARCH__) && (defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM101_ALL) || \
                               defined(__CUDA_ARCH_FEAT_SM103_ALL) || defined(__CUDA_ARCH_FEAT_SM110_ALL) || \
                               defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL) || \
                               defined(__CUDA_ARCH_SPECIFIC__) && __CUDA_ARCH_SPECIFIC__ >= 1000 ||          \
                               defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000)
#define MSA_HW_FP4 1
#else
#define MSA_HW_FP4 0
#endif

namespace msa::nvfp4 {

// ---- decode -----------------------------------------------------------------------------------------

// 8 E2M1 codes (one 32-bit word, element 0 in the low nibble) -> 4 half2 (element 2i in the low half).
__device__ __forceinline__ void e2m1x8_to_half2x4(uint32_t w, uint32_t (&h)[4]) {
#if MSA_HW_FP4
  asm("{\n"
      ".reg .b8 b0, b1, b2, b3;\n"
      "mov.b32 {b0, b1, b2, b3}, %4;\n"
      "cvt.rn.f16x2.e2m1x2 %0, b0;\n"
      "cvt.rn.f16x2.e2m1x2 %1, b1;\n"
      "cvt.rn.f16x2.e2m1x2 %2, b2;\n"
      "cvt.rn.f16x2.e2m1x2 %3, b3;\n"
      "}"
      : "=r"(h[0]), "=r"(h[1]), "=r"(h[2]), "=r"(h[3])
      : "r"(w));
#else
  // fp16 bit patterns of 0, 0.5, 1, 1.5 | 2, 3, 4, 6 have a zero low byte; their high bytes form the table.
  constexpr uint32_t kLutLo = 0x3E3C3800u, kLutHi = 0x46444240u;
  const uint32_t hi_bytes_0123 = __byte_perm(kLutLo, kLutHi, w & 0x7777u);
  const uint32_t hi_bytes_4567 = __byte_perm(kLutLo, kLutHi, (w >> 16) & 0x7777u);
  // Spread the looked-up bytes into the high byte of each fp16 lane (selector 4 = zero byte).
  h[0] = __byte_perm(hi_bytes_0123, 0u, 0x1404u);
  h[1] = __byte_perm(hi_bytes_0123, 0u, 0x3424u);
  h[2] = __byte_perm(hi_bytes_4567, 0u, 0x1404u);
  h[3] = __byte_perm(hi_bytes_4567, 0u, 0x3424u);
  // Sign of element k is bit 4k+3 of w; it goes to bit 15 (even k) or 31 (odd k) of its half2.
  h[0] |= ((w << 12) & 0x8000u) | ((w << 24) & 0x80000000u);
  h[1] |= ((w << 4) & 0x8000u) | ((w << 16) & 0x80000000u);
  h[2] |= ((w >> 4) & 0x8000u) | ((w << 8) & 0x80000000u);
  h[3] |= ((w >> 12) & 0x8000u) | (w & 0x80000000u);
#endif
}

__device__ __forceinline__ __half2 e4m3_to_half2(uint8_t s) {
  const __half h = __half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(s), __NV_E4M3));
  return __half2(h, h);
}

// Two E4M3 bytes (low byte first) -> f16x2 bits (exact: every E4M3 value is an fp16 value).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_bytes) {
  uint32_t out;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(out) : "h"(static_cast<unsigned short>(two_bytes)));
  return out;
}

__device__ __forceinline__ float e4m3_to_float_dev(uint8_t s) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(s), __NV_E4M3)));
}

// Two fp16 (exact e2m1 * scale products) -> two E4M3 bytes, round to nearest even, saturating.
// (One cvt; the intrinsic on a __half2_raw costs two extra instructions to re-pack the halves.)
__device__ __forceinline__ uint32_t half2_to_e4m3x2(uint32_t h) {
  unsigned short out;
  asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(out) : "r"(h));  // low half -> low byte
  return out;
}

__device__ __forceinline__ uint8_t float_to_e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// ---- encode -----------------------------------------------------------------------------------------

// max that propagates NaN (fmaxf drops it), so a NaN anywhere in a group is seen in its amax.
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// RN(t / s) without a division per element: r = RN(1/s) once per group, then one Markstein correction
// step, which is exactly the correctly rounded quotient whenever it does not underflow (and an
// underflowing quotient is far below the first E2M1 rounding threshold, 0.25).
__device__ __forceinline__ float div_by_scale(float t, float s, float r) {
  const float q0 = __fmul_rn(t, r);
  const float residual = __fmaf_rn(-q0, s, t);
  return __fmaf_rn(residual, r, q0);
}

// Quotient -> E2M1 code (software). Adding a power of two M whose fp32 ulp is the E2M1 step of a's binade
// (0.5 below 2, 1 in [2, 4), 2 in [4, 8)) rounds a to that step, ties to even; the number of ulps the sum
// lies above M, plus 2 per binade above [0, 2), is the code. M is built from a's exponent with integer ops.
__device__ __forceinline__ uint32_t e2m1_code_fast(float q, float sign_source) {
  const float a = fminf(fabsf(q), kE2M1Max);
  const uint32_t binade = max(__float_as_uint(a) & 0x7F800000u, 0x3F800000u);  // exponent of max(a, 1)
  const uint32_t magic_bits = binade + (22u << 23);                            // 2^22, 2^23 or 2^24
  const uint32_t sum_bits = __float_as_uint(__fadd_rn(a, __uint_as_float(magic_bits)));
  const uint32_t code = sum_bits - magic_bits + (magic_bits >> 22) - 298u;    // + 2 * (log2(M) - 22)
  return code | ((__float_as_uint(sign_source) >> 28) & 8u);
}

// Two quotients -> one byte of two E2M1 codes (first in the low nibble); signs from t0 / t1.
__device__ __forceinline__ uint32_t e2m1x2_from_quotients(float q0, float q1, float t0, float t1) {
#if MSA_HW_FP4
  const float a0 = copysignf(fminf(fabsf(q0), kE2M1Max), t0);
  const float a1 = copysignf(fminf(fabsf(q1), kE2M1Max), t1);
  uint32_t out;
  asm("{\n"
      ".reg .b8 byte0;\n"
      "cvt.rn.satfinite.e2m1x2.f32 byte0, %1, %2;\n"
      "cvt.u32.u8 %0, byte0;\n"
      "}"
      : "=r"(out)
      : "f"(a1), "f"(a0));
  return out;
#else
  return e2m1_code_fast(q0, t0) | (e2m1_code_fast(q1, t1) << 4);
#endif
}

// Two quotients -> one byte of two E2M1 codes, rounding in packed fp16 (about half the instructions of the
// fp32 path). Exact only when every quotient is either exactly an E2M1 rounding threshold T or at least
// ~2^-9 (relative) away from every T -- true for bf16 inputs with G = 1: t = x and T * s are both on the
// bf16 grid, so t != T * s means |t / s - T| >= 2^-8 T, far more than the 2^-23 + 2^-11 error of
// RN16(RN32(t * RN(1/s))); and t = T * s gives exactly T. Callers must use it for that case only.
__device__ __forceinline__ uint32_t e2m1x2_from_quotients_bf16in(float q0, float q1) {
  const __half2 hq = __floats2half2_rn(q0, q1);  // sign kept (-0 too)
  const uint32_t h = *reinterpret_cast<const uint32_t*>(&hq);
  const uint32_t mag = __vminu2(h & 0x7FFF7FFFu, 0x46004600u);  // |q| clamped to 6 (also +Inf), per lane
  // Per lane: 2^9, 2^10 or 2^11, whose fp16 ulp is the E2M1 step of |q|'s binade (exponent of max(|q|, 1)).
  const uint32_t magic = __vmaxu2(mag & 0x7C007C00u, 0x3C003C00u) + 0x24002400u;
  const __half2 sum = __hadd2(*reinterpret_cast<const __half2*>(&mag), *reinterpret_cast<const __half2*>(&magic));
  const uint32_t sum_bits = *reinterpret_cast<const uint32_t*>(&sum);
  // ulps above the magic + 2 per binade above [0, 2); no lane borrows or carries (all terms >= 0, < 16).
  uint32_t code = sum_bits - magic + ((magic >> 9) & 0x003F003Fu) - 0x00300030u;
  code |= (h >> 12) & 0x00080008u;  // sign bits 15 / 31 -> code bit 3 of each lane
  return (code | (code >> 12)) & 0xFFu;
}

// Eight quotients as four fp16x2 words -> one word of eight E2M1 codes (element 0 in the low nibble), for
// bf16 input with G = 1 only (same precondition as e2m1x2_from_quotients_bf16in, which this replaces in the
// bf16 quantize_bf16_group). Word j holds element j in its low half and element j + 4 in its high half, each
// the fp16 rounding RN16(RN32(x * RN(1/s))): for bf16 x that is exactly a rounding threshold T when x = T * s
// and otherwise on the same side of every T as x / s (see e2m1x2_from_quotients_bf16in).
//
// Per lane, with a = |q| (fp16) and code = the E2M1 magnitude code:
//   A = RN(a + 1022): below 1024 (ulp 0.5) iff a < 2, so bits(A) - 0x63FC = RNE(2a) for a < 2 and RNE(a) + 2
//     above, i.e. RNE(min(2a, a + 2));
//   B = RN(a + 2044): below 2048 (ulp 1) iff a < 4, so bits(B) - 0x67FA = RNE(min(a + 2, a / 2 + 4)).
// min(2a, a + 2, a / 2 + 4, 7) is the piecewise-linear map of the E2M1 values 0, .5, 1, 1.5, 2, 3, 4, 6 onto
// 0..7, so code = RNE of it (the offsets are even: ties to the even significand are ties to the even code),
// and RNE commutes with min: code = min(bits(A) - 0x63FC, bits(B) - 0x67FA, 7), two fused add + min ops on
// the u16 lanes (no overflow: bits <= 0x7C00, Inf gives 7). Each lane ends as 0x6400 | code; byte permutes
// gather the codes and the sign bits (sign of q, so -0 and negatives rounding to 0 give code 8), and one
// shift-add packs the nibbles. Checked exhaustively against msa_ops/formats.py with a bit-level emulation:
// every finite fp16 a, and every finite bf16 x at every non-zero E4M3 scale.
__device__ __forceinline__ uint32_t prmt_b32(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t out;  // PTX prmt default mode: a selector nibble with bit 3 set replicates the byte's sign bit
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(out) : "r"(a), "r"(b), "r"(selector));
  return out;
}

__device__ __forceinline__ uint32_t e2m1x8_from_half2x4_bf16in(const uint32_t (&h)[4], uint32_t four = 0x00040004u) {
  uint32_t biased[4];  // per lane 0x6400 | code
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __half2 a = __habs2(*reinterpret_cast<const __half2*>(&h[j]));
    const __half2 pa = __hadd2(a, __float2half2_rn(1022.0f));
    const __half2 pb = __hadd2(a, __float2half2_rn(2044.0f));
    const uint32_t a_bits = *reinterpret_cast<const uint32_t*>(&pa);
    const uint32_t b_bits = *reinterpret_cast<const uint32_t*>(&pb);
    const uint32_t code = __viaddmin_u16x2(b_bits, 0xFC02FC02u, a_bits);  // 0x63FC + code, per lane
    biased[j] = __viaddmin_u16x2(code, four, 0x64076407u);               // 0x6400 + min(code, 7)
  }
  const uint32_t even = prmt_b32(biased[0], biased[2], 0x6240u);  // codes of elements 0, 2, 4, 6 (a byte each)
  const uint32_t odd = prmt_b32(biased[1], biased[3], 0x6240u);   // 1, 3, 5, 7
  const uint32_t even_sign = prmt_b32(h[0], h[2], 0xFBD9u);      // 0xFF for a negative element, else 0
  const uint32_t odd_sign = prmt_b32(h[1], h[3], 0xFBD9u);
  const uint32_t lo = even | (even_sign & 0x08080808u);
  const uint32_t hi = odd | (odd_sign & 0x08080808u);
  return lo + (hi << 4);
}

}  // namespace msa::nvfp4
