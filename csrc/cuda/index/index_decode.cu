// Kernel choice and launch for the decode indexer. No torch: checks, workspace and errors live in
// index_host.cpp.
#include "cuda/index/index_kernels.cuh"
#include "cuda/index/index_launch.h"

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

template <KeyKind kKeys>
LaunchStatus launch_scores_keys(const ScoreArgs& a, cudaStream_t stream) {
  switch ((a.q_len * a.heads + 15) / 16) {
    case 1: return launch_scores_tiles<kKeys, 1>(a, stream);
    case 2: return launch_scores_tiles<kKeys, 2>(a, stream);
    case 3: return launch_scores_tiles<kKeys, 3>(a, stream);
    default: return launch_scores_tiles<kKeys, 4>(a, stream);
  }
}

}  // namespace

LaunchStatus launch_scores(const ScoreArgs& args, cudaStream_t stream) {
  if (args.batch == 0) return LaunchStatus::ok();
  switch (args.key_kind) {
    case KeyKind::kNvfp4: return launch_scores_keys<KeyKind::kNvfp4>(args, stream);
    case KeyKind::kE4M3: return launch_scores_keys<KeyKind::kE4M3>(args, stream);
    default: return launch_scores_keys<KeyKind::kBF16>(args, stream);
  }
}

LaunchStatus launch_select(const SelectArgs& args, cudaStream_t stream) {
  const int rows = args.heads * args.tokens;
  if (rows == 0) return LaunchStatus::ok();
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(topk_select_kernel));
  if (!ready.is_ok()) return ready;
  topk_select_kernel<<<rows, SelectConfig::kThreads, 0, stream>>>(args);
  return last_error();
}

}  // namespace msa::index
