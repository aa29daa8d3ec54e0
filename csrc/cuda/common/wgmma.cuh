// Warpgroup MMA (wgmma, sm_90a only) building blocks: shared-memory matrix descriptors and the m64nNk16 forms
// with A from registers that the kernels use (fp16 or bf16 operands, fp32 accumulators, N = 8..128), and the
// m64n64k32 / m64n16k32 E4M3 forms. Include only from code compiled for sm_90a (guard with MSA_WGMMA).
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MSA_WGMMA 1
#else
#define MSA_WGMMA 0
#endif

namespace msa::cuda {

// Shared-memory matrix descriptor with the 128-byte swizzle: rows of 128 bytes whose 16-byte chunk c is stored
// at chunk c ^ (row % 8), 8-row atoms of 1024 bytes (the atom must start 1024-byte aligned). K-major operand:
// `sbo` = bytes between 8-row groups, `lbo` unused. MN-major (transposed) operand: `lbo` = bytes between 64-element
// column blocks along M/N, `sbo` = bytes between 8-row groups along K.
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_addr & 0x3FFFFu) >> 4) | (uint64_t((lbo >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFFu) << 32) | (uint64_t(1) << 62);
}

// Shared-memory matrix descriptor without swizzle: 8-row x 16-byte core matrices, `lbo` bytes apart along K,
// `sbo` bytes apart along M/N.
__device__ __forceinline__ uint64_t wgmma_desc_interleave(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_addr & 0x3FFFFu) >> 4) | (uint64_t((lbo >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFFu) << 32);
}

#if MSA_WGMMA
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Generic-proxy shared-memory writes (st.shared, cp.async) made visible to the async proxy (wgmma operands): run by
// the writing threads after their writes, before the release that hands the data over.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Per-thread register budget of the executing warpgroup (warp-specialized kernels: producers give registers back,
// consumers take them). .inc waits until the registers are free.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256);
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256);
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
#else
// Other targets (and the host pass): kernels that also build there keep their wgmma paths behind `if constexpr`
// and launch them on Hopper only; reaching one elsewhere traps.
__device__ __forceinline__ void wgmma_fence() { __trap(); }
__device__ __forceinline__ void wgmma_commit() { __trap(); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  __trap();
}
__device__ __forceinline__ void fence_proxy_async_shared() { __trap(); }
#endif

// Keeps the compiler from moving accumulator reads or writes across a wgmma fence / wait.
template <int kCount>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int kCount>
__device__ __forceinline__ void wgmma_fence_operands(uint32_t (&r)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Operand lists of the accumulator registers: the asm text "{%0, ..., %(n-1)}" and the "+f" constraints.
#define MSA_WGMMA_D4 "{%0, %1, %2, %3}"
#define MSA_WGMMA_OUT4(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define MSA_WGMMA_D8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define MSA_WGMMA_OUT8(d) MSA_WGMMA_OUT4(d), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define MSA_WGMMA_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define MSA_WGMMA_OUT16(d)                                                                                             \
  MSA_WGMMA_OUT8(d), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),         \
      "+f"(d[15])
#define MSA_WGMMA_D32                                                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "                   \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define MSA_WGMMA_OUT32(d)                                                                                             \
  MSA_WGMMA_OUT16(d), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),      \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),          \
      "+f"(d[31])
#define MSA_WGMMA_D64                                                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "                   \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "                    \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "                    \
  "%59, %60, %61, %62, %63}"
#define MSA_WGMMA_OUT64(d)                                                                                             \
  MSA_WGMMA_OUT32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]),      \
      "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]),          \
      "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),          \
      "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),          \
      "+f"(d[63])
// One m64nNk16 asm for operand type `type` ("f16" / "bf16"): D list, then A (4 registers), the B descriptor,
// the accumulate flag and the transpose immediate at the operand numbers `A`, `DESC`, `ACC`, `TRANS`.
#define MSA_WGMMA_ASM(N, type, DLIST, OUTS, A, DESC, ACC, TRANS)                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " ACC ", 0;\n"                                                        \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." type "." type " " DLIST ", " A ", " DESC              \
               ", p, 1, 1, " TRANS ";\n}\n"                                                                            \
               : OUTS(d)                                                                                               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate), "n"(kTransB ? 1 : 0))
#define MSA_WGMMA_SHAPE(N, DLIST, OUTS, A, DESC, ACC, TRANS)                                                           \
  if constexpr (kN == N) {                                                                                             \
    if constexpr (kBF16) {                                                                                             \
      MSA_WGMMA_ASM(N, "bf16", DLIST, OUTS, A, DESC, ACC, TRANS);                                                      \
    } else {                                                                                                           \
      MSA_WGMMA_ASM(N, "f16", DLIST, OUTS, A, DESC, ACC, TRANS);                                                       \
    }                                                                                                                  \
  }

// D (64 x kN, fp32: d[4 j + x] = the m16n8 accumulator x of n-tile j for the warp's 16 rows) (+)= A B, A = 64 x 16
// from registers (per warp: the m16n8k16 A fragment of its 16 rows), B = 16 x kN through `b_desc` (fp16, or bf16
// when kBF16); kTransB: B is MN-major in shared memory. `accumulate` = 0 overwrites D. kN = 8, 16, 32, 64, 128.
template <int kN, bool kBF16, bool kTransB>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t b_desc,
                                             int accumulate) {
  static_assert(kN == 8 || kN == 16 || kN == 32 || kN == 64 || kN == 128);
#if MSA_WGMMA
  MSA_WGMMA_SHAPE(8, MSA_WGMMA_D4, MSA_WGMMA_OUT4, "{%4, %5, %6, %7}", "%8", "%9", "%10")
  MSA_WGMMA_SHAPE(16, MSA_WGMMA_D8, MSA_WGMMA_OUT8, "{%8, %9, %10, %11}", "%12", "%13", "%14")
  MSA_WGMMA_SHAPE(32, MSA_WGMMA_D16, MSA_WGMMA_OUT16, "{%16, %17, %18, %19}", "%20", "%21", "%22")
  MSA_WGMMA_SHAPE(64, MSA_WGMMA_D32, MSA_WGMMA_OUT32, "{%32, %33, %34, %35}", "%36", "%37", "%38")
  MSA_WGMMA_SHAPE(128, MSA_WGMMA_D64, MSA_WGMMA_OUT64, "{%64, %65, %66, %67}", "%68", "%69", "%70")
#else
  (void)d, (void)a, (void)b_desc, (void)accumulate;
  __trap();
#endif
}

// D (64 x kN, fp32, laid out as in wgmma_m64k16) (+)= A B with fp16 operands, both from shared memory: A = 64 x 16
// K-major through `a_desc`, B = 16 x kN K-major through `b_desc`. kN = 8, 16, 32, 64, 128. (Used by
// scripts/wgmma_rates.cu; the index kernel's shared-memory-keys variant that used it measured slower: NOTES.)
template <int kN>
__device__ __forceinline__ void wgmma_m64k16_ss_f16(float (&d)[kN / 2], uint64_t a_desc, uint64_t b_desc,
                                                    int accumulate) {
  static_assert(kN == 8 || kN == 16 || kN == 32 || kN == 64 || kN == 128);
#if MSA_WGMMA
#define MSA_WGMMA_SS(N, DLIST, OUTS, A, B, ACC)                                                                      \
  if constexpr (kN == N) {                                                                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " ACC ", 0;\n"                                                      \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 " DLIST ", " A ", " B ", p, 1, 1, 0, 0;\n}\n" \
                 : OUTS(d)                                                                                             \
                 : "l"(a_desc), "l"(b_desc), "r"(accumulate));                                                         \
  }
  MSA_WGMMA_SS(8, MSA_WGMMA_D4, MSA_WGMMA_OUT4, "%4", "%5", "%6")
  MSA_WGMMA_SS(16, MSA_WGMMA_D8, MSA_WGMMA_OUT8, "%8", "%9", "%10")
  MSA_WGMMA_SS(32, MSA_WGMMA_D16, MSA_WGMMA_OUT16, "%16", "%17", "%18")
  MSA_WGMMA_SS(64, MSA_WGMMA_D32, MSA_WGMMA_OUT32, "%32", "%33", "%34")
  MSA_WGMMA_SS(128, MSA_WGMMA_D64, MSA_WGMMA_OUT64, "%64", "%65", "%66")
#undef MSA_WGMMA_SS
#else
  (void)d, (void)a_desc, (void)b_desc, (void)accumulate;
  __trap();
#endif
}

// D (64 x 64, fp32, laid out as in wgmma_m64k16) (+)= A B with E4M3 operands, K = 32: A = 64 x 32 from registers
// (per warp: the m16n8k32 8-bit A fragment of its 16 rows: a[0] = row g8, k 4 quad + [0, 4) (4 bytes, low first),
// a[1] = row g8 + 8, a[2] / a[3] = the same at k + 16), B = 32 x 64 K-major through `b_desc` (FP8 wgmma has no
// transposed operands). The tensor cores accumulate the 32 products at reduced precision before the fp32 add.
__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[32], const uint32_t (&a)[4], uint64_t b_desc,
                                                     int accumulate) {
#if MSA_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " MSA_WGMMA_D32
               ", {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
               : MSA_WGMMA_OUT32(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
#else
  (void)d, (void)a, (void)b_desc, (void)accumulate;
  __trap();
#endif
}

// D (64 x 16, fp32, laid out as in wgmma_m64k16: d[4 j + x] for n-tile j) (+)= A B with E4M3 operands, K = 32: A as
// in wgmma_m64n64k32_e4m3 (per warp the m16n8k32 8-bit A fragment of its 16 rows), B = 32 x 16 K-major through
// `b_desc`. Same reduced-precision accumulation of the 32 products.
__device__ __forceinline__ void wgmma_m64n16k32_e4m3(float (&d)[8], const uint32_t (&a)[4], uint64_t b_desc,
                                                     int accumulate) {
#if MSA_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 " MSA_WGMMA_D8
               ", {%8, %9, %10, %11}, %12, p, 1, 1;\n}\n"
               : MSA_WGMMA_OUT8(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
#else
  (void)d, (void)a, (void)b_desc, (void)accumulate;
  __trap();
#endif
}

#undef MSA_WGMMA_SHAPE
#undef MSA_WGMMA_ASM
#undef MSA_WGMMA_D4
#undef MSA_WGMMA_OUT4
#undef MSA_WGMMA_D8
#undef MSA_WGMMA_OUT8
#undef MSA_WGMMA_D16
#undef MSA_WGMMA_OUT16
#undef MSA_WGMMA_D32
#undef MSA_WGMMA_OUT32
#undef MSA_WGMMA_D64
#undef MSA_WGMMA_OUT64

}  // namespace msa::cuda
