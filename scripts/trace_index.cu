// Per-CTA timeline of one decode-indexer call (the score kernel, then the select kernel), for latency studies:
// where a small case's microseconds go (launch, waits, setup, first key loads, pages, select). Not part of the
// library; needs a CUDA GPU. Build (from the repository root) and run:
//   nvcc -std=c++20 -O3 -DMSA_KERNEL_TRACE -Icsrc -Icsrc/include -gencode arch=compute_90a,code=sm_90a \
//        scripts/trace_index.cu -o /tmp/trace_index
//   /tmp/trace_index B N [nvfp4|fp8] [H] [iterations]
// Inputs: Q = 8, request lengths N -+ 15 % and N -+ 10 % (alternating), random keys and queries, physical pages
// a permutation, L2 evicted (a 256 MiB read) before every call. The library's launchers pick the grid, so the
// MSA_INDEX_* knobs apply. Prints the op time (events, median) and, for the last call, each trace point's spread
// over the CTAs in µs after the first score CTA started (csrc/cuda/common/trace.cuh; points listed below).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/index/index_decode.cu"
#include "trace_harness.cuh"

// Where the score kernel's time goes across CTAs and SMs (points 10 / 11: SM id + 1, pages loaded + 1): the
// per-CTA rate (µs per page from setup done to main loop done), and per SM its CTAs, pages and last finish, so a
// late finish shows whether it had more pages, a slower rate, or started late.
void report_balance(const msa::trace::Timeline& timeline, uint64_t t0) {
  struct Cta { int sm, pages; double start, setup, done; };
  std::vector<Cta> ctas;
  const int n = timeline.ctas(0);
  for (int c = 0; c < n; ++c) {
    const uint64_t* p = timeline.kernel(0)[c];
    if (p[10] == 0 || p[11] <= 1 || p[6] == 0) continue;
    auto us = [&](int k) { return (double(p[k]) - double(t0)) * 1e-3; };
    ctas.push_back({int(p[10] - 1), int(p[11] - 1), us(0), us(3), us(6)});
  }
  if (ctas.empty()) return;
  auto spread = [](std::vector<double> v, const char* what) {
    std::sort(v.begin(), v.end());
    std::printf("  %-34s min %7.3f  p10 %7.3f  p50 %7.3f  p90 %7.3f  max %7.3f\n", what, v.front(), v[v.size() / 10],
                v[v.size() / 2], v[v.size() * 9 / 10], v.back());
  };
  std::vector<double> rate, pages;
  for (const Cta& c : ctas) rate.push_back((c.done - c.setup) / c.pages), pages.push_back(c.pages);
  std::printf("balance: %zu working CTAs\n", ctas.size());
  spread(pages, "pages per CTA");
  spread(rate, "us per page per CTA (setup..done)");
  int sms = 0;
  for (const Cta& c : ctas) sms = std::max(sms, c.sm + 1);
  struct Sm { int ctas = 0, pages = 0; double first = 1e30, last = 0, last_start = 0; };
  std::vector<Sm> per(sms);
  for (const Cta& c : ctas) {
    Sm& m = per[c.sm];
    m.ctas++, m.pages += c.pages, m.first = std::min(m.first, c.done), m.last = std::max(m.last, c.done);
    m.last_start = std::max(m.last_start, c.start);
  }
  std::vector<double> last, within, sm_rate;
  std::vector<int> order;
  for (int i = 0; i < sms; ++i) {
    if (per[i].ctas == 0) continue;
    order.push_back(i);
    last.push_back(per[i].last), within.push_back(per[i].last - per[i].first);
    sm_rate.push_back(per[i].last / per[i].pages);
  }
  spread(last, "SM last finish (us)");
  spread(within, "SM last - first finish (us)");
  spread(sm_rate, "SM last finish / SM pages (us)");
  std::sort(order.begin(), order.end(), [&](int x, int y) { return per[x].last < per[y].last; });
  auto show = [&](int i) {
    std::printf("    sm %3d: %d CTAs, %3d pages, finish %6.2f .. %6.2f, last start %5.2f\n", i, per[i].ctas,
                per[i].pages, per[i].first, per[i].last, per[i].last_start);
  };
  std::printf("  fastest SMs:\n");
  for (size_t k = 0; k < std::min<size_t>(4, order.size()); ++k) show(order[k]);
  std::printf("  slowest SMs:\n");
  for (size_t k = order.size() > 6 ? order.size() - 6 : 0; k < order.size(); ++k) show(order[k]);
}

int main(int argc, char** argv) {
  using namespace msa::trace;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s B N [nvfp4|fp8] [H] [iterations]\n", argv[0]);
    return 2;
  }
  const int batch = std::atoi(argv[1]), n = std::atoi(argv[2]);
  const bool nvfp4 = argc < 4 || std::strcmp(argv[3], "fp8") != 0;
  const int heads = argc > 4 ? std::atoi(argv[4]) : 4;
  const int iterations = argc > 5 ? std::atoi(argv[5]) : 20;
  constexpr int kQ = 8, kPage = 128, kTopk = 16;

  const std::vector<int32_t> lens = request_lengths(batch, n, kQ);
  const Paging pages = paging(lens, kPage, 1701);
  const int row_bytes = nvfp4 ? 64 : 128;
  const auto keys = random_e4m3(size_t(pages.physical) * kPage * row_bytes, 7, nvfp4 ? 0x7F : 0x3F);
  const auto scales = random_e4m3(size_t(pages.physical) * kPage * 8, 11, 0x0F, 0x30);
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
  a.physical_pages = pages.physical;
  a.page_table = to_device(pages.table);
  a.page_table_stride = pages.max_pages;
  a.seq_lens = to_device(lens);
  a.batch = batch;
  a.q_len = kQ;
  a.heads = heads;
  a.max_pages = pages.max_pages;
  const int tokens = batch * kQ;
  MSA_TRACE_CHECK(cudaMalloc(&a.scores, size_t(heads) * tokens * pages.max_pages * sizeof(float)));
  a.scores_stride_t = pages.max_pages;
  a.scores_stride_h = int64_t(tokens) * pages.max_pages;
  a.write_all_pages = false;

  msa::index::SelectArgs s{};
  s.scores = a.scores;
  s.scores_stride_h = a.scores_stride_h;
  s.scores_stride_t = a.scores_stride_t;
  s.heads = heads;
  s.tokens = tokens;
  s.max_pages = pages.max_pages;
  s.seq_lens = a.seq_lens;
  s.q_len = kQ;
  s.topk = kTopk;
  s.init_blocks = 0;
  s.local_blocks = 1;
  MSA_TRACE_CHECK(cudaMalloc(&s.out, size_t(heads) * tokens * kTopk * sizeof(int32_t)));
  s.out_stride_k = 1;
  s.out_stride_t = kTopk;
  s.out_stride_h = int64_t(tokens) * kTopk;

  cudaStream_t stream;
  MSA_TRACE_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::vector<float> times = timed_calls(iterations, stream, [&] {
    return msa::index::launch_scores(a, stream).is_ok() && msa::index::launch_select(s, stream).is_ok();
  });
  const Timeline timeline;

  std::printf("B=%d N=%d keys=%s H=%d Q=%d max_pages=%d pages=%lld ", batch, n, nvfp4 ? "nvfp4" : "fp8", heads, kQ,
              pages.max_pages, static_cast<long long>(pages.physical));
  print_lengths_and_times(lens, times);
  static const char* const kScorePoints[] = {"entry", "after PDL wait", "run and length known", "setup done",
                                             "first slice decoded", "first page stored", "main loop done", "exit",
                                             "", "", "", ""};
  static const char* const kSelectPoints[] = {"entry", "after PDL wait", "position known", "keys ranked",
                                              "bound found", "selection done", "-", "exit (history rows)",
                                              "", "", "", ""};
  static_assert(sizeof(kScorePoints) == sizeof(kSelectPoints) &&
                    sizeof(kScorePoints) / sizeof(kScorePoints[0]) == msa::cuda::TraceShape::kPoints,
                "a label per point");
  const uint64_t t0 = timeline.first_entry(0);
  timeline.report(0, "score kernel", t0, kScorePoints);
  timeline.report(1, "select kernel", t0, kSelectPoints);
  report_balance(timeline, t0);
  return 0;
}
