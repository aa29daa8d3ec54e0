// Kernel choice and launch for sparse decode attention. No torch: checks and errors live in
// sparse_decode_host.cpp.
//
// Default: the split kernel (sparse_decode_split_kernels.cuh), one cluster of `splits` CTAs per (token, KV head,
// 16 query heads). `splits` comes from host-known shapes only (never from device data): the smallest power of
// two <= 8 that gives at least half a wave of resident CTAs, and at least ceil(W / 32) (a CTA walks <= 32
// TopK slots). Knobs for benchmarks and tests: MSA_SPARSE_DECODE_SPLITS=1|2|4|8 forces the split count (raised
// to ceil(W / 32) when lower); MSA_SPARSE_DECODE_KERNEL=1 selects the v1 kernel (one CTA per token, no split);
// MSA_SPARSE_DECODE_LEAN=1 the split kernel with one ring stage less and more CTAs per SM (split::Shape).
#include <algorithm>

#include "cuda/attention/sparse_decode_kernels.cuh"
#include "cuda/attention/sparse_decode_launch.h"
#include "cuda/attention/sparse_decode_split_kernels.cuh"

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
  kernel<<<grid, AttnConfig::kThreads, kSmem, stream>>>(a);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  return LaunchStatus::ok();
}

// `wave`: CTAs of the kernel resident on the GPU at once.
int choose_splits(const SparseDecodeArgs& a, int units, int wave) {
  const int least = (a.topk_width + split::Cfg::kMaxSlots - 1) / split::Cfg::kMaxSlots;  // <= 2 for W <= 64
  int splits = 1;
  const int forced = msa::cuda::env_choice("MSA_SPARSE_DECODE_SPLITS", {1, 2, 4, 8}, 0);
  if (forced > 0) {
    splits = forced;
  } else {
    // Split only while fewer than half a wave of CTAs would run: every split repeats the CTA's fixed work (tables,
    // query, page list, the dependent loads before the first chunk, the cluster merge). Measured on the H200
    // (2026-12-02, 64/4, NVFP4 / FP8): B = 8 (256 units) takes 44 / 41 us with 1 split, 52 / 57 us with 2, 61 / 62
    // with 4; B = 1 (32 units) takes 31 / 26 us with 1 split, 16 / 15 us with 8.
    while (splits < split::Cfg::kMaxSplits && 2 * splits <= a.topk_width && 2 * int64_t(units) * splits < wave) {
      splits *= 2;
    }
  }
  while (splits < least) splits *= 2;
  return splits;
}

template <KvKind kKv, bool kLean>
LaunchStatus launch_split(const SparseDecodeArgs& a, cudaStream_t stream) {
  using S = split::Shape<kKv, kLean>;
  auto kernel = split::sparse_decode_split_kernel<kKv, S::kStages, S::kMinBlocks>;
  constexpr int kSmem = split::Layout<kKv, S::kStages>::kSmemBytes;
  const LaunchStatus ready = msa::cuda::prepare_kernel(reinterpret_cast<const void*>(kernel), kSmem);
  if (!ready.is_ok()) return ready;
  int wave = 0;
  const LaunchStatus sized = msa::cuda::resident_blocks(reinterpret_cast<const void*>(kernel), split::Cfg::kThreads,
                                                        kSmem, wave);
  if (!sized.is_ok()) return sized;
  const int group = a.q_heads / a.kv_heads;
  const int blocks = (group + split::Cfg::kRows - 1) / split::Cfg::kRows;
  const int units = a.tokens * a.kv_heads * blocks;
  const int splits = choose_splits(a, units, wave);

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(a.tokens) * splits, a.kv_heads, blocks);
  config.blockDim = dim3(split::Cfg::kThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = splits;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  cudaError_t err = cudaLaunchKernelEx(&config, kernel, a, splits);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) return {LaunchStatus::Kind::kCudaError, err};
  return LaunchStatus::ok();
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
  if (msa::cuda::env_choice("MSA_SPARSE_DECODE_LEAN", {0, 1}, 0) == 1) return launch_split<kKv, true>(a, stream);
  return launch_split<kKv, false>(a, stream);
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
