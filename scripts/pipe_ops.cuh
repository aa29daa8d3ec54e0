// Single-instruction asm wrappers for the pipe-rate microbenchmarks (scripts/pipe_rates.cu, scripts/wgmma_rates.cu):
// asm volatile so that each call is exactly one instruction of its pipe, kept in program order.
#pragma once

#include <cstdint>

namespace msa::bench {

// cvt.rn.f16x2.e4m3x2 of the low two bytes (F2FP.F16.E4M3.UNPACK_B), reading the half in place.
__device__ __forceinline__ uint32_t cvt(uint32_t x) {
  uint32_t out;
  asm volatile("{.reg .b16 l, h; mov.b32 {l, h}, %1; cvt.rn.f16x2.e4m3x2 %0, l;}" : "=r"(out) : "r"(x));
  return out;
}
__device__ __forceinline__ uint32_t prmt(uint32_t x, uint32_t y) {
  uint32_t out;
  asm volatile("prmt.b32 %0, %1, %2, %3;" : "=r"(out) : "r"(x), "r"(y), "r"(x));
  return out;
}
__device__ __forceinline__ uint32_t lop3(uint32_t x, uint32_t y) {
  uint32_t out;
  asm volatile("lop3.b32 %0, %1, %2, %3, 0x96;" : "=r"(out) : "r"(x), "r"(y), "r"(0x80808080u));
  return out;
}
__device__ __forceinline__ uint32_t mulhi(uint32_t x, uint32_t y) {  // y in a register: a constant 2^k
  uint32_t out;                                                    // multiplier would become a shift
  asm volatile("mad.hi.u32 %0, %1, %2, %1;" : "=r"(out) : "r"(x), "r"(y));
  return out;
}
__device__ __forceinline__ uint32_t hmul2(uint32_t x, uint32_t y) {
  uint32_t out;
  asm volatile("mul.rn.f16x2 %0, %1, %2;" : "=r"(out) : "r"(x), "r"(y));
  return out;
}
__device__ __forceinline__ uint32_t hfma2(uint32_t x, uint32_t y) {
  uint32_t out;
  asm volatile("fma.rn.f16x2 %0, %1, %2, %1;" : "=r"(out) : "r"(x), "r"(y));
  return out;
}
__device__ __forceinline__ float ffma(float x, float y) {
  float out;
  asm volatile("fma.rn.f32 %0, %1, %2, %1;" : "=f"(out) : "f"(x), "f"(y));
  return out;
}

}  // namespace msa::bench
