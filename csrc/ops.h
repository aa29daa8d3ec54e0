// Host declarations of every msa op implementation (CPU and CUDA). Schemas: torch_bindings.cpp.
#pragma once

#include <optional>
#include <tuple>

#include <ATen/core/Tensor.h>

namespace msa {

// ---- NVFP4 formats (shared/SPEC.md §2) ----
std::tuple<at::Tensor, at::Tensor> nvfp4_quantize_cpu(const at::Tensor& x, double global_scale);
at::Tensor nvfp4_dequantize_cpu(const at::Tensor& packed, const at::Tensor& scales, at::ScalarType dtype,
                                double global_scale);

// ---- decode indexer (shared/SPEC.md §4-§5): outputs preallocated by the caller ----
void index_decode_cpu(const at::Tensor& q_idx, const at::Tensor& index_k,
                      const std::optional<at::Tensor>& index_k_scales, const at::Tensor& page_table,
                      const at::Tensor& seq_lens, int64_t topk, int64_t init_blocks, int64_t local_blocks,
                      const at::Tensor& out, const std::optional<at::Tensor>& scores_out,
                      const std::optional<at::Tensor>& workspace);
void topk_select_cpu(const at::Tensor& scores, const at::Tensor& positions, int64_t topk, int64_t init_blocks,
                     int64_t local_blocks, const at::Tensor& out);

// ---- sparse decode attention (shared/SPEC.md §4-§5): outputs (and the CUDA workspace) from the caller ----
void sparse_decode_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const std::optional<at::Tensor>& k_scales, const std::optional<at::Tensor>& v_scales,
                       const at::Tensor& topk, const at::Tensor& page_table, const at::Tensor& seq_lens,
                       double sm_scale, const at::Tensor& out, const std::optional<at::Tensor>& lse,
                       const std::optional<at::Tensor>& workspace);

#ifdef MSA_WITH_CUDA
void sparse_decode_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::optional<at::Tensor>& k_scales, const std::optional<at::Tensor>& v_scales,
                        const at::Tensor& topk, const at::Tensor& page_table, const at::Tensor& seq_lens,
                        double sm_scale, const at::Tensor& out, const std::optional<at::Tensor>& lse,
                        const std::optional<at::Tensor>& workspace);
void index_decode_cuda(const at::Tensor& q_idx, const at::Tensor& index_k,
                       const std::optional<at::Tensor>& index_k_scales, const at::Tensor& page_table,
                       const at::Tensor& seq_lens, int64_t topk, int64_t init_blocks, int64_t local_blocks,
                       const at::Tensor& out, const std::optional<at::Tensor>& scores_out,
                       const std::optional<at::Tensor>& workspace);
void topk_select_cuda(const at::Tensor& scores, const at::Tensor& positions, int64_t topk, int64_t init_blocks,
                      int64_t local_blocks, const at::Tensor& out);
std::tuple<at::Tensor, at::Tensor> nvfp4_quantize_cuda(const at::Tensor& x, double global_scale);
at::Tensor nvfp4_dequantize_cuda(const at::Tensor& packed, const at::Tensor& scales, at::ScalarType dtype,
                                 double global_scale);
#endif

}  // namespace msa
