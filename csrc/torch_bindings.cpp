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
}
