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
// A value instead of the time (e.g. the SM id or a CTA's page count), for the harness's own analysis.
__device__ __forceinline__ void trace_value(int kernel, int point, uint64_t value) {
  const int cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (threadIdx.x == 0 && cta < TraceShape::kCtas) msa_trace_buffer[kernel][cta][point] = value;
}
__device__ __forceinline__ uint32_t trace_smid() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}
#define MSA_TRACE(kernel, point) ::msa::cuda::trace_point(kernel, point)
#define MSA_TRACE_VALUE(kernel, point, value) ::msa::cuda::trace_value(kernel, point, value)
#define MSA_TRACE_SMID() ::msa::cuda::trace_smid()
#else
#define MSA_TRACE(kernel, point) ((void)0)
#define MSA_TRACE_VALUE(kernel, point, value) ((void)0)
#define MSA_TRACE_SMID() 0u
#endif

}  // namespace msa::cuda
