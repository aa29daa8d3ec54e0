// CUDA host code of the decode indexer: checks (shared with the CPU op), alignment, the scores workspace,
// two launches on the current stream (one when there is nothing to score). Never reads device data: CUDA-graph
// safe; allocates nothing when the caller passes scores_out or a workspace (or when there is nothing to score).
#include <array>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/index_host.h"
#include "cuda/common/cuda_host.h"
#include "cuda/index/index_launch.h"
#include "ops.h"

namespace msa {
namespace {

// `scores` may be undefined (no history to select anywhere): heads, tokens and max_pages then come from `dims`.
index::SelectArgs select_args(const at::Tensor& scores, at::IntArrayRef dims, int64_t topk, int64_t init_blocks,
                              int64_t local_blocks, const at::Tensor& out) {
  index::SelectArgs a{};
  if (scores.defined()) {
    a.scores = scores.data_ptr<float>();
    a.scores_stride_h = scores.stride(0);
    a.scores_stride_t = scores.stride(1);
  }
  a.heads = static_cast<int>(dims[0]);
  a.tokens = static_cast<int>(dims[1]);
  a.max_pages = static_cast<int>(dims[2]);
  a.topk = static_cast<int>(topk);
  a.init_blocks = static_cast<int>(init_blocks);
  a.local_blocks = static_cast<int>(local_blocks);
  a.out = out.data_ptr<int32_t>();
  a.out_stride_h = out.stride(0);
  a.out_stride_t = out.stride(1);
  a.out_stride_k = out.stride(2);
  return a;
}

// The score kernels' arguments; `write_all_pages`: every page < max_pages (scores_out), else the needed ones.
index::ScoreArgs score_args(const index::DecodeShape& s, const at::Tensor& q_idx, const at::Tensor& index_k,
                            const std::optional<at::Tensor>& index_k_scales, const at::Tensor& page_table,
                            const at::Tensor& seq_lens, const at::Tensor& scores, bool write_all_pages) {
  index::ScoreArgs a{};
  a.q = q_idx.data_ptr();
  a.q_stride_b = q_idx.stride(0);
  a.q_stride_q = q_idx.stride(1);
  a.q_stride_h = q_idx.stride(2);
  a.keys = index_k.data_ptr();
  a.key_stride_page = index_k.stride(0);
  a.key_stride_token = index_k.stride(1);
  a.key_kind = s.keys == index::KeyFormat::kNvfp4 ? index::KeyKind::kNvfp4
               : s.keys == index::KeyFormat::kE4M3 ? index::KeyKind::kE4M3 : index::KeyKind::kBF16;
  if (s.keys == index::KeyFormat::kNvfp4) {
    a.key_scales = reinterpret_cast<const uint8_t*>(index_k_scales->data_ptr());
    a.scale_stride_page = index_k_scales->stride(0);
    a.scale_stride_token = index_k_scales->stride(1);
  }
  a.physical_pages = s.physical_pages;
  a.page_table = page_table.data_ptr<int32_t>();
  a.page_table_stride = page_table.stride(0);
  a.seq_lens = seq_lens.data_ptr<int32_t>();
  a.batch = static_cast<int>(s.batch);
  a.q_len = static_cast<int>(s.q_len);
  a.heads = static_cast<int>(s.heads);
  a.max_pages = static_cast<int>(s.max_pages);
  a.scores = scores.data_ptr<float>();
  a.scores_stride_h = scores.stride(0);
  a.scores_stride_t = scores.stride(1);
  a.write_all_pages = write_all_pages;
  return a;
}

}  // namespace

void index_decode_cuda(const at::Tensor& q_idx_in, const at::Tensor& index_k,
                       const std::optional<at::Tensor>& index_k_scales, const at::Tensor& page_table,
                       const at::Tensor& seq_lens, int64_t topk, int64_t init_blocks, int64_t local_blocks,
                       const at::Tensor& out, const std::optional<at::Tensor>& scores_out,
                       const std::optional<at::Tensor>& workspace) {
  const char* op = "msa::index_decode";
  const index::DecodeShape s = index::check_index_decode_args(q_idx_in, index_k, index_k_scales, page_table,
                                                              seq_lens, topk, init_blocks, local_blocks, out,
                                                              scores_out, workspace);
  TORCH_CHECK(q_idx_in.is_cuda(), op, ": tensors must be CUDA tensors here, got ", q_idx_in.device());
  TORCH_CHECK(s.batch <= 65535, op, ": at most 65535 requests per call, got ", s.batch);
  if (s.tokens() == 0) return;
  const c10::cuda::CUDAGuard guard(q_idx_in.device());
  // Query rows are loaded as 16-byte vectors: a misaligned view is copied (it is small); the key cache is
  // never copied, so it must be aligned.
  const at::Tensor q_idx = msa::cuda::rows_aligned(q_idx_in, 16) ? q_idx_in : q_idx_in.contiguous();
  TORCH_CHECK(msa::cuda::rows_aligned(index_k, 16), op,
              ": index_k's rows must start on 16-byte boundaries (data pointer and strides); got strides ",
              index_k.strides());
  if (s.keys == index::KeyFormat::kNvfp4) {
    TORCH_CHECK(msa::cuda::rows_aligned(*index_k_scales, 4), op,
                ": index_k_scales' rows must start on 4-byte boundaries; got strides ", index_k_scales->strides());
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // Nothing to score (index_host.h): only the select kernel runs; it writes those rows without reading scores.
  at::Tensor scores;
  if (!index::nothing_to_score(s, topk, scores_out)) {
    scores = index::scores_buffer(s, q_idx, scores_out, workspace);
    const index::ScoreArgs a =
        score_args(s, q_idx, index_k, index_k_scales, page_table, seq_lens, scores, scores_out.has_value());
    msa::cuda::check_launch(index::launch_scores(a, stream), op);
  }
  const std::array<int64_t, 3> dims{s.heads, s.tokens(), s.max_pages};
  index::SelectArgs sel = select_args(scores, dims, topk, init_blocks, local_blocks, out);
  sel.positions = nullptr;
  sel.seq_lens = seq_lens.data_ptr<int32_t>();
  sel.q_len = static_cast<int>(s.q_len);
  msa::cuda::check_launch(index::launch_select(sel, stream), op);
}

void topk_select_cuda(const at::Tensor& scores, const at::Tensor& positions, int64_t topk, int64_t init_blocks,
                      int64_t local_blocks, const at::Tensor& out) {
  const char* op = "msa::topk_select";
  index::check_topk_select_args(scores, positions, topk, init_blocks, local_blocks, out);
  TORCH_CHECK(scores.is_cuda(), op, ": tensors must be CUDA tensors here, got ", scores.device());
  if (scores.size(0) * scores.size(1) == 0) return;
  const c10::cuda::CUDAGuard guard(scores.device());
  index::SelectArgs sel = select_args(scores, scores.sizes(), topk, init_blocks, local_blocks, out);
  sel.positions = positions.data_ptr<int32_t>();
  sel.seq_lens = nullptr;
  sel.q_len = 1;
  msa::cuda::check_launch(index::launch_select(sel, c10::cuda::getCurrentCUDAStream()), op);
}

TORCH_LIBRARY_IMPL(msa, CUDA, m) {
  m.impl("index_decode", &index_decode_cuda);
  m.impl("topk_select", &topk_select_cuda);
}

}  // namespace msa
