// Torch-free launch API of the decode-indexer kernels (index_decode.cu), called from index_host.cpp.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda/common/launch_status.h"

namespace msa::index {

enum class KeyKind { kNvfp4, kE4M3, kBF16 };

struct ScoreArgs {
  const void* q;  // [B, Q, H, 128] E4M3 or BF16 (BF16 iff keys are BF16)
  int64_t q_stride_b, q_stride_q, q_stride_h;
  const void* keys;  // [P, 128, 128 or 64 (NVFP4)], unit inner stride
  int64_t key_stride_page, key_stride_token;
  const uint8_t* key_scales;  // NVFP4: E4M3 [P, 128, 8]
  int64_t scale_stride_page, scale_stride_token;
  KeyKind key_kind;
  int64_t physical_pages;
  const int32_t* page_table;  // [B, max_pages]
  int64_t page_table_stride;
  const int32_t* seq_lens;  // [B]
  int batch, q_len, heads, max_pages;
  float* scores;  // [H, B*Q, max_pages], unit inner stride
  int64_t scores_stride_h, scores_stride_t;
  bool write_all_pages;  // true: every page < max_pages written (-inf where unseen); false: needed pages only
  int pages_per_unit;    // set by launch_scores (FP8 / NVFP4 keys): pages of one warp (mma.sync) or CTA (wgmma)
  // Set by launch_scores (wgmma kernel): 0, or the CTAs of a 1-D grid over all requests' pages whose runs are
  // sized from the true lengths on the device (flat_run in index_wgmma_kernels.cuh).
  int flat_ctas;
  // Set by launch_scores: flat grid runs of ceil(P / CTAs) pages, the last CTAs idle (knob MSA_INDEX_FLAT_BALANCE=0).
  bool flat_even;
  // Set by launch_scores (wgmma kernel): the 64-key slices before the end of its run at which a CTA lets the select
  // kernel launch (default 2; knob MSA_INDEX_SCORE_TRIGGER); 0: after its main loop.
  int trigger_slices;
};

struct SelectArgs {
  // [H, T, max_pages]; nullptr only when no row has history to select (max_pages <= topk): every row is then
  // structural (0 .. local, or -1) and no score is read.
  const float* scores;
  int64_t scores_stride_h, scores_stride_t;
  int heads, tokens, max_pages;
  // Position of token t: positions[t] when positions != nullptr, else seq_lens[t / q_len] - q_len + t % q_len.
  const int32_t* positions;
  const int32_t* seq_lens;
  int q_len;
  int topk, init_blocks, local_blocks;
  int32_t* out;  // [H, T, topk], any strides
  int64_t out_stride_h, out_stride_t, out_stride_k;
  // Set by launch_select (experiment knob MSA_INDEX_SELECT_TRIGGER=1, when its grid is one wave): the warp select
  // kernel lets the next kernel in the stream launch at its start instead of its exit.
  bool trigger_early;
};

msa::cuda::LaunchStatus launch_scores(const ScoreArgs& args, cudaStream_t stream);
msa::cuda::LaunchStatus launch_select(const SelectArgs& args, cudaStream_t stream);

}  // namespace msa::index
