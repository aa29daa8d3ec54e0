// Sparse decode attention v2: pages split over the CTAs of a thread-block cluster, K/V streamed by cp.async
// straight into each thread's MMA fragments. No torch includes.
//
// Grid: x = token * splits + split (a cluster of `splits` CTAs per token), y = KV head, z = block of 16 query
// heads. A CTA walks the TopK slots split, split + splits, ... of its token's row (interleaved: short rows end
// in -1 padding): the slots' visible keys form a list of 16-key chunks (8 per history page, fewer on the local
// page), dealt round-robin to its 4 warps. Each warp keeps its own online softmax over its chunks; the warps
// merge in shared memory, then the CTAs of the cluster merge through distributed shared memory (the LSE-weighted
// combine, no workspace and no second launch) and each CTA writes 1/splits of the output (a CTA that is its
// token's only split writes its output directly).
//
// Per 16-key chunk a thread loads, with cp.async into a private slot of a per-warp ring of chunks (Shape),
// exactly the bytes of its own MMA fragments (each byte of K/V is loaded by one thread, once):
//   S = Q K^T: mma.sync m16n8k16, A = 16 query heads x 128 dims (registers, whole CTA), B = the chunk's keys
//     as two n-tiles of 8. The dims are permuted (as in the indexer): thread `quad` owns 32 dims of every key
//     (16-byte pieces), and each k16-step takes 4 of them.
//   O += P V: mma.sync m16n8k16, A = P (from the S accumulators, FlashAttention-2 style), B = V with keys as k.
//     Output dims are permuted too: thread g owns 16 dims of each of its 4 keys (one NVFP4 scale group) and
//     pairs two keys per register with byte permutes.
// NVFP4 K/V are decoded through per-scale E4M3 tables (shared memory; two byte permutes per 4 codes) to exactly
// the E4M3 values of the MSA Q8KV4 dequant; E4M3 K/V and q are widened exactly to fp16 (one cvt per pair), and
// the MMAs run in fp16 (bf16 for BF16 K/V) with fp32 accumulation; P is rounded to fp16 (bf16) for the PV
// product, as FlashAttention does. The exact dims each thread owns are in q_piece_offset / dim_of_column.
#pragma once

#include <cmath>
#include <cstdint>

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/attention/sparse_decode_launch.h"
#include "cuda/common/mma.cuh"
#include "cuda/common/nvfp4.cuh"
#include "cuda/common/trace.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/index/index_stream_kernels.cuh"  // the Q8KV4 decode: fill_product_tables, e2m1x8_to_e4m3x8

namespace msa::attention::split {

namespace cg = cooperative_groups;

struct Cfg {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kDim = 128;
  static constexpr int kPage = 128;
  static constexpr int kChunk = 16;     // keys per chunk: one PV k16-step, two S n-tiles
  static constexpr int kRows = 16;      // query heads per CTA (the M of every MMA)
  static constexpr int kMaxSlots = 32;  // TopK slots one CTA walks (one per lane of the slot list)
  static constexpr int kMaxSplits = 8;  // portable cluster size
  static constexpr int kORow = kDim + 4;  // fp32 row stride of the merge tiles (conflict-free stores)
};

// Bytes of one chunk's slot in the ring, per warp, and where each piece lives: [piece][lane] so that each
// thread's loads and reads are conflict-free 16/8/4-byte accesses.
template <KvKind kKv>
struct Fmt;

template <>
struct Fmt<KvKind::kNvfp4> {
  static constexpr int kKOff = 0;                      // K codes: 2 keys x 16 B, [key half][lane]
  static constexpr int kVOff = kKOff + 2 * 32 * 16;    // V codes: 4 keys x 8 B, [i][v_code_slot]
  static constexpr int kKsOff = kVOff + 4 * 32 * 8;    // K scales: the chunk's 16 rows of 8 B
  static constexpr int kVsOff = kKsOff + 16 * 8;       // V scales: the chunk's 16 rows of 8 B
  static constexpr int kStageBytes = kVsOff + 16 * 8;
  static constexpr int kElem = 1;
};

// 8-byte unit of V codes (key 2 quad + (i & 1) + 8 (i >> 1), dims 16 g + [0, 16)) in a stage: the two units
// of one 16-byte piece of a key row (g = 2 p, 2 p + 1) are adjacent, and the 16 lanes of a half-warp read
// distinct banks.
__host__ __device__ constexpr int v_code_unit(int i, int g, int quad) {
  return i * 32 + quad * 8 + (g ^ (4 * (quad >> 1)));
}

template <>
struct Fmt<KvKind::kE4M3> {
  static constexpr int kKOff = 0;                      // K: 2 keys x 32 B
  static constexpr int kVOff = kKOff + 4 * 32 * 16;    // V: 4 keys x 16 B
  static constexpr int kStageBytes = kVOff + 4 * 32 * 16;
  static constexpr int kElem = 1;
};

template <>
struct Fmt<KvKind::kBF16> {
  static constexpr int kKOff = 0;                      // K: 2 keys x 64 B
  static constexpr int kVOff = kKOff + 8 * 32 * 16;    // V: 4 keys x 32 B
  static constexpr int kStageBytes = kVOff + 8 * 32 * 16;
  static constexpr int kElem = 2;
};

// Ring depth (16-key chunks per warp) and the CTAs per SM the registers are budgeted for. Default: 3 CTAs per SM
// (<= 168 registers) for NVFP4 and E4M3; BF16's 3-stage ring (~109 KB of shared memory) fits only 2 CTAs per SM,
// so its registers are budgeted for 2 (at 3 ptxas spilled a value inside the main loop). One stage less so that
// more CTAs fit (NVFP4 4 per SM at <= 128 registers, BF16 3) was measured and removed: NVFP4 slower, FP8 and BF16
// the same (bench/NOTES.md v2.2 and session 28).
// Wide (NVFP4 and E4M3; chosen by launch_lazy_split, knob MSA_SPARSE_DECODE_WARPS): 6 warps per CTA and
// 2 CTAs per SM (the same 12 warps per SM and register budget as 3 CTAs of 4), so that a grid of fewer CTAs than
// three per SM (B8 at 64/4: 256 CTAs of one split, 2 per SM) still runs 12 warps per SM, each with a third fewer
// chunks.
template <KvKind kKv, int kWarps = Cfg::kWarps>
struct Shape {
  static_assert(kWarps == Cfg::kWarps || (kWarps == 6 && kKv != KvKind::kBF16), "the wide variant");
  static constexpr int kStages = kKv == KvKind::kBF16 ? 3 : 4;
  static constexpr int kMinBlocks = kWarps == 6 || kKv == KvKind::kBF16 ? 2 : 3;
};

template <KvKind kKv, int kStages, int kWarps = Cfg::kWarps, bool kQTile = false>
struct Layout {
  using F = Fmt<kKv>;
  static constexpr int kOTileBytes = Cfg::kRows * Cfg::kORow * 4;
  // per warp: its ring, reused for its fp32 O tile at the end
  static constexpr int kSlab = kStages * F::kStageBytes > kOTileBytes ? kStages * F::kStageBytes : kOTileBytes;
  static constexpr int kTablesOff = kWarps * kSlab;
  static constexpr int kTablesBytes = kKv == KvKind::kNvfp4 ? 256 * 8 : 0;
  static constexpr int kPagesOff = kTablesOff + kTablesBytes;  // [slot] PagePointers
  static constexpr int kStatsOff = kPagesOff + Cfg::kMaxSlots * 32;  // [warp][row] (m, l)
  static constexpr int kMergedOff = kStatsOff + kWarps * Cfg::kRows * 2 * 4;
  // the CTA's m[16], l[16], broken (int; no longer read since the push merge), pad; then the values pushed to this
  // CTA by the cluster merge, [sender][span] (16 x 128 floats for any split count, in a region sized 16 x kORow).
  // Removing the dead store and shrinking the region made ptxas take 2 more registers and the NVFP4 4-warp kernels
  // ~2 % slower (H200, 2026-12-03, bench/NOTES.md sparse v2.7), so both stay.
  static constexpr int kMergedOOff = kMergedOff + (2 * Cfg::kRows + 4) * 4;
  // the rest of the cluster merge: each sender's (m, l) of this CTA's rows, each sender's broken flag, the merged
  // (m, l) of those rows and the merged flag
  static constexpr int kCrossOff = kMergedOOff + Cfg::kRows * Cfg::kORow * 4;
  static constexpr int kCrossEnd = kCrossOff + (4 * Cfg::kRows + Cfg::kMaxSplits + 4) * 4;
  // FP8 S (kQTile): the query tile, the B operand of S^T = K Q^T, [2 head groups][8 16-byte K chunks][8 heads][16 B]
  // (no swizzle; see fp8s_dim_base for the dims of each byte).
  static constexpr int kQTileOff = (kCrossEnd + 127) / 128 * 128;
  static constexpr int kQTileBytes = Cfg::kRows * Cfg::kDim;
  static constexpr int kSmemBytes = kQTile ? kQTileOff + kQTileBytes : kCrossEnd;
  static_assert(Cfg::kRows * Cfg::kORow >= Cfg::kRows * Cfg::kDim, "the pushed values fit the O tile");
};

// ---- small device helpers ------------------------------------------------------------------------------

using msa::cuda::cp_async16;
using msa::cuda::cp_async16_ca;
using msa::cuda::cp_async4;
using msa::cuda::cp_async8;
using msa::cuda::cp_async_commit;
using msa::cuda::cp_async_wait;

// The dead-key rule: a key past the visible end of the local page is loaded with zero fill, so garbage (even
// NaN) in the unwritten tail of a page never reaches P V.

template <bool kBF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kBF16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

using nvfp4::e4m3x2_to_f16x2;

using index::e4m3_hi_to_f16x2;
using index::e4m3_lo_to_f16x2;

// Fast 2^x (MUFU.EX2; ex2(-inf) = +0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Which bytes of a key row a thread owns (each 16-byte piece p of a 16-byte-aligned row), chosen so that one
// cp.async instruction of a warp covers whole 32-byte sectors. K and q: thread `quad` owns 32 dims; k16-step t
// takes 4 of them (b0 / a0-a1: the first two, b1 / a2-a3: the next two). NVFP4 K is one 16-byte piece of codes
// (dims 32 quad + [0, 32), k-step t: dims 32 quad + 4 t); its q (E4M3) pieces are at 32 quad + 16 p. E4M3 K/q:
// pieces at 64 p + 16 quad (p = 0, 1; k-step t = 4 p + s: dims 64 p + 16 quad + 4 s). BF16 K/q: pieces at
// 64 p + 16 quad bytes (p = 0..3; dims 32 p + 8 quad + [0, 8); k-step t = 2 p + s: dims + 4 s).
template <KvKind kKv>
__device__ __forceinline__ int q_piece_offset(int quad, int p) {
  return kKv == KvKind::kNvfp4 ? 32 * quad + 16 * p : 64 * p + 16 * quad;
}

// V: thread g owns 16 dims of each of its 4 keys: NVFP4 / E4M3 dims 16 g + [0, 16) (one scale group; one
// 8- / 16-byte piece), BF16 pieces at 128 p + 16 g bytes (dims 64 p + 8 g + [0, 8)). n-tile j, column c of
// P V is then dim 16 c + j (NVFP4 / E4M3) or 64 (j / 8) + 8 c + j % 8 (BF16).
template <KvKind kKv>
__device__ __forceinline__ int dim_of_column(int j, int c) {
  return kKv == KvKind::kBF16 ? 64 * (j >> 3) + 8 * c + (j & 7) : 16 * c + j;
}

// ---- the chunk list of a CTA ---------------------------------------------------------------------------

// Where a slot's page of this KV head starts in each cache tensor (K, V; NVFP4 also the two scale tensors).
struct PagePointers {
  const uint8_t* k;
  const uint8_t* v;
  const uint8_t* ks;
  const uint8_t* vs;
};

// Lane l describes slot first + l * step of the token's TopK row: its visible keys and chunk count, and the
// prefix of chunk counts over the lanes. Warp 0 also stores the slot's page pointers in the CTA's table
// `pages` (computed once here, so a chunk costs a broadcast shared load instead of 64-bit address math; the
// caller synchronises the block before the table is read).
struct SlotList {
  int visible, first, total;  // first: chunks before this lane's slot; total: chunks of the CTA
  bool broken;                // some listed page is visible but maps outside the cache
};

// TopK slot first + lane * step of token t's row for KV head hk (the lane's slot of the list below), or -1 for
// lanes past the n_slots slots. Loaded apart from make_slot_list, and by every lane (a clamped slot, no branch),
// so that the load goes out together with seq_lens[b]: behind a branch, ptxas computed the position from
// seq_lens[b] first and issued this load after it, one more dependent memory latency before the first K/V load.
__device__ __forceinline__ int lane_slot_page(const SparseDecodeArgs& a, int t, int hk, int first, int step,
                                              int n_slots) {
  const int lane = threadIdx.x & 31;
  const int slot = min(first + lane * step, a.topk_width - 1);
  const int page = a.topk[hk * a.topk_stride_h + int64_t(t) * a.topk_stride_t + int64_t(slot) * a.topk_stride_k];
  return lane < n_slots ? page : -1;
}

// `page`: lane_slot_page's value for this lane.
template <KvKind kKv>
__device__ __forceinline__ SlotList make_slot_list(const SparseDecodeArgs& a, int page, int hk, int b, int local,
                                                   int pos, PagePointers* pages) {
  const int lane = threadIdx.x & 31;
  int chunks = 0, visible = 0;
  int64_t physical = 0;
  bool broken = false;
  if (page >= 0 && page <= local) {
    const int32_t p = page < a.max_pages ? a.page_table[int64_t(b) * a.page_table_stride + page] : -1;
    if (p < 0 || p >= a.physical_pages) {
      broken = true;
    } else {
      physical = p;
      visible = page < local ? Cfg::kPage : pos % Cfg::kPage + 1;
      chunks = (visible + Cfg::kChunk - 1) / Cfg::kChunk;
    }
  }
  constexpr int64_t kElem = Fmt<kKv>::kElem;
  PagePointers pp;
  pp.k = static_cast<const uint8_t*>(a.k) + (physical * a.k_stride_page + hk * a.k_stride_head) * kElem;
  pp.v = static_cast<const uint8_t*>(a.v) + (physical * a.v_stride_page + hk * a.v_stride_head) * kElem;
  if constexpr (kKv == KvKind::kNvfp4) {
    pp.ks = a.k_scales + physical * a.ks_stride_page + hk * a.ks_stride_head;
    pp.vs = a.v_scales + physical * a.vs_stride_page + hk * a.vs_stride_head;
  } else {
    pp.ks = pp.vs = nullptr;
  }
  if (threadIdx.x < 32) pages[lane] = pp;
  int incl = chunks;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int y = __shfl_up_sync(0xFFFFFFFFu, incl, d);
    if (lane >= d) incl += y;
  }
  SlotList s;
  s.visible = visible;
  s.first = incl - chunks;
  s.total = __shfl_sync(0xFFFFFFFFu, incl, 31);
  s.broken = __any_sync(0xFFFFFFFFu, broken);
  return s;
}

struct ChunkRef {
  int slot, key0, visible;
};

// Chunk c (warp-uniform, < total) of the list.
__device__ __forceinline__ ChunkRef chunk_ref(const SlotList& s, int c) {
  const unsigned before = __ballot_sync(0xFFFFFFFFu, s.first <= c);  // lanes whose chunks start at or before c
  const int lane_of = 31 - __clz(before);  // the last of them holds c (lanes after it start past c)
  ChunkRef r;
  r.slot = lane_of;
  r.visible = __shfl_sync(0xFFFFFFFFu, s.visible, lane_of);
  r.key0 = (c - __shfl_sync(0xFFFFFFFFu, s.first, lane_of)) * Cfg::kChunk;
  return r;
}

// ---- loads ---------------------------------------------------------------------------------------------

// Loop-invariant byte offsets of a thread's pieces inside a 16-key chunk (key0 = 0) of one page. Dead keys
// (past the visible end of the local page) are still inside the page, so their addresses stay valid; they
// are loaded with src-size 0 (zero fill).
//
// NVFP4: each thread loads its own fragment bytes. E4M3 / BF16 (whole 128-byte lines): the loads are
// decoupled from the fragments. Load j of lane (q = lane / 8, r = lane % 8) copies bytes 16 r of line 4 j + q
// of the chunk (K rows, then V rows; a BF16 row is two lines), so every 8 lanes of a cp.async read one whole
// 128-byte line (one L2 request of 4 sectors; measured on the H200: fragment-shaped 32-byte pieces cost twice
// the L2 sectors and 8x the shared-memory wavefronts). The bytes land in the slot of the lane whose fragment
// holds them (piece_slot); the warp syncs before it reads a landed stage and before it refills one.
template <KvKind kKv>
struct PieceOffsets;

// NVFP4: per chunk a lane copies 16 bytes of K codes for each key half (its own fragment bytes), 16 bytes of
// V codes for each key half (row 8 j + lane / 4, bytes 16 (lane % 4): the units of two other lanes) and one
// 8-byte scale row (lanes 0-15: K, 16-31: V).
template <>
struct PieceOffsets<KvKind::kNvfp4> {
  uint32_t k, v, s;  // byte offsets of load 0 in the chunk (s: in the K or V scale tensor)
  uint32_t v_dst;    // byte offset of V load 0 in the stage
};

template <KvKind kKv>
struct LineLoads {
  static constexpr int kLinesPerRow = Fmt<kKv>::kElem;              // 128 dims x 1 or 2 bytes
  static constexpr int kKPieces = 2 * kLinesPerRow;                 // 16-byte pieces of a K row per owner
  static constexpr int kVPieces = kLinesPerRow;                     // of a V row per owner
  static constexpr int kLoads = 2 * Cfg::kChunk * kLinesPerRow / 4;  // cp.async per lane per chunk (K, then V)
};

// Slot (16-byte unit, swizzled so that the 8 lanes of a load and of a fragment read hit distinct banks) of
// piece `piece` of lane `owner`.
__host__ __device__ constexpr int piece_slot(int piece, int owner) {
  return piece * 32 + (owner ^ ((owner >> 3) & 3) ^ ((piece & 1) << 2));
}

// Byte offset in the stage of line load j of `lane` (see piece_offsets).
template <KvKind kKv>
__host__ __device__ constexpr uint32_t line_load_dst(int j, int lane) {
  using LL = LineLoads<kKv>;
  const int q = lane >> 3, r = lane & 7;
  const bool is_v = j >= LL::kLoads / 2;
  const int line = 4 * (j % (LL::kLoads / 2)) + q;
  const int key = line / LL::kLinesPerRow;
  const int byte = 128 * (line % LL::kLinesPerRow) + 16 * r;  // in the row
  int owner = 0, piece = 0;
  if (!is_v) {  // K: lane 4 (key % 8) + quad owns bytes 16 quad + 64 p of key 8 i + key % 8, piece i * kKPieces + p
    owner = 4 * (key & 7) + ((byte >> 4) & 3);
    piece = (key >> 3) * LL::kKPieces + (byte >> 6);
  } else {  // V: lane 4 g + quad owns bytes 16 g + 128 p of key 2 quad + (i & 1) + 8 (i >> 1), piece i * kVPieces + p
    owner = 4 * ((byte >> 4) & 7) + ((key & 7) >> 1);
    piece = ((key & 1) + 2 * (key >> 3)) * LL::kVPieces + (byte >> 7);
  }
  return static_cast<uint32_t>((is_v ? Fmt<kKv>::kVOff : Fmt<kKv>::kKOff) + 16 * piece_slot(piece, owner));
}

// The destinations of a lane's loads differ from its first K / V destination by a lane-independent XOR
// (checked at compile time below), so the loop keeps two registers per stream and folds the rest in.
template <KvKind kKv>
__host__ __device__ constexpr uint32_t line_load_xor(int j) {
  constexpr int kHalf = LineLoads<kKv>::kLoads / 2;
  return line_load_dst<kKv>(j, 0) ^ line_load_dst<kKv>(j < kHalf ? 0 : kHalf, 0);
}

template <KvKind kKv>
constexpr bool line_loads_are_xor_shifts() {
  constexpr int kHalf = LineLoads<kKv>::kLoads / 2;
  for (int j = 0; j < LineLoads<kKv>::kLoads; ++j) {
    for (int lane = 0; lane < 32; ++lane) {
      if (line_load_dst<kKv>(j, lane) != (line_load_dst<kKv>(j < kHalf ? 0 : kHalf, lane) ^ line_load_xor<kKv>(j))) {
        return false;
      }
    }
  }
  return true;
}
static_assert(line_loads_are_xor_shifts<KvKind::kE4M3>() && line_loads_are_xor_shifts<KvKind::kBF16>());

// Line loads of a lane: load j (j' = j % half) reads key 4 j' / lines-per-row further than load 0 of its
// stream (K: j < half, V: j >= half).
template <KvKind kKv>
struct PieceOffsets {
  uint32_t src_k, src_v;    // byte offset of load 0 of the stream in the chunk
  uint32_t step_k, step_v;  // bytes between consecutive loads of the stream
  uint32_t dst_k, dst_v;    // byte offset of load 0 of the stream in the stage
};

template <KvKind kKv>
__device__ __forceinline__ PieceOffsets<kKv> piece_offsets(const SparseDecodeArgs& a) {
  using F = Fmt<kKv>;
  const int lane = threadIdx.x & 31;
  if constexpr (kKv == KvKind::kNvfp4) {
    const int g8 = lane >> 2, quad = lane & 3;
    PieceOffsets<kKv> o;
    o.k = g8 * static_cast<uint32_t>(a.k_stride_token) + 16 * quad;
    o.v = g8 * static_cast<uint32_t>(a.v_stride_token) + 16 * quad;
    o.s = (lane & 15) * static_cast<uint32_t>(lane < 16 ? a.ks_stride_token : a.vs_stride_token);
    o.v_dst = F::kVOff + 8 * v_code_unit(g8 & 1, 2 * quad, g8 >> 1);  // row g8: i = g8 % 2, quad' = g8 / 2
    asm("" : "+r"(o.k), "+r"(o.v), "+r"(o.s), "+r"(o.v_dst));
    return o;
  } else {
    using LL = LineLoads<kKv>;
    const int q = lane >> 3, r = lane & 7;
    const uint32_t kstride = static_cast<uint32_t>(a.k_stride_token * F::kElem);
    const uint32_t vstride = static_cast<uint32_t>(a.v_stride_token * F::kElem);
    const uint32_t key = q / LL::kLinesPerRow, byte = 128 * (q % LL::kLinesPerRow) + 16 * r;
    PieceOffsets<kKv> o;
    o.src_k = key * kstride + byte;
    o.src_v = key * vstride + byte;
    o.step_k = (4 / LL::kLinesPerRow) * kstride;
    o.step_v = (4 / LL::kLinesPerRow) * vstride;
    o.dst_k = line_load_dst<kKv>(0, lane);
    o.dst_v = line_load_dst<kKv>(LL::kLoads / 2, lane);
    // Opaque to the compiler, so it keeps these four in registers instead of recomputing them every chunk.
    asm("" : "+r"(o.src_k), "+r"(o.src_v), "+r"(o.dst_k), "+r"(o.dst_v));
    return o;
  }
}

// Token strides are below 2^24 bytes (the launcher sends larger ones to v1), so in-page offsets fit 32 bits.
template <KvKind kKv>
__device__ __forceinline__ void issue_chunk(const SparseDecodeArgs& a, const PagePointers* pages, const ChunkRef& c,
                                            const PieceOffsets<kKv>& off, uint32_t stage) {
  using F = Fmt<kKv>;
  const int lane = threadIdx.x & 31;
  const PagePointers& page = pages[c.slot];  // broadcast load
  const uint32_t key0 = static_cast<uint32_t>(c.key0);
  const uint8_t* kchunk = page.k + key0 * static_cast<uint32_t>(a.k_stride_token * F::kElem);
  const uint8_t* vchunk = page.v + key0 * static_cast<uint32_t>(a.v_stride_token * F::kElem);
  const int left = c.visible - c.key0;  // live keys of this chunk (>= 1; >= 16 unless the local page ends here)
  if constexpr (kKv == KvKind::kNvfp4) {
    const int g8 = lane >> 2;
    const bool scale_k = lane < 16;
    const uint8_t* schunk = scale_k ? page.ks + key0 * static_cast<uint32_t>(a.ks_stride_token)
                                    : page.vs + key0 * static_cast<uint32_t>(a.vs_stride_token);
    cp_async8(stage + (scale_k ? F::kKsOff : F::kVsOff) + 8 * (lane & 15), schunk + off.s, (lane & 15) < left);
#pragma unroll
    for (int j = 0; j < 2; ++j) {  // key rows 8 j + g8; V row 8 j + g8 = key 2 quad' + (i & 1) + 8 (i >> 1)
      const bool live = g8 + 8 * j < left;
      cp_async16_ca(stage + F::kKOff + (j * 32 + lane) * 16,
                    kchunk + off.k + 8 * j * static_cast<uint32_t>(a.k_stride_token), live);
      cp_async16_ca(stage + off.v_dst + 8 * 32 * 2 * j,  // i += 2
                    vchunk + off.v + 8 * j * static_cast<uint32_t>(a.v_stride_token), live);
    }
  } else {
    using LL = LineLoads<kKv>;
    const int q = lane >> 3;
    constexpr int kHalf = LL::kLoads / 2;
#pragma unroll
    for (int j = 0; j < LL::kLoads; ++j) {
      const bool is_v = j >= kHalf;
      const int jj = j % kHalf;
      const int key = (4 * jj + q) / LL::kLinesPerRow;
      const uint8_t* src = is_v ? vchunk + off.src_v + jj * off.step_v : kchunk + off.src_k + jj * off.step_k;
      cp_async16_ca(stage + ((is_v ? off.dst_v : off.dst_k) ^ line_load_xor<kKv>(j)), src, key < left);
    }
  }
}

// ---- fragments from a landed chunk ---------------------------------------------------------------------

// One NVFP4 scale byte from shared memory, as its own byte load: volatile so that neighbouring bytes are not
// fetched as one wider word and then taken apart with integer instructions (the integer pipe is the limit).
__device__ __forceinline__ uint32_t scale_byte(const uint8_t* p) {
  return *reinterpret_cast<const volatile uint8_t*>(p);
}

// B fragments of S for n-tile i (key key0 + 8 i + g): kb[t] = {b0, b1} of k16-step t.
template <KvKind kKv>
__device__ __forceinline__ void key_fragments(const uint8_t* stage, const uint2* tables, int i,
                                              uint32_t (&kb)[8][2]) {
  using F = Fmt<kKv>;
  const int lane = threadIdx.x & 31, g8 = lane >> 2, quad = lane & 3;
  if constexpr (kKv == KvKind::kNvfp4) {
    const uint4 c = *reinterpret_cast<const uint4*>(stage + F::kKOff + (i * 32 + lane) * 16);
    // Scale bytes of key g8 + 8 i, dims 32 quad + [0, 16) and + [16, 32): byte loads (a lane-constant address plus
    // an immediate) instead of shifting and masking a word, which costs integer-pipe instructions.
    const uint8_t* scale = stage + F::kKsOff + 8 * (g8 + 8 * i) + 2 * quad;
    const uint2 table[2] = {tables[scale_byte(scale)], tables[scale_byte(scale + 1)]};
    const uint32_t words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int s = 0; s < 4; ++s) {  // word s: dims 32 quad + 8 s + [0, 8) = k-steps 2 s, 2 s + 1
      const uint2 t = table[s >> 1];
      uint32_t lo, hi;
      index::e2m1x8_to_e4m3x8(words[s], t.x, t.y, lo, hi);
      kb[2 * s][0] = e4m3_lo_to_f16x2(lo), kb[2 * s][1] = e4m3_hi_to_f16x2(lo);
      kb[2 * s + 1][0] = e4m3_lo_to_f16x2(hi), kb[2 * s + 1][1] = e4m3_hi_to_f16x2(hi);
    }
  } else if constexpr (kKv == KvKind::kE4M3) {
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const uint4 c = *reinterpret_cast<const uint4*>(stage + F::kKOff + 16 * piece_slot(i * 2 + p, lane));
      const uint32_t words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        kb[4 * p + s][0] = e4m3_lo_to_f16x2(words[s]);
        kb[4 * p + s][1] = e4m3_hi_to_f16x2(words[s]);
      }
    }
  } else {
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const uint4 c = *reinterpret_cast<const uint4*>(stage + F::kKOff + 16 * piece_slot(i * 4 + p, lane));
      kb[2 * p][0] = c.x, kb[2 * p][1] = c.y;
      kb[2 * p + 1][0] = c.z, kb[2 * p + 1][1] = c.w;
    }
  }
}

// Two keys' E4M3 bytes of the same 4 dims -> the key-paired f16x2 B fragments of those dims.
__device__ __forceinline__ void pair_e4m3(uint32_t a, uint32_t b, uint32_t (&vb)[16][2], int j0, int pair) {
  const uint32_t x01 = __byte_perm(a, b, 0x5140);  // (a0, b0, a1, b1)
  const uint32_t x23 = __byte_perm(a, b, 0x7362);  // (a2, b2, a3, b3)
  vb[j0][pair] = e4m3_lo_to_f16x2(x01);
  vb[j0 + 1][pair] = e4m3_hi_to_f16x2(x01);
  vb[j0 + 2][pair] = e4m3_lo_to_f16x2(x23);
  vb[j0 + 3][pair] = e4m3_hi_to_f16x2(x23);
}

// B fragments of P V for the 16 n-tiles: vb[j] = {V[2q][d], V[2q+1][d]}, {V[2q+8][d], V[2q+9][d]} with
// d = dim_of_column(j, g).
template <KvKind kKv>
__device__ __forceinline__ void value_fragments(const uint8_t* stage, const uint2* tables, uint32_t (&vb)[16][2]) {
  using F = Fmt<kKv>;
  const int lane = threadIdx.x & 31, g8 = lane >> 2, quad = lane & 3;
#pragma unroll
  for (int pair = 0; pair < 2; ++pair) {  // keys (2q, 2q+1) -> vb[.][0], (2q+8, 2q+9) -> vb[.][1]
    if constexpr (kKv == KvKind::kNvfp4) {
      uint32_t e[2][4];  // e[key][w]: E4M3 bytes of dims 4 w .. 4 w + 3
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int i = 2 * pair + k;
        const uint2 c = *reinterpret_cast<const uint2*>(stage + F::kVOff + 8 * v_code_unit(i, g8, quad));
        const int key = 2 * quad + (i & 1) + 8 * (i >> 1);
        const uint2 t = tables[scale_byte(stage + F::kVsOff + 8 * key + g8)];  // scale of dims 16 g8 + [0, 16)
        index::e2m1x8_to_e4m3x8(c.x, t.x, t.y, e[k][0], e[k][1]);
        index::e2m1x8_to_e4m3x8(c.y, t.x, t.y, e[k][2], e[k][3]);
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) pair_e4m3(e[0][w], e[1][w], vb, 4 * w, pair);
    } else if constexpr (kKv == KvKind::kE4M3) {
      const uint4 c0 = *reinterpret_cast<const uint4*>(stage + F::kVOff + 16 * piece_slot(2 * pair, lane));
      const uint4 c1 = *reinterpret_cast<const uint4*>(stage + F::kVOff + 16 * piece_slot(2 * pair + 1, lane));
      pair_e4m3(c0.x, c1.x, vb, 0, pair);
      pair_e4m3(c0.y, c1.y, vb, 4, pair);
      pair_e4m3(c0.z, c1.z, vb, 8, pair);
      pair_e4m3(c0.w, c1.w, vb, 12, pair);
    } else {
#pragma unroll
      for (int p = 0; p < 2; ++p) {  // dims 64 p + 8 g + [0, 8)
        const uint8_t* v = stage + F::kVOff;  // key i, piece p: piece 2 i + p
        const uint4 c0 = *reinterpret_cast<const uint4*>(v + 16 * piece_slot(2 * (2 * pair) + p, lane));
        const uint4 c1 = *reinterpret_cast<const uint4*>(v + 16 * piece_slot(2 * (2 * pair + 1) + p, lane));
        const uint32_t w0[4] = {c0.x, c0.y, c0.z, c0.w}, w1[4] = {c1.x, c1.y, c1.z, c1.w};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          vb[8 * p + 2 * m][pair] = __byte_perm(w0[m], w1[m], 0x5410);
          vb[8 * p + 2 * m + 1][pair] = __byte_perm(w0[m], w1[m], 0x7632);
        }
      }
    }
  }
}

// ---- FP8 S: S^T = K Q^T by wgmma (one warpgroup per CTA) -------------------------------------------------
//
// The keys are the M of the MMA (each warp's 16 chunk keys are its 16 rows: A from registers, the E4M3 bytes of the
// Q8KV4 dequant or of the E4M3 cache, no widening to fp16), the 16 query heads its N (B = the q tile in shared
// memory, E4M3 as given): wgmma m64n16k32 e4m3, 4 k-steps over the 128 dims. Hopper's FP8 MMA sums the 32 products
// of a k-step at reduced precision (~2^-11 relative of the score measured in the union pass; E4M3 q and K already
// carry 2^-4). S^T comes back with the keys as rows, so the softmax keeps per-thread statistics of 4 heads (2 quad,
// 2 quad + 1, + 8) and P is transposed into the A fragments of P V with movmatrix (fp16). The O accumulators, the
// P V product and the merges are the split kernel's.

// First of the 4 dims of A-word u (0..7: k-step u / 2, first (even u) or second half of its k) of a thread `quad`
// for each of its two keys: the bytes it already holds (NVFP4: decoded word u / 2, codes 4 (u % 2) + [0, 4);
// E4M3: word u % 4 of piece u / 4). The q tile puts the same dims at the same k.
template <KvKind kKv>
__host__ __device__ constexpr int fp8s_dim_base(int quad, int u) {
  return kKv == KvKind::kNvfp4 ? 32 * quad + 4 * u : 64 * (u >> 2) + 16 * quad + 4 * (u & 3);
}

// The wgmma A fragments of a landed chunk: ka[k-step] = {key g8 half 0, key g8 + 8 half 0, key g8 half 1, key g8 + 8
// half 1} (4 E4M3 bytes each).
template <KvKind kKv>
__device__ __forceinline__ void key_fragments_fp8(const uint8_t* stage, const uint2* tables, uint32_t (&ka)[4][4]) {
  using F = Fmt<kKv>;
  const int lane = threadIdx.x & 31, g8 = lane >> 2, quad = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // key g8 + 8 i
    if constexpr (kKv == KvKind::kNvfp4) {
      const uint4 c = *reinterpret_cast<const uint4*>(stage + F::kKOff + (i * 32 + lane) * 16);
      const uint8_t* scale = stage + F::kKsOff + 8 * (g8 + 8 * i) + 2 * quad;
      const uint2 table[2] = {tables[scale_byte(scale)], tables[scale_byte(scale + 1)]};
      const uint32_t words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
      for (int s = 0; s < 4; ++s) {  // A-words 2 s (codes 0-3), 2 s + 1 (codes 4-7)
        const uint2 t = table[s >> 1];
        index::e2m1x8_to_e4m3x8(words[s], t.x, t.y, ka[s][i], ka[s][i + 2]);
      }
    } else {
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const uint4 c = *reinterpret_cast<const uint4*>(stage + F::kKOff + 16 * piece_slot(i * 2 + p, lane));
        const uint32_t words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const int u = 4 * p + w;
          ka[u >> 1][i + 2 * (u & 1)] = words[w];
        }
      }
    }
  }
}

// Position of (n-tile j, column half h, quad) in the fragment-ordered merge tiles: 8 j + 4 h + quad.
template <KvKind kKv>
__device__ __forceinline__ int dim_of_position(int p) {
  return dim_of_column<kKv>(p >> 3, 2 * (p & 3) + ((p >> 2) & 1));
}

// ---- the kernel ----------------------------------------------------------------------------------------

// kLazy (the default; knob MSA_SPARSE_DECODE_LAZY=0 turns it off): lazy rescaling. A row keeps its
// running max while a chunk's max stays within kLazySlack (log2 units) above it, so P = 2^(s - max) <= 2^8 (exact
// enough in fp16 / bf16; the fp32 sums stay far from overflow) and O is rescaled only when some row's max grows
// past that. The final O / l and the LSE do not depend on the reference max. Without it every growth rescales,
// which with 16 rows per warp happens in most chunks (64 FMUL each). Measured on the H200 (2026-12-03, 64/4, us,
// eager -> lazy): NVFP4 B128 N200K 532.8 -> 511.4, B8 N100K 44.3 -> 42.8, B4 N32K 28.8 -> 28.0; FP8 1-2 % faster,
// BF16 within 1 %.
constexpr float kLazySlack = 8.0f;

// FP8 S: issues (and commits, without waiting) S^T = K Q^T of the warpgroup's 64 keys, this warp's 16 from `stage`
// (zero A fragments when the warp has no chunk: the wgmma is collective). `ka` must stay untouched until the wait.
template <KvKind kKv>
__device__ __forceinline__ void fp8s_issue_scores(const uint8_t* stage, const uint2* tables, bool has, uint32_t q_tile,
                                                  uint32_t (&ka)[4][4], float (&sacc)[8]) {
  if (has) key_fragments_fp8<kKv>(stage, tables, ka);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int x = 0; x < 4; ++x) asm volatile("" : "+r"(ka[kk][x]));
  msa::cuda::wgmma_fence_operands(sacc);
  msa::cuda::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    msa::cuda::wgmma_m64n16k32_e4m3(sacc, ka[kk], msa::cuda::wgmma_desc_interleave(q_tile + 256 * kk, 128, 1024),
                                    kk > 0);
  }
  msa::cuda::wgmma_commit();
}

// FP8 S: chunk `c`'s softmax from its S^T accumulator (per thread heads hh = 0..3: 2 quad, 2 quad + 1, 2 quad + 8,
// 2 quad + 9; accumulator d[4 j + x]: head 8 j + 2 quad + x % 2, key g8 + 8 (x / 2)), lazy rescaling of O, and P as
// the m16n8k16 A fragments of P V. m4 is uniform over the 8 lanes of a quad, l4 sums this thread's keys.
__device__ __forceinline__ void fp8s_softmax(float (&sacc)[8], const ChunkRef& c, float sm_scale_log2, int g8,
                                             float (&m4)[4], float (&l4)[4], float (&o)[16][4], uint32_t (&pa)[4]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) sacc[e] *= sm_scale_log2;
  if (c.visible - c.key0 < Cfg::kChunk) {  // warp-uniform: only the last chunk of a local page has dead keys
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (c.key0 + g8 + 8 * ((e >> 1) & 1) >= c.visible) sacc[e] = -INFINITY;
    }
  }
  // Lazy rescaling as in the plain loop; a chunk changes a head's reference max only when one of its scores passes
  // it by more than the slack, so the common chunk needs no max reduction at all.
  bool grows = false;
#pragma unroll
  for (int e = 0; e < 8; ++e) grows |= sacc[e] > m4[2 * (e >> 2) + (e & 1)] + kLazySlack;
  if (__any_sync(0xFFFFFFFFu, grows)) {
    float correction[4];
#pragma unroll
    for (int hh = 0; hh < 4; ++hh) {
      const int e = 4 * (hh >> 1) + (hh & 1);
      float chunk_max = fmaxf(sacc[e], sacc[e + 2]);
#pragma unroll
      for (int d = 4; d < 32; d *= 2) chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xFFFFFFFFu, chunk_max, d));
      const float new_max = fmaxf(m4[hh], chunk_max);
      correction[hh] = fast_exp2(m4[hh] - new_max);
      m4[hh] = new_max;
      l4[hh] *= correction[hh];
    }
    // O rows g8 and g8 + 8 are heads hh = g8 % 2 and 2 + g8 % 2 of lane g8 / 2 (quad g8 / 2).
    float from[4];
#pragma unroll
    for (int hh = 0; hh < 4; ++hh) from[hh] = __shfl_sync(0xFFFFFFFFu, correction[hh], g8 >> 1);
    const float c0 = (g8 & 1) ? from[1] : from[0], c1 = (g8 & 1) ? from[3] : from[2];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      o[j][0] *= c0, o[j][1] *= c0;
      o[j][2] *= c1, o[j][3] *= c1;
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int hh = 2 * (e >> 2) + (e & 1);
    sacc[e] = fast_exp2(sacc[e] - m4[hh]);  // dead keys: ex2(-inf) = 0
    l4[hh] += sacc[e];
  }
  // P^T blocks (keys x heads, 8 x 8) transposed into the m16n8k16 A fragments of P (heads x keys).
  using msa::cuda::movmatrix_trans;
  pa[0] = movmatrix_trans(pack2<false>(sacc[0], sacc[1]));  // heads 0-7, keys 0-7
  pa[1] = movmatrix_trans(pack2<false>(sacc[4], sacc[5]));  // heads 8-15, keys 0-7
  pa[2] = movmatrix_trans(pack2<false>(sacc[2], sacc[3]));  // heads 0-7, keys 8-15
  pa[3] = movmatrix_trans(pack2<false>(sacc[6], sacc[7]));  // heads 8-15, keys 8-15
}

// kFp8S: S^T = K Q^T by FP8 wgmma (key_fragments_fp8; NVFP4 / E4M3, 4 warps, lazy rescaling), waited for at once
// (leaving it in flight over the previous chunk's P V measured slower on the H100, sessions 20-21); else S by
// mma.sync.
template <KvKind kKv, int kStages, int kMinBlocks, bool kLazy, int kWarps = Cfg::kWarps, bool kFp8S = false>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks)
    sparse_decode_split_kernel(const SparseDecodeArgs a, int splits) {
  static_assert(!kFp8S || (kKv != KvKind::kBF16 && kWarps == 4 && kLazy && kStages >= 2),
                "FP8 S: NVFP4 / E4M3, one warpgroup, lazy");
  MSA_TRACE(2, 0);
  msa::cuda::grid_dependency_wait();  // PDL: before any memory access (mma.cuh)
  MSA_TRACE(2, 1);
  using F = Fmt<kKv>;
  using L = Layout<kKv, kStages, kWarps, kFp8S>;
  constexpr int kThreads = 32 * kWarps;
  constexpr bool kBF16 = kKv == KvKind::kBF16;
  extern __shared__ __align__(16) uint8_t smem[];
  uint2* tables = reinterpret_cast<uint2*>(smem + L::kTablesOff);
  float* stats = reinterpret_cast<float*>(smem + L::kStatsOff);
  float* merged_m = reinterpret_cast<float*>(smem + L::kMergedOff);
  float* merged_l = merged_m + Cfg::kRows;
  int* merged_broken = reinterpret_cast<int*>(merged_l + Cfg::kRows);
  float* merged_o = reinterpret_cast<float*>(smem + L::kMergedOOff);

  const int t = blockIdx.x / splits, split = blockIdx.x % splits, hk = blockIdx.y;
  const int group = a.q_heads / a.kv_heads;
  const int head0 = hk * group + blockIdx.z * Cfg::kRows;
  const int rows = min(Cfg::kRows, hk * group + group - head0);
  // Split s walks slots s, s + splits, ...: rows end in -1 padding (short contexts), so interleaving spreads
  // the real pages evenly over the splits.
  const int n_slots = split < a.topk_width ? (a.topk_width - split + splits - 1) / splits : 0;
  const int slot_page = lane_slot_page(a, t, hk, split, splits, n_slots);
  const int b = t / a.q_len;
  const int pos = a.seq_lens[b] - a.q_len + t % a.q_len;
  const int local = pos >= 0 ? pos / Cfg::kPage : -1;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g8 = lane >> 2, quad = lane & 3;
  // FP8 S: thread x loads the 16 bytes of q-tile chunk x % 8 of head x / 8 (k-step c / 2, half c % 2: A-word
  // u = c of every quad), stored after the first chunk loads are issued.
  uint32_t q_tile_words[4] = {0u, 0u, 0u, 0u};
  if constexpr (kFp8S) {
    const int n = threadIdx.x >> 3, chunk = threadIdx.x & 7;
    if (n < rows) {
      const uint8_t* src =
          static_cast<const uint8_t*>(a.q) + int64_t(t) * a.q_stride_t + int64_t(head0 + n) * a.q_stride_h;
#pragma unroll
      for (int qd = 0; qd < 4; ++qd) {
        q_tile_words[qd] = __ldg(reinterpret_cast<const uint32_t*>(src + fp8s_dim_base<kKv>(qd, chunk)));
      }
    }
  }

  if constexpr (kKv == KvKind::kNvfp4) index::fill_product_tables(tables);  // per scale byte: 8 E4M3 values

  PagePointers* pages = reinterpret_cast<PagePointers*>(smem + L::kPagesOff);
  const SlotList slots = make_slot_list<kKv>(a, slot_page, hk, b, local, pos, pages);
  const int mine = slots.total > warp ? (slots.total - warp + kWarps - 1) / kWarps : 0;
  __syncthreads();  // page table (and the NVFP4 product tables)
  MSA_TRACE(2, 2);
  if (splits > 1) msa::cuda::cluster_arrive_relaxed();  // "started": peers push into this CTA's shared memory

  uint8_t* ring = smem + warp * L::kSlab;
  const uint32_t ring_addr = msa::cuda::smem_u32(ring);
  const PieceOffsets<kKv> off = piece_offsets<kKv>(a);
  // The warp's chunk n (when it has one) into ring stage n % kStages, as one cp.async group.
  auto issue_ahead = [&](int n) {
    if (n < mine) {
      issue_chunk<kKv>(a, pages, chunk_ref(slots, warp + kWarps * n), off, ring_addr + (n % kStages) * F::kStageBytes);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue_ahead(i);

  // Query fragments (A of S), dims permuted like the keys: qa[t] = rows g / g + 8, dims 32 quad + 4 t + [0, 4).
  // FP8 S: the q tile instead (B of S^T), published to the async proxy before the first wgmma.
  uint32_t qa[8][4];
  if constexpr (kFp8S) {
    const int n = threadIdx.x >> 3, chunk = threadIdx.x & 7;
    *reinterpret_cast<uint4*>(smem + L::kQTileOff + (n >> 3) * 1024 + chunk * 128 + (n & 7) * 16) =
        make_uint4(q_tile_words[0], q_tile_words[1], q_tile_words[2], q_tile_words[3]);
    msa::cuda::fence_proxy_async_shared();
    __syncthreads();
  }
#pragma unroll
  for (int h = 0; h < (kFp8S ? 0 : 2); ++h) {
    const int r = g8 + 8 * h;
    const uint8_t* src = static_cast<const uint8_t*>(a.q) +
                         (int64_t(t) * a.q_stride_t + int64_t(head0 + r) * a.q_stride_h) * F::kElem;
    if constexpr (kBF16) {
      uint4 v[4] = {};
      if (r < rows) {
#pragma unroll
        for (int p = 0; p < 4; ++p) v[p] = __ldg(reinterpret_cast<const uint4*>(src + q_piece_offset<kKv>(quad, p)));
      }
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        qa[2 * p][h] = v[p].x, qa[2 * p][h + 2] = v[p].y;
        qa[2 * p + 1][h] = v[p].z, qa[2 * p + 1][h + 2] = v[p].w;
      }
    } else {
      uint4 v[2] = {};
      if (r < rows) {
#pragma unroll
        for (int p = 0; p < 2; ++p) v[p] = __ldg(reinterpret_cast<const uint4*>(src + q_piece_offset<kKv>(quad, p)));
      }
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const uint32_t w[4] = {v[p].x, v[p].y, v[p].z, v[p].w};
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          qa[4 * p + s][h] = e4m3_lo_to_f16x2(w[s]);
          qa[4 * p + s][h + 2] = e4m3_hi_to_f16x2(w[s]);
        }
      }
    }
  }

  float o[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  // E4M3 / BF16 lanes load each other's fragments: sync before refilling the stage read last iteration and
  // after a stage lands (cp.async.wait_group covers only the thread's own copies).
  constexpr bool kShared = kKv != KvKind::kNvfp4;
  if constexpr (kFp8S) {
    // The warpgroup's wgmma is collective: every warp runs warp 0's chunk count (the most), a warp past its own
    // chunks with zero A fragments and no softmax / P V.
    const int steps = slots.total > 0 ? (slots.total + kWarps - 1) / kWarps : 0;
    const uint32_t q_tile = msa::cuda::smem_u32(smem + L::kQTileOff);
    float m4[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, l4[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // fp8s_softmax
    uint32_t pa[4] = {0u, 0u, 0u, 0u};  // P as m16n8k16 A fragments (finite: <= 2^8)
    auto pv = [&](int chunk) {  // O += P V of the warp's chunk `chunk`
      uint32_t vb[16][2];
      value_fragments<kKv>(ring + (chunk % kStages) * F::kStageBytes, tables, vb);
#pragma unroll
      for (int j = 0; j < 16; ++j) msa::cuda::mma_m16n8k16<false>(o[j], pa, vb[j][0], vb[j][1]);
    };
    // Each chunk in turn: S, wait, softmax, P V.
    for (int i = 0; i < steps; ++i) {
      const bool has = i < mine;
      if constexpr (kShared) __syncwarp();
      issue_ahead(i + kStages - 1);
      cp_async_wait<kStages - 1>();
      if constexpr (kShared) __syncwarp();
      if (i == 0) MSA_TRACE(2, 3);
      const uint8_t* stage = ring + (i % kStages) * F::kStageBytes;
      uint32_t ka[4][4] = {};
      float sacc[8];
      fp8s_issue_scores<kKv>(stage, tables, has, q_tile, ka, sacc);
      msa::cuda::wgmma_wait<0>();
      msa::cuda::wgmma_fence_operands(sacc);
      if (!has) continue;
      fp8s_softmax(sacc, chunk_ref(slots, warp + kWarps * i), a.sm_scale_log2, g8, m4, l4, o, pa);
      pv(i);
    }
    // Statistics into the O layout (rows g8, g8 + 8): sums over the 8 lanes of a quad, then from lane g8 / 2.
#pragma unroll
    for (int hh = 0; hh < 4; ++hh) {
#pragma unroll
      for (int d = 4; d < 32; d *= 2) l4[hh] += __shfl_xor_sync(0xFFFFFFFFu, l4[hh], d);
    }
    float m_from[4], l_from[4];
#pragma unroll
    for (int hh = 0; hh < 4; ++hh) {
      m_from[hh] = __shfl_sync(0xFFFFFFFFu, m4[hh], g8 >> 1);
      l_from[hh] = __shfl_sync(0xFFFFFFFFu, l4[hh], g8 >> 1);
    }
    row_max[0] = (g8 & 1) ? m_from[1] : m_from[0], row_max[1] = (g8 & 1) ? m_from[3] : m_from[2];
    row_sum[0] = (g8 & 1) ? l_from[1] : l_from[0], row_sum[1] = (g8 & 1) ? l_from[3] : l_from[2];
  } else  // the plain loop: S = Q K^T by mma.sync, fp16 (bf16)
  for (int i = 0; i < mine; ++i) {
    if constexpr (kShared) __syncwarp();
    issue_ahead(i + kStages - 1);
    cp_async_wait<kStages - 1>();
    if constexpr (kShared) __syncwarp();
    if (i == 0) MSA_TRACE(2, 3);  // warp 0's first chunk landed
    const ChunkRef c = chunk_ref(slots, warp + kWarps * i);
    const uint8_t* stage = ring + (i % kStages) * F::kStageBytes;

    float s[2][4];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      uint32_t kb[8][2];
      key_fragments<kKv>(stage, tables, n, kb);
      float s2[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // two accumulation chains of 4 MMAs instead of one of 8
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; k += 2) {
        msa::cuda::mma_m16n8k16<kBF16>(s[n], qa[k], kb[k][0], kb[k][1]);
        msa::cuda::mma_m16n8k16<kBF16>(s2, qa[k + 1], kb[k + 1][0], kb[k + 1][1]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] += s2[e];
    }
    // Online softmax in base 2; the thread holds rows g (e = 0, 1) and g + 8 (e = 2, 3), keys 8 n + 2 quad + e % 2.
    float chunk_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] *= a.sm_scale_log2;
    }
    if (c.visible - c.key0 < Cfg::kChunk) {  // warp-uniform: only the last chunk of a local page has dead keys
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (c.key0 + 8 * n + 2 * quad + (e & 1) >= c.visible) s[n][e] = -INFINITY;
        }
      }
    }
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) chunk_max[e >> 1] = fmaxf(chunk_max[e >> 1], s[n][e]);
    }
    bool grows = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      chunk_max[h] = fmaxf(chunk_max[h], __shfl_xor_sync(0xFFFFFFFFu, chunk_max[h], 1));
      chunk_max[h] = fmaxf(chunk_max[h], __shfl_xor_sync(0xFFFFFFFFu, chunk_max[h], 2));
      if constexpr (kLazy) {
        grows |= chunk_max[h] > row_max[h] + kLazySlack;  // -inf + slack = -inf: the first chunk always sets it
      } else {
        grows |= chunk_max[h] > row_max[h];
      }
    }
    if (__any_sync(0xFFFFFFFFu, grows)) {  // rescale only when some row's running max moves
      float correction[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float new_max = fmaxf(row_max[h], chunk_max[h]);
        correction[h] = fast_exp2(row_max[h] - new_max);  // ex2(-inf) = 0 before the first key
        row_max[h] = new_max;
        row_sum[h] *= correction[h];
      }
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        o[j][0] *= correction[0], o[j][1] *= correction[0];
        o[j][2] *= correction[1], o[j][3] *= correction[1];
      }
    }
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = fast_exp2(s[n][e] - row_max[e >> 1]);  // dead keys: ex2(-inf) = 0
        row_sum[e >> 1] += s[n][e];
      }
    }
    const uint32_t pa[4] = {pack2<kBF16>(s[0][0], s[0][1]), pack2<kBF16>(s[0][2], s[0][3]),
                            pack2<kBF16>(s[1][0], s[1][1]), pack2<kBF16>(s[1][2], s[1][3])};
    uint32_t vb[16][2];
    value_fragments<kKv>(stage, tables, vb);
#pragma unroll
    for (int j = 0; j < 16; ++j) msa::cuda::mma_m16n8k16<kBF16>(o[j], pa, vb[j][0], vb[j][1]);
  }
  cp_async_wait<0>();
  MSA_TRACE(2, 4);  // warp 0's chunks done
#pragma unroll
  for (int h = 0; h < (kFp8S ? 0 : 2); ++h) {  // FP8 S: summed over the lanes already
    row_sum[h] += __shfl_xor_sync(0xFFFFFFFFu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xFFFFFFFFu, row_sum[h], 2);
  }

  // Merge the warps of the CTA: (m, l) per row and the fp32 O tile (fragment order) of each warp in its ring.
  __syncthreads();
  float* o_tile = reinterpret_cast<float*>(ring);
  if (quad == 0) {
    stats[(warp * Cfg::kRows + g8) * 2 + 0] = row_max[0];
    stats[(warp * Cfg::kRows + g8) * 2 + 1] = row_sum[0];
    stats[(warp * Cfg::kRows + g8 + 8) * 2 + 0] = row_max[1];
    stats[(warp * Cfg::kRows + g8 + 8) * 2 + 1] = row_sum[1];
  }
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int p = 8 * j + 4 * h + quad;
      o_tile[g8 * Cfg::kORow + p] = o[j][h];
      o_tile[(g8 + 8) * Cfg::kORow + p] = o[j][h + 2];
    }
  }
  const int broken = __syncthreads_or(slots.broken);
  // Per row (thread r): the warps' weights 2^(m_w - m), written over their m (`stats`), and the merged (m, l).
  if (threadIdx.x < Cfg::kRows) {
    const int r = threadIdx.x;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, stats[(w * Cfg::kRows + r) * 2]);
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      float& slot = stats[(w * Cfg::kRows + r) * 2];
      const float weight = m != -INFINITY ? exp2f(slot - m) : 0.0f;  // 0 for a warp without keys
      total += stats[(w * Cfg::kRows + r) * 2 + 1] * weight;
      slot = weight;
    }
    merged_m[r] = m, merged_l[r] = total;
  }
  if (threadIdx.x == 0) *merged_broken = broken;  // dead since the push merge; kept on purpose (Layout)
  __syncthreads();
  MSA_TRACE(2, 5);  // the CTA's warps merged
  // The warps' O tiles, weighted: value (r, p) of the CTA's partial output.
  auto warp_merged = [&](int r, int p) {
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      acc += reinterpret_cast<const float*>(smem + w * L::kSlab)[r * Cfg::kORow + p] * stats[(w * Cfg::kRows + r) * 2];
    }
    return acc;
  };
  auto store = [&](int r, int p, float acc, float m, float total, bool bad) {
    const float value = bad ? NAN : (total > 0.0f ? acc / total : 0.0f);  // no key: zeros
    reinterpret_cast<__nv_bfloat16*>(a.out)[int64_t(t) * a.out_stride_t + int64_t(head0 + r) * a.out_stride_h +
                                            dim_of_position<kKv>(p)] = __float2bfloat16_rn(value);
    if (p == 0 && a.lse != nullptr) {
      const float lse = bad ? NAN : (total > 0.0f ? (m + log2f(total)) * 0.69314718055994531f : -INFINITY);
      a.lse[int64_t(t) * a.lse_stride_t + int64_t(head0 + r) * a.lse_stride_h] = lse;
    }
  };

  if (splits == 1) {  // one CTA per token: it finishes the output itself
    for (int idx = threadIdx.x; idx < rows * Cfg::kDim; idx += kThreads) {
      const int r = idx / Cfg::kDim, p = idx % Cfg::kDim;
      store(r, p, warp_merged(r, p), merged_m[r], merged_l[r], broken);
    }
    MSA_TRACE(2, 7);
    return;
  }
  // Merge the splits of the token (the CTAs of the cluster). CTA `rank` owns rows [rank, rank + 1) x 16 / splits
  // and finishes them: every CTA pushes its weighted O of each CTA's rows, and those rows' (m, l), into that CTA's
  // shared memory (posted stores: no remote round trip), one cluster barrier publishes them, and each owner
  // combines its rows locally. Nothing is read remotely, so a CTA exits without waiting for its peers. Same
  // values and summation order as a pull from the peers.
  cg::cluster_group cluster = cg::this_cluster();
  const int ranks = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int rows_per_rank = Cfg::kRows / ranks, span = rows_per_rank * Cfg::kDim;
  float* recv_o = merged_o;  // [sender][span]: this CTA's rows from each split
  float* recv_m = reinterpret_cast<float*>(smem + L::kCrossOff);  // [sender][own row]: m, then the split's weight
  float* recv_l = recv_m + Cfg::kRows;
  int* recv_broken = reinterpret_cast<int*>(recv_l + Cfg::kRows);  // [sender]
  float* final_m = reinterpret_cast<float*>(recv_broken + Cfg::kMaxSplits);
  float* final_l = final_m + Cfg::kRows;
  int* final_broken = reinterpret_cast<int*>(final_l + Cfg::kRows);
  using msa::cuda::cluster_map;
  using msa::cuda::cluster_store;
  using msa::cuda::smem_u32;
  msa::cuda::cluster_wait();  // pairs with the arrive after the prologue: every peer has started
  if (threadIdx.x < Cfg::kRows) {
    const int r = threadIdx.x, owner = r / rows_per_rank, slot = rank * rows_per_rank + r % rows_per_rank;
    cluster_store(cluster_map(smem_u32(recv_m + slot), owner), merged_m[r]);
    cluster_store(cluster_map(smem_u32(recv_l + slot), owner), merged_l[r]);
  }
  if (threadIdx.x < ranks) cluster_store(cluster_map(smem_u32(recv_broken + rank), threadIdx.x), broken);
  for (int i = threadIdx.x; i < Cfg::kRows * Cfg::kDim / 4; i += kThreads) {  // a warp: 128 values of a row
    const int r = i / (Cfg::kDim / 4), p = 4 * (i % (Cfg::kDim / 4));
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float4 x = *reinterpret_cast<const float4*>(reinterpret_cast<const float*>(smem + w * L::kSlab) +
                                                        r * Cfg::kORow + p);
      const float weight = stats[(w * Cfg::kRows + r) * 2];
      acc.x += x.x * weight, acc.y += x.y * weight, acc.z += x.z * weight, acc.w += x.w * weight;
    }
    const float* dst = recv_o + rank * span + (r % rows_per_rank) * Cfg::kDim + p;
    cluster_store(cluster_map(smem_u32(dst), r / rows_per_rank), acc);
  }
  MSA_TRACE(2, 8);  // this CTA's pushes issued
  msa::cuda::cluster_arrive();  // release: the pushes above
  msa::cuda::cluster_wait();    // acquire: every peer's pushes into this CTA
  MSA_TRACE(2, 6);  // every split of the token pushed its part
  if (threadIdx.x < rows_per_rank) {
    const int r = threadIdx.x;
    float m = -INFINITY;
    for (int k = 0; k < ranks; ++k) m = fmaxf(m, recv_m[k * rows_per_rank + r]);
    float total = 0.0f;
    for (int k = 0; k < ranks; ++k) {
      float& slot = recv_m[k * rows_per_rank + r];
      const float weight = m != -INFINITY ? exp2f(slot - m) : 0.0f;
      total += recv_l[k * rows_per_rank + r] * weight;
      slot = weight;
    }
    final_m[r] = m, final_l[r] = total;
  }
  if (threadIdx.x == 0) {
    int any_broken = 0;
    for (int k = 0; k < ranks; ++k) any_broken |= recv_broken[k];
    *final_broken = any_broken;
  }
  __syncthreads();
  MSA_TRACE(2, 9);  // the owner's weights ready
  for (int idx = threadIdx.x; idx < span; idx += kThreads) {
    const int rl = idx / Cfg::kDim, p = idx % Cfg::kDim, r = rank * rows_per_rank + rl;
    if (r >= rows) continue;
    float acc = 0.0f;
    for (int k = 0; k < ranks; ++k) acc += recv_o[k * span + idx] * recv_m[k * rows_per_rank + rl];
    store(r, p, acc, final_m[rl], final_l[rl], *final_broken);
  }
  MSA_TRACE(2, 7);
}

}  // namespace msa::attention::split
