// The one place that declares the msa op schemas. Implementations register themselves next to their
// kernels (TORCH_LIBRARY_IMPL in cpu/*.cpp and cuda/*/*.cu); fake (meta) kernels live in msa_ops/_fake.py.
#include <string>

#include <torch/library.h>

namespace {

std::string cuda_archs() {
#ifdef MSA_CUDA_ARCHS_STR
  return MSA_CUDA_ARCHS_STR;
#else
  return "";
#endif
}

}  // namespace

TORCH_LIBRARY(msa, m) {
  // Build facts: the CUDA targets compiled in (";"-separated, empty for a CPU-only build).
  m.def("cuda_archs() -> str", &cuda_archs);

  // NVFP4 (shared/SPEC.md §2). global_scale is used as an fp32 value.
  m.def("nvfp4_quantize(Tensor x, float global_scale=1.0) -> (Tensor packed, Tensor scales)");
  m.def("nvfp4_dequantize(Tensor packed, Tensor scales, ScalarType dtype, float global_scale=1.0) -> Tensor");

  // Decode indexer (shared/SPEC.md §4-§5; contract in msa_ops/ops.py). Out-variants: the caller (the Python
  // wrapper) preallocates `out` (TopK, int32 [H, B*Q, topk]) and the optional `scores_out` (fp32
  // [H, B*Q, max_pages]); `workspace` (uint8, 1-D, >= 4 * H * B*Q * max_pages bytes) holds the scores when
  // scores_out is absent. With either, the CUDA op allocates nothing and can be captured in a CUDA graph.
  m.def("index_decode(Tensor q_idx, Tensor index_k, Tensor? index_k_scales, Tensor page_table, Tensor seq_lens, "
        "int topk, int init_blocks, int local_blocks, Tensor(a!) out, Tensor(b!)? scores_out, "
        "Tensor(c!)? workspace=None) -> ()");
  // TopK rows from precomputed page scores fp32 [H, T, max_pages] and the query positions int32 [T].
  m.def("topk_select(Tensor scores, Tensor positions, int topk, int init_blocks, int local_blocks, "
        "Tensor(a!) out) -> ()");

  // Sparse decode attention (shared/SPEC.md §4-§5; contract in msa_ops/ops.py). Out-variant: the caller
  // preallocates `out` (bf16 [B*Q, Hq, 128]) and the optional `lse` (fp32 [B*Q, Hq]). `workspace` (uint8,
  // 1-D) is scratch for the CUDA split-KV partial results, owned by the caller so that a captured CUDA graph
  // allocates nothing; the CPU op ignores it.
  m.def("sparse_decode(Tensor q, Tensor k, Tensor v, Tensor? k_scales, Tensor? v_scales, Tensor topk, "
        "Tensor page_table, Tensor seq_lens, float sm_scale, Tensor(a!) out, Tensor(b!)? lse, "
        "Tensor(c!)? workspace) -> ()");
}
