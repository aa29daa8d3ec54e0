// Per-CTA timeline of one decode-indexer call (the score kernel, then the select kernel), for latency studies:
// where a small case's microseconds go (launch, waits, setup, first key loads, pages, select). Not part of the
// library; needs a CUDA GPU. Build (from the repository root) and run:
//   nvcc -std=c++20 -O3 -DMSA_KERNEL_TRACE -Icsrc -Icsrc/include -gencode arch=compute_90a,code=sm_90a \
//        scripts/trace_index.cu -o /tmp/trace_index
//   /tmp/trace_index B N [nvfp4|fp8] [H] [iterations]
// Inputs: Q = 8, request lengths N -+ 15 % and N -+ 10 % (alternating), random keys and queries, physical pages
// a permutation, L2 flushed (a 256 MiB read) before every call. The library's launchers pick the grid, so the
// MSA_INDEX_* knobs apply. Prints the op time (events, median) and, for the last call, each trace point's spread
// over the CTAs in µs after the first score CTA started (csrc/cuda/common/trace.cuh; points listed below).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/index/index_decode.cu"

namespace {

#define CHECK(x)                                                                              \
  do {                                                                                        \
    const cudaError_t e = (x);                                                                \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

// Evicts the inputs from L2 by reading (not writing: a memset leaves L2 full of dirty lines whose write-backs
// then compete with the traced call's first loads, which the benchmark's rotated inputs do not).
__global__ void flush_l2(const uint4* p, size_t n, uint4* sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc.x ^= v.x, acc.y ^= v.y, acc.z ^= v.z, acc.w ^= v.w;
  }
  if (acc.x == 0x9E3779B9u && acc.y == 0x7F4A7C15u) *sink = acc;  // practically never; keeps the loads
}

uint32_t next_random(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<uint32_t>(state >> 33);
}

// Random bytes that are never an E4M3 NaN (0x7F / 0xFF), magnitude limited by `mask`.
std::vector<uint8_t> random_e4m3(size_t n, uint64_t seed, uint8_t mask, uint8_t floor_bits = 0) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) {
    b = static_cast<uint8_t>((next_random(seed) & (0x80 | mask)) | floor_bits);
    if ((b & 0x7F) == 0x7F) b ^= 0x01;
  }
  return v;
}

template <typename T>
T* to_device(const std::vector<T>& h) {
  T* d = nullptr;
  CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
  CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

void report(const char* name, const uint64_t (*trace)[msa::cuda::TraceShape::kPoints], int ctas, uint64_t t0,
            const char* const* labels) {
  std::printf("%s: %d CTAs\n", name, ctas);
  for (int p = 0; p < msa::cuda::TraceShape::kPoints; ++p) {
    std::vector<double> v;
    for (int c = 0; c < std::min(ctas, msa::cuda::TraceShape::kCtas); ++c) {
      if (trace[c][p] != 0) v.push_back((trace[c][p] - t0) * 1e-3);
    }
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    std::printf("  %d %-28s n=%4zu  min %7.2f  p10 %7.2f  p50 %7.2f  p90 %7.2f  max %7.2f\n", p, labels[p], v.size(),
                v.front(), v[v.size() / 10], v[v.size() / 2], v[v.size() * 9 / 10], v.back());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s B N [nvfp4|fp8] [H] [iterations]\n", argv[0]);
    return 2;
  }
  const int batch = std::atoi(argv[1]), n = std::atoi(argv[2]);
  const bool nvfp4 = argc < 4 || std::strcmp(argv[3], "fp8") != 0;
  const int heads = argc > 4 ? std::atoi(argv[4]) : 4;
  const int iterations = argc > 5 ? std::atoi(argv[5]) : 20;
  constexpr int kQ = 8, kPage = 128, kTopk = 16;

  std::vector<int32_t> lens(batch);
  for (int b = 0; b < batch; ++b) {
    const int d = (b / 2) % 2 == 0 ? n * 15 / 100 : n / 10;
    lens[b] = std::max(kQ, b % 2 == 0 ? n - d : n + d);
  }
  if (batch == 1) lens[0] = n;
  int max_pages = 0;
  int64_t physical = 0;
  for (int32_t len : lens) {
    max_pages = std::max(max_pages, (len + kPage - 1) / kPage);
    physical += (len + kPage - 1) / kPage;
  }
  std::vector<int32_t> perm(physical);
  std::iota(perm.begin(), perm.end(), 0);
  uint64_t seed = 1701;
  for (int64_t i = physical - 1; i > 0; --i) std::swap(perm[i], perm[next_random(seed) % (i + 1)]);
  std::vector<int32_t> table(int64_t(batch) * max_pages, 0);
  int64_t next = 0;
  for (int b = 0; b < batch; ++b) {
    for (int p = 0; p < (lens[b] + kPage - 1) / kPage; ++p) table[int64_t(b) * max_pages + p] = perm[next++];
  }

  const int row_bytes = nvfp4 ? 64 : 128;
  const auto keys = random_e4m3(size_t(physical) * kPage * row_bytes, 7, nvfp4 ? 0x7F : 0x3F);
  const auto scales = random_e4m3(size_t(physical) * kPage * 8, 11, 0x0F, 0x30);
  const auto q = random_e4m3(size_t(batch) * kQ * heads * 128, 13, 0x3F);

  msa::index::ScoreArgs a{};
  a.q = to_device(q);
  a.q_stride_h = 128;
  a.q_stride_q = int64_t(heads) * 128;
  a.q_stride_b = kQ * a.q_stride_q;
  a.keys = to_device(keys);
  a.key_stride_token = row_bytes;
  a.key_stride_page = int64_t(kPage) * row_bytes;
  a.key_kind = nvfp4 ? msa::index::KeyKind::kNvfp4 : msa::index::KeyKind::kE4M3;
  if (nvfp4) {
    a.key_scales = to_device(scales);
    a.scale_stride_token = 8;
    a.scale_stride_page = kPage * 8;
  }
  a.physical_pages = physical;
  a.page_table = to_device(table);
  a.page_table_stride = max_pages;
  a.seq_lens = to_device(lens);
  a.batch = batch;
  a.q_len = kQ;
  a.heads = heads;
  a.max_pages = max_pages;
  const int tokens = batch * kQ;
  CHECK(cudaMalloc(&a.scores, size_t(heads) * tokens * max_pages * sizeof(float)));
  a.scores_stride_t = max_pages;
  a.scores_stride_h = int64_t(tokens) * max_pages;
  a.write_all_pages = false;

  msa::index::SelectArgs s{};
  s.scores = a.scores;
  s.scores_stride_h = a.scores_stride_h;
  s.scores_stride_t = a.scores_stride_t;
  s.heads = heads;
  s.tokens = tokens;
  s.max_pages = max_pages;
  s.seq_lens = a.seq_lens;
  s.q_len = kQ;
  s.topk = kTopk;
  s.init_blocks = 0;
  s.local_blocks = 1;
  CHECK(cudaMalloc(&s.out, size_t(heads) * tokens * kTopk * sizeof(int32_t)));
  s.out_stride_k = 1;
  s.out_stride_t = kTopk;
  s.out_stride_h = int64_t(tokens) * kTopk;

  void* flush = nullptr;
  constexpr size_t kFlush = size_t(256) << 20;
  CHECK(cudaMalloc(&flush, kFlush + 16));
  CHECK(cudaMemset(flush, 0x5A, kFlush + 16));
  void* trace_device = nullptr;
  CHECK(cudaGetSymbolAddress(&trace_device, msa::cuda::msa_trace_buffer));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int it = 0; it < iterations; ++it) {
    flush_l2<<<132 * 8, 256, 0, stream>>>(static_cast<const uint4*>(flush), kFlush / 16,
                                          reinterpret_cast<uint4*>(static_cast<uint8_t*>(flush) + kFlush));
    if (it == iterations - 1) CHECK(cudaMemsetAsync(trace_device, 0, sizeof(msa::cuda::msa_trace_buffer), stream));
    CHECK(cudaEventRecord(start, stream));
    if (!msa::index::launch_scores(a, stream).is_ok() || !msa::index::launch_select(s, stream).is_ok()) {
      std::fprintf(stderr, "launch failed\n");
      return 1;
    }
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaStreamSynchronize(stream));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1e3f);
  }
  std::sort(times.begin(), times.end());
  static uint64_t trace[msa::cuda::TraceShape::kKernels][msa::cuda::TraceShape::kCtas][msa::cuda::TraceShape::kPoints];
  CHECK(cudaMemcpyFromSymbol(trace, msa::cuda::msa_trace_buffer, sizeof(trace)));

  std::printf("B=%d N=%d keys=%s H=%d Q=%d max_pages=%d pages=%lld lens=", batch, n, nvfp4 ? "nvfp4" : "fp8", heads, kQ,
              max_pages, static_cast<long long>(physical));
  for (int32_t len : lens) std::printf("%d ", len);
  std::printf("\nop time (events, L2 flushed, no graph): median %.2f us, min %.2f us\n", times[times.size() / 2],
              times.front());
  uint64_t t0 = ~0ull;
  int score_ctas = 0, select_ctas = 0;
  for (int c = 0; c < msa::cuda::TraceShape::kCtas; ++c) {
    if (trace[0][c][0] != 0) {
      t0 = std::min(t0, trace[0][c][0]);
      score_ctas = c + 1;
    }
    if (trace[1][c][0] != 0) select_ctas = c + 1;
  }
  static const char* const kScorePoints[] = {"entry", "after PDL wait", "run and length known", "setup done",
                                             "first slice decoded", "first page stored", "main loop done", "exit"};
  static const char* const kSelectPoints[] = {"entry", "after PDL wait", "position known", "keys ranked",
                                              "bound found", "selection done", "-", "exit (history rows)"};
  report("score kernel", trace[0], score_ctas, t0, kScorePoints);
  report("select kernel", trace[1], select_ctas, t0, kSelectPoints);
  return 0;
}
