// Issue rates of the instructions the NVFP4 decode loops are made of, measured on the GPU at hand: warp
// instructions per cycle per SM for each alone, and for pairs issued together (do they share a pipe?).
// The question it answers (bench/NOTES.md, GPU plan item 2): is F2FP.F16.E4M3.UNPACK_B (cvt.rn.f16x2.e4m3x2)
// full rate, or is it the NVFP4 decode's ceiling rather than the integer pipe?
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/pipe_rates scripts/pipe_rates.cu
//   /tmp/pipe_rates            # one line per test: warp instr / cycle / SM (a full-rate 16-lane pipe: 2 per
//                              # scheduler every 2 cycles = 2.0 per SM; 32-lane: 4.0)
//
// Each thread runs kChains independent dependency chains so that latency hides; every SM holds kWarps warps.
// Cycles are the SM clock (clock64) from the first warp's start to the last warp's end of each block.
#include <cuda_fp16.h>
#include <cstdint>
#include <cstdio>

#include "pipe_ops.cuh"

namespace {

constexpr int kChains = 8, kIters = 4096, kThreads = 512, kBlocksPerSm = 2;

enum class Op { kCvt, kPrmt, kLop3, kMulHi, kHmul2, kFfma, kHmma, kCvtPrmt, kCvtLop3, kPrmtLop3, kCvtHmma,
                kLop3Hmma, kCvtMulHi };

template <Op kOp>
struct Counts;  // warp instructions per chain step
#define MSA_COUNTS(op, n) template <> struct Counts<op> { static constexpr int kPerStep = n; };
MSA_COUNTS(Op::kCvt, 1)
MSA_COUNTS(Op::kPrmt, 1)
MSA_COUNTS(Op::kLop3, 1)
MSA_COUNTS(Op::kMulHi, 1)
MSA_COUNTS(Op::kHmul2, 1)
MSA_COUNTS(Op::kFfma, 1)
MSA_COUNTS(Op::kHmma, 1)
MSA_COUNTS(Op::kCvtPrmt, 2)
MSA_COUNTS(Op::kCvtLop3, 2)
MSA_COUNTS(Op::kPrmtLop3, 2)
MSA_COUNTS(Op::kCvtHmma, 2)
MSA_COUNTS(Op::kLop3Hmma, 2)
MSA_COUNTS(Op::kCvtMulHi, 2)
#undef MSA_COUNTS

using msa::bench::cvt, msa::bench::prmt, msa::bench::lop3, msa::bench::mulhi, msa::bench::hmul2, msa::bench::ffma;

__device__ __forceinline__ void hmma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <Op kOp>
__global__ void __launch_bounds__(kThreads) rate_kernel(uint32_t seed, uint32_t* sink, long long* cycles) {
  __shared__ long long t0, t1;
  if (threadIdx.x == 0) { t0 = 0x7fffffffffffffffLL; t1 = 0; }
  __syncthreads();
  uint32_t x[kChains], y = seed * 0x9E3779B9u + threadIdx.x;
  float f[kChains], d[kChains][4];
  const uint32_t fa[4] = {y & 0x3c003c00u, y & 0x3c003c01u, y & 0x3c003c02u, y & 0x3c003c03u};  // loop-invariant
  const uint32_t fb[2] = {y & 0x3c003c04u, y & 0x3c003c05u};                                    // MMA operands
#pragma unroll
  for (int c = 0; c < kChains; ++c) {
    x[c] = seed + c * 0x01010101u + threadIdx.x;
    f[c] = 1.0f + c * 1e-3f;
    for (int k = 0; k < 4; ++k) d[c][k] = 0.f;
  }
  const long long start = clock64();
#pragma unroll 4
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (kOp == Op::kCvt) x[c] = cvt(x[c]);
      if constexpr (kOp == Op::kPrmt) x[c] = prmt(x[c], y);
      if constexpr (kOp == Op::kLop3) x[c] = lop3(x[c], y);
      if constexpr (kOp == Op::kMulHi) x[c] = mulhi(x[c], y | 1u);
      if constexpr (kOp == Op::kHmul2) x[c] = hmul2(x[c], y);
      if constexpr (kOp == Op::kFfma) f[c] = ffma(f[c], 0.999f);
      if constexpr (kOp == Op::kHmma) hmma(d[c], fa, fb);
      if constexpr (kOp == Op::kCvtPrmt) x[c] = prmt(cvt(x[c]), y);
      if constexpr (kOp == Op::kCvtLop3) x[c] = lop3(cvt(x[c]), y);
      if constexpr (kOp == Op::kPrmtLop3) x[c] = lop3(prmt(x[c], y), y);
      if constexpr (kOp == Op::kCvtHmma) { x[c] = cvt(x[c]); hmma(d[c], fa, fb); }
      if constexpr (kOp == Op::kLop3Hmma) { x[c] = lop3(x[c], y); hmma(d[c], fa, fb); }
      if constexpr (kOp == Op::kCvtMulHi) x[c] = mulhi(cvt(x[c]), y | 1u);
    }
  }
  const long long stop = clock64();
  atomicMin(&t0, start);
  atomicMax(reinterpret_cast<unsigned long long*>(&t1), static_cast<unsigned long long>(stop));
  uint32_t acc = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) acc ^= x[c] ^ __float_as_uint(f[c]) ^ __float_as_uint(d[c][0] + d[c][3]);
  if (acc == 0x12345678u) sink[threadIdx.x] = acc;  // keeps the chains alive
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <Op kOp>
void run(const char* name, int sms, uint32_t* sink, long long* cycles_dev) {
  const int blocks = sms * kBlocksPerSm;
  rate_kernel<kOp><<<blocks, kThreads>>>(1u, sink, cycles_dev);  // warm-up
  rate_kernel<kOp><<<blocks, kThreads>>>(2u, sink, cycles_dev);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) { std::printf("%-12s error %s\n", name, cudaGetErrorString(err)); return; }
  static long long cycles[4096];
  cudaMemcpy(cycles, cycles_dev, blocks * sizeof(long long), cudaMemcpyDeviceToHost);
  long long sum = 0;
  for (int i = 0; i < blocks; ++i) sum += cycles[i];
  const double mean_cycles = static_cast<double>(sum) / blocks;
  // Both blocks of an SM run at once, so per SM: 2 blocks' warp instructions over one block's span.
  const double warp_instr = static_cast<double>(kBlocksPerSm) * (kThreads / 32) * kIters * kChains *
                            Counts<kOp>::kPerStep;
  std::printf("%-12s %6.2f warp instr / cycle / SM  (%.0f cycles per block)\n", name, warp_instr / mean_cycles,
              mean_cycles);
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  uint32_t* sink;
  long long* cycles;
  cudaMalloc(&sink, kThreads * sizeof(uint32_t));
  cudaMalloc(&cycles, 4096 * sizeof(long long));
  std::printf("%d SMs, %d warps per SM, %d chains per thread\n", sms, kBlocksPerSm * kThreads / 32, kChains);
  run<Op::kCvt>("cvt e4m3x2", sms, sink, cycles);
  run<Op::kPrmt>("prmt", sms, sink, cycles);
  run<Op::kLop3>("lop3", sms, sink, cycles);
  run<Op::kMulHi>("mad.hi", sms, sink, cycles);
  run<Op::kHmul2>("hmul2", sms, sink, cycles);
  run<Op::kFfma>("ffma", sms, sink, cycles);
  run<Op::kHmma>("hmma 16816", sms, sink, cycles);
  run<Op::kCvtPrmt>("cvt+prmt", sms, sink, cycles);
  run<Op::kCvtLop3>("cvt+lop3", sms, sink, cycles);
  run<Op::kPrmtLop3>("prmt+lop3", sms, sink, cycles);
  run<Op::kCvtMulHi>("cvt+mad.hi", sms, sink, cycles);
  run<Op::kCvtHmma>("cvt+hmma", sms, sink, cycles);
  run<Op::kLop3Hmma>("lop3+hmma", sms, sink, cycles);
  return 0;
}
