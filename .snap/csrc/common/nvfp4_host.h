// Host-side argument checks and row views shared by the CPU and CUDA NVFP4 ops.
#pragma once

#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace msa {

// A tensor seen as [rows, width] with a unit inner stride and one row stride.
struct RowView {
  at::Tensor tensor;  // keeps a copy alive when one had to be made
  int64_t rows = 0;
  int64_t row_stride = 0;  // in elements
};

// Collapses the leading dims of `x` (last dim = width) into rows without copying when the strides allow
// it (e.g. the K half of a [P, H, 128, 256] K-then-V buffer); otherwise makes one contiguous copy.
inline RowView as_rows(const at::Tensor& x, int64_t width) {
  at::Tensor t = x.reshape({-1, width});
  if (width > 1 && t.stride(1) != 1) t = t.contiguous();
  RowView v;
  v.rows = t.size(0);
  v.row_stride = t.size(0) > 1 ? t.stride(0) : width;
  v.tensor = t;
  return v;
}

inline void check_global_scale(double global_scale, const char* op) {
  TORCH_CHECK(std::isfinite(global_scale) && global_scale > 0.0, op,
              ": global_scale must be a finite positive number, got ", global_scale);
}

inline void check_quantize_args(const at::Tensor& x, double global_scale) {
  const char* op = "msa::nvfp4_quantize";
  TORCH_CHECK(x.dim() >= 1, op, ": x must have at least one dimension");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf || x.scalar_type() == at::kFloat,
              op, ": x must be bfloat16, float16 or float32, got ", x.scalar_type());
  TORCH_CHECK(x.size(-1) > 0 && x.size(-1) % 16 == 0, op,
              ": the last dimension of x must be a positive multiple of 16, got ", x.size(-1));
  check_global_scale(global_scale, op);
}

// Returns D, the number of unpacked elements per row.
inline int64_t check_dequantize_args(const at::Tensor& packed, const at::Tensor& scales, at::ScalarType dtype,
                                     double global_scale) {
  const char* op = "msa::nvfp4_dequantize";
  TORCH_CHECK(packed.scalar_type() == at::kByte, op, ": packed must be uint8, got ", packed.scalar_type());
  TORCH_CHECK(scales.scalar_type() == at::kFloat8_e4m3fn, op, ": scales must be float8_e4m3fn, got ",
              scales.scalar_type());
  TORCH_CHECK(dtype == at::kFloat8_e4m3fn || dtype == at::kBFloat16 || dtype == at::kFloat, op,
              ": dtype must be float8_e4m3fn, bfloat16 or float32, got ", dtype);
  TORCH_CHECK(packed.dim() >= 1 && packed.dim() == scales.dim(), op,
              ": packed and scales must have the same number of dimensions (>= 1), got ", packed.sizes(), " and ",
              scales.sizes());
  TORCH_CHECK(packed.device() == scales.device(), op, ": packed and scales must be on one device, got ",
              packed.device(), " and ", scales.device());
  for (int64_t d = 0; d + 1 < packed.dim(); ++d) {
    TORCH_CHECK(packed.size(d) == scales.size(d), op, ": leading shapes of packed ", packed.sizes(),
                " and scales ", scales.sizes(), " differ");
  }
  const int64_t d_packed = packed.size(-1);
  TORCH_CHECK(d_packed > 0 && d_packed % 8 == 0, op,
              ": the last dimension of packed must be a positive multiple of 8 (16 elements), got ", d_packed);
  TORCH_CHECK(scales.size(-1) * 8 == d_packed, op, ": scales must have packed.size(-1) / 8 = ", d_packed / 8,
              " entries in the last dimension, got ", scales.size(-1));
  check_global_scale(global_scale, op);
  return d_packed * 2;
}

inline std::vector<int64_t> with_last_dim(at::IntArrayRef sizes, int64_t last) {
  std::vector<int64_t> out(sizes.begin(), sizes.end());
  out.back() = last;
  return out;
}

}  // namespace msa
