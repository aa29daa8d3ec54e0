// CUDA host code of sparse decode attention: checks (shared with the CPU op), alignment, one launch on the
// current stream. Never reads device data and allocates nothing: CUDA-graph safe.
#include <cmath>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/attention_host.h"
#include "cuda/attention/sparse_decode_launch.h"
#include "cuda/common/cuda_host.h"
#include "ops.h"

namespace msa {

void sparse_decode_cuda(const at::Tensor& q_in, const at::Tensor& k, const at::Tensor& v,
                        const std::optional<at::Tensor>& k_scales, const std::optional<at::Tensor>& v_scales,
                        const at::Tensor& topk, const at::Tensor& page_table, const at::Tensor& seq_lens,
                        double sm_scale, const at::Tensor& out, const std::optional<at::Tensor>& lse,
                        const std::optional<at::Tensor>& workspace) {
  const char* op = "msa::sparse_decode";
  const attention::DecodeShape s = attention::check_sparse_decode_args(q_in, k, v, k_scales, v_scales, topk,
                                                                       page_table, seq_lens, sm_scale, out, lse,
                                                                       workspace);
  TORCH_CHECK(q_in.is_cuda(), op, ": tensors must be CUDA tensors here, got ", q_in.device());
  TORCH_CHECK(s.kv_heads <= 65535, op, ": at most 65535 KV heads, got ", s.kv_heads);
  if (s.tokens == 0) return;
  const c10::cuda::CUDAGuard guard(q_in.device());
  // 16-byte vector loads of q rows and K/V rows: a misaligned q is copied (small); caches must be aligned.
  const at::Tensor q = msa::cuda::rows_aligned(q_in, 16) ? q_in : q_in.contiguous();
  TORCH_CHECK(msa::cuda::rows_aligned(k, 16) && msa::cuda::rows_aligned(v, 16), op,
              ": k and v rows must start on 16-byte boundaries (data pointers and strides); got strides ",
              k.strides(), " and ", v.strides());
  if (s.kv == attention::KvFormat::kNvfp4) {
    TORCH_CHECK(msa::cuda::rows_aligned(*k_scales, 8) && msa::cuda::rows_aligned(*v_scales, 8), op,
                ": k_scales and v_scales rows must start on 8-byte boundaries");
  }

  attention::SparseDecodeArgs a{};
  a.q = q.data_ptr();
  a.q_stride_t = q.stride(0);
  a.q_stride_h = q.stride(1);
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.k_stride_page = k.stride(0), a.k_stride_head = k.stride(1), a.k_stride_token = k.stride(2);
  a.v_stride_page = v.stride(0), a.v_stride_head = v.stride(1), a.v_stride_token = v.stride(2);
  if (s.kv == attention::KvFormat::kNvfp4) {
    a.k_scales = reinterpret_cast<const uint8_t*>(k_scales->data_ptr());
    a.v_scales = reinterpret_cast<const uint8_t*>(v_scales->data_ptr());
    a.ks_stride_page = k_scales->stride(0), a.ks_stride_head = k_scales->stride(1);
    a.ks_stride_token = k_scales->stride(2);
    a.vs_stride_page = v_scales->stride(0), a.vs_stride_head = v_scales->stride(1);
    a.vs_stride_token = v_scales->stride(2);
  }
  a.kv_kind = s.kv == attention::KvFormat::kNvfp4 ? attention::KvKind::kNvfp4
              : s.kv == attention::KvFormat::kE4M3 ? attention::KvKind::kE4M3 : attention::KvKind::kBF16;
  a.physical_pages = s.physical_pages;
  a.topk = topk.data_ptr<int32_t>();
  a.topk_stride_h = topk.stride(0), a.topk_stride_t = topk.stride(1), a.topk_stride_k = topk.stride(2);
  a.topk_width = static_cast<int>(s.topk_width);
  a.page_table = page_table.data_ptr<int32_t>();
  a.page_table_stride = page_table.stride(0);
  a.max_pages = static_cast<int>(s.max_pages);
  a.seq_lens = seq_lens.data_ptr<int32_t>();
  a.q_len = static_cast<int>(s.q_len);
  a.tokens = static_cast<int>(s.tokens);
  a.q_heads = static_cast<int>(s.q_heads);
  a.kv_heads = static_cast<int>(s.kv_heads);
  a.sm_scale_log2 = static_cast<float>(sm_scale * 1.4426950408889634);
  a.out = out.data_ptr();
  a.out_stride_t = out.stride(0), a.out_stride_h = out.stride(1);
  a.out_rows_aligned = msa::cuda::rows_aligned(out, 8);
  if (lse.has_value()) {
    a.lse = lse->data_ptr<float>();
    a.lse_stride_t = lse->stride(0), a.lse_stride_h = lse->stride(1);
  }
  msa::cuda::check_launch(attention::launch_sparse_decode(a, c10::cuda::getCurrentCUDAStream()), op);
}

TORCH_LIBRARY_IMPL(msa, CUDA, m) { m.impl("sparse_decode", &sparse_decode_cuda); }

}  // namespace msa
