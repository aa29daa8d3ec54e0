// Kernel choice and launch for the decode indexer. No torch: checks, workspace and errors live in
// index_host.cpp.
#include <algorithm>

#include "cuda/common/launch.cuh"
#include "cuda/index/index_kernels.cuh"
#include "cuda/index/index_launch.h"
#include "cuda/index/index_stream_kernels.cuh"
#include "cuda/index/index_wgmma_kernels.cuh"

namespace msa::index {
namespace {

using msa::cuda::LaunchStatus;

template <KeyKind kKeys, int kMTiles>
LaunchStatus launch_scores_tiles(const ScoreArgs& a, cudaStream_t stream) {
  auto kernel = index_scores_kernel<kKeys, kMTiles>;
  constexpr int kSmem = ScoreTraits<kKeys>::kSmemBytes;
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel), kSmem);
  if (!ready.is_ok()) return ready;
  const dim3 grid((a.max_pages + ScoreConfig::kPagesPerCta - 1) / ScoreConfig::kPagesPerCta, a.batch);
  return msa::cuda::launch_kernel(kernel, grid, ScoreConfig::kThreads, kSmem, stream, a);
}

LaunchStatus launch_scores_bf16(const ScoreArgs& a, cudaStream_t stream) {
  switch ((a.q_len * a.heads + 15) / 16) {
    case 1: return launch_scores_tiles<KeyKind::kBF16, 1>(a, stream);
    case 2: return launch_scores_tiles<KeyKind::kBF16, 2>(a, stream);
    case 3: return launch_scores_tiles<KeyKind::kBF16, 3>(a, stream);
    default: return launch_scores_tiles<KeyKind::kBF16, 4>(a, stream);
  }
}

// Pages per warp (mma.sync kernel) or per CTA (wgmma kernel): enough units for ~2 waves of `per_sm` units per
// SM over the page-table width (an upper bound of the pages; the true lengths live on the device), each unit
// streaming at least one page and at most `most`.
int choose_pages_per_unit(const ScoreArgs& a, int sms, int per_sm, int most) {
  const int64_t pages = int64_t(a.batch) * a.max_pages;
  return static_cast<int>(std::min<int64_t>(most, std::max<int64_t>(1, pages / (int64_t(sms) * per_sm * 2))));
}

template <KeyKind kKeys, int kNTiles>
LaunchStatus launch_stream_tiles(ScoreArgs a, int sms, cudaStream_t stream) {
  auto kernel = index_scores_stream_kernel<kKeys, kNTiles>;
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel));
  if (!ready.is_ok()) return ready;
  a.pages_per_unit = choose_pages_per_unit(a, sms, 16, 32);
  const int pages_per_cta = StreamConfig::kWarps * a.pages_per_unit;
  return msa::cuda::launch_kernel(kernel, dim3((a.max_pages + pages_per_cta - 1) / pages_per_cta, a.batch),
                                  StreamConfig::kThreads, 0, stream, a);
}

// Experiment knob MSA_INDEX_FLAT_RUN=n: the flat grid wherever it can serve, with enough waves for runs of <= n
// pages (0 = the rule below: flat only where the 2-D rule gives runs of >= 8 pages, runs up to kMaxPagesPerUnit).
int flat_run_target() {
  static const int target = msa::cuda::env_choice("MSA_INDEX_FLAT_RUN", {0, 2, 3, 4, 6, 8, 12, 16, 32, 64}, 0);
  return target;
}

// Pages per CTA of the wgmma kernel, from host-known shapes only. The CTAs of a request are counted per request
// (B x ceil(W / pages) must fit), so the grid is exactly one wave of resident CTAs when the runs stay short
// (<= 16 pages: a CTA's setup, about a page's time, is paid once per run and every CTA starts at once), else
// exactly two waves (so CTAs of short requests free their slots for the rest), at most kMaxPagesPerUnit pages
// (then more waves). Measured 2026-12-03 against the earlier "2 waves of pages, rounded down" rule: B128 N1000
// 22.3 -> 15.4 us, B4 N32000 19.6 -> 15.3 us; an unrounded one-wave rule lost up to 8 % at B32-B64 N >= 50000
// (a few CTAs in a second wave). Benchmark knob MSA_INDEX_PAGES_PER_CTA (0 = this rule) forces it.
int forced_pages_per_cta() {
  static const int forced =
      msa::cuda::env_choice("MSA_INDEX_PAGES_PER_CTA", {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}, 0);
  return forced;
}
// Many short requests (B >= 128, page tables <= 128 pages) with 32 or 8 query rows (Q x H; measured at Q = 8 with
// H = 4 and H = 1; other Q x H of 32 or 8 rows run the same kernel shape, e.g. Q = 2 at H = 4 in the tests):
// runs of 4 pages on the 2-D grid, several waves that the block scheduler balances as CTAs finish, instead of one
// wave of ~10-16-page runs (the rule below, then the flat grid). Measured on the H200 (bench_index_decode.py, us,
// rule -> 4 pages): H = 4 (2026-12-03, session 11) NVFP4 B128 N4000 32.5 -> 28.7, N5000 36.8 -> 33.4, N10000 64.2 ->
// 57.0; FP8 31.1 -> 29.3, 36.1 -> 34.5, 60.8 -> 57.3. H = 1 (session 13, knob MSA_INDEX_PAGES_PER_CTA=4) NVFP4 B128
// N4000 23.64 -> 21.33, N5000 27.27 -> 24.88, N10000 47.39 -> 42.10; FP8 28.19 -> 24.65, 32.23 -> 28.84, 56.68 ->
// 50.78. Not at B64 (H = 4 FP8 B64 N4000 16.4 -> 18.6; H = 1 FP8 14.18 -> 15.64, NVFP4 14.45 -> 13.53) nor at
// N >= 50000 (H = 4 B128 N50000 NVFP4 217 -> 245; H = 1 169.7 -> 179.2); 16 rows (H = 2) not measured.
bool many_short_requests(const ScoreArgs& a) {
  const int rows = a.q_len * a.heads;
  return a.batch >= 128 && a.max_pages <= 128 && (rows == 32 || rows == 8);
}

int wgmma_pages_per_cta(const ScoreArgs& a, int slots) {
  if (forced_pages_per_cta() > 0) return forced_pages_per_cta();
  if (many_short_requests(a) && flat_run_target() == 0) return 4;
  const int per_request = std::max(1, slots / std::max(a.batch, 1));  // CTAs of one request in one wave
  int pages = (a.max_pages + per_request - 1) / per_request;
  if (pages > 16) pages = (a.max_pages + 2 * per_request - 1) / (2 * per_request);
  return std::clamp(pages, 1, WgmmaConfig::kMaxPagesPerUnit);
}

// CTAs of the wgmma kernel's flat grid (flat_run: runs sized from the true lengths on the device), or 0 for the
// 2-D grid. Flat for 2..128 requests when only the needed pages are written (the 2-D grid also covers the -inf
// pages of scores_out) and no run length is forced: whole waves of `slots` CTAs, enough that runs of `run_target`
// pages cover B x max_pages (sum_b ceil(needed_b / run) <= CTAs - B for any lengths). The CTAs past the last run
// exit at once, inside the last wave.
int flat_grid_ctas(const ScoreArgs& a, int slots, int run_target) {
  static const bool off = msa::cuda::env_choice("MSA_INDEX_FLAT_GRID", {0, 1}, 1) == 0;
  if (off || forced_pages_per_cta() > 0 || a.write_all_pages || a.batch < 2 || a.batch > WgmmaConfig::kThreads) return 0;
  const int64_t needed = (int64_t(a.batch) * a.max_pages + run_target - 1) / run_target + a.batch;
  const int64_t waves = (needed + slots - 1) / slots;
  return static_cast<int>(std::min<int64_t>(waves * slots, 1 << 30));
}

// The flat grid's runs (flat_run): by default each request's pages are dealt over nearly all the CTAs in runs of
// floor / ceil(needed / its CTAs) pages. Measured on the H200 (2026-12-03, scripts/trace_index.cu, B8 N100K NVFP4
// H = 4) with the earlier even runs of ceil(P / CTAs) pages (knob MSA_INDEX_FLAT_BALANCE=0): 488 of 528 CTAs
// worked, 13 pages each; the main loop ended at 24.3 us (p50) but 32.8 us (max): the SMs holding 4 working CTAs
// (52 pages) set the time, those with 3 finished at ~24.
bool flat_even_runs() {
  static const bool even = msa::cuda::env_choice("MSA_INDEX_FLAT_BALANCE", {0, 1}, 1) == 0;
  return even;
}

// Each wgmma score CTA lets the select kernel launch 2 slices (one page) before the end of its run instead of after
// it (knob MSA_INDEX_SCORE_TRIGGER: 0 = after the run, or 1, 2, 4, 8 slices before its end): the select kernel's
// CTAs are then launched and resident, blocked in their grid_dependency_wait, when the last score CTA ends. Only
// once every score CTA has reached that point (so all have started) does the select grid launch: it never takes
// the SM slot of a later wave. Measured on the H200 (2026-12-03, bench_index_decode.py --heads 4, two runs each,
// us, 0 -> 1 / 2 / 4 slices): B4 N32K NVFP4 12.03-12.11 -> 11.80-11.86 / 11.89-11.90 / 11.72-11.80, FP8
// 12.06-12.08 -> 11.72-11.80 / 11.75 / 11.66-11.69; B2 N32K NVFP4 9.00-9.05 -> 8.74 / 8.83-8.85 / 8.88-8.91; B8
// N10000 9.77 -> 9.54-9.55 / 9.57 / 9.76-9.79; B8 N100K 35.07-35.40 -> 34.73-35.02 / 34.83-34.87 / 34.96-34.97.
int score_trigger_slices() {
  static const int slices = msa::cuda::env_choice("MSA_INDEX_SCORE_TRIGGER", {0, 1, 2, 4, 8}, 2);
  return slices;
}

template <KeyKind kKeys, int kN>
LaunchStatus launch_wgmma_rows(ScoreArgs a, cudaStream_t stream) {
  const bool dense = a.key_stride_token == WgmmaConfig::row_bytes(kKeys) &&
                     (kKeys != KeyKind::kNvfp4 || a.scale_stride_token == WgmmaConfig::kScaleRowBytes);
  auto kernel = dense ? index_scores_wgmma_kernel<kKeys, kN, true> : index_scores_wgmma_kernel<kKeys, kN, false>;
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel));
  if (!ready.is_ok()) return ready;
  int slots = 0;  // CTAs resident at once
  const LaunchStatus sized = msa::cuda::resident_blocks(reinterpret_cast<const void*>(kernel), WgmmaConfig::kThreads,
                                                        0, slots);
  if (!sized.is_ok()) return sized;
  a.pages_per_unit = wgmma_pages_per_cta(a, slots);
  // The flat grid pays a dependent load and two block scans before its first key load (~1 us); it wins where
  // long runs of requests of different lengths set the time (H200, 2026-12-03, NVFP4 H = 4, us, 2-D -> flat:
  // B8 N100K 41.1 -> 37.8, B8 N200K 68.4 -> 64.0, B32 N50K 68.0 -> 64.6, B32 N100K 124.4 -> 117.7) and loses
  // on short ones (B8 N10000, 2-page runs: 11.5 -> 12.8; B4 N32000, 3 pages: 14.1 -> 14.3).
  a.flat_ctas = flat_run_target() > 0   ? flat_grid_ctas(a, slots, flat_run_target())
                : a.pages_per_unit >= 8 ? flat_grid_ctas(a, slots, WgmmaConfig::kMaxPagesPerUnit)
                                        : 0;
  a.flat_even = flat_even_runs();
  a.trigger_slices = score_trigger_slices();
  if (a.flat_ctas > 0) return msa::cuda::launch_kernel(kernel, dim3(a.flat_ctas), WgmmaConfig::kThreads, 0, stream, a);
  return msa::cuda::launch_kernel(kernel, dim3((a.max_pages + a.pages_per_unit - 1) / a.pages_per_unit, a.batch),
                                  WgmmaConfig::kThreads, 0, stream, a);
}

// The wgmma kernel addresses keys with 32-bit page strides and 32-bit offsets inside a page (one IMAD.WIDE
// per page and load).
bool page_strides_32bit(const ScoreArgs& a) {
  constexpr int64_t kMax = 0xFFFFFFFFll;
  const bool keys = a.key_stride_page <= kMax && a.key_stride_token <= kMax / 256;
  return keys && (a.key_kind != KeyKind::kNvfp4 || (a.scale_stride_page <= kMax && a.scale_stride_token <= kMax / 256));
}

// Hopper: wgmma with fp16 operands (exact widening of E4M3 / NVFP4 values). Other GPUs, and page strides of 4 GiB
// or more: mma.sync (compiled for sm_100a, not run there). Benchmark knob MSA_INDEX_SCORES: 1 = mma.sync
// everywhere (on Hopper it runs through fp16: F2FP unpack + 2 HMMA per k32).
template <KeyKind kKeys>
LaunchStatus launch_stream_keys(const ScoreArgs& a, cudaStream_t stream) {
  static const int choice = msa::cuda::env_choice("MSA_INDEX_SCORES", {0, 1}, 0);
  msa::cuda::DeviceInfo device;
  const LaunchStatus known = msa::cuda::current_device_info(device);
  if (!known.is_ok()) return known;
  const int rows = a.q_len * a.heads;
  if (device.cc_major == 9 && choice != 1 && page_strides_32bit(a)) {
    if (rows <= 8) return launch_wgmma_rows<kKeys, 8>(a, stream);
    if (rows <= 16) return launch_wgmma_rows<kKeys, 16>(a, stream);
    if (rows <= 32) return launch_wgmma_rows<kKeys, 32>(a, stream);
    return launch_wgmma_rows<kKeys, 64>(a, stream);
  }
  if (rows <= 8) return launch_stream_tiles<kKeys, 1>(a, device.sms, stream);
  if (rows <= 16) return launch_stream_tiles<kKeys, 2>(a, device.sms, stream);
  if (rows <= 32) return launch_stream_tiles<kKeys, 4>(a, device.sms, stream);
  return launch_stream_tiles<kKeys, 8>(a, device.sms, stream);
}

}  // namespace

LaunchStatus launch_scores(const ScoreArgs& args, cudaStream_t stream) {
  if (args.batch == 0) return LaunchStatus::ok();
  switch (args.key_kind) {
    case KeyKind::kNvfp4: return launch_stream_keys<KeyKind::kNvfp4>(args, stream);
    case KeyKind::kE4M3: return launch_stream_keys<KeyKind::kE4M3>(args, stream);
    default: return launch_scores_bf16(args, stream);
  }
}

// Experiment knob MSA_INDEX_SELECT_TRIGGER=1 (default 0): the warp (or split) select kernel lets its dependent launch
// at its start when its grid fits one wave (so no CTA of it waits for a slot the dependent took). Measured on the H200
// (2026-12-03, bench_decode_step.py --low-latency, NVFP4 64/4, us, 0 -> 1): B4 N32K 38.5 -> 45.0, B4 N4000 32.2 ->
// 38.6, B1-B2 0.1-0.6 faster; the index op alone B4 N32K 11.92 -> 13.18. So off.
bool select_trigger_early() {
  static const bool on = msa::cuda::env_choice("MSA_INDEX_SELECT_TRIGGER", {0, 1}, 0) == 1;
  return on;
}

LaunchStatus launch_select(const SelectArgs& select_args, cudaStream_t stream) {
  SelectArgs args = select_args;
  const int rows = args.heads * args.tokens;
  if (rows == 0) return LaunchStatus::ok();
  // A row has fewer than max_pages candidates (its local page is < max_pages and local_blocks >= 1). Up to 2048:
  // one warp per row with the smallest register array that holds them (128 threads, no dynamic shared memory);
  // longer rows: one CTA per row. (Session 28's split of a long row over the 4 warps of a CTA, 1731844, measured
  // no faster in session 29 and was removed.)
  const int candidates = args.max_pages - 1;
  if (candidates <= 32 * WarpSelectConfig::kMaxPerLane) {
    auto kernel = candidates <= 32 * 8    ? topk_select_warp_kernel<8>
                  : candidates <= 32 * 16 ? topk_select_warp_kernel<16>
                  : candidates <= 32 * 32 ? topk_select_warp_kernel<32>
                                          : topk_select_warp_kernel<WarpSelectConfig::kMaxPerLane>;
    const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel));
    if (!ready.is_ok()) return ready;
    const int ctas = (rows + WarpSelectConfig::kWarps - 1) / WarpSelectConfig::kWarps;
    args.trigger_early = false;
    if (select_trigger_early()) {
      int wave = 0;
      const LaunchStatus sized = msa::cuda::resident_blocks(reinterpret_cast<const void*>(kernel),
                                                            WarpSelectConfig::kThreads, 0, wave);
      if (!sized.is_ok()) return sized;
      args.trigger_early = ctas <= wave;
    }
    return msa::cuda::launch_kernel(kernel, dim3(ctas), WarpSelectConfig::kThreads, 0, stream, args);
  }
  auto kernel = topk_select_kernel;
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel));
  if (!ready.is_ok()) return ready;
  return msa::cuda::launch_kernel(kernel, dim3(rows), SelectConfig::kThreads, 0, stream, args);
}

}  // namespace msa::index
