// Warp-level building blocks shared by the kernels: mma.sync, ldmatrix, cp.async and mbarrier wrappers.
// No torch includes.
#pragma once

#include <cstdint>

namespace msa::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// D += A B, m16n8k16, fp16 or bf16 operands, fp32 accumulators (registers as in the PTX fragment layouts).
template <bool kBF16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// D += A B, m16n8k32, E4M3 operands (emulated through fp16 on sm_90: F2FP unpack + two HMMA).
__device__ __forceinline__ void mma_e4m3_m16n8k32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 b16 matrices, transposed; lane l gives the row address of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row_address));
}

// One 8x8 b16 matrix transposed across the warp (sm_75+): lane l gives (row l / 4, columns 2 (l % 4) + {0, 1})
// and gets the same element pair of the transpose.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ void st_shared16(uint32_t address, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// cp.async with zero fill: `live` false copies nothing and writes zeros (the source address is not read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool live) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(live ? 16 : 0)
               : "memory");
}
// Through L1 (.ca): on the H200 the L1-bypassing form (.cg) reaches L2 as one request per 32-byte sector,
// while .ca requests whole lines like ordinary loads.
__device__ __forceinline__ void cp_async16_ca(uint32_t dst, const void* src, bool live) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(live ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src, bool live) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(live ? 8 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool live) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(live ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// mbarriers in shared memory (CTA scope).
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase with this parity has completed. The loop is C++ (not a branch inside the asm), so the
// compiler knows it and reconverges the warp after it: the .aligned ldmatrix / mma.sync that follow need the
// whole warp converged (a hand-written asm spin loop left lanes diverged: wrong fragments, illegal instructions).
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// The mbarrier inits of this thread visible to the async proxy (bulk copies) and the rest of the CTA (cluster
// scope covers a CTA of one). Then a CTA barrier, before any thread waits on them.
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// This thread's arrival on `bar`, with `bytes` more to land in its current phase (by bulk copies naming it).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
// Bulk copy (sm_90+): `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to this CTA's shared
// memory, counted on `bar` as they land. The shared::cluster form is this CTA's own window without a cluster.
__device__ __forceinline__ void bulk_copy_to_shared(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

// Thread-block clusters (sm_90+): the cluster barrier split into its two halves, and stores into a peer CTA's
// shared memory. Every thread of every CTA of the cluster must arrive, and arrive and wait alternate.
// cluster_arrive_relaxed orders nothing (e.g. "this CTA has started"); cluster_arrive releases this thread's
// earlier writes (incl. remote shared-memory stores) to the threads that then return from cluster_wait (acquire).
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
// The shared::cluster address of `address` (this CTA's shared window) in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t cluster_map(uint32_t address, int rank) {
  uint32_t mapped = address;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(mapped) : "r"(address), "r"(rank));
#endif
  return mapped;
}
__device__ __forceinline__ void cluster_store(uint32_t address, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(address), "f"(v) : "memory");
#endif
}
__device__ __forceinline__ void cluster_store(uint32_t address, int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.shared::cluster.s32 [%0], %1;" ::"r"(address), "r"(v) : "memory");
#endif
}
__device__ __forceinline__ void cluster_store(uint32_t address, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(address), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
#endif
}

// Programmatic dependent launch (sm_90+; see launch_status.h's pdl_attribute). grid_dependency_wait: returns
// once the grids this one depends on have completed and their writes are visible; a no-op for a launch without
// the attribute. Call it before the first global read or write. allow_dependent_launch: the next kernel in the
// stream (launched with the attribute) may start once every CTA of this grid has called it or exited; that
// kernel still waits in its own grid_dependency_wait for this grid's completion before it touches memory.
// Trigger only late, or where the dependent grid is small: a dependent launched while this grid runs takes the
// SM slots as they free up and ends spread unevenly over the SMs (measured: sparse decode 64/4 B8 N100K 45 -> 58
// us when every kernel triggered at its start). Kernels that do not call it trigger at exit.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace msa::cuda
