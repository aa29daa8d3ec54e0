// Sparse decode attention, union pass: one cluster of CTAs per (request, KV head, 16 query heads) walks the
// union of the TopK pages of the request's Q <= 8 tokens, decoding each page's K/V once for all of them.
// No torch includes.
//
// Why: the tokens of a decode step attend over 16 pages each, but at short contexts they share most of them
// (B = 8, N = 4000: 31 distinct pages for 128 page reads). The per-token split kernel decodes every page read;
// here each page (two units of 64 keys) is loaded once, decoded once into 16-bit K/V tiles in shared memory,
// and every token that lists it runs its MMAs over the tiles.
//
// Grid: x = request * splits + split (a cluster of `splits` CTAs), y = KV head, z = block of 16 query heads.
// Every CTA of a cluster builds the same union: a per-page token mask (bit t: token t lists the page and may see
// it), compacted in page order into a list of pages and then of units (the second half of a page only when a
// listing token sees past its key 63). CTA `split` takes units split, split + splits, ...
//
// Warp roles: two consumer warpgroups (warps 0-3: tokens 0-3, warps 4-7: tokens 4-7; warp w owns token w's 16
// query rows) and one producer warpgroup (warps 8-11). Producers load each unit (cp.async into a private raw ring,
// zero fill past the last key any listing token sees) and decode it (NVFP4 through the per-scale E4M3 tables of the
// Q8KV4 dequant, E4M3 widened exactly) into a K tile and a V tile [64 keys][128 dims] of fp16 (bf16 for BF16 KV,
// which lands in the tiles straight from cp.async) in the wgmma 128-byte-swizzle layout, in a ring of tile sets;
// mbarriers (full: the producers' stores, empty: every consumer warp is done) pace the ring. A consumer warpgroup
// runs a unit when any of its 4 tokens lists it: S = q K^T (wgmma m64n64k16, q as register A fragments, the K tile
// as K-major B), online softmax in base 2 per warp with its token's causal limit (a warp whose token does not
// list the unit contributes P = 0), O += P V (wgmma m64n128k16, P from registers, the V tile as MN-major B).
// The softmax takes each row's max over the raw scores and rescales O lazily (as the split kernel). With kPipe a
// warpgroup issues S of a unit before O += P V of the previous one, so that the unit's softmax runs while that PV is
// on the tensor cores. setmaxnreg moves registers from the producers to the consumers (O and S accumulators).
// Hopper (sm_90a) only: other targets compile a trap and the launcher never picks the union pass there. The CTAs
// of a cluster merge by their LSE through distributed shared memory (as in the split kernel).
//
// History: the first version ran one mma.sync consumer warp per token (ldmatrix from the tiles): 2-4x slower per
// unit than the tensor cores allow (a warp's S -> softmax -> PV chain is serial and 2 warps per scheduler cannot
// hide it); measured in bench/NOTES.md (v2.4, v2.5).
#pragma once

#include <cmath>
#include <cstdint>

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/attention/sparse_decode_launch.h"
#include "cuda/attention/sparse_decode_split_kernels.cuh"  // pack2, fast_exp2, scale_byte
#include "cuda/common/block_scan.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/index/index_stream_kernels.cuh"  // the Q8KV4 decode: fill_product_tables, e2m1x8_to_e4m3x8

namespace msa::attention::page_union {

namespace cg = cooperative_groups;

struct Cfg {
  static constexpr int kConsumers = 8;                  // consumer warp w: token w of the request
  static constexpr int kProducers = 4;                  // producer warps: loads and decode
  static constexpr int kWarps = kConsumers + kProducers;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kProducerThreads = 32 * kProducers;
  static constexpr int kDim = 128;
  static constexpr int kPage = 128;
  static constexpr int kKeys = 64;                      // keys per unit: half a page
  static constexpr int kRows = 16;                      // query heads per token (the M of every MMA)
  static constexpr int kMaxTokens = kConsumers;         // q_len <= 8
  static constexpr int kMaxEntries = 256;               // q_len * topk_width: one TopK entry per thread
  static constexpr int kMaxWidth = 255;                 // topk_width: a page's count per token fits 8 bits
  static constexpr int kMaxTablePages = 8192;           // page-table width: the token counts fill <= 64 KB
  static constexpr int kMaxSplits = 8;                  // portable cluster size
  // Registers per thread (setmaxnreg) while the roles run: 168 at launch (one CTA per SM); the producers give
  // back what the consumers' wgmma accumulators need: the CTA's pool is its launch allocation, 384 x 168, so
  // 256 x (208 - 168) <= 128 x (168 - 80) (an .inc beyond what was given back would wait forever).
  static constexpr int kConsumerRegs = 208, kProducerRegs = 80, kLaunchRegs = 168;
  static constexpr int kTileBytes = kKeys * kDim * 2;   // one 16-bit K or V tile: 16 KB
  static constexpr int kORow = kDim + 4;                // fp32 row stride of the merge record
  static constexpr int kRecordRows = kMaxTokens * kRows;
  static_assert(kMaxEntries <= kThreads);
  static_assert(32 * kConsumers * (kConsumerRegs - kLaunchRegs) <= 32 * kProducers * (kLaunchRegs - kProducerRegs) &&
                kLaunchRegs * kThreads <= 65536);
};

// Unit entry: union page index << 8 | half << 7 | live keys (1..64: the last key a listing token sees, + 1).
__device__ __forceinline__ int unit_page(int e) { return e >> 8; }
__device__ __forceinline__ int unit_half(int e) { return (e >> 7) & 1; }
__device__ __forceinline__ int unit_live(int e) { return e & 127; }

// Union page entry: {physical page, logical page, then per token t the times its row lists the page (8 bits each:
// rows are used as given, so a page listed twice is attended twice) in z (tokens 0-3) and w (tokens 4-7)}.
__device__ __forceinline__ int entry_page(int4 e) { return e.y; }
__device__ __forceinline__ int entry_count(int4 e, int t) {
  return (static_cast<uint32_t>(t < 4 ? e.z : e.w) >> (8 * (t & 3))) & 0xFF;
}
__device__ __forceinline__ int entry_last_token(int4 e) {  // the highest listing token
  return e.w != 0 ? 4 + (31 - __clz(e.w)) / 8 : (31 - __clz(e.z)) / 8;
}

// Raw bytes of one unit, per producer thread (a private ring: each producer decodes exactly what it loaded).
// A unit's K (and V) rows hold 256 16-byte pieces for NVFP4 codes (row = piece / 4, dims 32 (piece % 4) + [0, 32)),
// 512 for E4M3 (row = piece / 8, dims 16 (piece % 8) + [0, 16)), 1024 for BF16; producer thread p owns pieces
// j * 128 + p, so that each warp load covers whole rows.
template <KvKind kKv>
struct Raw;

// NVFP4: per piece 16 bytes of codes and the row's 8 scale bytes (the 4 pieces of a row load them alike:
// cp.async moves 4, 8 or 16 bytes), for K and for V; 2 pieces per thread.
template <>
struct Raw<KvKind::kNvfp4> {
  static constexpr int kPieces = 2;
  static constexpr int kKOff = 0, kVOff = 16 * kPieces * Cfg::kProducerThreads;
  static constexpr int kKsOff = 2 * kVOff, kVsOff = kKsOff + 8 * kPieces * Cfg::kProducerThreads;
  static constexpr int kBytes = kVsOff + 8 * kPieces * Cfg::kProducerThreads;
  static constexpr int kStages = 4;
};

// E4M3: 4 pieces of K, then 4 of V, per thread.
template <>
struct Raw<KvKind::kE4M3> {
  static constexpr int kPieces = 4;
  static constexpr int kBytes = 2 * 16 * kPieces * Cfg::kProducerThreads;
  static constexpr int kStages = 3;
};

template <>
struct Raw<KvKind::kBF16> {
  static constexpr int kPieces = 8;
  static constexpr int kBytes = 0;  // cp.async lands in the tiles
  static constexpr int kStages = 0;
};

template <KvKind kKv>
struct Layout {
  static constexpr bool kDirect = kKv == KvKind::kBF16;
  static constexpr int kSets = kDirect ? 6 : 4;  // ring of K + V tile pairs
  static constexpr int kSetBytes = 2 * Cfg::kTileBytes;
  static constexpr int kRawOff = kSets * kSetBytes;
  static constexpr int kPipeBytes = kRawOff + Raw<kKv>::kStages * Raw<kKv>::kBytes;
  // before the pipeline: the token counts (8 bytes per page, from 0); after it: the O record [token][row][kORow]
  static_assert(Cfg::kMaxTablePages * 8 <= kPipeBytes);
  static constexpr int kRecordBytes = Cfg::kRecordRows * Cfg::kORow * 4;
  static constexpr int kTablesOff = kPipeBytes > kRecordBytes ? kPipeBytes : kRecordBytes;
  static constexpr int kTablesBytes = kKv == KvKind::kNvfp4 ? 256 * 8 : 0;
  static constexpr int kPagesOff = kTablesOff + kTablesBytes;              // int4 [kMaxEntries]
  static constexpr int kUnitsOff = kPagesOff + Cfg::kMaxEntries * 16;      // int [2 * kMaxEntries]
  static constexpr int kBarriersOff = kUnitsOff + 2 * Cfg::kMaxEntries * 4;  // full [kSets], empty [kSets]
  static constexpr int kScalarsOff = kBarriersOff + 2 * kSets * 8;          // broken mask, warp counts
  static constexpr int kStatsOff = kScalarsOff + 32 * 4;                   // m [kRecordRows], l [kRecordRows]
  static constexpr int kCrossOff = kStatsOff + 2 * Cfg::kRecordRows * 4;   // w [splits][rows], m, l
  static constexpr int kSmemBytes = kCrossOff + (Cfg::kMaxSplits + 2) * Cfg::kRecordRows * 4;
  static_assert(kSmemBytes <= 227 * 1024);
};

// ---- helpers ---------------------------------------------------------------------------------------------

using index::e4m3_hi_to_f16x2;
using index::e4m3_lo_to_f16x2;
using split::fast_exp2;
using split::pack2;
using split::scale_byte;
using msa::cuda::mbar_arrive;
using msa::cuda::mbar_init;
using msa::cuda::mbar_wait;
using msa::cuda::st_shared16;

// Byte offset of 16-byte chunk `chunk` (dims 8 chunk + [0, 8)) of key `row` in a 16-bit K or V tile [64 keys][128 dims]:
// the wgmma 128-byte-swizzle layout, two column blocks of 64 dims (8 KB each: dims 0-63, then 64-127), 128-byte
// rows, the chunk index within a row XORed with row % 8 (so the decode stores of 8 rows or of 8 chunks hit distinct
// banks). The same tile is K-major B of S = q K^T and MN-major B of O += P V.
__device__ __forceinline__ uint32_t tile_offset(int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * 8192 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// 16 E4M3 bytes -> the two 16-byte chunks of their fp16 values (exact).
__device__ __forceinline__ void e4m3x16_to_f16(uint4 w, uint4& lo, uint4& hi) {
  lo = make_uint4(e4m3_lo_to_f16x2(w.x), e4m3_hi_to_f16x2(w.x), e4m3_lo_to_f16x2(w.y), e4m3_hi_to_f16x2(w.y));
  hi = make_uint4(e4m3_lo_to_f16x2(w.z), e4m3_hi_to_f16x2(w.z), e4m3_lo_to_f16x2(w.w), e4m3_hi_to_f16x2(w.w));
}

// ---- loads and decode of one unit ------------------------------------------------------------------------

// Cache pointers of a unit's first key row (page `physical`, KV head hk, key 64 half), per tensor.
struct UnitRows {
  const uint8_t *k, *v, *ks, *vs;
};

template <KvKind kKv>
__device__ __forceinline__ UnitRows unit_rows(const SparseDecodeArgs& a, int hk, int64_t physical, int half) {
  constexpr int64_t kElem = kKv == KvKind::kBF16 ? 2 : 1;
  const int64_t key0 = int64_t(half) * Cfg::kKeys;
  UnitRows r;
  r.k = static_cast<const uint8_t*>(a.k) +
        (physical * a.k_stride_page + hk * a.k_stride_head + key0 * a.k_stride_token) * kElem;
  r.v = static_cast<const uint8_t*>(a.v) +
        (physical * a.v_stride_page + hk * a.v_stride_head + key0 * a.v_stride_token) * kElem;
  if constexpr (kKv == KvKind::kNvfp4) {
    r.ks = a.k_scales + physical * a.ks_stride_page + hk * a.ks_stride_head + key0 * a.ks_stride_token;
    r.vs = a.v_scales + physical * a.vs_stride_page + hk * a.vs_stride_head + key0 * a.vs_stride_token;
  } else {
    r.ks = r.vs = nullptr;
  }
  return r;
}

// Issues producer thread p's cp.async of unit `e` into `dst` (NVFP4 / E4M3: a raw stage; BF16: a tile set). Key
// rows past the unit's live keys are zero-filled (their bytes may be unwritten cache, even NaN).
template <KvKind kKv>
__device__ __forceinline__ void issue_unit(const SparseDecodeArgs& a, int hk, const int4* pages, int e, int p,
                                           uint32_t dst) {
  using msa::cuda::cp_async16_ca;
  using msa::cuda::cp_async8;
  using R = Raw<kKv>;
  constexpr int kP = Cfg::kProducerThreads;
  const int live = unit_live(e);
  const UnitRows r = unit_rows<kKv>(a, hk, pages[unit_page(e)].x, unit_half(e));
#pragma unroll
  for (int j = 0; j < R::kPieces; ++j) {
    const int piece = j * kP + p;
    if constexpr (kKv == KvKind::kNvfp4) {
      const int row = piece >> 2, quarter = piece & 3;
      const bool on = row < live;
      cp_async16_ca(dst + R::kKOff + 16 * piece, r.k + row * a.k_stride_token + 16 * quarter, on);
      cp_async16_ca(dst + R::kVOff + 16 * piece, r.v + row * a.v_stride_token + 16 * quarter, on);
      cp_async8(dst + R::kKsOff + 8 * piece, r.ks + row * a.ks_stride_token, on);
      cp_async8(dst + R::kVsOff + 8 * piece, r.vs + row * a.vs_stride_token, on);
    } else if constexpr (kKv == KvKind::kE4M3) {
      const int row = piece >> 3, c = piece & 7;
      cp_async16_ca(dst + 16 * piece, r.k + row * a.k_stride_token + 16 * c, row < live);
      cp_async16_ca(dst + 16 * (R::kPieces * kP + piece), r.v + row * a.v_stride_token + 16 * c, row < live);
    } else {
      const int row = piece >> 4, c = piece & 15;
      cp_async16_ca(dst + tile_offset(row, c), r.k + row * a.k_stride_token * 2 + 16 * c, row < live);
      cp_async16_ca(dst + Cfg::kTileBytes + tile_offset(row, c), r.v + row * a.v_stride_token * 2 + 16 * c,
                    row < live);
    }
  }
}

// Decodes producer thread p's raw pieces of a landed stage into the K / V tiles of `set`. kFp8K (NVFP4 / E4M3): the
// K tile holds E4M3 bytes (NVFP4: the Q8KV4 dequant's, not widened further), [64 keys][128 bytes] in the
// 128-byte-swizzle layout (the K-major B of an FP8 wgmma).
template <KvKind kKv, bool kFp8K = false>
__device__ __forceinline__ void decode_unit(const uint8_t* raw, const uint2* tables, int p, uint32_t set) {
  static_assert(!kFp8K || kKv != KvKind::kBF16);
  using R = Raw<kKv>;
  constexpr int kP = Cfg::kProducerThreads;
#pragma unroll
  for (int j = 0; j < R::kPieces; ++j) {
    const int piece = j * kP + p;
    if constexpr (kKv == KvKind::kNvfp4) {
      const int row = piece >> 2, quarter = piece & 3;
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        const uint4 c = *reinterpret_cast<const uint4*>(raw + (kv ? R::kVOff : R::kKOff) + 16 * piece);
        const uint8_t* scale = raw + (kv ? R::kVsOff : R::kKsOff) + 8 * piece + 2 * quarter;
        const uint2 table[2] = {tables[scale_byte(scale)], tables[scale_byte(scale + 1)]};
        const uint32_t words[4] = {c.x, c.y, c.z, c.w};
        if (kFp8K && kv == 0) {  // E4M3 K tile: dims 32 quarter + [0, 32) = 16-byte chunks 2 quarter, 2 quarter + 1
          uint32_t e[8];
#pragma unroll
          for (int s = 0; s < 4; ++s) index::e2m1x8_to_e4m3x8(words[s], table[s >> 1].x, table[s >> 1].y, e[2 * s],
                                                              e[2 * s + 1]);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            st_shared16(set + row * 128 + (((2 * quarter + h) ^ (row & 7)) << 4),
                        make_uint4(e[4 * h], e[4 * h + 1], e[4 * h + 2], e[4 * h + 3]));
          }
          continue;
        }
#pragma unroll
        for (int s = 0; s < 4; ++s) {  // word s: dims 32 quarter + 8 s + [0, 8) = chunk 4 quarter + s
          uint32_t lo, hi;
          index::e2m1x8_to_e4m3x8(words[s], table[s >> 1].x, table[s >> 1].y, lo, hi);
          st_shared16(set + kv * Cfg::kTileBytes + tile_offset(row, 4 * quarter + s),
                      make_uint4(e4m3_lo_to_f16x2(lo), e4m3_hi_to_f16x2(lo), e4m3_lo_to_f16x2(hi),
                                 e4m3_hi_to_f16x2(hi)));
        }
      }
    } else {
      const int row = piece >> 3, c = piece & 7;
      if constexpr (kFp8K) {  // bytes 16 c + [0, 16) of key `row`: chunk c of its 128-byte row, swizzled
        st_shared16(set + row * 128 + ((c ^ (row & 7)) << 4), *reinterpret_cast<const uint4*>(raw + 16 * piece));
      }
#pragma unroll
      for (int kv = kFp8K ? 1 : 0; kv < 2; ++kv) {
        uint4 lo, hi;
        e4m3x16_to_f16(*reinterpret_cast<const uint4*>(raw + 16 * (kv * R::kPieces * kP + piece)), lo, hi);
        st_shared16(set + kv * Cfg::kTileBytes + tile_offset(row, 2 * c), lo);
        st_shared16(set + kv * Cfg::kTileBytes + tile_offset(row, 2 * c + 1), hi);
      }
    }
  }
}

// q fragments (A of S = q K^T) of 16 rows straight from global memory; rows past `rows` (or of an inactive token)
// are zero. 16-bit MMA (fp16 from E4M3 q, or BF16 q): qa[kk] = rows g8 / g8 + 8, dims 16 kk + 2 quad + {0, 1} (a0,
// a1) and + 8 (a2, a3). kFp8 (FP8 MMA, E4M3 q): qa[kk] (kk < 4) = the 8-bit A fragment of k-step kk: rows g8 / g8 + 8,
// dims 32 kk + 4 quad + [0, 4) (a0, a1) and + 16 (a2, a3), 4 bytes each, low dim first (q rows are 16-byte aligned:
// the host copies a q that is not).
template <bool kBF16, bool kFp8 = false>
__device__ __forceinline__ void load_query_fragments(const uint8_t* qrow, int64_t stride_h, int rows, bool active,
                                                     uint32_t (&qa)[8][4]) {
  static_assert(!(kBF16 && kFp8));
  const int lane = threadIdx.x & 31, g8 = lane >> 2, quad = lane & 3;
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    const int r = g8 + 8 * (x & 1);
    const bool on = active && r < rows;
    if constexpr (kFp8) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int dim = 32 * kk + 4 * quad + 16 * (x >> 1);
        qa[kk][x] = on ? __ldg(reinterpret_cast<const uint32_t*>(qrow + r * stride_h + dim)) : 0u;
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        const int dim = 16 * kk + 2 * quad + 8 * (x >> 1);
        if constexpr (kBF16) {
          qa[kk][x] = on ? __ldg(reinterpret_cast<const uint32_t*>(qrow + (r * stride_h + dim) * 2)) : 0u;
        } else {
          const uint32_t pair = on ? __ldg(reinterpret_cast<const uint16_t*>(qrow + r * stride_h + dim)) : 0u;
          qa[kk][x] = e4m3_lo_to_f16x2(pair);
        }
      }
    }
  }
}

// ---- the kernel ------------------------------------------------------------------------------------------

// kPipe (NVFP4 / E4M3): each consumer warpgroup issues S of a unit before O += P V of the previous one and runs the
// unit's softmax while that PV is on the tensor cores (launch_union says where it is used). kFp8S (NVFP4 / E4M3, not
// run on a GPU yet): S by FP8 wgmma (m64n64k32, E4M3 q and K tile; the K tile is not widened to fp16); PV stays fp16.
template <KvKind kKv, bool kPipe = false, bool kFp8S = false>
__global__ void __launch_bounds__(Cfg::kThreads, 1) sparse_decode_union_kernel(const SparseDecodeArgs a, int splits) {
#if MSA_WGMMA
  msa::cuda::grid_dependency_wait();  // PDL: before any memory access (mma.cuh)
  using L = Layout<kKv>;
  using R = Raw<kKv>;
  // The direct (BF16) producers arrive on unit u's full barrier only after waiting for unit u - 2's release: a
  // pipelined consumer, which holds one unit's tiles while waiting for a later one, could deadlock there.
  static_assert(!(kPipe && L::kDirect));
  static_assert(!kFp8S || kKv != KvKind::kBF16);
  constexpr bool kBF16 = kKv == KvKind::kBF16;
  constexpr int kSets = L::kSets;
  extern __shared__ __align__(1024) uint8_t union_smem[];  // tile sets: 1024-byte aligned (128-byte swizzle)
  uint8_t* smem = union_smem;
  const uint32_t smem_base = msa::cuda::smem_u32(smem);
  uint2* tables = reinterpret_cast<uint2*>(smem + L::kTablesOff);
  int4* pages = reinterpret_cast<int4*>(smem + L::kPagesOff);
  int* units = reinterpret_cast<int*>(smem + L::kUnitsOff);
  const uint32_t full_bar = smem_base + L::kBarriersOff, empty_bar = full_bar + 8 * kSets;  // + 8 * set
  int* broken_mask = reinterpret_cast<int*>(smem + L::kScalarsOff);
  int* counts = broken_mask + 8;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g8 = lane >> 2, quad = lane & 3;
  const int b = blockIdx.x / splits, split = blockIdx.x % splits, hk = blockIdx.y;
  const int group = a.q_heads / a.kv_heads;
  const int head0 = hk * group + blockIdx.z * Cfg::kRows;
  const int rows = min(Cfg::kRows, hk * group + group - head0);
  const int pos0 = a.seq_lens[b] - a.q_len;  // position of the request's token 0 (< 0: padding tokens)
  const int t = warp;  // consumers: the token
  const bool active = t < a.q_len;
  // Loads that do not depend on the union, issued first so that their latency overlaps the build: the page-table
  // entries of the first kThreads pages, and the consumers' q fragments.
  const int32_t* table_row = a.page_table + int64_t(b) * a.page_table_stride;
  const int32_t first_physical = tid < a.max_pages ? __ldg(table_row + tid) : 0;
  uint32_t qa[8][4];
  if (warp < Cfg::kConsumers) {
    const uint8_t* qrow = static_cast<const uint8_t*>(a.q) +
                          (int64_t(b * a.q_len + min(t, a.q_len - 1)) * a.q_stride_t + int64_t(head0) * a.q_stride_h) *
                              (kBF16 ? 2 : 1);
    load_query_fragments<kBF16, kFp8S>(qrow, a.q_stride_h, rows, active, qa);
  }

  // ---- the union: token counts per logical page, then the page list in page order, then the units ----
  unsigned long long* marks = reinterpret_cast<unsigned long long*>(smem);
  for (int p = tid; p < a.max_pages; p += Cfg::kThreads) marks[p] = 0;
  if (tid == 0) {
    *broken_mask = 0;
    for (int set = 0; set < kSets; ++set) {
      mbar_init(full_bar + 8 * set, Cfg::kProducerThreads);
      mbar_init(empty_bar + 8 * set, Cfg::kConsumers);
    }
  }
  if constexpr (kKv == KvKind::kNvfp4) index::fill_product_tables(tables);
  __syncthreads();
  if (tid < a.q_len * a.topk_width) {
    const int t = tid / a.topk_width, slot = tid % a.topk_width;
    const int pos = pos0 + t;
    const int local = pos >= 0 ? pos / Cfg::kPage : -1;
    const int page = a.topk[hk * a.topk_stride_h + int64_t(b * a.q_len + t) * a.topk_stride_t +
                            int64_t(slot) * a.topk_stride_k];
    if (page >= 0 && page <= local) {
      if (page < a.max_pages) {
        atomicAdd(&marks[page], 1ull << (8 * t));  // <= W <= 255 per token: no carry
      } else {
        atomicOr(broken_mask, 1 << t);
      }
    }
  }
  __syncthreads();
  int n_pages = 0;  // block-uniform
  for (int base = 0; base < a.max_pages; base += Cfg::kThreads) {
    const int p = base + tid;
    unsigned long long listed = p < a.max_pages ? marks[p] : 0;
    int32_t physical = 0;
    if (listed != 0) {
      physical = base == 0 ? first_physical : table_row[p];
      if (physical < 0 || physical >= a.physical_pages) {  // listed, visible, but outside the cache
        int mask = 0;
#pragma unroll
        for (int t = 0; t < Cfg::kMaxTokens; ++t) mask |= ((listed >> (8 * t)) & 0xFF) != 0 ? 1 << t : 0;
        atomicOr(broken_mask, mask);
        listed = 0;
      }
    }
    int found = 0;
    const int at = n_pages + msa::cuda::block_exclusive_scan<Cfg::kWarps>(listed != 0 ? 1 : 0, counts, found);
    if (listed != 0) {
      pages[at] = make_int4(physical, p, static_cast<int>(listed & 0xFFFFFFFFu), static_cast<int>(listed >> 32));
    }
    n_pages += found;
  }
  __syncthreads();  // the page list (written after the last scan's barriers)
  int n_units = 0;
  {
    int mine_units = 0, live = 0;
    if (tid < n_pages) {
      const int4 e = pages[tid];
      const int last = entry_last_token(e);  // the listing token that sees furthest
      live = min(Cfg::kPage, pos0 + last - entry_page(e) * Cfg::kPage + 1);
      mine_units = live > Cfg::kKeys ? 2 : 1;
    }
    const int at = msa::cuda::block_exclusive_scan<Cfg::kWarps>(mine_units, counts, n_units);
    if (tid < n_pages) {
      units[at] = (tid << 8) | min(live, Cfg::kKeys);
      if (mine_units == 2) units[at + 1] = (tid << 8) | (1 << 7) | (live - Cfg::kKeys);
    }
  }
  const int broken = *broken_mask;  // final: the last write precedes the scans' barriers
  __syncthreads();                  // units, and the marks are dead (their bytes become tiles)

  const int mine = n_units > split ? (n_units - split + splits - 1) / splits : 0;
  auto unit_at = [&](int k) { return units[split + k * splits]; };

  float o[64];  // consumers: O of the warp's 16 rows, o[4 j + x] as the S accumulators (dims 8 j + ...)
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  if (warp >= Cfg::kConsumers) {
    // ---- producers: unit k into tile set k % kSets once every consumer is done with unit k - kSets ----
    const int p = tid - Cfg::kConsumers * 32;
    msa::cuda::setmaxnreg_dec<Cfg::kProducerRegs>();
    if constexpr (L::kDirect) {
      // cp.async straight into the tiles; unit k is handed over once this thread's copies of it have landed
      // (cp.async writes through the generic proxy: each thread fences them for the consumers' wgmma).
      constexpr int kAhead = kSets - 1;  // units in flight
      for (int k = 0; k < mine + kAhead - 1; ++k) {
        if (k < mine) {
          const int set = k % kSets;
          if (k >= kSets) mbar_wait(empty_bar + 8 * set, ((k / kSets) - 1) & 1);
          issue_unit<kKv>(a, hk, pages, unit_at(k), p, smem_base + set * L::kSetBytes);
        }
        msa::cuda::cp_async_commit();
        const int ready = k - (kAhead - 1);
        if (ready >= 0) {
          msa::cuda::cp_async_wait<kAhead - 1>();  // unit `ready`'s copies (this thread's own)
          msa::cuda::fence_proxy_async_shared();
          mbar_arrive(full_bar + 8 * (ready % kSets));
        }
      }
      msa::cuda::cp_async_wait<0>();
    } else {
      constexpr int kRing = R::kStages;
      const uint32_t raw_base = smem_base + L::kRawOff;
#pragma unroll
      for (int k = 0; k < kRing - 1; ++k) {
        if (k < mine) issue_unit<kKv>(a, hk, pages, unit_at(k), p, raw_base + k * R::kBytes);
        msa::cuda::cp_async_commit();
      }
      for (int k = 0; k < mine; ++k) {
        const int set = k % kSets;
        msa::cuda::cp_async_wait<kRing - 2>();  // unit k's raw bytes (this thread's own)
        if (k >= kSets) mbar_wait(empty_bar + 8 * set, ((k / kSets) - 1) & 1);
        decode_unit<kKv, kFp8S>(smem + L::kRawOff + (k % kRing) * R::kBytes, tables, p,
                                smem_base + set * L::kSetBytes);
        msa::cuda::fence_proxy_async_shared();  // the tiles are read by wgmma (async proxy)
        mbar_arrive(full_bar + 8 * set);
        if (k + kRing - 1 < mine) {  // into the stage of unit k - 1, decoded by this thread last round
          issue_unit<kKv>(a, hk, pages, unit_at(k + kRing - 1), p, raw_base + ((k + kRing - 1) % kRing) * R::kBytes);
        }
        msa::cuda::cp_async_commit();
      }
      msa::cuda::cp_async_wait<0>();
    }
    msa::cuda::setmaxnreg_inc<Cfg::kLaunchRegs>();  // back for the shared epilogue (waits for the consumers)
  } else {
    // ---- consumers: warpgroup g = warps 4 g + [0, 4) = tokens 4 g + [0, 4), 64 query rows ----
    msa::cuda::setmaxnreg_inc<Cfg::kConsumerRegs>();
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.0f;
    const int pos = pos0 + t;
    const int first_token = warp & ~3;

    // S = q K^T over a unit's 64 keys (K tile: K-major B; k-step kk = dims 16 kk + [0, 16)): s[4 n + x] = rows g8
    // (x = 0, 1) / g8 + 8 (x = 2, 3) of this warp's token, keys 8 n + 2 quad + x % 2. Issued, not waited for.
    auto issue_scores = [&](uint32_t set, float (&s)[32]) {
      if constexpr (kFp8S) {  // E4M3 K tile: one 8 KB block of 128-byte rows; k-step kk = dims 32 kk + [0, 32)
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const uint64_t desc = msa::cuda::wgmma_desc_sw128(set + kk * 32, 16, 1024);
          msa::cuda::wgmma_m64n64k32_e4m3(s, qa[kk], desc, kk > 0);
        }
      } else {
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
          const uint64_t desc = msa::cuda::wgmma_desc_sw128(set + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024);
          msa::cuda::wgmma_m64k16<64, kBF16, false>(s, qa[kk], desc, kk > 0);
        }
      }
      msa::cuda::wgmma_commit();
    };
    // O += P V (V tile: MN-major B, k-step kk = keys 16 kk + [0, 16)): o[4 j + x] = dims 8 j + 2 quad + x % 2.
    auto issue_pv = [&](uint32_t set, const uint32_t (&pa)[4][4]) {
      const uint32_t vtile = set + Cfg::kTileBytes;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t desc = msa::cuda::wgmma_desc_sw128(vtile + 2048 * kk, 8192, 1024);
        msa::cuda::wgmma_m64k16<128, kBF16, true>(o, pa[kk], desc, 1);
      }
      msa::cuda::wgmma_commit();
    };
    // Unit k's shared facts for this warp: whether its warpgroup runs it (any of its 4 tokens attends it: from
    // shared data, uniform over the group), this token's last visible key of it, its listing count, and whether
    // this token attends it (warp-uniform; implies group_attends).
    struct UnitView {
      bool group_attends;
      int limit, listed;
      bool attends;
    };
    auto view_unit = [&](int k) {
      const int e = unit_at(k);
      const int4 entry = pages[unit_page(e)];
      const int key0 = entry_page(entry) * Cfg::kPage + unit_half(e) * Cfg::kKeys;
      UnitView v{false, pos - key0, entry_count(entry, t), false};
      v.attends = active && v.listed > 0 && v.limit >= 0;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int tu = first_token + u;
        v.group_attends |= tu < a.q_len && entry_count(entry, tu) > 0 && pos0 + tu >= key0;
      }
      return v;
    };
    // The online-softmax step of a unit for this warp's token: raw scores -> P in s (in place), the row statistics
    // updated; O must then be multiplied by `correction` when it returns true. Warp-uniform. Per score: one max
    // over the raw q . k (sm_scale > 0, checked by the op), then P = 2^(s sm_scale log2 e + bias - max) as one FFMA
    // and an ex2; the causal mask only when the token's last visible key is inside the unit. Lazy rescaling as in
    // the split kernel (split::kLazySlack): a row keeps its max while the unit's stays within the slack above it.
    auto softmax_unit = [&](const UnitView& v, float (&s)[32], float (&correction)[2]) {
      // A page listed m times counts m times: 2^(s + log2 m) = m 2^s.
      const float bias = v.listed > 1 ? log2f(static_cast<float>(v.listed)) : 0.0f;
      if (v.limit < Cfg::kKeys - 1) {
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          if (8 * (i >> 2) + 2 * quad + (i & 1) > v.limit) s[i] = -INFINITY;
        }
      }
      float unit_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int i = 0; i < 32; ++i) unit_max[(i >> 1) & 1] = fmaxf(unit_max[(i >> 1) & 1], s[i]);
      bool grows = false;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        unit_max[h] = fmaxf(unit_max[h], __shfl_xor_sync(0xFFFFFFFFu, unit_max[h], 1));
        unit_max[h] = fmaxf(unit_max[h], __shfl_xor_sync(0xFFFFFFFFu, unit_max[h], 2));
        unit_max[h] = unit_max[h] * a.sm_scale_log2 + bias;  // -inf stays -inf
        grows |= unit_max[h] > row_max[h] + split::kLazySlack;  // -inf + slack = -inf: the first unit sets it
      }
      const bool rescale = __any_sync(0xFFFFFFFFu, grows);
      if (rescale) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float new_max = fmaxf(row_max[h], unit_max[h]);
          correction[h] = fast_exp2(row_max[h] - new_max);  // ex2(-inf) = 0 before the first key
          row_max[h] = new_max;
          row_sum[h] *= correction[h];
        }
      }
      const float offset[2] = {bias - row_max[0], bias - row_max[1]};
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        s[i] = fast_exp2(fmaf(s[i], a.sm_scale_log2, offset[(i >> 1) & 1]));  // masked keys: ex2(-inf) = 0
        row_sum[(i >> 1) & 1] += s[i];
      }
      return rescale;
    };
    auto rescale_o = [&](const float (&correction)[2]) {
#pragma unroll
      for (int i = 0; i < 64; ++i) o[i] *= correction[(i >> 1) & 1];
    };
    // P as the A fragments of O += P V: k-step kk = keys 16 kk + [0, 16) = S n-tiles 2 kk, 2 kk + 1; zero for a
    // warp whose token does not attend the unit (its rows of O stay as they are).
    auto pack_p = [&](bool attends, const float (&s)[32], uint32_t (&pa)[4][4]) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int x = 0; x < 4; ++x) pa[kk][x] = attends ? pack2<kBF16>(s[8 * kk + 2 * x], s[8 * kk + 2 * x + 1]) : 0u;
      }
    };
    // S of a unit (issued and waited for), then this warp's softmax step if its token attends the unit: P in s;
    // returns whether O must be rescaled by `correction`.
    auto scores_softmax = [&](uint32_t set, const UnitView& v, float (&s)[32], float (&correction)[2]) {
      msa::cuda::wgmma_fence();
      issue_scores(set, s);
      msa::cuda::wgmma_wait<0>();
      msa::cuda::wgmma_fence_operands(s);
      return v.attends && softmax_unit(v, s, correction);
    };
    auto release = [&](int set_index) {  // this warp is done with the unit's tiles
      __syncwarp();
      if (lane == 0) mbar_arrive(empty_bar + 8 * set_index);
    };

    if constexpr (!kPipe) {
      for (int k = 0; k < mine; ++k) {
        const int set_index = k % kSets;
        const uint32_t set = smem_base + set_index * L::kSetBytes;
        const UnitView v = view_unit(k);
        mbar_wait(full_bar + 8 * set_index, (k / kSets) & 1);
        __syncwarp();
        if (v.group_attends) {
          float s[32], correction[2];
          if (scores_softmax(set, v, s, correction)) rescale_o(correction);
          uint32_t pa[4][4];
          pack_p(v.attends, s, pa);
          msa::cuda::wgmma_fence_operands(o);
          msa::cuda::wgmma_fence();
          issue_pv(set, pa);
          msa::cuda::wgmma_wait<0>();
          msa::cuda::wgmma_fence_operands(o);
        }
        release(set_index);
      }
    } else {
      // prev: the tile set of the last attended unit, whose P is packed in pa and whose PV is not issued yet. Per
      // attended unit k after the first: issue S_k, then PV_prev; wait for S_k (the older group), run k's softmax
      // while PV_prev is on the tensor cores; wait for PV_prev, release its tiles, rescale O, pack P_k. (The first
      // attended unit is peeled so that every wgmma issue and wait in the loop is unconditional: ptxas serializes
      // wgmma around a conditional one.) The warpgroup holds prev's tile set until its next run unit, so it also runs
      // (with P = 0) the unit kSets - 1 after prev: else it could wait for a unit in prev's set, which the producers
      // cannot fill before prev is released.
      int k = 0, prev = -1, prev_unit = 0;
      uint32_t pa[4][4];
      for (; k < mine; ++k) {  // units before the first one the warpgroup attends
        const int set_index = k % kSets;
        const UnitView v = view_unit(k);
        mbar_wait(full_bar + 8 * set_index, (k / kSets) & 1);
        __syncwarp();
        if (v.group_attends) {
          float s[32], correction[2];
          scores_softmax(smem_base + set_index * L::kSetBytes, v, s, correction);  // O is zero: no rescale
          pack_p(v.attends, s, pa);
          prev = set_index, prev_unit = k;
          ++k;
          break;
        }
        release(set_index);
      }
      for (; k < mine; ++k) {
        const int set_index = k % kSets;
        const UnitView v = view_unit(k);
        mbar_wait(full_bar + 8 * set_index, (k / kSets) & 1);
        __syncwarp();
        if (!v.group_attends && k - prev_unit < kSets - 1) {
          release(set_index);
          continue;
        }
        float s[32];
        msa::cuda::wgmma_fence_operands(o);
        msa::cuda::wgmma_fence();
        issue_scores(smem_base + set_index * L::kSetBytes, s);
        issue_pv(smem_base + prev * L::kSetBytes, pa);
        msa::cuda::wgmma_wait<1>();
        msa::cuda::wgmma_fence_operands(s);
        float correction[2];
        const bool rescale = v.attends && softmax_unit(v, s, correction);
        msa::cuda::wgmma_wait<0>();
        msa::cuda::wgmma_fence_operands(o);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) msa::cuda::wgmma_fence_operands(pa[kk]);  // PV_prev's operands until here
        release(prev);
        if (rescale) rescale_o(correction);
        pack_p(v.attends, s, pa);
        prev = set_index, prev_unit = k;
      }
      if (prev >= 0) {
        msa::cuda::wgmma_fence_operands(o);
        msa::cuda::wgmma_fence();
        issue_pv(smem_base + prev * L::kSetBytes, pa);
        msa::cuda::wgmma_wait<0>();
        msa::cuda::wgmma_fence_operands(o);
        release(prev);
      }
    }
    msa::cuda::setmaxnreg_dec<Cfg::kLaunchRegs>();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_sum[h] += __shfl_xor_sync(0xFFFFFFFFu, row_sum[h], 1);
      row_sum[h] += __shfl_xor_sync(0xFFFFFFFFu, row_sum[h], 2);
    }
  }

  const bool token_broken = (broken >> t) & 1;
  auto out_row = [&](int token, int r) {
    return reinterpret_cast<__nv_bfloat16*>(a.out) + int64_t(b * a.q_len + token) * a.out_stride_t +
           int64_t(head0 + r) * a.out_stride_h;
  };
  auto write_lse = [&](int token, int r, float m, float total, bool bad) {
    if (a.lse == nullptr) return;
    const float lse = bad ? NAN : (total > 0.0f ? (m + log2f(total)) * 0.69314718055994531f : -INFINITY);
    a.lse[int64_t(b * a.q_len + token) * a.lse_stride_t + int64_t(head0 + r) * a.lse_stride_h] = lse;
  };

  if (splits == 1) {  // the only CTA of its request: write from the registers
    if (warp >= Cfg::kConsumers || !active) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = g8 + 8 * h;
      if (r >= rows) continue;
      const float total = row_sum[h];
      const float inv = total > 0.0f ? 1.0f / total : 0.0f;
      __nv_bfloat16* dst = out_row(t, r);
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const float x = token_broken ? NAN : o[4 * j + 2 * h] * inv;
        const float y = token_broken ? NAN : o[4 * j + 2 * h + 1] * inv;
        *reinterpret_cast<__nv_bfloat162*>(dst + 8 * j + 2 * quad) = __floats2bfloat162_rn(x, y);
      }
      if (quad == 0) write_lse(t, r, row_max[h], total, token_broken);
    }
    return;
  }

  // ---- merge the CTAs of the cluster: each writes its record, then finishes 1/splits of the values ----
  float* stat_m = reinterpret_cast<float*>(smem + L::kStatsOff);
  float* stat_l = stat_m + Cfg::kRecordRows;
  float* record = reinterpret_cast<float*>(smem);
  __syncthreads();  // every warp is done with the tiles
  for (int h = 0; h < 2 && warp < Cfg::kConsumers; ++h) {
    const int rr = t * Cfg::kRows + g8 + 8 * h;
    if (quad == 0) stat_m[rr] = row_max[h], stat_l[rr] = row_sum[h];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      *reinterpret_cast<float2*>(record + rr * Cfg::kORow + 8 * j + 2 * quad) =
          make_float2(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int ranks = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  float* cross_w = reinterpret_cast<float*>(smem + L::kCrossOff);  // [split][record row]
  float* cross_m = cross_w + Cfg::kMaxSplits * Cfg::kRecordRows;
  float* cross_l = cross_m + Cfg::kRecordRows;
  const int record_rows = a.q_len * Cfg::kRows;
  if (tid < record_rows) {
    float mk[Cfg::kMaxSplits], lk[Cfg::kMaxSplits];
#pragma unroll
    for (int k = 0; k < Cfg::kMaxSplits; ++k) {  // all remote loads first: one round trip
      if (k < ranks) {
        mk[k] = cluster.map_shared_rank(stat_m, k)[tid];
        lk[k] = cluster.map_shared_rank(stat_l, k)[tid];
      }
    }
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < Cfg::kMaxSplits; ++k) m = k < ranks ? fmaxf(m, mk[k]) : m;
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < Cfg::kMaxSplits; ++k) {
      if (k < ranks) {
        const float weight = m != -INFINITY ? exp2f(mk[k] - m) : 0.0f;
        total += lk[k] * weight;
        cross_w[k * Cfg::kRecordRows + tid] = weight;
      }
    }
    cross_m[tid] = m, cross_l[tid] = total;
  }
  __syncthreads();
  const int quads = record_rows * (Cfg::kDim / 4);  // 4 dims per item
  const int span = (quads + ranks - 1) / ranks;
  const int end = min(quads, (rank + 1) * span);
  for (int idx = rank * span + tid; idx < end; idx += Cfg::kThreads) {
    const int rr = idx >> 5, d = 4 * (idx & 31);
    const int token = rr / Cfg::kRows, r = rr % Cfg::kRows;
    if (r >= rows) continue;
    float4 part[Cfg::kMaxSplits];
#pragma unroll
    for (int k = 0; k < Cfg::kMaxSplits; ++k) {
      if (k < ranks) {
        part[k] = *reinterpret_cast<const float4*>(cluster.map_shared_rank(record, k) + rr * Cfg::kORow + d);
      }
    }
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < Cfg::kMaxSplits; ++k) {
      if (k < ranks) {
        const float w = cross_w[k * Cfg::kRecordRows + rr];
        acc.x += part[k].x * w, acc.y += part[k].y * w, acc.z += part[k].z * w, acc.w += part[k].w * w;
      }
    }
    const float total = cross_l[rr];
    const bool bad = (broken >> token) & 1;
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    const __nv_bfloat162 lo = __floats2bfloat162_rn(bad ? NAN : acc.x * inv, bad ? NAN : acc.y * inv);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(bad ? NAN : acc.z * inv, bad ? NAN : acc.w * inv);
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(out_row(token, r) + d) = packed;
    if (d == 0) write_lse(token, r, cross_m[rr], total, bad);
  }
  cluster.sync();  // peers may still be reading this CTA's record
#else
  (void)a, (void)splits;
  __trap();  // Hopper only (wgmma): the launcher never picks the union pass elsewhere
#endif
}

}  // namespace msa::attention::page_union
