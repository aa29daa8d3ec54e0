// Kernel choice and launch for the decode indexer. No torch: checks, workspace and errors live in
// index_host.cpp.
#include <algorithm>

#include "cuda/index/index_kernels.cuh"
#include "cuda/index/index_launch.h"
#include "cuda/index/index_stream_kernels.cuh"

namespace msa::index {
namespace {

using msa::cuda::LaunchStatus;

LaunchStatus last_error() {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  return LaunchStatus::ok();
}

template <KeyKind kKeys, int kMTiles>
LaunchStatus launch_scores_tiles(const ScoreArgs& a, cudaStream_t stream) {
  auto kernel = index_scores_kernel<kKeys, kMTiles>;
  constexpr int kSmem = ScoreTraits<kKeys>::kSmemBytes;
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel), kSmem);
  if (!ready.is_ok()) return ready;
  const dim3 grid((a.max_pages + ScoreConfig::kPagesPerCta - 1) / ScoreConfig::kPagesPerCta, a.batch);
  kernel<<<grid, ScoreConfig::kThreads, kSmem, stream>>>(a);
  return last_error();
}

LaunchStatus launch_scores_bf16(const ScoreArgs& a, cudaStream_t stream) {
  switch ((a.q_len * a.heads + 15) / 16) {
    case 1: return launch_scores_tiles<KeyKind::kBF16, 1>(a, stream);
    case 2: return launch_scores_tiles<KeyKind::kBF16, 2>(a, stream);
    case 3: return launch_scores_tiles<KeyKind::kBF16, 3>(a, stream);
    default: return launch_scores_tiles<KeyKind::kBF16, 4>(a, stream);
  }
}

template <KeyKind kKeys, int kNTiles>
LaunchStatus launch_stream_tiles(ScoreArgs a, cudaStream_t stream) {
  auto kernel = index_scores_stream_kernel<kKeys, kNTiles>;
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel));
  if (!ready.is_ok()) return ready;
  int sms = 0;
  const LaunchStatus counted = msa::cuda::current_sm_count(sms);
  if (!counted.is_ok()) return counted;
  // Pages per warp: enough warps for ~2 waves of 16 warps per SM over the (upper bound of the) pages, each
  // warp streaming at least one page and at most 32; the true lengths live on the device.
  const int64_t pages = int64_t(a.batch) * a.max_pages;
  const int64_t target_warps = int64_t(sms) * 32;
  a.pages_per_warp = static_cast<int>(std::min<int64_t>(32, std::max<int64_t>(1, pages / target_warps)));
  constexpr int kPagesPerCta = StreamConfig::kWarps;  // times pages_per_warp
  const int ctas_x = (a.max_pages + kPagesPerCta * a.pages_per_warp - 1) / (kPagesPerCta * a.pages_per_warp);
  kernel<<<dim3(ctas_x, a.batch), StreamConfig::kThreads, 0, stream>>>(a);
  return last_error();
}

template <KeyKind kKeys>
LaunchStatus launch_stream_keys(const ScoreArgs& a, cudaStream_t stream) {
  const int rows = a.q_len * a.heads;
  if (rows <= 8) return launch_stream_tiles<kKeys, 1>(a, stream);
  if (rows <= 16) return launch_stream_tiles<kKeys, 2>(a, stream);
  if (rows <= 32) return launch_stream_tiles<kKeys, 4>(a, stream);
  return launch_stream_tiles<kKeys, 8>(a, stream);
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

LaunchStatus launch_select(const SelectArgs& args, cudaStream_t stream) {
  const int rows = args.heads * args.tokens;
  if (rows == 0) return LaunchStatus::ok();
  // Candidates per thread: the smallest kernel that holds max_pages (a bound on every row's candidates).
  const int per_thread = (args.max_pages + SelectConfig::kThreads - 1) / SelectConfig::kThreads;
  auto kernel = per_thread <= 1 ? topk_select_kernel<1>
                : per_thread <= 4 ? topk_select_kernel<4>
                : per_thread <= 8 ? topk_select_kernel<8>
                                  : topk_select_kernel<SelectConfig::kMaxPerThread>;
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel));
  if (!ready.is_ok()) return ready;
  kernel<<<rows, SelectConfig::kThreads, 0, stream>>>(args);
  return last_error();
}

}  // namespace msa::index
