// Decode-indexer page scores on Hopper (sm_90a) with warpgroup MMA: FP8 (E4M3) and NVFP4 index keys.
// No torch includes.
//
// One CTA = one warpgroup (4 warps) streams a run of pages of one request. A page is two slices of 64 keys;
// warp w owns keys 16 w .. 16 w + 15 of each slice and loads them straight from global memory into the A
// fragments of the wgmma (keys are A, in registers; NVFP4 decoded on the way to exactly the values of the
// MSA Q8KV4 dequant). The query rows (N = Q x H padded to 8, 16, 32 or 64) are the B operand, in shared
// memory once per CTA; both operands widened exactly to fp16, wgmma m64nNk16 (fp32 accumulation meets the 1e-4
// score tolerance). Hopper runs FP8 mma.sync through fp16 (unpack + two HMMA per k32), so wgmma is its
// tensor-core path here. The run's physical page ids are read once into shared memory; at each page end the
// per-thread maxima meet in shared memory (one barrier per page) and one thread per query row stores.
//
// The dims inside each k-step are permuted as in the mma.sync kernel (thread `quad` owns dims
// [32 quad, 32 quad + 32); k-step s takes the next 4 of them); the query tile in shared memory is written in
// the same permuted order, so each thread's key bytes stay one contiguous load.
#pragma once

#include <cstdint>

#include "cuda/common/block_scan.cuh"
#include "cuda/common/nvfp4.cuh"
#include "cuda/common/trace.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/index/index_launch.h"
#include "cuda/index/index_stream_kernels.cuh"

namespace msa::index {

using nvfp4::e4m3x2_to_f16x2;

struct WgmmaConfig {
  static constexpr int kThreads = 128;  // one warpgroup
  static constexpr int kPage = 128;
  static constexpr int kSlices = 2;  // 64-key slices per page
  static constexpr int kDepth = 4;   // slices of loads in flight per warp (even: whole pages)
  // Bytes of one token's index key (NVFP4 codes or E4M3 values) and NVFP4 scales in a dense page.
  __host__ __device__ static constexpr int row_bytes(KeyKind keys) { return keys == KeyKind::kNvfp4 ? 64 : 128; }
  static constexpr int kScaleRowBytes = 8;
  static constexpr int kMaxPagesPerUnit = 64;  // pages of one CTA's run (launcher: pages_per_unit <= this)
  // NVFP4 with up to 32 query rows fits 128 registers: 4 CTAs (16 warps) per SM; larger shapes take what they need.
  static constexpr int min_ctas(KeyKind keys, int n) { return keys == KeyKind::kNvfp4 && n <= 32 ? 4 : 1; }
};

// p + x * y with one IMAD.WIDE.U32 (x * y < 2^32 is not required; the product is 64-bit).
__device__ __forceinline__ const uint8_t* mad_wide(uint32_t x, uint32_t y, const void* p) {
  uint64_t r;
  asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(r) : "r"(x), "r"(y), "l"(reinterpret_cast<uint64_t>(p)));
  return reinterpret_cast<const uint8_t*>(r);
}

// The run of CTA blockIdx.x in a flat grid of a.flat_ctas CTAs over every request's needed pages (B <= 128):
// each thread t < B reads seq_lens[t]. With P = sum of the needed pages and S = flat_ctas - B, request t gets
// c_t = min(needed_t, floor(needed_t S / P) + 1) CTAs in order (sum_t c_t <= S + B), and its pages are dealt over
// them in runs of floor or ceil(needed_t / c_t) < P / S + 1 pages (<= kMaxPagesPerUnit: launch_wgmma_rows sizes
// S). So nearly every CTA works, on nearly the same number of pages whatever the spread of the lengths (the 2-D
// grid sizes runs from max_pages, and the CTAs of the longest request set the time). With a.flat_even (knob) runs
// are ceil(P / S) pages, c_t = ceil(needed_t / run): up to ~B + S / run CTAs idle, and the SMs that hold them
// finish early while the others set the time. Returns false for a CTA past the last run. Block-wide (barriers):
// every thread calls it.
struct FlatRun {
  int b, p_begin, pages;
  int32_t seq_len;
};
__device__ __forceinline__ bool flat_run(const ScoreArgs& a, FlatRun& run) {
  constexpr int kThreads = WgmmaConfig::kThreads, kWarps = kThreads / 32;
  __shared__ int warp_sums[kWarps];
  __shared__ FlatRun found;
  const int t = threadIdx.x;
  int32_t len = 0;
  int needed = 0;
  if (t < a.batch) {
    len = a.seq_lens[t];
    needed = pages_needed(a, len);
  }
  int total_pages = 0;
  msa::cuda::block_exclusive_scan<kWarps>(needed, warp_sums, total_pages);
  const int slots = max(a.flat_ctas - a.batch, 1);
  const int even = min(max((total_pages + slots - 1) / slots, 1), WgmmaConfig::kMaxPagesPerUnit);
  const int ctas = a.flat_even ? (needed + even - 1) / even
                               : min(needed, static_cast<int>(int64_t(needed) * slots / max(total_pages, 1)) + 1);
  int total_ctas = 0;
  const int first = msa::cuda::block_exclusive_scan<kWarps>(ctas, warp_sums, total_ctas);
  const int cta = blockIdx.x;
  if (t == 0 && cta >= total_ctas) found.b = -1;
  if (t < a.batch && cta >= first && cta < first + ctas) {
    const int k = cta - first;
    if (a.flat_even) {
      found = FlatRun{t, k * even, even, len};
    } else {  // run k: pages [k needed / c, (k + 1) needed / c)
      const int begin = k * needed / ctas, end = (k + 1) * needed / ctas;
      found = FlatRun{t, begin, end - begin, len};
    }
  }
  __syncthreads();
  run = found;
  return run.b >= 0;
}

// Shared-memory descriptor of the query tile (no swizzle; see msa::cuda::wgmma_desc_interleave).
__device__ __forceinline__ uint64_t wgmma_smem_desc(const void* p, uint32_t lbo, uint32_t sbo) {
  return msa::cuda::wgmma_desc_interleave(static_cast<uint32_t>(__cvta_generic_to_shared(p)), lbo, sbo);
}

// Byte offsets into the 256 8-byte product tables of the two E4M3 scales of a 16-bit load (low byte first),
// mostly on the FMA pipe: the integer pipe (masks, shifts, byte permutes) is the decode's limit. mul.hi is in
// asm, else the compiler turns it back into a shift; ptxas folds 8 high + table base into one LEA whatever the
// form, so 1 integer op is left of the former 3.
__device__ __forceinline__ void scale_pair_table_offsets(uint32_t two_scales, uint32_t (&offset)[2]) {
  uint32_t high;  // two_scales >> 8 (two_scales < 2^16)
  asm("mul.hi.u32 %0, %1, 0x1000000;" : "=r"(high) : "r"(two_scales));
  offset[0] = two_scales * 8u - high * 2048u;  // 8 (two_scales - 256 high) = 8 x the low byte
  offset[1] = high * 8u;
}

// The f16 A fragments of one slice's 8 k16-steps (4 registers each): keys g (a0, a2) and g + 8 (a1, a3); k16-step
// t takes the thread's dims 32 quad + 4 t + [0, 4): (a0 | a1) dims + 0, 1; (a2 | a3) dims + 2, 3. Word s of each
// key's codes (dims 32 quad + 8 s + [0, 8)) gives k16-steps 2s, 2s + 1. NVFP4 goes through the E4M3 bytes of the
// Q8KV4 dequant (per-scale tables, 8 integer instructions and one IMAD.HI per 8 codes) and one exact cvt per pair
// to fp16; the table offsets of the slice's two scale pairs come first (scale_pair_table_offsets).
template <KeyKind kKeys>
__device__ __forceinline__ void slice_fragments_f16(const SliceFetch<kKeys>& f, const uint2* tables,
                                                    uint32_t (&a)[8][4]) {
  uint32_t table_offset[2][2];
  if constexpr (kKeys == KeyKind::kNvfp4) {
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) scale_pair_table_offsets(f.scales[kk], table_offset[kk]);
  }
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    if constexpr (kKeys == KeyKind::kNvfp4) {
      const uint32_t codes[4] = {f.codes[kk].x, f.codes[kk].y, f.codes[kk].z, f.codes[kk].w};
#pragma unroll
      for (int gh = 0; gh < 2; ++gh) {
        const uint2 t =
            *reinterpret_cast<const uint2*>(reinterpret_cast<const uint8_t*>(tables) + table_offset[kk][gh]);
#pragma unroll
        for (int s = 2 * gh; s < 2 * gh + 2; ++s) {
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

// Operands: keys and queries widened exactly to fp16, wgmma m64nNk16 with fp32 accumulation (meets SPEC's 1e-4
// score tolerance). Native FP8 wgmma (m64nNk32, twice the tensor rate) was measured and removed: QGMMA's
// reduced-precision accumulation misses that tolerance (6e-4 relative, 2026-12-02), and with each k32 step
// promoted to fp32 registers (DeepGEMM's fix) still 1.75e-4: Hopper's FP8 MMA loses bits inside one k32 step.
//
// kDenseRows: tokens of a page are packed (key rows of 64 NVFP4 / 128 E4M3 bytes, scale rows of 8), so every
// load of a slice is the page base plus a compile-time offset; otherwise the token strides are runtime values.
// Page strides are 32-bit in both (the launcher checks it).
//
// Each slice builds all 8 k16-steps' fragments, then issues its 8 wgmmas in one commit group and waits for them
// before the max. Measured and removed (bench/NOTES.md, sessions 20 and 26): the steps in 2 or 4 commit groups
// with the next group decoded under the previous one's wgmmas, the next slice's first group decoded before the
// last wait, 5 CTAs per SM with 2 slices of loads in flight, and both operands in shared memory: none faster; on
// Hopper the decode's integer-pipe time and the wgmma time add up however they are interleaved.
template <KeyKind kKeys, int kN, bool kDenseRows>
__global__ void __launch_bounds__(WgmmaConfig::kThreads, WgmmaConfig::min_ctas(kKeys, kN))
    index_scores_wgmma_kernel(const ScoreArgs a) {
#if MSA_WGMMA
  MSA_TRACE(0, 0);
  msa::cuda::grid_dependency_wait();  // PDL: before any memory access (mma.cuh)
  MSA_TRACE(0, 1);
  using C = WgmmaConfig;
  constexpr int kNTiles = kN / 8;
  constexpr int kDepth = C::kDepth;
  constexpr int kSteps = 8;            // MMA k16-steps over the 128 dims
  constexpr int kChunkBytes = 2048;    // one 8-row group of the query tile
  constexpr int kRowBytes = C::row_bytes(kKeys);
  // Query tile: [kN / 8][K in 16 16-byte chunks][8 rows][16 B].
  __shared__ __align__(128) uint8_t q_tile[kN / 8 * kChunkBytes];
  // Per page parity: each thread's max over its keys, [warp * 8 + g][row] (pitch: see the page finalize).
  constexpr int kRowThreads = C::kThreads / kN;  // threads combining one row's 32 partial maxima
  constexpr int kPitch = kN + 32 / kRowThreads;  // = kRowThreads' bank stride: conflict-free combine reads
  __shared__ float partial_max[2][32][kPitch];
  __shared__ uint2 tables[kKeys == KeyKind::kNvfp4 ? 256 : 1];  // NVFP4: the 8 E4M3 values of each scale
  __shared__ int32_t unit_pages[C::kMaxPagesPerUnit];  // physical id of each page of the run, -1: out of range
  __shared__ uint2 thread_offsets[C::kThreads];        // (key, scale) byte offsets of each thread's first key

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, quad = lane & 3;
  const int rows = a.q_len * a.heads;  // query row r = i * H + h
  const int head_shift = a.heads >> 1;  // H = 1, 2 or 4 (the op checks it): i = r >> head_shift, h = r & (H - 1)
  // The CTA's run: pages [p_begin, p_begin + run_pages) of request b (2-D grid: blockIdx = (run, request)).
  FlatRun flat{};
  if (a.flat_ctas > 0 && !flat_run(a, flat)) return;
  const int b = a.flat_ctas > 0 ? flat.b : int(blockIdx.y);
  const int run_pages = a.flat_ctas > 0 ? flat.pages : a.pages_per_unit;
  const int p_begin = a.flat_ctas > 0 ? flat.p_begin : int(blockIdx.x) * run_pages;
  // 2-D grid: loads that do not depend on the request's length go out together with seq_lens[b] (one dependent
  // memory latency less before the first key load): this thread's page-table entry (thread i: page p_begin + i of
  // the run; entries past the request's pages are read but never used) and its words of the query tile (element
  // u = threadIdx.x + 128 j of the tile loop below: row u / 32 = warp + 4 j, k-step (u / 4) % 8, quad u % 4; 0 past
  // the last row). The query addresses take a shift and two multiply-adds per word: with a division by H and
  // 64-bit products per word this prologue was ~900 instructions, ~1 us before the first key load of a small case.
  static_assert(C::kMaxPagesPerUnit <= C::kThreads, "one page-table entry per thread");
  int32_t table_entry = -1;
  if (int(threadIdx.x) < run_pages && p_begin + int(threadIdx.x) < a.max_pages) {
    table_entry = a.page_table[int64_t(b) * a.page_table_stride + p_begin + threadIdx.x];
  }
  const int32_t seq_len = a.flat_ctas > 0 ? flat.seq_len : a.seq_lens[b];
  constexpr int kQWords = kN * 4 * kSteps / C::kThreads;
  static_assert(C::kThreads == 4 * kSteps * 4, "tile element u = threadIdx.x + 128 j keeps its k-step and quad");
  uint32_t q_words[kQWords];
  {
    const uint8_t* q_thread = static_cast<const uint8_t*>(a.q) + int64_t(b) * a.q_stride_b + 32 * (threadIdx.x % 4) +
                              4 * ((threadIdx.x / 4) % kSteps);
#pragma unroll
    for (int j = 0; j < kQWords; ++j) {
      const int r = warp + 4 * j;
      q_words[j] = 0u;
      if (r < rows) {
        const int64_t offset = int64_t(r >> head_shift) * a.q_stride_q + int64_t(r & (a.heads - 1)) * a.q_stride_h;
        q_words[j] = __ldg(reinterpret_cast<const uint32_t*>(q_thread + offset));
      }
    }
  }
  const int needed = pages_needed(a, seq_len);
  const int limit = a.write_all_pages ? a.max_pages : needed;
  MSA_TRACE(0, 2);
  if (p_begin >= limit) return;
  const int p_end = min(p_begin + run_pages, limit);
  const int load_end = min(p_end, needed);
  MSA_TRACE_SM(0, 10);  // trace harness only: SM id + 1 and pages loaded + 1
  MSA_TRACE_VALUE(0, 11, uint64_t(max(load_end - p_begin, 0)) + 1u);
  const int first_row_pos = seq_len - a.q_len;  // position of row i: first_row_pos + i
  // Byte strides between the tokens of a page (compile-time for dense rows).
  const int64_t key_stride = kDenseRows ? kRowBytes : a.key_stride_token;
  const int64_t scale_stride = kDenseRows ? C::kScaleRowBytes : a.scale_stride_token;

  auto store_row = [&](int r, int page, float value) {
    const int i = r >> head_shift, h = r & (a.heads - 1);
    const int64_t t = int64_t(b) * a.q_len + i;
    a.scores[h * a.scores_stride_h + t * a.scores_stride_t + page] = value;
  };

  if (p_begin < load_end) {
    // Query tile, dims permuted per k-step like the keys (4 dims per (row, quad, step)); rows past the last
    // are zero.
#pragma unroll
    for (int j = 0; j < kQWords; ++j) {
      const int u = threadIdx.x + C::kThreads * j;
      const int r = u / (4 * kSteps), s = (u / 4) % kSteps, qd = u % 4;
      const uint2 v = make_uint2(e4m3x2_to_f16x2(q_words[j]), e4m3x2_to_f16x2(q_words[j] >> 16));
      uint8_t* dst = q_tile + (r >> 3) * kChunkBytes + (r & 7) * 16 + 4 * qd;
      *reinterpret_cast<uint32_t*>(dst + (2 * s) * 128) = v.x;      // first half of the step's k
      *reinterpret_cast<uint32_t*>(dst + (2 * s + 1) * 128) = v.y;  // second half
    }
    if constexpr (kKeys == KeyKind::kNvfp4) fill_product_tables(tables);
    // The run's physical page ids, checked once (the loop's loads then depend on shared memory only).
    if (int(threadIdx.x) < load_end - p_begin) {
      unit_pages[threadIdx.x] = static_cast<int32_t>(checked_page(a, table_entry));
    }
    thread_offsets[threadIdx.x] = make_uint2(uint32_t((16 * warp + g) * key_stride + (kRowBytes / 4) * quad),
                                             uint32_t((16 * warp + g) * scale_stride + 2 * quad));
    msa::cuda::fence_proxy_async_shared();
    __syncthreads();
    MSA_TRACE(0, 3);
    // k16-step s reads the query tile 256 s bytes on: its descriptor is the first one + 16 s (the 14-bit address
    // field, in 16-byte units, cannot carry: shared memory ends below 2^18 bytes). One add per step in the loop;
    // eight separate descriptors were rebuilt there from the tile address, five uniform ops each.
    const uint64_t desc0 = wgmma_smem_desc(q_tile, 128, kChunkBytes);

    // Rows this thread reports in the accumulator: 8 nt + 2 quad + j; their positions (-1: none).
    int pos[kNTiles][2];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r = 8 * nt + 2 * quad + j;
        pos[nt][j] = r < rows ? max(first_row_pos + (r >> head_shift), -1) : -1;
      }
    // The row this thread combines at each page end, and stores (one thread per row: combine_sub == 0).
    const int combine_row = threadIdx.x / kRowThreads, combine_sub = threadIdx.x % kRowThreads;
    float* out_row = nullptr;
    int out_pos = 0;
    if (combine_sub == 0 && combine_row < rows) {
      const int i = combine_row >> head_shift, h = combine_row & (a.heads - 1);
      out_row = a.scores + h * a.scores_stride_h + (int64_t(b) * a.q_len + i) * a.scores_stride_t;
      out_pos = first_row_pos + i;
    }

    // Slice s: page p_begin + s / 2, keys 64 (s % 2) + 16 warp + [0, 16): this thread loads keys
    // 64 half + 16 warp + 8 kk + g, dims [32 quad, 32 quad + 32), each load at the page base (one IMAD.WIDE)
    // plus a per-(half, kk) offset (a compile-time immediate for dense rows).
    // The thread's first key and scale bytes, through shared memory (thread_offsets, written with the
    // setup): ptxas cannot recompute a loaded value, so the loop keeps two registers instead of redoing
    // the index arithmetic from the thread id before every load. (Issuing the first kDepth slices' loads
    // before this setup, from page-table entries read by every thread, measured 0.6-0.8 us slower.)
    const uint8_t* thread_keys = static_cast<const uint8_t*>(a.keys) + thread_offsets[threadIdx.x].x;
    const uint8_t* thread_scales = a.key_scales + thread_offsets[threadIdx.x].y;
    const uint32_t key_page_stride = static_cast<uint32_t>(a.key_stride_page);
    const uint32_t scale_page_stride = static_cast<uint32_t>(a.scale_stride_page);
    const int steps = (load_end - p_begin) * C::kSlices;
    const int trigger_step = a.trigger_slices > 0 ? max(steps - a.trigger_slices, 0) : -1;
    SliceFetch<kKeys> ring[kDepth];
    auto issue = [&](int s, int half, SliceFetch<kKeys>& f) {  // half = s % 2, known when unrolled
      // Past the run (never decoded) or a page outside the cache (its scores are stored as NaN): nothing to load,
      // but the latter slot's fragments are built, so its NVFP4 scales are zeroed: the table offsets come from them
      // and must stay inside the tables (stale registers did not: session 22).
      const int32_t physical = s < steps ? unit_pages[s / C::kSlices] : -1;
      if (physical < 0) {
        if constexpr (kKeys == KeyKind::kNvfp4) f.scales[0] = f.scales[1] = 0u;
        return;
      }
      const uint8_t* keys = mad_wide(uint32_t(physical), key_page_stride, thread_keys);
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        const int64_t key = 64 * half + 8 * kk;  // relative to this thread's first key
        if constexpr (kKeys == KeyKind::kNvfp4) {
          f.codes[kk] = ld_stream(keys + key * key_stride);
          f.scales[kk] =
              ld_stream_u16(mad_wide(uint32_t(physical), scale_page_stride, thread_scales) + key * scale_stride);
        } else {
          f.v[kk][0] = ld_stream(keys + key * key_stride);
          f.v[kk][1] = ld_stream(keys + key * key_stride + 16);
        }
      }
    };
#pragma unroll
    for (int d = 0; d < kDepth; ++d) issue(d, d % C::kSlices, ring[d]);

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
        slice_fragments_f16<kKeys>(ring[d], tables, frag);
        if (s0 + d == 0) MSA_TRACE(0, 4);
        if (s0 + d == trigger_step) msa::cuda::allow_dependent_launch();
        // Fragments complete before the wgmma fence (else ptxas inserts a warpgroup arrive per k-step).
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
#pragma unroll
          for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(frag[s][i]));
        msa::cuda::wgmma_fence_operands(acc);
        msa::cuda::wgmma_fence();
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
          msa::cuda::wgmma_m64k16<kN, false, false>(acc, frag[s], desc0 + 16 * s, s > 0);
        }
        msa::cuda::wgmma_commit();
        issue(s0 + d + kDepth, half, ring[d]);  // the next loads' address work overlaps the wgmma
        msa::cuda::wgmma_wait<0>();
        msa::cuda::wgmma_fence_operands(acc);
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
        if (half == C::kSlices - 1) {  // page done: the 32 partial maxima of each row meet in shared memory
          float(&slot)[32][kPitch] = partial_max[page & 1];
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) {
            *reinterpret_cast<float2*>(&slot[8 * warp + g][8 * nt + 2 * quad]) = make_float2(best[nt][0], best[nt][1]);
            best[nt][0] = best[nt][1] = -INFINITY;
          }
          __syncthreads();  // double-buffered by page parity: one barrier per page
          // Thread t combines row t / kRowThreads: partials t % kRowThreads + kRowThreads k, then a shuffle.
          float v = slot[combine_sub][combine_row];
#pragma unroll
          for (int k = 1; k < 32 / kRowThreads; ++k)
            v = nvfp4::fmax_nan(v, slot[combine_sub + kRowThreads * k][combine_row]);
#pragma unroll
          for (int m = 1; m < kRowThreads; m *= 2) v = nvfp4::fmax_nan(v, __shfl_xor_sync(0xFFFFFFFFu, v, m));
          if (out_row != nullptr) {
            // Not visible (padding row, or past the row's local page): -inf; visible, bad id: NaN.
            out_row[page] = out_pos < page * C::kPage ? -INFINITY : (unit_pages[page - p_begin] >= 0 ? v : NAN);
          }
          if (page == p_begin) MSA_TRACE(0, 5);
        }
      }
    }
  }
  // The select kernel (a few CTAs) may launch now and wait for this grid's end in its grid_dependency_wait (if the
  // loop above has not let it already, a.trigger_slices before the run's end): it launches only once every CTA of
  // this grid got here or to that point, so it never takes the SM slots of a later wave of this grid.
  MSA_TRACE(0, 6);
  msa::cuda::allow_dependent_launch();
  // Pages past the request (only when every page is written): -inf.
  for (int page = max(p_begin, load_end); page < p_end; ++page) {
    for (int r = threadIdx.x; r < rows; r += C::kThreads) store_row(r, page, -INFINITY);
  }
  MSA_TRACE(0, 7);
#endif
}

}  // namespace msa::index
