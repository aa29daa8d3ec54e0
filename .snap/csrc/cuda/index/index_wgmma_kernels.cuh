// Decode-indexer page scores on Hopper (sm_90a) with warpgroup MMA: FP8 (E4M3) and NVFP4 index keys.
// No torch includes.
//
// One CTA = one warpgroup (4 warps) streams a run of pages of one request. A page is two slices of 64 keys;
// warp w owns keys 16 w .. 16 w + 15 of each slice and loads them straight from global memory into the A
// fragments of the wgmma (keys are A, in registers; NVFP4 decoded on the way to exactly the values of the
// MSA Q8KV4 dequant). The query rows (N = Q x H padded to 8, 16, 32 or 64) are the B operand, in shared
// memory once per CTA. Default operands: both widened exactly to fp16, wgmma m64nNk16 (fp32 accumulation
// meets the 1e-4 score tolerance); native FP8 m64nNk32 variants are kept as experiments (WgmmaOperands).
// Hopper runs FP8 mma.sync through fp16 (unpack + two HMMA per k32), so wgmma is its tensor-core path here.
//
// The dims inside each k-step are permuted as in the mma.sync kernel (thread `quad` owns dims
// [32 quad, 32 quad + 32); k-step s takes the next 8 (FP8) or 4 (fp16) of them); the query tile in shared
// memory is written in the same permuted order, so each thread's key bytes stay one contiguous load.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/nvfp4.cuh"
#include "cuda/index/index_launch.h"
#include "cuda/index/index_stream_kernels.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MSA_INDEX_WGMMA 1
#else
#define MSA_INDEX_WGMMA 0
#endif

namespace msa::index {

using nvfp4::e4m3x2_to_f16x2;

struct WgmmaConfig {
  static constexpr int kThreads = 128;  // one warpgroup
  static constexpr int kPage = 128;
  static constexpr int kSlices = 2;  // 64-key slices per page
  static constexpr int kDepth = 4;   // slices of loads in flight per warp (even: whole pages)
};

// Shared-memory matrix descriptor, no swizzle: 8-row x 16-byte core matrices, `lbo` bytes apart along K,
// `sbo` bytes apart along N.
__device__ __forceinline__ uint64_t wgmma_smem_desc(const void* p, uint32_t lbo, uint32_t sbo) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t((lbo >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFFu) << 32);
}

template <int kN>
struct WgmmaE4M3;

template <>
struct WgmmaE4M3<8> {
  __device__ static void run(float (&d)[4], const uint32_t (&a)[4], uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
  }
};
template <>
struct WgmmaE4M3<16> {
  __device__ static void run(float (&d)[8], const uint32_t (&a)[4], uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
  }
};
template <>
struct WgmmaE4M3<32> {
  __device__ static void run(float (&d)[16], const uint32_t (&a)[4], uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
  }
};
template <>
struct WgmmaE4M3<64> {
  __device__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
  }
};

template <int kN>
struct WgmmaF16;

template <>
struct WgmmaF16<8> {
  __device__ static void run(float (&d)[4], const uint32_t (&a)[4], uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
  }
};
template <>
struct WgmmaF16<16> {
  __device__ static void run(float (&d)[8], const uint32_t (&a)[4], uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
  }
};
template <>
struct WgmmaF16<32> {
  __device__ static void run(float (&d)[16], const uint32_t (&a)[4], uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
  }
};
template <>
struct WgmmaF16<64> {
  __device__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
  }
};

template <int kCount>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The f16 A fragments (8 k16-steps x 4 registers) of one slice: keys g (a0, a2) and g + 8 (a1, a3). k16-step
// t takes the thread's dims 32 quad + 4 t + [0, 4): (a0 | a1) dims + 0, 1; (a2 | a3) dims + 2, 3.
// NVFP4 goes through the E4M3 bytes of the Q8KV4 dequant (per-scale tables, 9 integer instructions per 8
// codes) and one exact cvt per pair to fp16.
template <KeyKind kKeys>
__device__ __forceinline__ void slice_fragments_f16(const SliceFetch<kKeys>& f, const uint2* tables,
                                                    uint32_t (&a)[8][4]) {
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    if constexpr (kKeys == KeyKind::kNvfp4) {
      const uint32_t codes[4] = {f.codes[kk].x, f.codes[kk].y, f.codes[kk].z, f.codes[kk].w};
#pragma unroll
      for (int gh = 0; gh < 2; ++gh) {
        const uint2 t = tables[(f.scales[kk] >> (8 * gh)) & 0xFFu];
#pragma unroll
        for (int s = 2 * gh; s < 2 * gh + 2; ++s) {  // word s: dims 32 quad + 8 s + [0, 8) = k16-steps 2s, 2s+1
          uint32_t lo, hi;  // E4M3 bytes of codes 0..3, 4..7
          e2m1x8_to_e4m3x8(codes[s], t.x, t.y, lo, hi);
          a[2 * s][kk] = e4m3_lo_to_f16x2(lo);
          a[2 * s][kk + 2] = e4m3_hi_to_f16x2(lo);
          a[2 * s + 1][kk] = e4m3_lo_to_f16x2(hi);
          a[2 * s + 1][kk + 2] = e4m3_hi_to_f16x2(hi);
        }
      }
    } else {
      const uint32_t w[8] = {f.v[kk][0].x, f.v[kk][0].y, f.v[kk][0].z, f.v[kk][0].w,
                             f.v[kk][1].x, f.v[kk][1].y, f.v[kk][1].z, f.v[kk][1].w};
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        a[t][kk] = e4m3_lo_to_f16x2(w[t]);
        a[t][kk + 2] = e4m3_hi_to_f16x2(w[t]);
      }
    }
  }
}

// How the MMA sees the operands:
//   kF16: widened (exactly) to fp16, wgmma m64nNk16 with fp32 accumulation: meets SPEC's 1e-4 score tolerance.
//   kFP8: native FP8 wgmma m64nNk32, twice the tensor rate, but QGMMA's reduced-precision accumulation misses
//         that tolerance (6e-4 relative measured 2026-12-02): an opt-in experiment.
// (FP8 wgmma with each k32 step promoted to fp32 registers, DeepGEMM's fix, was tried and removed: it still
// missed the tolerance, 1.75e-4 relative, 2026-12-02; Hopper's FP8 MMA loses bits inside one k32 step.)
enum class WgmmaOperands { kF16, kFP8 };

template <KeyKind kKeys, int kN, WgmmaOperands kOps>
__global__ void __launch_bounds__(WgmmaConfig::kThreads) index_scores_wgmma_kernel(const ScoreArgs a) {
#if MSA_INDEX_WGMMA
  constexpr bool kF16 = kOps == WgmmaOperands::kF16;
  using C = WgmmaConfig;
  constexpr int kNTiles = kN / 8;
  constexpr int kDepth = C::kDepth;
  constexpr int kSteps = kF16 ? 8 : 4;             // MMA k-steps over the 128 dims
  constexpr int kChunkBytes = kF16 ? 2048 : 1024;  // one 8-row group of the query tile
  // Query tile: [kN / 8][K in 16-byte chunks][8 rows][16 B] (f16: 16 chunks, E4M3: 8).
  __shared__ __align__(128) uint8_t q_tile[kN / 8 * kChunkBytes];
  __shared__ float warp_max[2][4][kN];  // per page parity: each warp's max over its keys
  __shared__ uint2 tables[kKeys == KeyKind::kNvfp4 ? 256 : 1];  // NVFP4: the 8 E4M3 values of each scale

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, quad = lane & 3;
  const int b = blockIdx.y;
  const int rows = a.q_len * a.heads;  // query row r = i * H + h
  const int32_t seq_len = a.seq_lens[b];
  const int needed = min(seq_len >= 1 ? (seq_len - 1) / C::kPage + 1 : 0, a.max_pages);
  const int limit = a.write_all_pages ? a.max_pages : needed;
  const int p_begin = blockIdx.x * a.pages_per_unit;
  if (p_begin >= limit) return;
  const int p_end = min(p_begin + a.pages_per_unit, limit);
  const int load_end = min(p_end, needed);
  const int first_row_pos = seq_len - a.q_len;  // position of row i: first_row_pos + i

  auto store_row = [&](int r, int page, float value) {
    const int i = r / a.heads, h = r - i * a.heads;
    const int64_t t = int64_t(b) * a.q_len + i;
    a.scores[h * a.scores_stride_h + t * a.scores_stride_t + page] = value;
  };

  if (p_begin < load_end) {
    // Query tile, dims permuted per k-step like the keys; rows past the last are zero.
    constexpr int kUnitDims = kF16 ? 4 : 8;  // dims per (row, quad, step) unit
    for (int u = threadIdx.x; u < kN * 4 * kSteps; u += C::kThreads) {
      const int r = u / (4 * kSteps), s = (u / 4) % kSteps, qd = u % 4;
      uint2 v = make_uint2(0u, 0u);
      if (r < rows) {
        const int i = r / a.heads, h = r - i * a.heads;
        const uint8_t* src = static_cast<const uint8_t*>(a.q) + int64_t(b) * a.q_stride_b +
                             int64_t(i) * a.q_stride_q + int64_t(h) * a.q_stride_h + 32 * qd + kUnitDims * s;
        if constexpr (kF16) {
          const uint32_t bytes = __ldg(reinterpret_cast<const uint32_t*>(src));
          v = make_uint2(e4m3x2_to_f16x2(bytes), e4m3x2_to_f16x2(bytes >> 16));
        } else {
          v = __ldg(reinterpret_cast<const uint2*>(src));
        }
      }
      uint8_t* dst = q_tile + (r >> 3) * kChunkBytes + (r & 7) * 16 + 4 * qd;
      *reinterpret_cast<uint32_t*>(dst + (2 * s) * 128) = v.x;      // first half of the step's k
      *reinterpret_cast<uint32_t*>(dst + (2 * s + 1) * 128) = v.y;  // second half
    }
    if constexpr (kKeys == KeyKind::kNvfp4) fill_product_tables(tables);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    uint64_t desc[kSteps];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) desc[s] = wgmma_smem_desc(q_tile + 256 * s, 128, kChunkBytes);

    // Rows this thread reports in the accumulator: 8 nt + 2 quad + j; their positions (-1: none).
    int pos[kNTiles][2];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r = 8 * nt + 2 * quad + j;
        pos[nt][j] = r < rows ? max(first_row_pos + r / a.heads, -1) : -1;
      }

    const int32_t* table = a.page_table + int64_t(b) * a.page_table_stride;  // this request's row
    const int steps = (load_end - p_begin) * C::kSlices;
    SliceFetch<kKeys> ring[kDepth];
    // Slice `s` of this warp: page p_begin + s / 2, keys 64 (s % 2) + 16 warp + [0, 16) (fetch_slice's
    // slice index counts 16-key slices).
    auto issue = [&](int s, SliceFetch<kKeys>& f) {
      if (s >= steps) return;
      const int64_t physical = physical_page(a, table, p_begin + s / C::kSlices);
      if (physical >= 0) fetch_slice<kKeys>(a, physical, 4 * (s % C::kSlices) + warp, g, quad, f);
    };
#pragma unroll
    for (int d = 0; d < kDepth; ++d) issue(d, ring[d]);

    const int first_masked = max(first_row_pos, 0) / C::kPage;
    float best[kNTiles][2];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) best[nt][0] = best[nt][1] = -INFINITY;
    float acc[kN / 2];
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc[i] = 0.0f;

    for (int s0 = 0; s0 < steps; s0 += kDepth) {
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        if (s0 + d >= steps) break;  // an odd page count ends mid-group (uniform over the CTA)
        const int page = p_begin + (s0 + d) / C::kSlices;
        const int half = d % C::kSlices;
        uint32_t frag[kSteps][4];
        if constexpr (kF16) {
          slice_fragments_f16<kKeys>(ring[d], tables, frag);
        } else if constexpr (kKeys == KeyKind::kNvfp4) {
          slice_fragments(ring[d], tables, frag);
        } else {
          slice_fragments<kKeys>(ring[d], frag);
        }
        issue(s0 + d + kDepth, ring[d]);
        // Fragments complete before the wgmma fence (else ptxas inserts a warpgroup arrive per k-step).
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
#pragma unroll
          for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(frag[s][i]));
        wgmma_fence_operands(acc);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
          if constexpr (kF16) {
            WgmmaF16<kN>::run(acc, frag[s], desc[s], s > 0);
          } else {
            WgmmaE4M3<kN>::run(acc, frag[s], desc[s], s > 0);
          }
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        wgmma_fence_operands(acc);
        // acc[4 nt + c]: key g (c < 2) or g + 8, row 8 nt + 2 quad + (c & 1).
        if (page < first_masked) {
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j)
              best[nt][j] = nvfp4::fmax_nan(best[nt][j], nvfp4::fmax_nan(acc[4 * nt + j], acc[4 * nt + 2 + j]));
        } else {
          const int key = page * C::kPage + 64 * half + 16 * warp + g;  // position of key g (key g + 8: +8)
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              if (key <= pos[nt][j]) best[nt][j] = nvfp4::fmax_nan(best[nt][j], acc[4 * nt + j]);
              if (key + 8 <= pos[nt][j]) best[nt][j] = nvfp4::fmax_nan(best[nt][j], acc[4 * nt + 2 + j]);
            }
        }
        if (half == C::kSlices - 1) {  // page done: max over the warp's keys, then over the 4 warps
          float(&slot)[4][kN] = warp_max[page & 1];
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              float v = best[nt][j];
              v = nvfp4::fmax_nan(v, __shfl_xor_sync(0xFFFFFFFFu, v, 4));
              v = nvfp4::fmax_nan(v, __shfl_xor_sync(0xFFFFFFFFu, v, 8));
              v = nvfp4::fmax_nan(v, __shfl_xor_sync(0xFFFFFFFFu, v, 16));
              best[nt][j] = -INFINITY;
              if (g == 0) slot[warp][8 * nt + 2 * quad + j] = v;
            }
          __syncthreads();  // double-buffered by page parity: one barrier per page
          if (threadIdx.x < rows) {
            const int r = threadIdx.x;
            const float v = nvfp4::fmax_nan(nvfp4::fmax_nan(slot[0][r], slot[1][r]),
                                            nvfp4::fmax_nan(slot[2][r], slot[3][r]));
            // Not visible (padding row, or past the row's local page): -inf; visible, bad id: NaN.
            const bool visible = first_row_pos + r / a.heads >= page * C::kPage;
            store_row(r, page, !visible ? -INFINITY : (physical_page(a, table, page) >= 0 ? v : NAN));
          }
        }
      }
    }
  }
  // Pages past the request (only when every page is written): -inf.
  for (int page = max(p_begin, load_end); page < p_end; ++page) {
    for (int r = threadIdx.x; r < rows; r += C::kThreads) store_row(r, page, -INFINITY);
  }
#endif
}

}  // namespace msa::index
