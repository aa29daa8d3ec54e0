// Kernel choice and launch for sparse decode attention. No torch: checks and errors live in
// sparse_decode_host.cpp.
#include "cuda/attention/sparse_decode_kernels.cuh"
#include "cuda/attention/sparse_decode_launch.h"

namespace msa::attention {
namespace {

using msa::cuda::LaunchStatus;

template <KvKind kKv>
LaunchStatus launch_kind(const SparseDecodeArgs& a, cudaStream_t stream) {
  auto kernel = sparse_decode_kernel<kKv>;
  constexpr int kSmem = AttnTraits<kKv>::kSmemBytes;
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel), kSmem);
  if (!ready.is_ok()) return ready;
  const int group = a.q_heads / a.kv_heads;
  const dim3 grid(a.tokens, a.kv_heads, (group + AttnConfig::kRows - 1) / AttnConfig::kRows);
  kernel<<<grid, AttnConfig::kThreads, kSmem, stream>>>(a);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  return LaunchStatus::ok();
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
