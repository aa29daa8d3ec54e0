// NVFP4 / E4M3 scalar codecs in plain C++, usable on the host and (as a fallback) on the device.
// No torch includes. Bit-exact to shared/SPEC.md §2; the fast device paths live in cuda/common/nvfp4.cuh.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MSA_HD __host__ __device__ __forceinline__
#else
#define MSA_HD inline
#endif

namespace msa::nvfp4 {

constexpr int kGroup = 16;            // elements sharing one E4M3 scale
constexpr float kE2M1Max = 6.0f;
constexpr float kE4M3Max = 448.0f;
constexpr uint8_t kE4M3NaN = 0x7F;    // canonical NaN written for a group with NaN/Inf input

MSA_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

MSA_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// E2M1 code (0..15) -> value. Codes 8..15 are the negatives of 0..7; code 8 is -0.
MSA_HD float e2m1_value(uint32_t code) {
  const uint32_t mag = code & 7u;
  // 0, 0.5, 1, 1.5, 2, 3, 4, 6
  const float v = mag < 4u ? 0.5f * float(mag) : float(2u << ((mag - 4u) >> 1)) * (1.0f + 0.5f * float(mag & 1u));
  return (code & 8u) ? -v : v;
}

// fp32 -> E2M1 code, round to nearest even, saturating to +-6. NaN gives +-6 (callers never pass NaN:
// quantize handles non-finite groups on their own). The sign is taken from `sign_source` so that a
// quotient that rounded to zero keeps the sign of the input (-0 -> code 8, as the hardware converter does).
MSA_HD uint32_t e2m1_code_rne_satfinite(float q, float sign_source) {
  const uint32_t sign = (float_bits(sign_source) >> 28) & 8u;
  float a = ::fabsf(q);
  a = a < kE2M1Max ? a : kE2M1Max;  // also maps NaN to 6
  // Adding a power of two whose ulp is the E2M1 step of a's binade rounds a to that step, ties to
  // even; the parity of the fp32 result is the parity of the E2M1 code, so ties go to the even code.
  const float magic = a < 2.0f ? 4194304.0f /*2^22, step 0.5*/ : (a < 4.0f ? 8388608.0f /*2^23*/ : 16777216.0f /*2^24*/);
#if defined(__CUDA_ARCH__)
  const float r = __fsub_rn(__fadd_rn(a, magic), magic);
#else
  volatile float sum = a + magic;  // volatile: keep the rounding add/sub pair on every compiler
  const float r = sum - magic;
#endif
  const uint32_t mag = r <= 2.0f ? uint32_t(r * 2.0f) : (r == 3.0f ? 5u : (r == 4.0f ? 6u : 7u));
  return sign | mag;
}

// fp32 -> E4M3 (float8_e4m3fn) bits, round to nearest even, saturating to +-448 (Inf too). NaN -> 0x7F.
MSA_HD uint8_t e4m3_rne_satfinite(float x) {
  const uint32_t bits = float_bits(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return kE4M3NaN;
  const float a = bits_float(abs_bits);
  if (a >= kE4M3Max) return sign | 0x7E;
  if (a < 0.015625f) {  // below 2^-6: subnormal E4M3, step 2^-9 (rint = nearest even)
    const float steps = ::nearbyintf(a * 512.0f);
    return sign | uint8_t(steps);  // 8 steps = 2^-6 = the smallest normal, code 0x08: continuous
  }
  // Normal: keep 3 mantissa bits, round to nearest even on the dropped 20 bits.
  const uint32_t rounded = abs_bits + 0x7FFFFu + ((abs_bits >> 20) & 1u);
  const uint32_t code = (rounded >> 20) - ((127u - 7u) << 3);
  return sign | uint8_t(code > 0x7Eu ? 0x7Eu : code);
}

// E4M3 bits -> fp32 (exact).
MSA_HD float e4m3_to_float(uint8_t v) {
  const uint32_t sign = uint32_t(v & 0x80) << 24;
  const uint32_t exp = (v >> 3) & 0xF;
  const uint32_t man = v & 0x7;
  if (exp == 0xF && man == 0x7) return bits_float(0x7FC00000u | sign);
  float mag;
  if (exp == 0) {
    mag = float(man) * 0.001953125f;  // man * 2^-9
  } else {
    mag = bits_float(((exp + 127u - 7u) << 23) | (man << 20));
  }
  return bits_float(float_bits(mag) | sign);
}

}  // namespace msa::nvfp4
