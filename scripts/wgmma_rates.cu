// Tensor rate of fp16 wgmma m64nNk16 by shape and operand source, measured on the GPU at hand: what the index
// score kernel's 8 wgmma m64n32k16 per 64-key slice (A = decoded keys, B = the query tile) can run at, against
// the wide shapes that reach the tensor peak. Every CTA is one warpgroup running chains of 8 dependent wgmmas
// (one commit group, then wait_group 0, like the score kernel's slice), `ctas` CTAs per SM over every SM.
//
//   nvcc -O3 -std=c++20 -Icsrc -Icsrc/include -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_rates \
//       scripts/wgmma_rates.cu && /tmp/wgmma_rates
//
// Prints one line per (shape, operands, CTAs per SM): TFLOP/s (2 x multiply-adds) and multiply-adds per SM per
// cycle at the clock the driver reports. Operand values are zero (the rate does not depend on them).
//
// Then the overlap question: each commit group also gets ~170 integer-pipe instructions (8 independent chains of
// PRMT + LOP3 + F2FP, about one slice's NVFP4 decode per warp), placed between the commit and the wait (overlapping
// the group's own wgmmas) or after the wait (overlapping other CTAs' only), against the same ALU work alone and
// the wgmmas alone: microseconds per kernel. If "both" is near the sum, the SM does not run the two together.
#include <cstdint>
#include <cstdio>

#include "cuda/common/wgmma.cuh"
#include "pipe_ops.cuh"

namespace {

constexpr int kSteps = 8;      // wgmmas per commit group (one 64-key slice of the score kernel: K = 128)
constexpr int kIters = 2048;   // commit groups per CTA

// The other work, 3 instructions per step: kOp 0 = PRMT + LOP3 + F2FP (the decode's mix), 1 = 3 LOP3, 2 = 3 PRMT,
// 3 = 3 F2FP, 4 = 3 FFMA (FMA pipe), 5 = 3 HFMA2.
template <int kOp>
__device__ __forceinline__ uint32_t one_op(uint32_t x, uint32_t y) {
  using namespace msa::bench;
  if constexpr (kOp == 1) return lop3(x, y);
  if constexpr (kOp == 2) return prmt(x, y);
  if constexpr (kOp == 3) return cvt(x);  // (y unused: an XOR with it would add a LOP3)
  if constexpr (kOp == 4) return __float_as_uint(ffma(__uint_as_float(x), __uint_as_float(y)));
  if constexpr (kOp == 5) return hfma2(x, y);
}
template <int kOp>
__device__ __forceinline__ uint32_t alu_step(uint32_t x, uint32_t y) {
  if constexpr (kOp == 0) {
    const uint32_t p = msa::bench::prmt(x, y);
    return msa::bench::cvt(msa::bench::lop3(p, y)) ^ p;
  } else {
    return one_op<kOp>(one_op<kOp>(one_op<kOp>(x, y), y), y);
  }
}

// kF8 (kN = 64, A from registers): E4M3 wgmma m64n64k32 instead (half the instructions, and so half the
// accumulator reads and writes, per multiply-add).
template <int kN, bool kSS, int kAlu, bool kMma, int kOp, bool kF8 = false>
__device__ __forceinline__ void wgmma_rate_body(float* out) {
#if MSA_WGMMA
  // B: kN x 16 fp16 K-major, no swizzle ([kN / 8][2 chunks][8 rows][16 B]); A (SS): 64 x 16 the same way.
  __shared__ __align__(128) uint8_t b_tile[kN * 32];
  __shared__ __align__(128) uint8_t a_tile[64 * 32];
  for (int i = threadIdx.x; i < kN * 8; i += 128) reinterpret_cast<uint32_t*>(b_tile)[i] = 0u;
  for (int i = threadIdx.x; i < 64 * 8; i += 128) reinterpret_cast<uint32_t*>(a_tile)[i] = 0u;
  msa::cuda::fence_proxy_async_shared();
  __syncthreads();
  const uint64_t b_desc =
      msa::cuda::wgmma_desc_interleave(static_cast<uint32_t>(__cvta_generic_to_shared(b_tile)), 128, 256);
  const uint64_t a_desc =
      msa::cuda::wgmma_desc_interleave(static_cast<uint32_t>(__cvta_generic_to_shared(a_tile)), 128, 256);
  uint32_t a[4] = {threadIdx.x & 1u, 0u, 0u, 0u};  // A fragment (RS): zeros, kept opaque to the compiler
  float d[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) d[i] = 0.0f;
  constexpr int kChains = 8, kAluSteps = 7;  // 8 x 7 x 3 = 168 integer-pipe instructions per group
  uint32_t x[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) x[c] = threadIdx.x * 0x01010101u + c;
  auto alu = [&] {
#pragma unroll
    for (int step = 0; step < kAluSteps; ++step)
#pragma unroll
      for (int c = 0; c < kChains; ++c) x[c] = alu_step<kOp>(x[c], kOp == 0 ? x[(c + 1) % kChains] : 0x3c003c01u);
  };
  for (int it = 0; it < kIters; ++it) {
    if constexpr (kMma) {
      msa::cuda::wgmma_fence_operands(a);
      msa::cuda::wgmma_fence_operands(d);
      msa::cuda::wgmma_fence();
#pragma unroll
      for (int k = 0; k < kSteps; ++k) {
        if constexpr (kF8) {
          static_assert(kN == 64);
          msa::cuda::wgmma_m64n64k32_e4m3(d, a, b_desc, 1);
        } else if constexpr (kSS) {
          msa::cuda::wgmma_m64k16_ss_f16<kN>(d, a_desc, b_desc, 1);
        } else {
          msa::cuda::wgmma_m64k16<kN, false, false>(d, a, b_desc, 1);
        }
      }
      msa::cuda::wgmma_commit();
    }
    if constexpr (kAlu == 1 || !kMma) alu();
    if constexpr (kMma) {
      msa::cuda::wgmma_wait<0>();
      msa::cuda::wgmma_fence_operands(d);
    }
    if constexpr (kAlu == 2 && kMma) alu();
  }
  uint32_t folded = 0u;
#pragma unroll
  for (int c = 0; c < kChains; ++c) folded ^= x[c];
  if (folded == 0x12345678u) out[0] = 1.0f;  // keeps the ALU chains alive
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) sum += d[i];
  if (sum != 0.0f) out[blockIdx.x * 128 + threadIdx.x] = sum;  // never true; keeps the chain alive
#endif
}

// kAlu: 0 none; 1 between the commit and the wait; 2 after the wait; 3 split roles: CTAs of odd (blockIdx / SMs)
// run only the wgmmas, the others only the ALU work (so ptxas cannot interleave the two in one instruction
// stream: it moves independent ALU work between the HGMMAs, which delays their issue). kMma = false: the ALU work
// alone.
template <int kN, bool kSS, int kAlu = 0, bool kMma = true, int kOp = 0, bool kF8 = false>
__global__ void __launch_bounds__(128) wgmma_rate_kernel(float* out, int sms) {
  if constexpr (kAlu == 3) {
    if ((blockIdx.x / sms) & 1) {
      wgmma_rate_body<kN, kSS, 0, true, kOp, kF8>(out);
    } else {
      wgmma_rate_body<kN, kSS, 0, false, kOp, kF8>(out);
    }
  } else {
    wgmma_rate_body<kN, kSS, kAlu, kMma, kOp, kF8>(out);
  }
}

struct Result {
  double tflops = 0.0, fma_per_sm_cycle = 0.0, us = 0.0;
};

template <int kN, bool kSS, int kAlu = 0, bool kMma = true, int kOp = 0, bool kF8 = false>
Result run(int ctas_per_sm, int sms, double clock_hz, float* out) {
  const int blocks = ctas_per_sm * sms;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  wgmma_rate_kernel<kN, kSS, kAlu, kMma, kOp, kF8><<<blocks, 128>>>(out, sms);  // warm-up
  cudaEventRecord(start);
  wgmma_rate_kernel<kN, kSS, kAlu, kMma, kOp, kF8><<<blocks, 128>>>(out, sms);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const double fma = double(blocks) * kIters * kSteps * 64.0 * kN * (kF8 ? 32.0 : 16.0);
  Result r;
  r.tflops = 2.0 * fma / (ms * 1e-3) / 1e12;
  r.fma_per_sm_cycle = fma / (ms * 1e-3) / sms / clock_hz;
  r.us = ms * 1e3;
  return r;
}

}  // namespace

int main() {
  int device = 0, sms = 0, clock_khz = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  float* out = nullptr;
  cudaMalloc(&out, size_t(8) * 1024 * 1024);
  const double clock_hz = clock_khz * 1e3;
  std::printf("%s, %d SMs, driver clock %.0f MHz; fp16 wgmma m64nNk16, chains of %d per commit group\n", prop.name,
              sms, clock_hz / 1e6, kSteps);
  std::printf("%-6s %-4s %-8s %10s %16s\n", "N", "A", "CTAs/SM", "TFLOP/s", "FMA/SM/cycle");
  auto line = [](int n, const char* src, int ctas, Result r) {
    std::printf("%-6d %-4s %-8d %10.1f %16.0f\n", n, src, ctas, r.tflops, r.fma_per_sm_cycle);
  };
  for (int ctas : {1, 2, 4}) {
    line(32, "RS", ctas, run<32, false>(ctas, sms, clock_hz, out));
    line(32, "SS", ctas, run<32, true>(ctas, sms, clock_hz, out));
    line(64, "RS", ctas, run<64, false>(ctas, sms, clock_hz, out));
    line(128, "RS", ctas, run<128, false>(ctas, sms, clock_hz, out));
    line(128, "SS", ctas, run<128, true>(ctas, sms, clock_hz, out));
  }
  line(8, "RS", 4, run<8, false>(4, sms, clock_hz, out));
  line(16, "RS", 4, run<16, false>(4, sms, clock_hz, out));
  std::printf("\noverlap, 4 CTAs per SM, N = 32 (us per kernel): wgmma alone, ALU alone, ALU before the wait, "
              "ALU after the wait\n");
  for (int ctas : {4, 2}) {
    const double mma_rs = run<32, false>(ctas, sms, clock_hz, out).us;
    const double alu = run<32, false, 0, false>(ctas, sms, clock_hz, out).us;
    const double rs_in = run<32, false, 1>(ctas, sms, clock_hz, out).us;
    const double rs_after = run<32, false, 2>(ctas, sms, clock_hz, out).us;
    const double mma_ss = run<32, true>(ctas, sms, clock_hz, out).us;
    const double ss_in = run<32, true, 1>(ctas, sms, clock_hz, out).us;
    const double ss_after = run<32, true, 2>(ctas, sms, clock_hz, out).us;
    std::printf("%d CTAs/SM  RS: %.1f  ALU: %.1f  in: %.1f  after: %.1f   SS: %.1f  in: %.1f  after: %.1f\n", ctas,
                mma_rs, alu, rs_in, rs_after, mma_ss, ss_in, ss_after);
  }
  std::printf("\nsplit roles, 4 CTAs per SM (2 wgmma-only + 2 ALU-only, us): wgmma 2 CTAs %.1f, ALU 2 CTAs %.1f, "
              "both %.1f (max if they overlap, sum if not)\n", run<32, false>(2, sms, clock_hz, out).us,
              run<32, false, 0, false>(2, sms, clock_hz, out).us, run<32, false, 3>(4, sms, clock_hz, out).us);
  std::printf("split roles, FFMA instead: ALU 2 CTAs %.1f, both %.1f\n",
              run<32, false, 0, false, 4>(2, sms, clock_hz, out).us, run<32, false, 3, true, 4>(4, sms, clock_hz, out).us);
  const Result f8 = run<64, false, 0, true, 0, true>(2, sms, clock_hz, out);
  std::printf("split roles, E4M3 m64n64k32 wgmmas (%.0f TFLOP/s alone, 2 CTAs): wgmma 2 CTAs %.1f, both (mix ALU) %.1f\n",
              f8.tflops, f8.us, run<64, false, 3, true, 0, true>(4, sms, clock_hz, out).us);
  std::printf("split roles, f16 m64n128k16 wgmmas: wgmma 2 CTAs %.1f, both (mix ALU) %.1f\n",
              run<128, false>(2, sms, clock_hz, out).us, run<128, false, 3>(4, sms, clock_hz, out).us);
  std::printf("\nby instruction, 4 CTAs per SM, N = 32 RS (us): the other work alone, with the wgmmas (before the "
              "wait); wgmma alone %.1f\n", run<32, false>(4, sms, clock_hz, out).us);
  auto op_line = [](const char* name, double alone, double both) {
    std::printf("%-6s alone %8.1f  with wgmma %8.1f\n", name, alone, both);
  };
  op_line("LOP3", run<32, false, 0, false, 1>(4, sms, clock_hz, out).us, run<32, false, 1, true, 1>(4, sms, clock_hz, out).us);
  op_line("PRMT", run<32, false, 0, false, 2>(4, sms, clock_hz, out).us, run<32, false, 1, true, 2>(4, sms, clock_hz, out).us);
  op_line("F2FP", run<32, false, 0, false, 3>(4, sms, clock_hz, out).us, run<32, false, 1, true, 3>(4, sms, clock_hz, out).us);
  op_line("FFMA", run<32, false, 0, false, 4>(4, sms, clock_hz, out).us, run<32, false, 1, true, 4>(4, sms, clock_hz, out).us);
  op_line("HFMA2", run<32, false, 0, false, 5>(4, sms, clock_hz, out).us, run<32, false, 1, true, 5>(4, sms, clock_hz, out).us);
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  cudaFree(out);
  return 0;
}
