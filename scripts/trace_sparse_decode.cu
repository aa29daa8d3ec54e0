// Per-CTA timeline of one sparse-decode call (the split kernel: one CTA per token, KV head and split), for
// latency studies: launch, PDL wait, slot list (TopK -> page table), first K/V chunk, chunks, the warp merge and
// the cluster merge. Not part of the library; needs a CUDA GPU. Build (from the repository root) and run:
//   nvcc -std=c++20 -O3 -DMSA_KERNEL_TRACE -Icsrc -Icsrc/include -gencode arch=compute_90a,code=sm_90a \
//        scripts/trace_sparse_decode.cu -o /tmp/trace_sparse_decode
//   /tmp/trace_sparse_decode B N [nvfp4|fp8|bf16] [Hq/Hkv, default 64/4] [iterations]
// Inputs: Q = 8, request lengths as scripts/trace_index.cu, random K/V (NVFP4 codes with E4M3 scales, E4M3 or
// BF16) and queries, each (KV head, token) TopK row 15 distinct random history pages plus the local page (SPEC
// §7), L2 evicted before every call. The library's launcher picks the kernel and split count, so the
// MSA_SPARSE_DECODE_* knobs apply; calls it routes to the union pass (many requests, short rows) record nothing.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/attention/sparse_decode.cu"
#include "trace_harness.cuh"

int main(int argc, char** argv) {
  using namespace msa::trace;
  using msa::attention::KvKind;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s B N [nvfp4|fp8|bf16] [Hq/Hkv] [iterations]\n", argv[0]);
    return 2;
  }
  const int batch = std::atoi(argv[1]), n = std::atoi(argv[2]);
  const char* kv_name = argc > 3 ? argv[3] : "nvfp4";
  const KvKind kv = std::strcmp(kv_name, "fp8") == 0    ? KvKind::kE4M3
                    : std::strcmp(kv_name, "bf16") == 0 ? KvKind::kBF16
                                                        : KvKind::kNvfp4;
  int q_heads = 64, kv_heads = 4;
  if (argc > 4 && std::sscanf(argv[4], "%d/%d", &q_heads, &kv_heads) != 2) {
    std::fprintf(stderr, "geometry: Hq/Hkv, e.g. 64/4\n");
    return 2;
  }
  const int iterations = argc > 5 ? std::atoi(argv[5]) : 20;
  constexpr int kQ = 8, kPage = 128, kTopk = 16, kDim = 128;
  const int tokens = batch * kQ;

  const std::vector<int32_t> lens = request_lengths(batch, n, kQ);
  const Paging pages = paging(lens, kPage, 1701);
  // Cache rows in elements (the launch API's strides count elements) and bytes per element.
  const int row = kv == KvKind::kNvfp4 ? kDim / 2 : kDim;
  const int elem = kv == KvKind::kBF16 ? 2 : 1;
  const size_t cache_bytes = size_t(pages.physical) * kv_heads * kPage * row * elem;
  // E4M3 bytes below 0x3F in magnitude (|x| < ~1.9) for E4M3 caches and queries; BF16 values are pairs of those
  // bytes read as bf16 (finite, |x| < 2^-1 or so): random data, not a distribution study.
  const auto k_bytes = random_e4m3(cache_bytes, 7, kv == KvKind::kNvfp4 ? 0x7F : 0x3F);
  const auto v_bytes = random_e4m3(cache_bytes, 8, kv == KvKind::kNvfp4 ? 0x7F : 0x3F);
  const auto scales = random_e4m3(size_t(pages.physical) * kv_heads * kPage * 8, 11, 0x0F, 0x30);
  const auto q = random_e4m3(size_t(tokens) * q_heads * kDim * elem, 13, 0x3F);

  // TopK rows [Hkv, T, 16]: the local page last, before it up to 15 distinct history pages (all of 0 .. local
  // when they fit), -1 padding.
  std::vector<int32_t> topk(size_t(kv_heads) * tokens * kTopk, -1);
  uint64_t seed = 4242;
  for (int hk = 0; hk < kv_heads; ++hk) {
    for (int t = 0; t < tokens; ++t) {
      const int pos = lens[t / kQ] - kQ + t % kQ, local = pos / kPage;
      int32_t* r = &topk[(size_t(hk) * tokens + t) * kTopk];
      int filled = 0;
      if (local + 1 <= kTopk) {
        for (int p = 0; p <= local; ++p) r[filled++] = p;
        continue;
      }
      while (filled < kTopk - 1) {
        const int p = static_cast<int>(next_random(seed) % local);
        bool seen = false;
        for (int j = 0; j < filled; ++j) seen |= r[j] == p;
        if (!seen) r[filled++] = p;
      }
      r[filled] = local;
    }
  }

  msa::attention::SparseDecodeArgs a{};
  a.q = to_device(q);
  a.q_stride_h = kDim;
  a.q_stride_t = int64_t(q_heads) * kDim;
  a.k = to_device(k_bytes);
  a.v = to_device(v_bytes);
  a.k_stride_token = a.v_stride_token = row;
  a.k_stride_head = a.v_stride_head = int64_t(kPage) * row;
  a.k_stride_page = a.v_stride_page = int64_t(kv_heads) * kPage * row;
  if (kv == KvKind::kNvfp4) {
    a.k_scales = to_device(scales);
    a.v_scales = to_device(scales);
    a.ks_stride_token = a.vs_stride_token = 8;
    a.ks_stride_head = a.vs_stride_head = kPage * 8;
    a.ks_stride_page = a.vs_stride_page = int64_t(kv_heads) * kPage * 8;
  }
  a.kv_kind = kv;
  a.physical_pages = pages.physical;
  a.topk = to_device(topk);
  a.topk_stride_k = 1;
  a.topk_stride_t = kTopk;
  a.topk_stride_h = int64_t(tokens) * kTopk;
  a.topk_width = kTopk;
  a.page_table = to_device(pages.table);
  a.page_table_stride = pages.max_pages;
  a.max_pages = pages.max_pages;
  a.seq_lens = to_device(lens);
  a.q_len = kQ;
  a.tokens = tokens;
  a.q_heads = q_heads;
  a.kv_heads = kv_heads;
  a.sm_scale_log2 = static_cast<float>(1.0 / std::sqrt(double(kDim)) * 1.4426950408889634);
  MSA_TRACE_CHECK(cudaMalloc(&a.out, size_t(tokens) * q_heads * kDim * 2));
  a.out_stride_t = int64_t(q_heads) * kDim;
  a.out_stride_h = kDim;
  a.out_rows_aligned = true;

  cudaStream_t stream;
  MSA_TRACE_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::vector<float> times =
      timed_calls(iterations, stream, [&] { return msa::attention::launch_sparse_decode(a, stream).is_ok(); });
  const Timeline timeline;

  std::printf("B=%d N=%d kv=%s geometry=%d/%d Q=%d max_pages=%d pages=%lld ", batch, n, kv_name, q_heads, kv_heads,
              kQ, pages.max_pages, static_cast<long long>(pages.physical));
  print_lengths_and_times(lens, times);
  static const char* const kPoints[] = {"entry", "after PDL wait", "slot list ready", "warp 0: first chunk in",
                                        "warp 0: chunks done", "warps merged", "splits merged (cluster)", "exit",
                                        "pushes issued (cluster)", "owner weights ready", "", ""};
  static_assert(sizeof(kPoints) / sizeof(kPoints[0]) == msa::cuda::TraceShape::kPoints, "a label per point");
  timeline.report(2, "sparse decode split kernel", timeline.first_entry(2), kPoints);
  return 0;
}
