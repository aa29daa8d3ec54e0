// Block-wide exclusive prefix sum for kernels of kWarps full warps. No torch includes.
#pragma once

namespace msa::cuda {

// Exclusive prefix over the block (thread order) of `value`, and the block's total. `warp_sums`: kWarps ints of
// shared memory. Every thread of the block must call it; it synchronises the block twice and leaves
// `warp_sums` free for the next call.
template <int kWarps>
__device__ __forceinline__ int block_exclusive_scan(int value, int* warp_sums, int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int inclusive = value;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int other = __shfl_up_sync(0xFFFFFFFFu, inclusive, d);
    if (lane >= d) inclusive += other;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  int before = 0;
  total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const int s = warp_sums[w];
    before += w < warp ? s : 0;
    total += s;
  }
  __syncthreads();  // warp_sums may be reused
  return before + inclusive - value;
}

}  // namespace msa::cuda
