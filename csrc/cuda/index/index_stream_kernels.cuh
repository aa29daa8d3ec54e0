// Decode-indexer page scores for FP8 (E4M3) and NVFP4 index keys on GPUs other than Hopper (and on Hopper with
// MSA_INDEX_SCORES=1): one warp streams a run of pages straight from global memory into mma.sync fragments.
// No shared memory, no block barriers. No torch includes. (On sm_90 FP8 mma.sync is emulated through fp16,
// so Hopper uses index_wgmma_kernels.cuh; this file also holds the fetch and NVFP4 decode helpers both use.)
//
// Work: warp j of request b scores pages [j * ppw, (j + 1) * ppw). A page is 8 slices of 16 keys; the warp
// keeps kDepth slices of loads in flight (registers), and the query rows stay in registers for the whole run.
//
// MMA (mma.sync m16n8k32 E4M3, fp32 accumulate): keys are the A operand (16 keys = one slice), query rows the
// B operand (n-tiles of 8 rows), so Q x H = 8 rows costs one n-tile, not a padded m-tile of 16.
// The k (dim) order inside each k-step is permuted, identically for keys and queries: thread `quad` owns dims
// [32 quad, 32 quad + 32), and k-step s takes its dims 32 quad + 8 s + [0, 8) (MMA k 4 quad + [0,4) and
// 16 + 4 quad + [0,4)). A dot product does not depend on the order of its terms beyond fp32 rounding, and
// the permutation makes every thread's key bytes one contiguous 16-byte (NVFP4) or 32-byte (E4M3) load.
//
// NVFP4 keys are decoded exactly as the MSA Q8KV4 dequant, e4m3_rne_satfinite(e2m1 * scale): per 16-dim
// group the 8 possible magnitudes are computed once (exact fp16 products, one cvt per pair), then each
// nibble is a byte-permute lookup, with its sign bit moved to bit 7 of the E4M3 byte.
#pragma once

#include <cstdint>

#include <cuda_fp16.h>

#include "cuda/common/mma.cuh"
#include "cuda/common/nvfp4.cuh"
#include "cuda/index/index_launch.h"

namespace msa::index {

struct StreamConfig {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kPage = 128;
  static constexpr int kSlices = 8;  // 16-key slices per page
  // Slices of loads in flight per warp (divides kSlices): fewer where registers are short (E4M3 slices are
  // twice as large; 64 query rows hold 64 registers of B fragments).
  template <KeyKind kKeys, int kNTiles>
  static constexpr int kDepth = (kKeys == KeyKind::kE4M3 || kNTiles == 8) ? 2 : 4;
};

// 16 bytes from global memory, not kept in L1 (keys are read once).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t ld_stream_u16(const void* p) {
  unsigned short v;
  asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}

template <KeyKind kKeys>
struct SliceFetch;

template <>
struct SliceFetch<KeyKind::kNvfp4> {
  uint4 codes[2];      // keys g and g + 8: codes of dims [32 quad, 32 quad + 32)
  uint32_t scales[2];  // their two E4M3 group scales (groups 2 quad, 2 quad + 1), low byte first
};

template <>
struct SliceFetch<KeyKind::kE4M3> {
  uint4 v[2][2];  // keys g and g + 8: bytes [32 quad, 32 quad + 32)
};

template <KeyKind kKeys>
__device__ __forceinline__ void fetch_slice(const ScoreArgs& a, int64_t physical, int slice, int g, int quad,
                                            SliceFetch<kKeys>& f) {
  const uint8_t* keys = static_cast<const uint8_t*>(a.keys) + physical * a.key_stride_page;
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const int key = 16 * slice + 8 * kk + g;
    if constexpr (kKeys == KeyKind::kNvfp4) {
      f.codes[kk] = ld_stream(keys + key * a.key_stride_token + 16 * quad);
      f.scales[kk] = ld_stream_u16(a.key_scales + physical * a.scale_stride_page + key * a.scale_stride_token +
                                   2 * quad);
    } else {
      const uint8_t* row = keys + key * a.key_stride_token + 32 * quad;
      f.v[kk][0] = ld_stream(row);
      f.v[kk][1] = ld_stream(row + 16);
    }
  }
}

// Bytes j = 0..7 of (lo, hi): e4m3_rne_satfinite(e2m1(j) * scale) for the magnitudes
// e2m1(j) = 0, 0.5, 1, 1.5, 2, 3, 4, 6 (the products are exact in fp16).
__device__ __forceinline__ void e4m3_product_table(__half2 scale, uint32_t& lo, uint32_t& hi) {
  constexpr uint32_t kM01 = 0x38000000u, kM23 = 0x3E003C00u, kM45 = 0x42004000u, kM67 = 0x46004400u;
  uint32_t p[4];
  const uint32_t m[4] = {kM01, kM23, kM45, kM67};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 prod = __hmul2(scale, *reinterpret_cast<const __half2*>(&m[i]));
    p[i] = nvfp4::half2_to_e4m3x2(*reinterpret_cast<const uint32_t*>(&prod));
  }
  lo = p[0] | (p[1] << 16);
  hi = p[2] | (p[3] << 16);
}

// 8 E2M1 codes (low nibble first) -> 8 E4M3 bytes through the table: out_lo = codes 0..3, out_hi = 4..7.
// The magnitudes are two byte-permute lookups; the signs are gathered straight from the code word and the
// word shifted by 4 (bit 7 of each gathered byte is one code's sign; the final AND keeps only it): 9 integer
// instructions per 8 codes.
__device__ __forceinline__ void e2m1x8_to_e4m3x8(uint32_t w, uint32_t lo, uint32_t hi, uint32_t& out_lo,
                                                 uint32_t& out_hi) {
  // Bit 3 of a selector nibble would mean "replicate the sign", so both selectors are masked; the high half's is
  // shifted down first by a multiply-high (in asm: the compiler would turn it back into a shift), which runs on
  // the FMA pipe instead of the busy integer pipe. (ptxas clears the upper half of a PRMT selector unless it
  // knows it is zero, so each selector needs its own 16-bit mask.)
  uint32_t w_hi;
  asm("mul.hi.u32 %0, %1, 0x10000;" : "=r"(w_hi) : "r"(w));
  const uint32_t w4 = w << 4;  // code 2c's sign at bit 7 of byte c (code 2c + 1's: in w)
  out_lo = __byte_perm(lo, hi, w & 0x7777u) | (__byte_perm(w, w4, 0x1504u) & 0x80808080u);
  out_hi = __byte_perm(lo, hi, w_hi & 0x7777u) | (__byte_perm(w, w4, 0x3726u) & 0x80808080u);
}

// E4M3 bytes 0, 1 (lo) or 2, 3 (hi) of a word -> f16x2 (exact). Taking the half through a b16 register pair
// lets the cvt read the upper half in place (F2FP ... R.H1) instead of shifting it down first.
__device__ __forceinline__ uint32_t e4m3_lo_to_f16x2(uint32_t w) {
  uint32_t out;
  asm("{.reg .b16 l, h; mov.b32 {l, h}, %1; cvt.rn.f16x2.e4m3x2 %0, l;}" : "=r"(out) : "r"(w));
  return out;
}
__device__ __forceinline__ uint32_t e4m3_hi_to_f16x2(uint32_t w) {
  uint32_t out;
  asm("{.reg .b16 l, h; mov.b32 {l, h}, %1; cvt.rn.f16x2.e4m3x2 %0, h;}" : "=r"(out) : "r"(w));
  return out;
}

// The A fragments (4 k-steps x 4 registers) of one slice: keys g (a0, a2) and g + 8 (a1, a3).
template <KeyKind kKeys>
__device__ __forceinline__ void slice_fragments(const SliceFetch<kKeys>& f, uint32_t (&a)[4][4]) {
  if constexpr (kKeys == KeyKind::kNvfp4) {
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      // Both group scales of this key at once: (s0, s1) -> tables for k-steps 0-1 and 2-3.
      const uint32_t both_bits = nvfp4::e4m3x2_to_f16x2(f.scales[kk]);
      const __half2 both = *reinterpret_cast<const __half2*>(&both_bits);
      const uint32_t codes[4] = {f.codes[kk].x, f.codes[kk].y, f.codes[kk].z, f.codes[kk].w};
#pragma unroll
      for (int gh = 0; gh < 2; ++gh) {
        uint32_t lo, hi;
        e4m3_product_table(gh == 0 ? __low2half2(both) : __high2half2(both), lo, hi);
#pragma unroll
        for (int s = 2 * gh; s < 2 * gh + 2; ++s) e2m1x8_to_e4m3x8(codes[s], lo, hi, a[s][kk], a[s][kk + 2]);
      }
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const uint32_t w[8] = {f.v[kk][0].x, f.v[kk][0].y, f.v[kk][0].z, f.v[kk][0].w,
                             f.v[kk][1].x, f.v[kk][1].y, f.v[kk][1].z, f.v[kk][1].w};
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        a[s][kk] = w[2 * s];
        a[s][kk + 2] = w[2 * s + 1];
      }
    }
  }
}

// A page-table entry as a physical page id, or -1 when it lies outside the cache.
__device__ __forceinline__ int64_t checked_page(const ScoreArgs& a, int32_t p) {
  return (p >= 0 && p < a.physical_pages) ? p : -1;
}

// Physical page of a logical page through one request's page-table row, or -1 when it lies outside the cache.
__device__ __forceinline__ int64_t physical_page(const ScoreArgs& a, const int32_t* row, int page) {
  return checked_page(a, row[page]);
}

// Pages a request of `seq_len` tokens reads: up to its last token's local page, at most the page-table width.
__device__ __forceinline__ int pages_needed(const ScoreArgs& a, int32_t seq_len) {
  return min(seq_len >= 1 ? (seq_len - 1) / StreamConfig::kPage + 1 : 0, a.max_pages);
}

// Fills tables[0..255] (any thread count; caller synchronises).
__device__ __forceinline__ void fill_product_tables(uint2* tables) {
  for (int sb = threadIdx.x; sb < 256; sb += blockDim.x) {
    const uint32_t scale = nvfp4::e4m3x2_to_f16x2(sb | (sb << 8));
    uint32_t lo, hi;
    e4m3_product_table(*reinterpret_cast<const __half2*>(&scale), lo, hi);
    tables[sb] = make_uint2(lo, hi);
  }
}

template <KeyKind kKeys, int kNTiles>
__global__ void __launch_bounds__(StreamConfig::kThreads) index_scores_stream_kernel(const ScoreArgs a) {
  msa::cuda::grid_dependency_wait();  // PDL: before any memory access (mma.cuh)
  using C = StreamConfig;
  constexpr int kDepth = C::kDepth<kKeys, kNTiles>;
  const int lane = threadIdx.x & 31, g = lane >> 2, quad = lane & 3;
  const int b = blockIdx.y;
  const int warp_index = blockIdx.x * C::kWarps + (threadIdx.x >> 5);
  const int rows = a.q_len * a.heads;  // query row r = i * H + h
  const int32_t seq_len = a.seq_lens[b];
  const int needed = pages_needed(a, seq_len);
  const int limit = a.write_all_pages ? a.max_pages : needed;
  const int p_begin = warp_index * a.pages_per_unit;
  if (p_begin >= limit) return;
  const int p_end = min(p_begin + a.pages_per_unit, limit);
  const int load_end = min(p_end, needed);

  // Position of each row this thread reports (rows 8 nt + 2 quad + j), -1 for padding / absent rows.
  int pos[kNTiles][2];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int r = 8 * nt + 2 * quad + j;
      pos[nt][j] = r < rows ? max(seq_len - a.q_len + r / a.heads, -1) : -1;
    }

  auto store_row = [&](int r, int page, float value) {
    const int i = r / a.heads, h = r - i * a.heads;
    const int64_t t = int64_t(b) * a.q_len + i;
    a.scores[h * a.scores_stride_h + t * a.scores_stride_t + page] = value;
  };

  if (p_begin < load_end) {
    // B fragments: query row 8 nt + g, bytes [32 quad, 32 quad + 32) (zero past the last row).
    uint32_t qf[kNTiles][8];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      const int r = 8 * nt + g;
      uint4 lo = make_uint4(0u, 0u, 0u, 0u), hi = lo;
      if (r < rows) {
        const int i = r / a.heads, h = r - i * a.heads;
        const uint8_t* src = static_cast<const uint8_t*>(a.q) + int64_t(b) * a.q_stride_b +
                             int64_t(i) * a.q_stride_q + int64_t(h) * a.q_stride_h + 32 * quad;
        lo = __ldg(reinterpret_cast<const uint4*>(src));
        hi = __ldg(reinterpret_cast<const uint4*>(src) + 1);
      }
      const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int k = 0; k < 8; ++k) qf[nt][k] = w[k];
    }

    const int32_t* table = a.page_table + int64_t(b) * a.page_table_stride;  // this request's row
    const int steps = (load_end - p_begin) * C::kSlices;
    SliceFetch<kKeys> ring[kDepth];
    auto issue = [&](int s, SliceFetch<kKeys>& f) {
      if (s >= steps) return;
      const int64_t physical = physical_page(a, table, p_begin + s / C::kSlices);
      if (physical >= 0) fetch_slice<kKeys>(a, physical, s % C::kSlices, g, quad, f);
    };
#pragma unroll
    for (int d = 0; d < kDepth; ++d) issue(d, ring[d]);

    // Pages from here on hold some row's last visible key (the local page), so keys are masked there.
    const int first_masked = max(seq_len - a.q_len, 0) / C::kPage;
    float best[kNTiles][2];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) best[nt][0] = best[nt][1] = -INFINITY;

    for (int s0 = 0; s0 < steps; s0 += kDepth) {
      const int page = p_begin + s0 / C::kSlices;
      const bool masked = page >= first_masked;
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        const int slice = s0 % C::kSlices + d;
        uint32_t frag[4][4];
        slice_fragments<kKeys>(ring[d], frag);
        issue(s0 + d + kDepth, ring[d]);
        float acc[kNTiles][4];
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) msa::cuda::mma_e4m3_m16n8k32(acc[nt], frag[s], qf[nt][2 * s], qf[nt][2 * s + 1]);
        // acc[nt]: (key g, row 8 nt + 2 quad), (key g, +1), (key g + 8, row 8 nt + 2 quad), (key g + 8, +1).
        if (!masked) {
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j)
              best[nt][j] = nvfp4::fmax_nan(best[nt][j], nvfp4::fmax_nan(acc[nt][j], acc[nt][j + 2]));
        } else {
          const int key = page * C::kPage + 16 * slice + g;  // absolute position of key g (key g + 8: +8)
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              if (key <= pos[nt][j]) best[nt][j] = nvfp4::fmax_nan(best[nt][j], acc[nt][j]);
              if (key + 8 <= pos[nt][j]) best[nt][j] = nvfp4::fmax_nan(best[nt][j], acc[nt][j + 2]);
            }
        }
        if (slice == C::kSlices - 1) {  // page done: max over the 8 key groups, then lanes 0..3 store
          const bool valid = physical_page(a, table, page) >= 0;
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              float v = best[nt][j];
              v = nvfp4::fmax_nan(v, __shfl_xor_sync(0xFFFFFFFFu, v, 4));
              v = nvfp4::fmax_nan(v, __shfl_xor_sync(0xFFFFFFFFu, v, 8));
              v = nvfp4::fmax_nan(v, __shfl_xor_sync(0xFFFFFFFFu, v, 16));
              best[nt][j] = -INFINITY;
              const int r = 8 * nt + 2 * quad + j;
              if (g == 0 && r < rows) {
                // Not visible (padding row, or the page is past the row's local page): -inf. Visible but
                // its id is out of range: NaN (ranked last by the select step).
                const bool visible = pos[nt][j] >= page * C::kPage;
                store_row(r, page, !visible ? -INFINITY : (valid ? v : NAN));
              }
            }
        }
      }
    }
  }
  // Pages past the request (only when every page is written): -inf.
  for (int page = max(p_begin, load_end); page < p_end; ++page) {
    for (int r = lane; r < rows; r += 32) store_row(r, page, -INFINITY);
  }
}

}  // namespace msa::index
