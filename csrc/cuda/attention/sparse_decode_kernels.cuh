// Sparse decode attention over the TopK pages (Q8KV4 / Q8KV8 / BF16). No torch includes.
//
// v1 (correctness first; verified on the H200 2026-12-02, far from its bars: bench/NOTES.md). One CTA per
// (query token, KV head, group of up to 16 query heads); 4 warps, each owning every 4th TopK entry of the token's row with its own online
// softmax state, merged at the end through shared memory (the LSE-weighted combine, inside the CTA).
// Per 32-key chunk a warp stages K as E4M3 (or BF16) and V as BF16 in its own shared slab (NVFP4 decoded to
// E4M3 exactly as the MSA Q8KV4 dequant, then widened exactly to BF16 for V), then
//   S = Q K^T  mma.sync m16n8k32 E4M3 (m16n8k16 BF16), fp32 accumulate;
//   online softmax in base 2 (sm_scale * log2 e folded in), causal mask on the local page;
//   O += P V   mma.sync m16n8k16 BF16 with P from the S accumulators (the FlashAttention-2 register reuse)
//              and V fragments by ldmatrix.trans.
// Known v1 limits, for the optimisation log: tokens of one request re-read shared pages; no split over pages
// beyond the 4 warps; staging is not pipelined with the MMAs.
#pragma once

#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/attention/sparse_decode_launch.h"
#include "cuda/common/mma.cuh"
#include "cuda/common/nvfp4.cuh"

namespace msa::attention {

struct AttnConfig {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kDim = 128;
  static constexpr int kPage = 128;
  static constexpr int kChunk = 32;      // keys staged per warp step (one key per lane)
  static constexpr int kRows = 16;       // query heads per CTA (one MMA M tile)
  static constexpr int kPad = 16;        // bytes of row padding: conflict-free fragment / ldmatrix rows
  static constexpr int kVRow = kDim * 2 + kPad;  // V staged as BF16
};

template <KvKind kKv>
struct AttnTraits {
  static constexpr bool kBF16 = kKv == KvKind::kBF16;
  static constexpr int kKElem = kBF16 ? 2 : 1;  // bytes per staged K element (and per q element)
  static constexpr int kKRow = AttnConfig::kDim * kKElem + AttnConfig::kPad;
  static constexpr int kQRow = kKRow;
  static constexpr int kWarpSlab = AttnConfig::kChunk * (kKRow + AttnConfig::kVRow);
  // q tile + per-warp slabs; the final merge reuses the slabs (16 rows x 128 fp32 per warp = 8 KB <= slab).
  static constexpr int kSmemBytes = AttnConfig::kRows * kQRow + AttnConfig::kWarps * kWarpSlab +
                                    AttnConfig::kWarps * AttnConfig::kRows * 2 * 4;
};

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two E4M3 bytes (low = first) -> two BF16 (exact: E4M3 fits BF16).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two_bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return pack_bf16(f.x, f.y);  // exact
}

// 8 NVFP4 codes (one word) with their scale -> 8 E4M3 bytes (the MSA Q8KV4 dequant), as two words.
__device__ __forceinline__ uint2 nvfp4x8_to_e4m3x8(uint32_t codes, __half2 scale) {
  uint32_t halves[4], prod[4];
  nvfp4::e2m1x8_to_half2x4(codes, halves);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 p = __hmul2(*reinterpret_cast<const __half2*>(&halves[i]), scale);  // exact
    prod[i] = *reinterpret_cast<const uint32_t*>(&p);
  }
  return make_uint2(nvfp4::half2_to_e4m3x2(prod[0]) | (nvfp4::half2_to_e4m3x2(prod[1]) << 16),
                    nvfp4::half2_to_e4m3x2(prod[2]) | (nvfp4::half2_to_e4m3x2(prod[3]) << 16));
}

// Lane `lane` stages key `key` (of page `physical`, head hk) into row `lane` of the warp's K and V slabs.
template <KvKind kKv>
__device__ __forceinline__ void stage_key(const SparseDecodeArgs& a, int64_t physical, int hk, int key, bool live,
                                          uint8_t* k_row, uint8_t* v_row) {
  using Tr = AttnTraits<kKv>;
  if (!live) {  // masked or missing key: zeros (its score is replaced by -inf anyway; V must not be NaN)
#pragma unroll
    for (int i = 0; i < AttnConfig::kDim * Tr::kKElem / 16; ++i) reinterpret_cast<uint4*>(k_row)[i] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < AttnConfig::kDim * 2 / 16; ++i) reinterpret_cast<uint4*>(v_row)[i] = make_uint4(0, 0, 0, 0);
    return;
  }
  if constexpr (kKv == KvKind::kNvfp4) {
    const uint4* k_src = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.k) + physical * a.k_stride_page +
                                                        hk * a.k_stride_head + key * a.k_stride_token);
    const uint4* v_src = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.v) + physical * a.v_stride_page +
                                                        hk * a.v_stride_head + key * a.v_stride_token);
    const uint2 ks = *reinterpret_cast<const uint2*>(a.k_scales + physical * a.ks_stride_page + hk * a.ks_stride_head +
                                                     key * a.ks_stride_token);
    const uint2 vs = *reinterpret_cast<const uint2*>(a.v_scales + physical * a.vs_stride_page + hk * a.vs_stride_head +
                                                     key * a.vs_stride_token);
    uint4 kc[4], vc[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) kc[i] = __ldg(k_src + i), vc[i] = __ldg(v_src + i);
    const uint32_t kwords[16] = {kc[0].x, kc[0].y, kc[0].z, kc[0].w, kc[1].x, kc[1].y, kc[1].z, kc[1].w,
                                 kc[2].x, kc[2].y, kc[2].z, kc[2].w, kc[3].x, kc[3].y, kc[3].z, kc[3].w};
    const uint32_t vwords[16] = {vc[0].x, vc[0].y, vc[0].z, vc[0].w, vc[1].x, vc[1].y, vc[1].z, vc[1].w,
                                 vc[2].x, vc[2].y, vc[2].z, vc[2].w, vc[3].x, vc[3].y, vc[3].z, vc[3].w};
#pragma unroll
    for (int g = 0; g < 8; ++g) {  // 8 groups of 16 elements, one scale each
      const uint32_t kscale_bits = ((g < 4 ? ks.x : ks.y) >> (8 * (g & 3))) & 0xFF;
      const uint32_t vscale_bits = ((g < 4 ? vs.x : vs.y) >> (8 * (g & 3))) & 0xFF;
      const __half2 kscale = nvfp4::e4m3_to_half2(static_cast<uint8_t>(kscale_bits));
      const __half2 vscale = nvfp4::e4m3_to_half2(static_cast<uint8_t>(vscale_bits));
      const uint2 k0 = nvfp4x8_to_e4m3x8(kwords[2 * g], kscale), k1 = nvfp4x8_to_e4m3x8(kwords[2 * g + 1], kscale);
      *reinterpret_cast<uint4*>(k_row + 16 * g) = make_uint4(k0.x, k0.y, k1.x, k1.y);
      const uint2 v0 = nvfp4x8_to_e4m3x8(vwords[2 * g], vscale), v1 = nvfp4x8_to_e4m3x8(vwords[2 * g + 1], vscale);
      const uint32_t e4m3[4] = {v0.x, v0.y, v1.x, v1.y};
      uint32_t bf[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        bf[2 * i] = e4m3x2_to_bf16x2(e4m3[i] & 0xFFFF);
        bf[2 * i + 1] = e4m3x2_to_bf16x2(e4m3[i] >> 16);
      }
      *reinterpret_cast<uint4*>(v_row + 32 * g) = make_uint4(bf[0], bf[1], bf[2], bf[3]);
      *reinterpret_cast<uint4*>(v_row + 32 * g + 16) = make_uint4(bf[4], bf[5], bf[6], bf[7]);
    }
  } else if constexpr (kKv == KvKind::kE4M3) {
    const uint4* k_src = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.k) + physical * a.k_stride_page +
                                                        hk * a.k_stride_head + key * a.k_stride_token);
    const uint4* v_src = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.v) + physical * a.v_stride_page +
                                                        hk * a.v_stride_head + key * a.v_stride_token);
    uint4 kc[8], vc[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) kc[i] = __ldg(k_src + i), vc[i] = __ldg(v_src + i);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      reinterpret_cast<uint4*>(k_row)[i] = kc[i];
      const uint32_t w[4] = {vc[i].x, vc[i].y, vc[i].z, vc[i].w};
      uint32_t bf[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        bf[2 * j] = e4m3x2_to_bf16x2(w[j] & 0xFFFF);
        bf[2 * j + 1] = e4m3x2_to_bf16x2(w[j] >> 16);
      }
      *reinterpret_cast<uint4*>(v_row + 32 * i) = make_uint4(bf[0], bf[1], bf[2], bf[3]);
      *reinterpret_cast<uint4*>(v_row + 32 * i + 16) = make_uint4(bf[4], bf[5], bf[6], bf[7]);
    }
  } else {
    const uint4* k_src = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.k) +
                                                        (physical * a.k_stride_page + hk * a.k_stride_head +
                                                         key * a.k_stride_token) * 2);
    const uint4* v_src = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.v) +
                                                        (physical * a.v_stride_page + hk * a.v_stride_head +
                                                         key * a.v_stride_token) * 2);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      reinterpret_cast<uint4*>(k_row)[i] = __ldg(k_src + i);
      reinterpret_cast<uint4*>(v_row)[i] = __ldg(v_src + i);
    }
  }
}

template <KvKind kKv>
__global__ void __launch_bounds__(AttnConfig::kThreads) sparse_decode_kernel(const SparseDecodeArgs a) {
  msa::cuda::grid_dependency_wait();  // PDL: before any memory access (mma.cuh)
  using Tr = AttnTraits<kKv>;
  using C = AttnConfig;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* q_tile = smem;                                 // [16][kQRow]
  uint8_t* slabs = smem + C::kRows * Tr::kQRow;           // per warp: K [32][kKRow], then V [32][kVRow]
  float* stats = reinterpret_cast<float*>(slabs + C::kWarps * Tr::kWarpSlab);  // [warp][row][m, l]

  const int t = blockIdx.x, hk = blockIdx.y;
  const int group = a.q_heads / a.kv_heads;
  const int head0 = hk * group + blockIdx.z * C::kRows;                     // first query head of this CTA
  const int rows = min(C::kRows, hk * group + group - head0);               // query heads here
  const int b = t / a.q_len;
  const int pos = a.seq_lens[b] - a.q_len + t % a.q_len;
  const int local = pos >= 0 ? pos / C::kPage : -1;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g8 = lane >> 2, quad = lane & 3;

  // Query rows (zero rows pad the tile).
  constexpr int kQVecs = C::kDim * Tr::kKElem / 16;
  for (int i = threadIdx.x; i < C::kRows * kQVecs; i += C::kThreads) {
    const int r = i / kQVecs, c = i % kQVecs;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows) {
      const uint8_t* src = static_cast<const uint8_t*>(a.q) +
                           (int64_t(t) * a.q_stride_t + int64_t(head0 + r) * a.q_stride_h) * Tr::kKElem;
      v = __ldg(reinterpret_cast<const uint4*>(src) + c);
    }
    *reinterpret_cast<uint4*>(q_tile + r * Tr::kQRow + 16 * c) = v;
  }
  __syncthreads();

  // Q fragments stay in registers for the whole CTA.
  constexpr int kKSteps = Tr::kBF16 ? C::kDim / 16 : C::kDim / 32;
  uint32_t qfrag[kKSteps][4];
#pragma unroll
  for (int s = 0; s < kKSteps; ++s) {
    const int kbyte = s * (Tr::kBF16 ? 32 : 32) + quad * 4;  // 16 BF16 or 32 E4M3 elements = 32 bytes
    const uint8_t* r0 = q_tile + g8 * Tr::kQRow;
    qfrag[s][0] = lds32(r0 + kbyte);
    qfrag[s][1] = lds32(r0 + 8 * Tr::kQRow + kbyte);
    qfrag[s][2] = lds32(r0 + kbyte + 16);
    qfrag[s][3] = lds32(r0 + 8 * Tr::kQRow + kbyte + 16);
  }

  float o[16][4];  // rows g8 / g8 + 8, dims 8 n + 2 quad (+1)
#pragma unroll
  for (int n = 0; n < 16; ++n)
#pragma unroll
    for (int j = 0; j < 4; ++j) o[n][j] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  bool broken = false;  // an out-of-range page id: the token's output becomes NaN

  uint8_t* k_slab = slabs + warp * Tr::kWarpSlab;
  uint8_t* v_slab = k_slab + C::kChunk * Tr::kKRow;
  const int32_t* row = a.topk + hk * a.topk_stride_h + int64_t(t) * a.topk_stride_t;
  for (int slot = warp; slot < a.topk_width; slot += C::kWarps) {
    const int page = row[slot * a.topk_stride_k];
    if (page < 0 || page > local) continue;  // padding, or a page this token cannot see
    const int32_t physical = page < a.max_pages ? a.page_table[int64_t(b) * a.page_table_stride + page] : -1;
    if (physical < 0 || physical >= a.physical_pages) {
      broken = true;
      continue;
    }
    const int visible = page < local ? C::kPage : pos % C::kPage + 1;
    for (int chunk = 0; chunk * C::kChunk < visible; ++chunk) {
      const int key = chunk * C::kChunk + lane;
      __syncwarp();
      stage_key<kKv>(a, physical, hk, key, key < visible, k_slab + lane * Tr::kKRow, v_slab + lane * C::kVRow);
      __syncwarp();

      // S = Q K^T for 32 keys: 4 n-tiles of 8 keys.
      float s[4][4];
#pragma unroll
      for (int n = 0; n < 4; ++n) {
#pragma unroll
        for (int j = 0; j < 4; ++j) s[n][j] = 0.0f;
        const uint8_t* krow = k_slab + (8 * n + g8) * Tr::kKRow;
#pragma unroll
        for (int st = 0; st < kKSteps; ++st) {
          const int kbyte = st * 32 + quad * 4;
          if constexpr (Tr::kBF16) {
            msa::cuda::mma_m16n8k16<true>(s[n], qfrag[st], lds32(krow + kbyte), lds32(krow + kbyte + 16));
          } else {
            msa::cuda::mma_e4m3_m16n8k32(s[n], qfrag[st], lds32(krow + kbyte), lds32(krow + kbyte + 16));
          }
        }
      }
      // Online softmax (base 2). Thread holds rows g8 (j = 0, 1) and g8 + 8 (j = 2, 3), keys 8 n + 2 quad + j%2.
      float chunk_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < 4; ++n) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int k_in_chunk = 8 * n + 2 * quad + (j & 1);
          s[n][j] = chunk * C::kChunk + k_in_chunk < visible ? s[n][j] * a.sm_scale_log2 : -INFINITY;
          chunk_max[j >> 1] = fmaxf(chunk_max[j >> 1], s[n][j]);
        }
      }
      float correction[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        chunk_max[h] = fmaxf(chunk_max[h], __shfl_xor_sync(0xFFFFFFFFu, chunk_max[h], 1));
        chunk_max[h] = fmaxf(chunk_max[h], __shfl_xor_sync(0xFFFFFFFFu, chunk_max[h], 2));
        const float new_max = fmaxf(row_max[h], chunk_max[h]);  // finite: chunk 0 of a page has key 0 visible
        correction[h] = exp2f(row_max[h] - new_max);           // exp2(-inf) = 0 on the first chunk
        row_max[h] = new_max;
        row_sum[h] *= correction[h];
      }
#pragma unroll
      for (int n = 0; n < 16; ++n) {
        o[n][0] *= correction[0], o[n][1] *= correction[0];
        o[n][2] *= correction[1], o[n][3] *= correction[1];
      }
#pragma unroll
      for (int n = 0; n < 4; ++n) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          s[n][j] = exp2f(s[n][j] - row_max[j >> 1]);  // masked: exp2(-inf) = 0
          row_sum[j >> 1] += s[n][j];
        }
      }
      // O += P V: two k16 steps over the 32 keys; P fragments straight from the S accumulators.
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        const uint32_t pfrag[4] = {pack_bf16(s[2 * ks][0], s[2 * ks][1]), pack_bf16(s[2 * ks][2], s[2 * ks][3]),
                                   pack_bf16(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                                   pack_bf16(s[2 * ks + 1][2], s[2 * ks + 1][3])};
#pragma unroll
        for (int n = 0; n < 16; n += 2) {
          // ldmatrix.x4.trans: lanes 0-7 keys 16ks+0..7 at dims 8n, 8-15 keys +8..15 at 8n, 16-23 keys 0..7 at
          // dims 8(n+1), 24-31 keys 8..15 at 8(n+1) -> B fragments of n-tiles n and n+1.
          const int vkey = 16 * ks + (lane & 7) + ((lane >> 3) & 1) * 8;
          const int vdim = 8 * (n + (lane >> 4));
          uint32_t vfrag[4];
          msa::cuda::ldmatrix_x4_trans(vfrag, msa::cuda::smem_u32(v_slab + vkey * C::kVRow + vdim * 2));
          msa::cuda::mma_m16n8k16<true>(o[n], pfrag, vfrag[0], vfrag[1]);
          msa::cuda::mma_m16n8k16<true>(o[n + 1], pfrag, vfrag[2], vfrag[3]);
        }
      }
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // row sums over the quad
    row_sum[h] += __shfl_xor_sync(0xFFFFFFFFu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xFFFFFFFFu, row_sum[h], 2);
  }

  // Merge the 4 warps: each writes (max, sum) per row and its O tile into its slab; then all threads combine.
  __syncthreads();
  float* o_slab = reinterpret_cast<float*>(slabs + warp * Tr::kWarpSlab);  // [16 rows][128] fp32
  if (quad == 0) {
    stats[(warp * C::kRows + g8) * 2 + 0] = row_max[0];
    stats[(warp * C::kRows + g8) * 2 + 1] = row_sum[0];
    stats[(warp * C::kRows + g8 + 8) * 2 + 0] = row_max[1];
    stats[(warp * C::kRows + g8 + 8) * 2 + 1] = row_sum[1];
  }
#pragma unroll
  for (int n = 0; n < 16; ++n) {
    const int d = 8 * n + 2 * quad;
    o_slab[g8 * C::kDim + d] = o[n][0];
    o_slab[g8 * C::kDim + d + 1] = o[n][1];
    o_slab[(g8 + 8) * C::kDim + d] = o[n][2];
    o_slab[(g8 + 8) * C::kDim + d + 1] = o[n][3];
  }
  const int any_broken = __syncthreads_or(broken);
  for (int i = threadIdx.x; i < rows * C::kDim; i += C::kThreads) {
    const int r = i / C::kDim, d = i % C::kDim;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < C::kWarps; ++w) m = fmaxf(m, stats[(w * C::kRows + r) * 2]);
    float total = 0.0f, acc = 0.0f;
    if (m != -INFINITY) {
#pragma unroll
      for (int w = 0; w < C::kWarps; ++w) {
        const float weight = exp2f(stats[(w * C::kRows + r) * 2] - m);  // 0 for a warp that saw no key
        total += stats[(w * C::kRows + r) * 2 + 1] * weight;
        acc += reinterpret_cast<const float*>(slabs + w * Tr::kWarpSlab)[r * C::kDim + d] * weight;
      }
    }
    float value = total > 0.0f ? acc / total : 0.0f;  // no key at all: zeros (and LSE -inf)
    if (any_broken) value = NAN;
    reinterpret_cast<__nv_bfloat16*>(a.out)[int64_t(t) * a.out_stride_t + int64_t(head0 + r) * a.out_stride_h + d] =
        __float2bfloat16_rn(value);
    if (d == 0 && a.lse != nullptr) {
      const float lse = any_broken ? NAN : (total > 0.0f ? (m + log2f(total)) * 0.69314718055994531f : -INFINITY);
      a.lse[int64_t(t) * a.lse_stride_t + int64_t(head0 + r) * a.lse_stride_h] = lse;
    }
  }
}

}  // namespace msa::attention
