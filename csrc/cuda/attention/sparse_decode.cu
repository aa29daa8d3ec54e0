// Kernel choice and launch for sparse decode attention. No torch: checks and errors live in
// sparse_decode_host.cpp.
//
// Default: the split kernel (sparse_decode_split_kernels.cuh), one cluster of `splits` CTAs per (token, KV head,
// 16 query heads). `splits` comes from host-known shapes only (never from device data): the smallest power of
// two <= 8 that gives at least half a wave of resident CTAs, and at least ceil(W / 32) (a CTA walks <= 32
// TopK slots). Knobs for benchmarks and tests: MSA_SPARSE_DECODE_SPLITS=1|2|4|8 forces the split count (raised
// to ceil(W / 32) when lower); MSA_SPARSE_DECODE_KERNEL=1 selects the v1 kernel (one CTA per token, no split);
// MSA_SPARSE_DECODE_WARPS=4|6 forces the lazy split kernel's warps per CTA (NVFP4 / E4M3; default: the rule in
// launch_lazy_split); MSA_SPARSE_DECODE_SPLIT_FP8S=0|1|2 its S by FP8 wgmma on Hopper (never / always / by the rule
// in launch_lazy_split, the default); MSA_SPARSE_DECODE_LAZY=0 the split kernel with eager O rescaling (every growth
// of a row's max; the default is lazy rescaling, kLazySlack).
//
// The union pass (sparse_decode_union_kernels.cuh: one cluster per request and KV head decodes each page once
// for all the request's tokens; Hopper only) is for requests whose tokens share pages. MSA_SPARSE_DECODE_UNION=2
// (default) uses it by the measured rule in union_pays (Q = 8, enough unions, a page table no wider than the rule's
// limit for the KV format: engines pass the table cut to the batch's longest request), =1 whenever it can serve the
// call (Q <= 8, Q x W <= 256, W <= 255, max_pages <= 8192, out rows 8-byte aligned), =0 never.
// MSA_SPARSE_DECODE_SPLITS sets its split count too (1-8); MSA_SPARSE_DECODE_UNION_PIPE=0|1 its pipelined consumers
// (default: by the KV format, launch_union).
#include <algorithm>

#include "cuda/common/launch.cuh"
#include "cuda/attention/sparse_decode_kernels.cuh"
#include "cuda/attention/sparse_decode_launch.h"
#include "cuda/attention/sparse_decode_split_kernels.cuh"
#include "cuda/attention/sparse_decode_union_kernels.cuh"

namespace msa::attention {
namespace {

using msa::cuda::LaunchStatus;

template <KvKind kKv>
LaunchStatus launch_v1(const SparseDecodeArgs& a, cudaStream_t stream) {
  auto kernel = sparse_decode_kernel<kKv>;
  constexpr int kSmem = AttnTraits<kKv>::kSmemBytes;
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel), kSmem);
  if (!ready.is_ok()) return ready;
  const int group = a.q_heads / a.kv_heads;
  const dim3 grid(a.tokens, a.kv_heads, (group + AttnConfig::kRows - 1) / AttnConfig::kRows);
  return msa::cuda::launch_kernel(kernel, grid, AttnConfig::kThreads, kSmem, stream, a);
}

// One launch of `kernel(a, splits)` in clusters of `splits` CTAs along x.
template <typename Kernel>
LaunchStatus launch_clusters(Kernel kernel, dim3 grid, int threads, int smem, int splits, const SparseDecodeArgs& a,
                             cudaStream_t stream) {
  return msa::cuda::launch_kernel_clusters(kernel, grid, threads, smem, splits, stream, a, splits);
}

// Split count of the split kernel. `wave`: its CTAs resident on the GPU at once; `kernel`, `smem`: for the
// number of its clusters that fit at once.
LaunchStatus choose_splits(const SparseDecodeArgs& a, int units, int wave, const void* kernel, int threads, int smem,
                           int& splits) {
  const int least = (a.topk_width + split::Cfg::kMaxSlots - 1) / split::Cfg::kMaxSlots;  // <= 2 for W <= 64
  splits = msa::cuda::env_choice("MSA_SPARSE_DECODE_SPLITS", {1, 2, 4, 8}, 0);
  if (splits == 0) {
    // Split only while fewer than half a wave of CTAs would run: every split repeats the CTA's fixed work (tables,
    // query, page list, the dependent loads before the first chunk, the cluster merge). Measured on the H200
    // (2026-12-02, 64/4, NVFP4 / FP8): B = 8 (256 units) takes 44 / 41 us with 1 split, 52 / 57 us with 2, 61 / 62
    // with 4; B = 1 (32 units) takes 31 / 26 us with 1 split, 16 / 15 us with 8.
    splits = 1;
    while (splits < split::Cfg::kMaxSplits && 2 * splits <= a.topk_width && 2 * int64_t(units) * splits < wave) {
      splits *= 2;
    }
    // A cluster must sit inside one GPC: when the clusters would not all fit at once (measured with the union pass:
    // 30 clusters of 4 one-CTA-per-SM CTAs fit on the H200, not 33), split less rather than run a second wave.
    while (splits > 1 && splits / 2 >= least) {
      int clusters = 0;
      const LaunchStatus fit = msa::cuda::resident_clusters(kernel, threads, smem, splits, clusters);
      if (!fit.is_ok()) return fit;
      if (units <= clusters) break;
      splits /= 2;
    }
  }
  while (splits < least) splits *= 2;
  return LaunchStatus::ok();
}

// The split kernel's (token, KV head, 16-head block) units of a call.
int split_units(const SparseDecodeArgs& a) {
  const int group = a.q_heads / a.kv_heads;
  return a.tokens * a.kv_heads * ((group + split::Cfg::kRows - 1) / split::Cfg::kRows);
}

// One split-kernel variant, planned from host-known shapes: its CTAs resident at once (`wave`), the call's
// (token, KV head, 16-head block) units and the split count.
// kFp8S: S by FP8 wgmma (split::sparse_decode_split_kernel), 4 CTAs per SM for NVFP4 (<= 128 registers), 3 for
// E4M3 (its 4-stage ring).
template <KvKind kKv, bool kLazy, int kWarps = split::Cfg::kWarps, bool kFp8S = false>
struct SplitPlan {
  using S = split::Shape<kKv, kWarps>;
  static constexpr int kMinBlocks = kFp8S ? (kKv == KvKind::kNvfp4 ? 4 : 3) : S::kMinBlocks;
  static constexpr auto kernel =
      split::sparse_decode_split_kernel<kKv, S::kStages, kMinBlocks, kLazy, kWarps, kFp8S>;
  static constexpr int kSmem = split::Layout<kKv, S::kStages, kWarps, kFp8S>::kSmemBytes;
  static constexpr int kThreads = 32 * kWarps;
  int wave = 0, units = 0, splits = 1;

  LaunchStatus plan(const SparseDecodeArgs& a) {
    const void* k = reinterpret_cast<const void*>(kernel);
    const LaunchStatus ready = msa::cuda::prepare_kernel(k, kSmem);
    if (!ready.is_ok()) return ready;
    const LaunchStatus sized = msa::cuda::resident_blocks(k, kThreads, kSmem, wave);
    if (!sized.is_ok()) return sized;
    units = split_units(a);
    return choose_splits(a, units, wave, k, kThreads, kSmem, splits);
  }
  LaunchStatus launch(const SparseDecodeArgs& a, cudaStream_t stream) const {
    const int blocks = units / (a.tokens * a.kv_heads);
    return launch_clusters(kernel, dim3(static_cast<unsigned>(a.tokens) * splits, a.kv_heads, blocks), kThreads,
                           kSmem, splits, a, stream);
  }
};

template <KvKind kKv, bool kLazy, int kWarps = split::Cfg::kWarps, bool kFp8S = false>
LaunchStatus launch_split(const SparseDecodeArgs& a, cudaStream_t stream) {
  SplitPlan<kKv, kLazy, kWarps, kFp8S> p;
  const LaunchStatus planned = p.plan(a);
  return planned.is_ok() ? p.launch(a, stream) : planned;
}

// The lazy split kernel for NVFP4 / E4M3 KV, 4 or 6 warps per CTA. MSA_SPARSE_DECODE_WARPS=4|6 forces one;
// the default takes 6 warps (2 CTAs per SM, 12 warps per SM) when the 6-warp kernel's CTAs all fit in one wave
// and each walks >= 8 TopK slots, else 4 warps (3 CTAs per SM). Measured on the H200 (2026-12-03, Q = 8, µs,
// 4 -> 6 warps, one build). One wave, >= 8 slots per CTA: 64/4 B8 N10000 NVFP4 41.2 -> 39.9, N100K 41.4 -> 40.0,
// FP8 36.1 -> 35.2, 40.8 -> 40.4; 16/1 B8 N100K NVFP4 20.5 -> 19.4, FP8 19.1 -> 17.3; 16/1 B32 N100K NVFP4 41.3 ->
// 40.0; 64/4 B2 N32K FP8 18.7 -> 17.0 (2 splits of 8 slots instead of 4 of 4: not all of the 6-warp kernel's 4-CTA
// clusters fit at once); 64/4 B4 N32K even. More than one wave: 64/4 B32 N100K 134.5 -> 141.9, B128 N200K 496.8 ->
// 529.3. 4 slots per CTA (4 splits instead of 8): 64/4 B1 N32K 13.9 -> 15.8, 16/1 B4 N32K 13.9 -> 15.6.
// MSA_SPARSE_DECODE_SPLIT_FP8S (Hopper; NVFP4 / E4M3): 1 the 4-warp kernel with S^T = K Q^T by FP8 wgmma, 0 never,
// 2 (default) by split_fp8s_pays, ahead of the 6-warp rule and only while MSA_SPARSE_DECODE_WARPS is left to its rule.
// Measured on the H200 (2026-12-04, Q = 8, µs, FP8 S off -> on, one build): NVFP4 64/4 B32 N50K 133.7 -> 128.1,
// B32 N100K 134.5 -> 128.8, B64 N50K 255.6 -> 243.1, B128 N200K 497.3 -> 471.3, 16/1 B64 N50K 75.2 -> 68.9, B128
// N200K 133.7 -> 128.1; but 16/1 B32 N100K 40.0 -> 41.6, 64/4 B8 N100K 40.1 -> 41.7, B4 N32K 25.9 -> 26.4, B1 N32K
// 14.0 -> 14.3. E4M3 64/4 B4 N32K 24.8 -> 23.0, B8 N100K 40.0 -> 38.4, B32 N100K 143.9 -> 140.9, 16/1 B32 N100K
// 40.0 -> 38.5, B64 N50K 83.7 -> 70.9; but 16/1 B8 N100K 17.3 -> 18.9, 64/4 B2 N32K 16.9 -> 18.8, B1 N32K 13.3 ->
// 14.1. Where a request's tokens share pages (E4M3 64/4 N5000, 49 pages: B32 113.4 -> 127.4, B64 214.5 -> 248.5,
// B128 402.3 -> 486.6; B64 N10000, 98 pages: 238.4 in session 14 -> 249.0) the fp16-S kernel gains from the L2
// hits and the FP8-S one, its warpgroup in lockstep at every wgmma wait, does not. Hence FP8 S from 512 (token, KV
// head, 16-head block) units for NVFP4 (64/4 B16, 16/1 B64 at Q = 8) and from 128 for E4M3 (64/4 B4, 16/1 B16)
// with a page table wider than one request's TopK slots (Q x W pages) until session 27. Re-fit on the H100 (session
// 27, 2026-12-07, 64/4 Q = 8, µs, default -> forced FP8 S): E4M3 N10000 (96-98 pages, under Q x W) B32 159.1 ->
// 144.9, B64 296.1 -> 271.0, B128 560.8 -> 511.4, so the E4M3 table must now only be wider than the union pass's
// limit (kUnionMaxPages: the N5000 tables, 49 pages, go to the union pass). NVFP4 N5000-10000 forced: within 1.5 %
// either way (B32 N10000 131.4 -> 129.4, B128 469.7 -> 476.6): unchanged.
// The widest page table (pages) for which union_pays sends NVFP4 / E4M3 KV to the union pass.
constexpr int kUnionMaxPages = 64;

bool split_fp8s_pays(const SparseDecodeArgs& a, int units) {
  if (a.kv_kind == KvKind::kNvfp4) return units >= 512;
  return units >= 128 && a.max_pages > kUnionMaxPages;
}

template <KvKind kKv>
LaunchStatus launch_lazy_split(const SparseDecodeArgs& a, cudaStream_t stream) {
  const int fp8s_knob = msa::cuda::env_choice("MSA_SPARSE_DECODE_SPLIT_FP8S", {0, 1, 2}, 2);
  const int warps = msa::cuda::env_choice("MSA_SPARSE_DECODE_WARPS", {0, 4, 6}, 0);
  if (fp8s_knob == 1 || (fp8s_knob == 2 && warps == 0 && split_fp8s_pays(a, split_units(a)))) {
    msa::cuda::DeviceInfo device;  // wgmma: Hopper only
    if (msa::cuda::current_device_info(device).is_ok() && device.cc_major == 9) {
      return launch_split<kKv, true, split::Cfg::kWarps, true>(a, stream);
    }
  }
  if (warps != 4) {
    SplitPlan<kKv, true, 6> six;
    const LaunchStatus planned = six.plan(a);
    if (!planned.is_ok()) return planned;
    const bool one_wave = int64_t(six.units) * six.splits <= six.wave;
    if (warps == 6 || (one_wave && a.topk_width >= 8 * six.splits)) {
      return six.launch(a, stream);
    }
  }
  return launch_split<kKv, true>(a, stream);
}

// The automatic rule (MSA_SPARSE_DECODE_UNION=2, the default): where the union pass measured faster than the
// per-token kernel on the H200 (2026-12-03, Q = 8, bench/NOTES.md v2.5). Its time grows with the union's size
// (bounded by the page-table width, a host-known shape) and it needs many (request, KV head, 16-head block) unions
// to fill the GPU; the per-token kernel's time is flat in the context length. Only Q = 8 was measured.
// Head blocks per KV head (16 query heads each) and the union pass's (request, KV head, head block) unions.
int union_blocks(const SparseDecodeArgs& a) {
  return (a.q_heads / a.kv_heads + page_union::Cfg::kRows - 1) / page_union::Cfg::kRows;
}
int union_count(const SparseDecodeArgs& a) { return a.tokens / a.q_len * a.kv_heads * union_blocks(a); }

// E4M3 up to 64 pages since session 27 (H100, 2026-12-07, 64/4 Q = 8 N5000, 49 pages, µs, split kernel -> union
// pass forced): B32 131.9 -> 98.8, B64 240.9 -> 195.5, B128 442.9 -> 368.0 (the union pass with FP8 S, v2.10, beats
// the old limit of 40 pages measured without it); N10000 (96-98 pages) 0.97-1.0, left to the split kernel.
bool union_pays(const SparseDecodeArgs& a) {
  if (a.q_len != 8 || a.max_pages > a.q_len * a.topk_width) return false;
  const int unions = union_count(a);
  const int width = a.max_pages;
  switch (a.kv_kind) {
    case KvKind::kNvfp4:
    case KvKind::kE4M3: return (unions >= 32 && width <= 16) || (unions >= 64 && width <= kUnionMaxPages);
    default: return (unions >= 8 && width <= 16) || (unions >= 32 && width <= 64) || (unions >= 128 && width <= 128);
  }
}

bool use_union(const SparseDecodeArgs& a) {
  using C = page_union::Cfg;
  const int knob = msa::cuda::env_choice("MSA_SPARSE_DECODE_UNION", {0, 1, 2}, 2);
  const bool fits = a.q_len <= C::kMaxTokens && int64_t(a.q_len) * a.topk_width <= C::kMaxEntries &&
                    a.topk_width <= C::kMaxWidth &&
                    a.max_pages <= C::kMaxTablePages && a.out_rows_aligned;
  if (knob == 0 || !fits) return false;
  msa::cuda::DeviceInfo device;  // the union pass runs on wgmma: Hopper only
  if (!msa::cuda::current_device_info(device).is_ok() || device.cc_major != 9) return false;
  return knob == 1 || union_pays(a);
}

template <KvKind kKv, bool kPipe, bool kFp8S = false>
LaunchStatus launch_union_variant(const SparseDecodeArgs& a, cudaStream_t stream) {
  auto kernel = page_union::sparse_decode_union_kernel<kKv, kPipe, kFp8S>;
  constexpr int kSmem = page_union::Layout<kKv>::kSmemBytes;
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel), kSmem);
  if (!ready.is_ok()) return ready;
  const int units = union_count(a);
  // A union's pages are dealt over a cluster of `splits` CTAs (1 per SM); a split repeats the union build and adds
  // the merge. The most splits (<= 8) whose clusters all fit on the GPU at once: a cluster must sit inside one GPC,
  // so e.g. 32 clusters of 4 may not all fit where 128 single CTAs would.
  int splits = msa::cuda::env_choice("MSA_SPARSE_DECODE_SPLITS", {1, 2, 3, 4, 5, 6, 7, 8}, 0);
  if (splits == 0) {
    splits = 1;
    for (int size = 2; size <= page_union::Cfg::kMaxSplits; ++size) {  // capacity falls as the size grows
      int clusters = 0;
      const LaunchStatus sized = msa::cuda::resident_clusters(reinterpret_cast<const void*>(kernel),
                                                              page_union::Cfg::kThreads, kSmem, size, clusters);
      if (!sized.is_ok()) return sized;
      if (units > clusters) break;
      splits = size;
    }
  }
  return launch_clusters(kernel, dim3(static_cast<unsigned>(a.tokens / a.q_len) * splits, a.kv_heads, union_blocks(a)),
                         page_union::Cfg::kThreads, kSmem, splits, a, stream);
}

// Pipelined consumers (kPipe) where they measured faster: E4M3 KV. Measured on the H200 (2026-12-03, 64/4 Q = 8,
// forced per knob, µs, plain -> pipelined): FP8 B128 N4000 366.6 -> 348.9, B64 N4000 200.2 -> 191.6, B32 N4000
// 103.2 -> 98.3, B128 N1000 126.6 -> 124.6; NVFP4 B128 N4000 394.6 -> 401.6, B64 N5000 247.4 -> 263.5 (its decode
// producers, not the consumers, set the pace there), but B128 N1000 137.5 -> 131.0, B32 N1000 39.1 -> 37.6 (every
// token attends every unit: the consumers' work), so NVFP4 takes it for page tables <= 16 pages. BF16 cannot: its
// producers hand a unit over only after issuing the loads of the unit two later, so a consumer may not hold a unit's
// tiles while it waits for another (the kernel's static_assert). MSA_SPARSE_DECODE_UNION_PIPE=0|1 forces it off / on
// (on is ignored for BF16). MSA_SPARSE_DECODE_UNION_FP8S (NVFP4 / E4M3; default 1): S by FP8 wgmma (0: fp16 wgmma on
// the widened K tile). Measured on the H200 (2026-12-04, 64/4 Q = 8, µs, 0 -> 1): NVFP4 B128 N4000 397.0 -> 346.5,
// N5000 469.1 -> 407.4, B64 N4000 215.9 -> 187.8, B128 N1000 133.5 -> 117.0; FP8 B128 N4000 352.5 -> 308.7, B64 N4000
// 192.9 -> 169.3, B128 N1000 126.6 -> 112.6. Scores (and the LSE) then carry the FP8 MMA's reduced-precision sums,
// ~2^-11 relative (ops.py).
template <KvKind kKv>
LaunchStatus launch_union(const SparseDecodeArgs& a, cudaStream_t stream) {
  constexpr bool kCanPipe = !page_union::Layout<kKv>::kDirect;
  using msa::cuda::env_choice;
  const int knob = env_choice("MSA_SPARSE_DECODE_UNION_PIPE", {0, 1, 2}, 2);
  const bool pipe = knob == 2 ? kKv == KvKind::kE4M3 || (kKv == KvKind::kNvfp4 && a.max_pages <= 16) : knob == 1;
  if constexpr (kKv != KvKind::kBF16) {
    if (env_choice("MSA_SPARSE_DECODE_UNION_FP8S", {0, 1}, 1) == 1) {
      if (pipe) return launch_union_variant<kKv, true, true>(a, stream);
      return launch_union_variant<kKv, false, true>(a, stream);
    }
  }
  if (kCanPipe && pipe) return launch_union_variant<kKv, kCanPipe>(a, stream);
  return launch_union_variant<kKv, false>(a, stream);
}

template <KvKind kKv>
LaunchStatus launch_kind(const SparseDecodeArgs& a, cudaStream_t stream) {
  // The split kernel keeps in-page byte offsets in 32 bits: token strides up to 2^24 bytes (any real cache).
  const int64_t elem = kKv == KvKind::kBF16 ? 2 : 1;
  const int64_t widest = std::max({a.k_stride_token * elem, a.v_stride_token * elem, a.ks_stride_token,
                                   a.vs_stride_token});
  if (widest > (int64_t(1) << 24) || msa::cuda::env_choice("MSA_SPARSE_DECODE_KERNEL", {1, 2}, 2) == 1) {
    return launch_v1<kKv>(a, stream);
  }
  if (use_union(a)) return launch_union<kKv>(a, stream);
  using msa::cuda::env_choice;
  if (env_choice("MSA_SPARSE_DECODE_LAZY", {0, 1}, 1) == 0) return launch_split<kKv, false>(a, stream);
  if constexpr (kKv != KvKind::kBF16) {
    return launch_lazy_split<kKv>(a, stream);
  } else {
    return launch_split<kKv, true>(a, stream);
  }
}

}  // namespace

LaunchStatus launch_sparse_decode(const SparseDecodeArgs& args, cudaStream_t stream) {
  if (args.tokens == 0) return LaunchStatus::ok();
  switch (args.kv_kind) {
    case KvKind::kNvfp4: return launch_kind<KvKind::kNvfp4>(args, stream);
    case KvKind::kE4M3: return launch_kind<KvKind::kE4M3>(args, stream);
    default: return launch_kind<KvKind::kBF16>(args, stream);
  }
}

}  // namespace msa::attention
