// Torch-free launch API of the sparse decode attention kernel (sparse_decode.cu), called from
// sparse_decode_host.cpp.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda/common/launch_status.h"

namespace msa::attention {

enum class KvKind { kNvfp4, kE4M3, kBF16 };

struct SparseDecodeArgs {
  const void* q;  // [T, Hq, 128] E4M3 (NVFP4/E4M3 KV) or BF16 (BF16 KV)
  int64_t q_stride_t, q_stride_h;
  const void* k;  // [P, Hkv, 128, 64 (NVFP4) or 128], unit inner stride
  const void* v;
  int64_t k_stride_page, k_stride_head, k_stride_token;
  int64_t v_stride_page, v_stride_head, v_stride_token;
  const uint8_t* k_scales;  // NVFP4: E4M3 [P, Hkv, 128, 8]
  const uint8_t* v_scales;
  int64_t ks_stride_page, ks_stride_head, ks_stride_token;
  int64_t vs_stride_page, vs_stride_head, vs_stride_token;
  KvKind kv_kind;
  int64_t physical_pages;
  const int32_t* topk;  // [Hkv, T, width], any strides
  int64_t topk_stride_h, topk_stride_t, topk_stride_k;
  int topk_width;
  const int32_t* page_table;  // [B, max_pages]
  int64_t page_table_stride;
  int max_pages;
  const int32_t* seq_lens;  // [B]
  int q_len, tokens, q_heads, kv_heads;
  float sm_scale_log2;  // sm_scale * log2(e)
  void* out;  // bf16 [T, Hq, 128], unit inner stride
  int64_t out_stride_t, out_stride_h;
  bool out_rows_aligned;  // out rows start on 8-byte boundaries (the union pass stores 4 values at once)
  float* lse;  // [T, Hq] or nullptr
  int64_t lse_stride_t, lse_stride_h;
};

msa::cuda::LaunchStatus launch_sparse_decode(const SparseDecodeArgs& args, cudaStream_t stream);

}  // namespace msa::attention
