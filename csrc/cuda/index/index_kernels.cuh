// Decode indexer kernels: BF16-key page scores, and the per-row exact top-k. No torch includes.
// (FP8 / NVFP4 keys: index_wgmma_kernels.cuh on Hopper, index_stream_kernels.cuh elsewhere.)
//
// BF16 scores (one CTA per (request, chunk of kPagesPerCta pages)): the request's Q x H query rows sit in
// shared memory for the whole CTA; per page the 128 index keys are staged in a padded shared tile, 8 warps
// each multiply 16 keys against every query row (mma.sync m16n8k16 BF16, fp32 accumulate), mask the local
// page causally, and reduce to one max per query row.
//
// Select: the K-th largest history score of a (head, token) row is found over order-preserving integer keys;
// pages above it, then the lowest-id pages equal to it, are written. Exact, deterministic, ties to the lower
// page id, NaN ranked as -inf. Rows of up to 2048 candidates take one warp each (keys in registers, a cheap
// lower bound from per-lane maxima, then an exact rank over the few keys above it); rows of more than 256, when
// there are few of them, take the 4 warps of a CTA each (a quarter per warp, then a merge of the quarters' picks);
// other rows of more than 2048 take one CTA each (bitwise search with block-wide counts).
#pragma once

#include <cfloat>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/block_scan.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/nvfp4.cuh"
#include "cuda/common/trace.cuh"
#include "cuda/index/index_launch.h"

namespace msa::index {

struct ScoreConfig {
  static constexpr int kThreads = 256;  // 8 warps; warp w owns keys [16 w, 16 w + 16) of a page
  static constexpr int kPage = 128;
  static constexpr int kDim = 128;
  static constexpr int kMaxRows = 64;  // Q x H <= 16 x 4
  static constexpr int kPagesPerCta = 4;
  static constexpr int kPadBytes = 16;  // row padding: conflict-free fragment loads (row stride = 4 banks mod 32)
};

template <KeyKind kKeys>
struct ScoreTraits {
  static constexpr bool kBF16 = kKeys == KeyKind::kBF16;
  static constexpr int kElemBytes = kBF16 ? 2 : 1;
  static constexpr int kRowBytes = ScoreConfig::kDim * kElemBytes + ScoreConfig::kPadBytes;
  static constexpr int kKStep = kBF16 ? 16 : 32;  // MMA k per instruction
  static constexpr int kSmemBytes = (ScoreConfig::kPage + ScoreConfig::kMaxRows) * kRowBytes +
                                    (ScoreConfig::kThreads / 32) * ScoreConfig::kMaxRows * 4;
};

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// One thread's share of a page (64 dims of one key) in registers: fetched from global memory one page ahead,
// committed to the shared tile once the tile is free.
template <KeyKind kKeys>
struct PageFetch {
  static constexpr int kVecs = 64 * ScoreTraits<kKeys>::kElemBytes / 16;
  uint4 v[kVecs];
};

template <KeyKind kKeys>
__device__ __forceinline__ void fetch_page_keys(const ScoreArgs& a, int64_t physical, PageFetch<kKeys>& f) {
  using Tr = ScoreTraits<kKeys>;
  const int token = threadIdx.x >> 1, half = threadIdx.x & 1;
  const uint8_t* key_base = static_cast<const uint8_t*>(a.keys) +
                            (physical * a.key_stride_page + token * a.key_stride_token) * Tr::kElemBytes;
  const uint4* src = reinterpret_cast<const uint4*>(key_base + half * 64 * Tr::kElemBytes);
#pragma unroll
  for (int i = 0; i < PageFetch<kKeys>::kVecs; ++i) f.v[i] = __ldg(src + i);
}

template <KeyKind kKeys>
__device__ __forceinline__ void commit_page_keys(const PageFetch<kKeys>& f, uint8_t* tile) {
  using Tr = ScoreTraits<kKeys>;
  const int token = threadIdx.x >> 1, half = threadIdx.x & 1;
  uint8_t* dst = tile + token * Tr::kRowBytes + half * 64 * Tr::kElemBytes;
#pragma unroll
  for (int i = 0; i < PageFetch<kKeys>::kVecs; ++i) reinterpret_cast<uint4*>(dst)[i] = f.v[i];
}

template <KeyKind kKeys, int kMTiles>
__global__ void __launch_bounds__(ScoreConfig::kThreads) index_scores_kernel(const ScoreArgs a) {
  msa::cuda::grid_dependency_wait();  // PDL: before any memory access (mma.cuh)
  static_assert(kKeys == KeyKind::kBF16, "FP8 / NVFP4 keys: index_wgmma_kernels.cuh, index_stream_kernels.cuh");
  using Tr = ScoreTraits<kKeys>;
  using C = ScoreConfig;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* key_tile = smem;                                  // [128][kRowBytes]
  uint8_t* q_tile = smem + C::kPage * Tr::kRowBytes;         // [kMTiles * 16][kRowBytes]
  float* row_max = reinterpret_cast<float*>(q_tile + C::kMaxRows * Tr::kRowBytes);  // [8 warps][64]

  const int b = blockIdx.y;
  const int rows = a.q_len * a.heads;  // query row r = i * H + h
  const int32_t seq_len = a.seq_lens[b];
  const int needed = seq_len >= 1 ? (seq_len - 1) / C::kPage + 1 : 0;  // pages up to the last token's local
  const int limit = a.write_all_pages ? a.max_pages : min(needed, a.max_pages);
  const int first_page = blockIdx.x * C::kPagesPerCta;
  if (first_page >= limit) return;
  const int last_page = min(first_page + C::kPagesPerCta, limit);

  // Query rows into shared memory (zero rows pad the last M tile).
  for (int chunk = threadIdx.x; chunk < kMTiles * 16 * (C::kDim * Tr::kElemBytes / 16); chunk += C::kThreads) {
    const int r = chunk / (C::kDim * Tr::kElemBytes / 16), c = chunk % (C::kDim * Tr::kElemBytes / 16);
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (r < rows) {
      const int i = r / a.heads, h = r % a.heads;
      const uint8_t* src = static_cast<const uint8_t*>(a.q) +
                           (int64_t(b) * a.q_stride_b + int64_t(i) * a.q_stride_q + int64_t(h) * a.q_stride_h) *
                               Tr::kElemBytes;
      v = __ldg(reinterpret_cast<const uint4*>(src) + c);
    }
    *reinterpret_cast<uint4*>(q_tile + r * Tr::kRowBytes + 16 * c) = v;
  }

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, group = lane >> 2, quad = lane & 3;
  // Physical page of logical `page`, or -1 when it has no keys to read (past the request, or an
  // out-of-range id: those pages score NaN for the tokens that see them).
  auto physical_of = [&](int page) -> int64_t {
    if (page >= needed || page >= last_page) return -1;
    const int32_t physical = a.page_table[int64_t(b) * a.page_table_stride + page];
    return (physical >= 0 && physical < a.physical_pages) ? physical : -2;
  };
  PageFetch<kKeys> fetched;
  int64_t next_physical = physical_of(first_page);
  if (next_physical >= 0) fetch_page_keys<kKeys>(a, next_physical, fetched);
  for (int page = first_page; page < last_page; ++page) {
    const int64_t physical = next_physical;
    const bool valid = physical >= 0;
    __syncthreads();  // previous page's tile fully consumed (and the query tile written, first time)
    if (valid) commit_page_keys<kKeys>(fetched, key_tile);
    __syncthreads();
    next_physical = physical_of(page + 1);  // the next page's loads fly while this page is multiplied
    if (next_physical >= 0) fetch_page_keys<kKeys>(a, next_physical, fetched);

    // acc[m][n][4]: rows 16 m + group (+8), keys 16 warp + 8 n + 2 quad (+1).
    float acc[kMTiles][2][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[m][n][j] = 0.0f;
    if (valid) {
#pragma unroll
      for (int k0 = 0; k0 < C::kDim; k0 += Tr::kKStep) {
        constexpr int kHalfK = 16;  // bytes between a fragment's two k halves (16 E4M3 or 8 BF16 elements)
        const int kbyte = k0 * Tr::kElemBytes + quad * 4;
        uint32_t bfrag[2][2];
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const uint8_t* key_row = key_tile + (16 * warp + 8 * n + group) * Tr::kRowBytes;
          bfrag[n][0] = lds32(key_row + kbyte);
          bfrag[n][1] = lds32(key_row + kbyte + kHalfK);
        }
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          const uint8_t* q_row = q_tile + (16 * m + group) * Tr::kRowBytes;
          const uint32_t afrag[4] = {lds32(q_row + kbyte), lds32(q_row + 8 * Tr::kRowBytes + kbyte),
                                     lds32(q_row + kbyte + kHalfK),
                                     lds32(q_row + 8 * Tr::kRowBytes + kbyte + kHalfK)};
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            msa::cuda::mma_m16n8k16<true>(acc[m][n], afrag, bfrag[n][0], bfrag[n][1]);
          }
        }
      }
    }

    // Causal visibility on the local page, then max over this warp's 16 keys per query row.
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int r = 16 * m + group + 8 * hi;
        const int i = r / a.heads;
        const int pos = seq_len - a.q_len + i;
        const int local = pos >= 0 ? pos / C::kPage : -1;
        const int visible = (r >= rows || pos < 0 || page > local) ? 0 : (page < local ? C::kPage : pos % C::kPage + 1);
        float best = -INFINITY;
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int key = 16 * warp + 8 * n + 2 * quad + j;
            if (key < visible) best = nvfp4::fmax_nan(best, acc[m][n][2 * hi + j]);
          }
        }
        best = nvfp4::fmax_nan(best, __shfl_xor_sync(0xFFFFFFFFu, best, 1));
        best = nvfp4::fmax_nan(best, __shfl_xor_sync(0xFFFFFFFFu, best, 2));
        if (quad == 0 && r < C::kMaxRows) row_max[warp * C::kMaxRows + r] = best;
      }
    }
    __syncthreads();
    if (threadIdx.x < rows) {
      const int r = threadIdx.x, i = r / a.heads, h = r % a.heads;
      const int pos = seq_len - a.q_len + i;
      const int local = pos >= 0 ? pos / C::kPage : -1;
      float best = -INFINITY;
      if (pos >= 0 && page <= local) {
        if (!valid) {  // page <= local means the page has keys: its id was out of range
          best = NAN;
        } else {
#pragma unroll
          for (int w = 0; w < C::kThreads / 32; ++w) best = nvfp4::fmax_nan(best, row_max[w * C::kMaxRows + r]);
          best *= 0.08838834764831845f;  // 1 / sqrt(128), after the max (monotone)
        }
      }
      const int64_t t = int64_t(b) * a.q_len + i;
      a.scores[h * a.scores_stride_h + t * a.scores_stride_t + page] = best;
    }
  }
}

// ---- select -------------------------------------------------------------------------------------------

struct SelectConfig {
  static constexpr int kThreads = 256;
  static constexpr int kMaxPerThread = 32;  // 8192 pages / 256 threads
};

// Order-preserving key: larger score -> larger key; NaN ranks as -inf; -0 == +0.
__device__ __forceinline__ uint32_t rank_key(float s) {
  if (s != s) s = -INFINITY;
  if (s == 0.0f) s = 0.0f;
  const uint32_t bits = __float_as_uint(s);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// Sum over the block.
__device__ __forceinline__ int block_sum(int value, int* warp_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) value += __shfl_xor_sync(0xFFFFFFFFu, value, d);
  __syncthreads();  // warp_sums free for reuse
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  int total = 0;
#pragma unroll
  for (int w = 0; w < SelectConfig::kThreads / 32; ++w) total += warp_sums[w];
  return total;
}

// Rows longer than the warp kernel holds (up to 8192 candidates) that the split kernel does not take
// (launch_select): one CTA each.
__global__ void __launch_bounds__(SelectConfig::kThreads) topk_select_kernel(const SelectArgs a) {
  msa::cuda::grid_dependency_wait();  // PDL: before any memory access (mma.cuh)
  constexpr int kPerThread = SelectConfig::kMaxPerThread;
  __shared__ int warp_sums[SelectConfig::kThreads / 32];
  __shared__ int step_counts[2][3][SelectConfig::kThreads / 32];  // double-buffered: one barrier per step
  const int row = blockIdx.x;
  const int h = row / a.tokens, t = row % a.tokens;
  const int pos = a.positions != nullptr ? a.positions[t] : a.seq_lens[t / a.q_len] - a.q_len + t % a.q_len;
  int32_t* out = a.out + h * a.out_stride_h + int64_t(t) * a.out_stride_t;
  const float* scores = a.scores + h * a.scores_stride_h + int64_t(t) * a.scores_stride_t;
  const int local = pos >= 0 ? pos / 128 : -1;

  // A token past the scores' pages (seq_lens beyond the page table; the CPU op raises, a kernel cannot)
  // gets an all -1 row, like padding, rather than reading out of bounds.
  if (pos < 0 || local >= a.max_pages || local + 1 <= a.topk) {  // padding, or every page fits: 0 .. local
    const int last = local < a.max_pages ? local : -1;
    for (int k = threadIdx.x; k < a.topk; k += blockDim.x) out[k * a.out_stride_k] = k <= last ? k : -1;
    return;
  }
  const int first_window = local - a.local_blocks + 1;
  const int history = a.topk - a.init_blocks - a.local_blocks;  // < candidates, since local + 1 > topk
  for (int k = threadIdx.x; k < a.init_blocks; k += blockDim.x) out[k * a.out_stride_k] = k;
  for (int k = threadIdx.x; k < a.local_blocks; k += blockDim.x) {
    out[(a.init_blocks + history + k) * a.out_stride_k] = first_window + k;
  }
  if (history == 0) return;

  // Candidates [init_blocks, first_window): a contiguous, ascending run per thread (thread order = id order).
  const int candidates = first_window - a.init_blocks;
  const int per_thread = (candidates + blockDim.x - 1) / blockDim.x;
  const int begin = a.init_blocks + threadIdx.x * per_thread;
  const int end = min(begin + per_thread, first_window);
  uint32_t keys[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    keys[j] = (j < per_thread && begin + j < end) ? rank_key(scores[begin + j]) : 0u;  // 0: below every key
  }
  // threshold = the history-th largest key: the largest value with at least `history` keys >= it, found two
  // bits per step (three trial values counted at once; 0 never counts, every trial is >= 1).
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t threshold = 0u;
#pragma unroll 1
  for (int bit = 30; bit >= 0; bit -= 2) {
    uint32_t count[3] = {0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
#pragma unroll
      for (int d = 0; d < 3; ++d) count[d] += keys[j] >= (threshold | (uint32_t(d + 1) << bit));
    }
    int (*buffer)[SelectConfig::kThreads / 32] = step_counts[(bit >> 1) & 1];
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      const uint32_t warp_count = __reduce_add_sync(0xFFFFFFFFu, count[d]);
      if (lane == 0) buffer[d][warp] = static_cast<int>(warp_count);
    }
    __syncthreads();
    int digit = 0;
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      int total = 0;
#pragma unroll
      for (int w = 0; w < SelectConfig::kThreads / 32; ++w) total += buffer[d][w];
      if (total >= history) digit = d + 1;
    }
    threshold |= uint32_t(digit) << bit;
  }
  int above = 0, equal = 0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    above += (j < per_thread && begin + j < end && keys[j] > threshold);
    equal += (j < per_thread && begin + j < end && keys[j] == threshold);
  }
  // Every key above the threshold (fewer than `history` of them), then the lowest-id keys equal to it.
  int total_equal = 0, total_slots = 0;
  const int equal_before = msa::cuda::block_exclusive_scan<SelectConfig::kThreads / 32>(equal, warp_sums, total_equal);
  const int equal_quota = history - block_sum(above, warp_sums);
  const int equal_taken = max(0, min(equal, equal_quota - equal_before));
  const int slot_before = msa::cuda::block_exclusive_scan<SelectConfig::kThreads / 32>(above + equal_taken, warp_sums,
                                                                                      total_slots);
  int slot = a.init_blocks + slot_before;
  int equal_seen = 0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    if (j < per_thread && begin + j < end) {
      const bool take = keys[j] > threshold || (keys[j] == threshold && equal_seen++ < equal_taken);
      if (take) out[(slot++) * a.out_stride_k] = begin + j;
    }
  }
}

// ---- select, one warp per row ---------------------------------------------------------------------------
//
// Lane l holds candidates l, l + 32, l + 64, ... (coalesced loads; id order = (register j, lane) order).
// Register slots past the row's end hold the key of -inf: they rank below or tie with every candidate and
// their ids come after every candidate's, and a row has more candidates than history slots, so they are
// never taken (ties go to the lower id).
// 1. bound: the history-th largest of the per-lane maxima (history <= 16), or of the per-lane maxima of the
//    even and of the odd registers (history > 16). At least `history` of these groups hold candidates, so at
//    least `history` candidates' keys are >= bound: bound <= threshold.
// 2. history <= 32: the keys >= bound (few, unless many ties) are kept in id order in shared memory, and the
//    threshold is their history-th largest, found by counting, for each kept key, the kept keys above it.
// 3. Otherwise (or more than kCap kept keys): a bitwise search over all keys from the highest bit where bound
//    and the largest key differ, then an ordered write-out by ballots.
// The steps are warp helpers over a set of slots in registers (slot l + 32 j in lane l's register j, slot order
// = id order): `steps` = registers holding a slot in some lane, `id_of(j)` = the id of this lane's register j,
// `emit(position, key, id)` = a chosen slot, `position` = `first` + its rank in id order among the chosen ones.
struct WarpSelectConfig {
  static constexpr int kWarps = 4;  // rows per CTA
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMaxPerLane = 64;  // 2048 candidates per row
  static constexpr int kCap = 64;         // kept keys: two per lane
  static constexpr int kChunk = 8;        // loops over registers stop at the first chunk past the row's end
};

// rank_key in four instructions: fmaxf turns NaN into -inf, adding +0 turns -0 into +0 and changes nothing else.
__device__ __forceinline__ uint32_t rank_key_fast(float s) {
  const uint32_t bits = __float_as_uint(fmaxf(s, -INFINITY) + 0.0f);
  return bits ^ (static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u);
}

// Keys of the (masked) scores, and this lane's maxima over its even and its odd registers (for the bound).
template <int kPerLane>
__device__ __forceinline__ void warp_rank_keys(const float (&raw)[kPerLane], uint32_t (&keys)[kPerLane],
                                               uint32_t& max_even, uint32_t& max_odd) {
  max_even = 0u;
  max_odd = 0u;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    keys[j] = rank_key_fast(raw[j]);
    if (j & 1) {
      max_odd = max(max_odd, keys[j]);
    } else {
      max_even = max(max_even, keys[j]);
    }
  }
}

// Step 1. The history-th largest of a set = its smallest member with fewer than `history` members above it.
__device__ __forceinline__ uint32_t warp_select_bound(uint32_t max_even, uint32_t max_odd, int history) {
  constexpr uint32_t kAll = 0xFFFFFFFFu;
  if (history <= 16) {
    const uint32_t v = max(max_even, max_odd);
    int above = 0;
#pragma unroll
    for (int s = 0; s < 32; ++s) above += __shfl_sync(kAll, v, s) > v;
    return __reduce_min_sync(kAll, above < history ? v : kAll);
  }
  int above_even = 0, above_odd = 0;
#pragma unroll
  for (int s = 0; s < 32; ++s) {
    const uint32_t e = __shfl_sync(kAll, max_even, s), o = __shfl_sync(kAll, max_odd, s);
    above_even += (e > max_even) + (o > max_even);
    above_odd += (e > max_odd) + (o > max_odd);
  }
  return __reduce_min_sync(kAll, min(above_even < history ? max_even : kAll, above_odd < history ? max_odd : kAll));
}

// f(j) for each register j that holds a slot in some lane, a chunk of kChunk registers at a time: the loop stops at
// the first chunk past `steps` (the registers holding a slot in some lane).
template <int kPerLane, class F>
__device__ __forceinline__ void for_each_step(int steps, F f) {
  using C = WarpSelectConfig;
#pragma unroll
  for (int c = 0; c < kPerLane / C::kChunk; ++c) {
    if (c * C::kChunk >= steps) break;
#pragma unroll
    for (int i = 0; i < C::kChunk; ++i) f(c * C::kChunk + i);
  }
}

// Step 2a: the keys >= bound, in id order, into kept (keys [0, kCap), ids [kCap, 2 kCap); unused key slots 0).
// Returns how many there were (only the first kCap are kept).
template <int kPerLane, class IdOf>
__device__ __forceinline__ int warp_keep_above(const uint32_t (&keys)[kPerLane], int steps, uint32_t bound,
                                               int lane, uint32_t lanes_below, IdOf id_of, uint32_t* kept) {
  using C = WarpSelectConfig;
  constexpr uint32_t kAll = 0xFFFFFFFFu;
  kept[lane] = 0u;  // unused slots rank below every kept key
  kept[lane + 32] = 0u;
  __syncwarp();
  int count = 0;
  for_each_step<kPerLane>(steps, [&](int j) {
    const bool hit = keys[j] >= bound;
    const uint32_t hits = __ballot_sync(kAll, hit);
    if (hits != 0u) {
      const int slot = count + __popc(hits & lanes_below);
      if (hit && slot < C::kCap) {
        kept[slot] = keys[j];
        kept[C::kCap + slot] = id_of(j);
      }
      count += __popc(hits);
    }
  });
  return count;
}

// Step 2b: the top `history` of the first `count` <= kCap slots in shared memory (keys, ids; slot order = id order),
// at least `history` of them holding candidates' keys (all > 0) and the rest 0; the slots from `count` up to a
// multiple of 4 hold 0 too. Trace points 5 and 7.
template <class Emit>
__device__ __forceinline__ void warp_take_kept(const uint32_t* kept_keys, const uint32_t* kept_ids, int count,
                                               int history, int lane, uint32_t lanes_below, int first,
                                               Emit emit) {
  constexpr uint32_t kAll = 0xFFFFFFFFu;
  __syncwarp();
  // This lane's kept slots: lane and lane + 32. Count the kept keys above each.
  const uint32_t key0 = kept_keys[lane], key1 = kept_keys[lane + 32];
  int above0 = 0, above1 = 0;
  const int count4 = (count + 3) & ~3;  // slots past `count` hold 0
  if (count <= 32) {
#pragma unroll 4
    for (int i = 0; i < count4; i += 4) {
      const uint4 q = *reinterpret_cast<const uint4*>(kept_keys + i);
      above0 += (q.x > key0) + (q.y > key0) + (q.z > key0) + (q.w > key0);
    }
  } else {
#pragma unroll 2
    for (int i = 0; i < count4; i += 4) {
      const uint4 q = *reinterpret_cast<const uint4*>(kept_keys + i);
      above0 += (q.x > key0) + (q.y > key0) + (q.z > key0) + (q.w > key0);
      above1 += (q.x > key1) + (q.y > key1) + (q.z > key1) + (q.w > key1);
    }
  }
  const bool valid0 = lane < count, valid1 = lane + 32 < count;
  const uint32_t threshold = __reduce_min_sync(
      kAll, min(valid0 && above0 < history ? key0 : kAll, valid1 && above1 < history ? key1 : kAll));
  // Kept keys above the threshold, then the first equal ones (slot order = id order); out in id order.
  const bool gt0 = valid0 && key0 > threshold, gt1 = valid1 && key1 > threshold;
  const bool eq0 = valid0 && key0 == threshold, eq1 = valid1 && key1 == threshold;
  const uint32_t eqs0 = __ballot_sync(kAll, eq0), eqs1 = __ballot_sync(kAll, eq1);
  const int quota = history - __popc(__ballot_sync(kAll, gt0)) - __popc(__ballot_sync(kAll, gt1));
  const bool take0 = gt0 || (eq0 && __popc(eqs0 & lanes_below) < quota);
  const bool take1 = gt1 || (eq1 && __popc(eqs0) + __popc(eqs1 & lanes_below) < quota);
  const uint32_t takes0 = __ballot_sync(kAll, take0), takes1 = __ballot_sync(kAll, take1);
  MSA_TRACE(1, 5);
  if (take0) {
    const uint32_t id = kept_ids[lane];
    emit(first + __popc(takes0 & lanes_below), key0, id);
  }
  if (take1) {
    const uint32_t id = kept_ids[lane + 32];
    emit(first + __popc(takes0) + __popc(takes1 & lanes_below), key1, id);
  }
  MSA_TRACE(1, 7);
}

// Step 3. The threshold lies in [bound, top] and shares their common high bits; search the rest, then take the
// keys above it and the first equal ones in id order. `lane_max`: this lane's largest key.
template <int kPerLane, class IdOf, class Emit>
__device__ __forceinline__ void warp_take_bitwise(const uint32_t (&keys)[kPerLane], int steps, uint32_t bound,
                                                  uint32_t lane_max, int history, uint32_t lanes_below, int first,
                                                  IdOf id_of, Emit emit) {
  constexpr uint32_t kAll = 0xFFFFFFFFu;
  const uint32_t top = __reduce_max_sync(kAll, lane_max);
  uint32_t threshold = bound;
  if (bound != top) {
    const int high = 31 - __clz(bound ^ top);
    threshold = bound & ~(kAll >> (31 - high));
#pragma unroll 1
    for (int bit = high; bit >= 0; --bit) {
      const uint32_t trial = threshold | (1u << bit);
      int count = 0;
      for_each_step<kPerLane>(steps, [&](int j) { count += keys[j] >= trial; });
      if (static_cast<int>(__reduce_add_sync(kAll, count)) >= history) threshold = trial;
    }
  }
  int above = 0;
  for_each_step<kPerLane>(steps, [&](int j) { above += keys[j] > threshold; });
  int quota = history - static_cast<int>(__reduce_add_sync(kAll, above));  // equal keys still to take
  int slot = first;
  for_each_step<kPerLane>(steps, [&](int j) {
    const bool eq = keys[j] == threshold;
    const uint32_t eqs = __ballot_sync(kAll, eq);
    const bool take = keys[j] > threshold || (eq && __popc(eqs & lanes_below) < quota);
    const uint32_t takes = __ballot_sync(kAll, take);
    if (take) {
      const uint32_t id = id_of(j);
      emit(slot + __popc(takes & lanes_below), keys[j], id);
    }
    slot += __popc(takes);
    quota -= __popc(eqs);
  });
}

// Steps 1-3: the top `history` of the warp's slots, emitted in id order. At least `history` slots must rank above
// every padding slot (the key of -inf or 0, ids after every slot's), so that none is emitted. `kept`: this warp's
// 2 kCap words of shared memory.
template <int kPerLane, class IdOf, class Emit>
__device__ __forceinline__ void warp_select(const uint32_t (&keys)[kPerLane], uint32_t max_even, uint32_t max_odd,
                                            int steps, int history, int lane, uint32_t lanes_below, uint32_t* kept,
                                            int first, IdOf id_of, Emit emit) {
  const uint32_t bound = warp_select_bound(max_even, max_odd, history);
  MSA_TRACE(1, 4);
  if (history <= 32) {
    const int count = warp_keep_above<kPerLane>(keys, steps, bound, lane, lanes_below, id_of, kept);
    if (count <= WarpSelectConfig::kCap) {
      warp_take_kept(kept, kept + WarpSelectConfig::kCap, count, history, lane, lanes_below, first, emit);
      return;
    }
  }
  warp_take_bitwise<kPerLane>(keys, steps, bound, max(max_even, max_odd), history, lanes_below, first, id_of, emit);
}

template <int kPerLane>
__global__ void __launch_bounds__(WarpSelectConfig::kThreads) topk_select_warp_kernel(const SelectArgs a) {
  MSA_TRACE(1, 0);
  msa::cuda::grid_dependency_wait();  // PDL: before any memory access (mma.cuh)
  // A one-wave grid: the next kernel (sparse decode, or the next step's scores) may take the free SM slots now and
  // wait in its own grid_dependency_wait, so its launch overlaps this kernel (experiment, launch_select).
  if (a.trigger_early) msa::cuda::allow_dependent_launch();
  MSA_TRACE(1, 1);
  using C = WarpSelectConfig;
  static_assert(kPerLane % C::kChunk == 0 && kPerLane <= C::kMaxPerLane, "registers per lane");
  __shared__ __align__(16) uint32_t kept_all[C::kWarps][2 * C::kCap];  // per warp: kCap keys, then their ids
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row = blockIdx.x * C::kWarps + warp;
  if (row >= a.heads * a.tokens) return;  // whole warp; no block-wide barriers below
  const int h = row / a.tokens, t = row % a.tokens;
  const float* lane_scores = a.scores + h * a.scores_stride_h + int64_t(t) * a.scores_stride_t + a.init_blocks + lane;
  // Every register is loaded before the position is known (bounded by the row's width, so in bounds), so that
  // no score load waits for the position's; what lies past the row's candidates is masked below. (Until session
  // 10 only the first 8 were; the gain of loading all early was not measured apart from that session's other
  // changes: scripts/trace_index.cu still shows ~0.4 us from the position to the last score at B4 N32K.)
  float raw[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    raw[j] = -INFINITY;
    if (a.scores != nullptr && lane + 32 * j < a.max_pages - a.init_blocks) raw[j] = lane_scores[32 * j];
  }
  const int pos = a.positions != nullptr ? a.positions[t] : a.seq_lens[t / a.q_len] - a.q_len + t % a.q_len;
  int32_t* out = a.out + h * a.out_stride_h + int64_t(t) * a.out_stride_t;
  const int local = pos >= 0 ? pos / 128 : -1;
  MSA_TRACE(1, 2);

  // Same row layout as topk_select_kernel: padding / every page fits, init pages, local window.
  if (pos < 0 || local >= a.max_pages || local + 1 <= a.topk) {
    const int last = local < a.max_pages ? local : -1;
    for (int k = lane; k < a.topk; k += 32) out[k * a.out_stride_k] = k <= last ? k : -1;
    return;
  }
  const int first_window = local - a.local_blocks + 1;
  const int history = a.topk - a.init_blocks - a.local_blocks;  // < candidates, <= 63
  for (int k = lane; k < a.init_blocks; k += 32) out[k * a.out_stride_k] = k;
  for (int k = lane; k < a.local_blocks; k += 32) {
    out[(a.init_blocks + history + k) * a.out_stride_k] = first_window + k;
  }
  if (history == 0) return;

  const int candidates = first_window - a.init_blocks;  // <= 32 * kPerLane (launch_select)
  const int steps = (candidates + 31) >> 5;             // registers holding a candidate in some lane
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) raw[j] = lane + 32 * j < candidates ? raw[j] : -INFINITY;
  uint32_t keys[kPerLane];
  uint32_t max_even, max_odd;
  warp_rank_keys<kPerLane>(raw, keys, max_even, max_odd);
  const uint32_t lanes_below = (1u << lane) - 1u;
  MSA_TRACE(1, 3);
  warp_select<kPerLane>(
      keys, max_even, max_odd, steps, history, lane, lanes_below, kept_all[warp], a.init_blocks,
      [&](int j) { return static_cast<uint32_t>(a.init_blocks + lane + 32 * j); },
      [&](int position, uint32_t, uint32_t id) { out[position * a.out_stride_k] = static_cast<int32_t>(id); });
}

}  // namespace msa::index
