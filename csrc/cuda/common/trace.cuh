// Optional per-CTA timelines for latency studies (scripts/trace_*.cu). Built with MSA_KERNEL_TRACE defined,
// MSA_TRACE(kernel, point) makes thread 0 of each CTA store %globaltimer (ns) into
// msa_trace_buffer[kernel][cta][point]; otherwise it compiles to nothing (the library never defines the macro).
#pragma once

#include <cstdint>

namespace msa::cuda {

struct TraceShape {
  static constexpr int kKernels = 3;   // 0: index scores, 1: top-k select, 2: sparse decode (split kernel)
  static constexpr int kCtas = 4096;   // CTAs past this are not recorded
  static constexpr int kPoints = 12;
};

#ifdef MSA_KERNEL_TRACE
__device__ uint64_t msa_trace_buffer[TraceShape::kKernels][TraceShape::kCtas][TraceShape::kPoints];

__device__ __forceinline__ void trace_point(int kernel, int point) {
  const int cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (threadIdx.x == 0 && cta < TraceShape::kCtas) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    msa_trace_buffer[kernel][cta][point] = t;
  }
}
#define MSA_TRACE(kernel, point) ::msa::cuda::trace_point(kernel, point)
#else
#define MSA_TRACE(kernel, point) ((void)0)
#endif

}  // namespace msa::cuda
