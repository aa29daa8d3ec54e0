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

// This CTA's slot for a point, on thread 0 only (nullptr elsewhere and past kCtas).
__device__ __forceinline__ uint64_t* trace_slot(int kernel, int point) {
  const int cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  return threadIdx.x == 0 && cta < TraceShape::kCtas ? &msa_trace_buffer[kernel][cta][point] : nullptr;
}
__device__ __forceinline__ void trace_point(int kernel, int point) {
  if (uint64_t* slot = trace_slot(kernel, point)) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    *slot = t;
  }
}
// A value instead of the time (a CTA's page count), and the SM id + 1, for the harnesses' own analysis.
__device__ __forceinline__ void trace_value(int kernel, int point, uint64_t value) {
  if (uint64_t* slot = trace_slot(kernel, point)) *slot = value;
}
__device__ __forceinline__ void trace_sm(int kernel, int point) {
  if (uint64_t* slot = trace_slot(kernel, point)) {
    uint32_t id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    *slot = uint64_t(id) + 1u;
  }
}
#define MSA_TRACE(kernel, point) ::msa::cuda::trace_point(kernel, point)
#define MSA_TRACE_VALUE(kernel, point, value) ::msa::cuda::trace_value(kernel, point, value)
#define MSA_TRACE_SM(kernel, point) ::msa::cuda::trace_sm(kernel, point)
#else
#define MSA_TRACE(kernel, point) ((void)0)
#define MSA_TRACE_VALUE(kernel, point, value) ((void)0)
#define MSA_TRACE_SM(kernel, point) ((void)0)
#endif

}  // namespace msa::cuda
