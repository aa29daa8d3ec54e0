// NVFP4 quantize / dequantize on the CPU: plain scalar C++, one 16-element group at a time.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "common/nvfp4_host.h"
#include "msa/nvfp4_codec.h"
#include "ops.h"

namespace msa {
namespace {

using namespace msa::nvfp4;

template <typename T>
float to_float(T v) {
  return static_cast<float>(v);
}

// One group: 16 inputs -> 8 packed bytes + 1 scale byte (SPEC §2).
template <typename T>
void quantize_group(const T* x, float global_scale, uint8_t* packed, uint8_t* scale_out) {
  float vals[kGroup];
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < kGroup; ++i) {
    vals[i] = to_float(x[i]);
    finite &= std::isfinite(vals[i]);
    amax = std::max(amax, std::fabs(vals[i]));
  }
  if (!finite) {  // documented: a group holding NaN or Inf gets a NaN scale and zero codes
    *scale_out = kE4M3NaN;
    for (int i = 0; i < kGroup / 2; ++i) packed[i] = 0;
    return;
  }
  const uint8_t s_bits = e4m3_rne_satfinite(global_scale * amax / 6.0f);
  *scale_out = s_bits;
  const float s = e4m3_to_float(s_bits);
  for (int i = 0; i < kGroup; i += 2) {
    uint32_t lo = 0, hi = 0;
    if (s != 0.0f) {
      const float t0 = vals[i] * global_scale, t1 = vals[i + 1] * global_scale;
      lo = e2m1_code_rne_satfinite(t0 / s, t0);
      hi = e2m1_code_rne_satfinite(t1 / s, t1);
    }
    packed[i / 2] = uint8_t(lo | (hi << 4));
  }
}

template <typename T>
void quantize_rows(const RowView& in, int64_t width, float global_scale, uint8_t* packed, uint8_t* scales) {
  const T* base = in.tensor.data_ptr<T>();
  const int64_t groups_per_row = width / kGroup;
  at::parallel_for(0, in.rows * groups_per_row, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const int64_t row = g / groups_per_row, col = g % groups_per_row;
      quantize_group(base + row * in.row_stride + col * kGroup, global_scale, packed + g * (kGroup / 2),
                     scales + g);
    }
  });
}

template <typename Out>
void dequantize_rows(const RowView& packed, const RowView& scales, int64_t width, float global_scale, Out* out) {
  const uint8_t* p = packed.tensor.data_ptr<uint8_t>();
  const uint8_t* s = reinterpret_cast<const uint8_t*>(scales.tensor.data_ptr());
  const int64_t groups_per_row = width / kGroup;
  at::parallel_for(0, packed.rows * groups_per_row, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const int64_t row = g / groups_per_row, col = g % groups_per_row;
      const uint8_t* group = p + row * packed.row_stride + col * (kGroup / 2);
      const float scale = e4m3_to_float(s[row * scales.row_stride + col]);
      Out* dst = out + g * kGroup;
      for (int i = 0; i < kGroup; ++i) {
        const uint32_t code = (group[i / 2] >> ((i & 1) * 4)) & 0xF;
        const float v = e2m1_value(code) * scale;  // exact in fp32
        if constexpr (std::is_same_v<Out, uint8_t>) {
          dst[i] = e4m3_rne_satfinite(v);  // the MSA Q8KV4 dequant: global scale not applied
        } else {
          dst[i] = static_cast<Out>(global_scale == 1.0f ? v : v / global_scale);
        }
      }
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> nvfp4_quantize_cpu(const at::Tensor& x, double global_scale) {
  check_quantize_args(x, global_scale);
  TORCH_CHECK(x.device().is_cpu(), "msa::nvfp4_quantize: x must be a CPU tensor here, got ", x.device());
  const int64_t width = x.size(-1);
  auto packed = at::empty(with_last_dim(x.sizes(), width / 2), x.options().dtype(at::kByte));
  auto scales = at::empty(with_last_dim(x.sizes(), width / kGroup), x.options().dtype(at::kFloat8_e4m3fn));
  if (x.numel() == 0) return {packed, scales};
  const RowView in = as_rows(x, width);
  auto* packed_ptr = packed.data_ptr<uint8_t>();
  auto* scales_ptr = reinterpret_cast<uint8_t*>(scales.data_ptr());
  const float g = static_cast<float>(global_scale);
  switch (x.scalar_type()) {
    case at::kFloat: quantize_rows<float>(in, width, g, packed_ptr, scales_ptr); break;
    case at::kBFloat16: quantize_rows<at::BFloat16>(in, width, g, packed_ptr, scales_ptr); break;
    case at::kHalf: quantize_rows<at::Half>(in, width, g, packed_ptr, scales_ptr); break;
    default: TORCH_CHECK(false, "unreachable");
  }
  return {packed, scales};
}

at::Tensor nvfp4_dequantize_cpu(const at::Tensor& packed, const at::Tensor& scales, at::ScalarType dtype,
                                double global_scale) {
  const int64_t width = check_dequantize_args(packed, scales, dtype, global_scale);
  TORCH_CHECK(packed.device().is_cpu(), "msa::nvfp4_dequantize: tensors must be on the CPU here, got ",
              packed.device());
  auto out = at::empty(with_last_dim(packed.sizes(), width), packed.options().dtype(dtype));
  if (out.numel() == 0) return out;
  const RowView p = as_rows(packed, width / 2);
  const RowView s = as_rows(scales, width / kGroup);
  const float g = static_cast<float>(global_scale);
  switch (dtype) {
    case at::kFloat8_e4m3fn:
      dequantize_rows<uint8_t>(p, s, width, g, reinterpret_cast<uint8_t*>(out.data_ptr()));
      break;
    case at::kBFloat16: dequantize_rows<at::BFloat16>(p, s, width, g, out.data_ptr<at::BFloat16>()); break;
    case at::kFloat: dequantize_rows<float>(p, s, width, g, out.data_ptr<float>()); break;
    default: TORCH_CHECK(false, "unreachable");
  }
  return out;
}

TORCH_LIBRARY_IMPL(msa, CPU, m) {
  m.impl("nvfp4_quantize", &nvfp4_quantize_cpu);
  m.impl("nvfp4_dequantize", &nvfp4_dequantize_cpu);
}

}  // namespace msa
