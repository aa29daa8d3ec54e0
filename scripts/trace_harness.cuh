// Shared plumbing of the latency-trace harnesses (scripts/trace_*.cu): random inputs, request lengths, an L2
// eviction pass, the timed loop and the per-trace-point report of csrc/cuda/common/trace.cuh's buffer. Include
// after the kernel's .cu file, in a translation unit built with -DMSA_KERNEL_TRACE.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/common/trace.cuh"

#ifndef MSA_KERNEL_TRACE
#error "build the trace harnesses with -DMSA_KERNEL_TRACE"
#endif

namespace msa::trace {

#define MSA_TRACE_CHECK(x)                                                                    \
  do {                                                                                        \
    const cudaError_t e = (x);                                                                \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

inline uint32_t next_random(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<uint32_t>(state >> 33);
}

// Random bytes that are never an E4M3 NaN (0x7F / 0xFF), magnitude limited by `mask`.
inline std::vector<uint8_t> random_e4m3(size_t n, uint64_t seed, uint8_t mask, uint8_t floor_bits = 0) {
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
  MSA_TRACE_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
  MSA_TRACE_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Request lengths around N: N -+ 15 % and N -+ 10 % alternating (N alone for one request), at least `q_len`.
inline std::vector<int32_t> request_lengths(int batch, int n, int q_len) {
  std::vector<int32_t> lens(batch);
  for (int b = 0; b < batch; ++b) {
    const int d = (b / 2) % 2 == 0 ? n * 15 / 100 : n / 10;
    lens[b] = std::max(q_len, b % 2 == 0 ? n - d : n + d);
  }
  if (batch == 1) lens[0] = std::max(q_len, n);
  return lens;
}

// Each request's pages in a shared cache: physical ids a random permutation, table [B, max_pages] (0 past a
// request's pages).
struct Paging {
  int max_pages = 0;
  int64_t physical = 0;
  std::vector<int32_t> table;
};
inline Paging paging(const std::vector<int32_t>& lens, int page, uint64_t seed) {
  Paging g;
  for (int32_t len : lens) {
    g.max_pages = std::max(g.max_pages, (len + page - 1) / page);
    g.physical += (len + page - 1) / page;
  }
  std::vector<int32_t> perm(g.physical);
  for (int64_t i = 0; i < g.physical; ++i) perm[i] = static_cast<int32_t>(i);
  for (int64_t i = g.physical - 1; i > 0; --i) std::swap(perm[i], perm[next_random(seed) % (i + 1)]);
  g.table.assign(lens.size() * size_t(g.max_pages), 0);
  int64_t next = 0;
  for (size_t b = 0; b < lens.size(); ++b) {
    for (int p = 0; p < (lens[b] + page - 1) / page; ++p) g.table[b * g.max_pages + p] = perm[next++];
  }
  return g;
}

// Evicts the inputs from L2 by reading (not writing: a memset leaves L2 full of dirty lines whose write-backs
// then compete with the traced call's first loads, which the benchmarks' rotated inputs do not).
__global__ void flush_l2_kernel(const uint4* p, size_t n, uint4* sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc.x ^= v.x, acc.y ^= v.y, acc.z ^= v.z, acc.w ^= v.w;
  }
  if (acc.x == 0x9E3779B9u && acc.y == 0x7F4A7C15u) *sink = acc;  // practically never; keeps the loads
}

// Runs `call` (which enqueues the op on `stream`) `iterations` times, each after an L2 eviction pass, timing each
// with events, and keeps the trace of the last call. Returns the sorted times in µs.
template <typename Call>
std::vector<float> timed_calls(int iterations, cudaStream_t stream, Call&& call) {
  constexpr size_t kFlush = size_t(256) << 20;
  uint8_t* flush = nullptr;
  MSA_TRACE_CHECK(cudaMalloc(&flush, kFlush + 16));
  MSA_TRACE_CHECK(cudaMemset(flush, 0x5A, kFlush + 16));
  void* buffer = nullptr;
  MSA_TRACE_CHECK(cudaGetSymbolAddress(&buffer, msa::cuda::msa_trace_buffer));
  cudaEvent_t start, stop;
  MSA_TRACE_CHECK(cudaEventCreate(&start));
  MSA_TRACE_CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int it = 0; it < iterations; ++it) {
    flush_l2_kernel<<<132 * 8, 256, 0, stream>>>(reinterpret_cast<const uint4*>(flush), kFlush / 16,
                                                 reinterpret_cast<uint4*>(flush + kFlush));
    if (it == iterations - 1) MSA_TRACE_CHECK(cudaMemsetAsync(buffer, 0, sizeof(msa::cuda::msa_trace_buffer), stream));
    MSA_TRACE_CHECK(cudaEventRecord(start, stream));
    if (!call()) {
      std::fprintf(stderr, "launch failed\n");
      std::exit(1);
    }
    MSA_TRACE_CHECK(cudaEventRecord(stop, stream));
    MSA_TRACE_CHECK(cudaStreamSynchronize(stream));
    float ms = 0.0f;
    MSA_TRACE_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1e3f);
  }
  MSA_TRACE_CHECK(cudaFree(flush));
  std::sort(times.begin(), times.end());
  return times;
}

// The rest of a harness's header line after its "... pages=P ": the requests' lengths, then the timed calls' median
// and minimum.
inline void print_lengths_and_times(const std::vector<int32_t>& lens, const std::vector<float>& times) {
  std::printf("lens=");
  for (int32_t len : lens) std::printf("%d ", len);
  std::printf("\nop time (events, L2 evicted, no graph): median %.2f us, min %.2f us\n", times[times.size() / 2],
              times.front());
}

// The trace buffer of the last timed call, copied to the host.
struct Timeline {
  using Points = uint64_t[msa::cuda::TraceShape::kPoints];
  std::vector<uint64_t> data;

  Timeline() : data(sizeof(msa::cuda::msa_trace_buffer) / sizeof(uint64_t)) {
    constexpr size_t kBytes = sizeof(msa::cuda::msa_trace_buffer);
    MSA_TRACE_CHECK(cudaMemcpyFromSymbol(data.data(), msa::cuda::msa_trace_buffer, kBytes));
  }
  const Points* kernel(int k) const {
    return reinterpret_cast<const Points*>(data.data()) + size_t(k) * msa::cuda::TraceShape::kCtas;
  }
  // CTAs that recorded point 0 (entry) are counted up to the last of them.
  int ctas(int k) const {
    int n = 0;
    for (int c = 0; c < msa::cuda::TraceShape::kCtas; ++c) n = kernel(k)[c][0] != 0 ? c + 1 : n;
    return n;
  }
  uint64_t first_entry(int k) const {
    uint64_t t0 = ~0ull;
    const int n = ctas(k);
    for (int c = 0; c < n; ++c) t0 = kernel(k)[c][0] != 0 ? std::min(t0, kernel(k)[c][0]) : t0;
    return t0;
  }
  // Per point: its spread over the CTAs that recorded it, in µs after t0.
  void report(int k, const char* name, uint64_t t0, const char* const* labels) const {
    const int n = ctas(k);
    std::printf("%s: %d CTAs\n", name, n);
    for (int p = 0; p < msa::cuda::TraceShape::kPoints; ++p) {
      std::vector<double> v;
      for (int c = 0; c < n; ++c) {
        if (kernel(k)[c][p] != 0) v.push_back((double(kernel(k)[c][p]) - double(t0)) * 1e-3);
      }
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      std::printf("  %d %-28s n=%4zu  min %7.2f  p10 %7.2f  p50 %7.2f  p90 %7.2f  max %7.2f\n", p, labels[p],
                  v.size(), v.front(), v[v.size() / 10], v[v.size() / 2], v[v.size() * 9 / 10], v.back());
    }
  }
};

}  // namespace msa::trace
