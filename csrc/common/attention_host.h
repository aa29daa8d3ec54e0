// Host-side argument checks shared by the CPU and CUDA sparse attention ops (sparse_decode).
// Shapes, dtypes, devices and strides only: nothing here reads tensor data, so the CUDA op stays free of
// host-device synchronisation. The contract is documented in msa_ops/ops.py and
// msa_ops/reference/sparse_attention.py.
#pragma once

#include <cmath>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include "common/index_host.h"  // check_same_device, check_inner_contiguous, check_writable

namespace msa::attention {

using index::check_inner_contiguous;
using index::check_same_device;
using index::check_writable;

constexpr int64_t kPageSize = 128;   // tokens per page (= MSA block)
constexpr int64_t kHeadDim = 128;    // q / k / v head dim
constexpr int64_t kScaleGroup = 16;  // NVFP4 elements per E4M3 scale
constexpr int64_t kMaxPages = 8192;  // logical pages per request: 1M tokens
constexpr int64_t kMaxQueryLen = 16;
constexpr int64_t kMaxTopK = 64;     // TopK row width: at most 64 * 128 = 8192 keys per row

enum class KvFormat { kNvfp4, kE4M3, kBF16 };

// What sparse_decode learned from its arguments' shapes.
struct DecodeShape {
  int64_t batch = 0;
  int64_t q_len = 0;
  int64_t tokens = 0;  // batch * q_len
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t physical_pages = 0;
  int64_t max_pages = 0;
  int64_t topk_width = 0;
  KvFormat kv = KvFormat::kE4M3;
  bool q_bf16 = false;
  int64_t group() const { return q_heads / kv_heads; }  // query heads per KV head
};

inline const char* kv_format_name(KvFormat f) {
  return f == KvFormat::kNvfp4 ? "NVFP4 (uint8)" : (f == KvFormat::kBF16 ? "bfloat16" : "float8_e4m3fn");
}

// One K or V cache: NVFP4 uint8 [P, Hkv, 128, 64] (+ E4M3 scales [P, Hkv, 128, 8]), or E4M3 / BF16
// [P, Hkv, 128, 128]. Any strides with a contiguous token row (e.g. half of a [P, Hkv, 128, 256] K-then-V
// buffer).
inline KvFormat check_kv_cache(const at::Tensor& cache, const char* name,
                               const std::optional<at::Tensor>& scales, const char* scales_name,
                               const at::Tensor& q, const char* op) {
  const auto dtype = cache.scalar_type();
  TORCH_CHECK(dtype == at::kByte || dtype == at::kFloat8_e4m3fn || dtype == at::kBFloat16, op, ": ", name,
              " must be uint8 (NVFP4), float8_e4m3fn or bfloat16, got ", dtype);
  const KvFormat format =
      dtype == at::kByte ? KvFormat::kNvfp4 : (dtype == at::kBFloat16 ? KvFormat::kBF16 : KvFormat::kE4M3);
  const int64_t width = format == KvFormat::kNvfp4 ? kHeadDim / 2 : kHeadDim;
  TORCH_CHECK(cache.dim() == 4 && cache.size(2) == kPageSize && cache.size(3) == width, op, ": ", name,
              " must have shape [P, Hkv, ", kPageSize, ", ", width, "] for ",
              format == KvFormat::kNvfp4 ? "NVFP4" : "E4M3/BF16", " values, got ", cache.sizes());
  check_inner_contiguous(cache, name, op);
  check_same_device(cache, name, q, "q", op);
  if (format == KvFormat::kNvfp4) {
    TORCH_CHECK(scales.has_value(), op, ": NVFP4 (uint8) ", name, " needs ", scales_name);
    const at::Tensor& sc = *scales;
    TORCH_CHECK(sc.scalar_type() == at::kFloat8_e4m3fn, op, ": ", scales_name, " must be float8_e4m3fn, got ",
                sc.scalar_type());
    TORCH_CHECK(sc.dim() == 4 && sc.size(0) == cache.size(0) && sc.size(1) == cache.size(1) &&
                    sc.size(2) == kPageSize && sc.size(3) == kHeadDim / kScaleGroup,
                op, ": ", scales_name, " must have shape [", cache.size(0), ", ", cache.size(1), ", ", kPageSize,
                ", ", kHeadDim / kScaleGroup, "] to match ", name, ", got ", sc.sizes());
    check_inner_contiguous(sc, scales_name, op);
    check_same_device(sc, scales_name, q, "q", op);
  } else {
    TORCH_CHECK(!scales.has_value(), op, ": ", scales_name, " is only used with NVFP4 (uint8) ", name,
                "; E4M3/BF16 values are unscaled");
  }
  return format;
}

inline DecodeShape check_sparse_decode_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const std::optional<at::Tensor>& k_scales,
                                            const std::optional<at::Tensor>& v_scales, const at::Tensor& topk,
                                            const at::Tensor& page_table, const at::Tensor& seq_lens,
                                            double sm_scale, const at::Tensor& out,
                                            const std::optional<at::Tensor>& lse,
                                            const std::optional<at::Tensor>& workspace) {
  const char* op = "msa::sparse_decode";
  DecodeShape s;

  // q [B*Q, Hq, 128], E4M3 or BF16.
  TORCH_CHECK(q.scalar_type() == at::kFloat8_e4m3fn || q.scalar_type() == at::kBFloat16, op,
              ": q must be float8_e4m3fn or bfloat16, got ", q.scalar_type());
  TORCH_CHECK(q.dim() == 3 && q.size(2) == kHeadDim, op, ": q must have shape [B * Q, Hq, ", kHeadDim, "], got ",
              q.sizes());
  check_inner_contiguous(q, "q", op);
  s.tokens = q.size(0);
  s.q_heads = q.size(1);
  s.q_bf16 = q.scalar_type() == at::kBFloat16;

  // k, v: the same format and shape; scales for NVFP4 only.
  s.kv = check_kv_cache(k, "k", k_scales, "k_scales", q, op);
  const KvFormat v_format = check_kv_cache(v, "v", v_scales, "v_scales", q, op);
  TORCH_CHECK(v_format == s.kv, op, ": k and v must have the same format, got ", kv_format_name(s.kv), " k and ",
              kv_format_name(v_format), " v");
  TORCH_CHECK(v.sizes() == k.sizes(), op, ": k and v must have the same shape, got ", k.sizes(), " and ",
              v.sizes());
  s.physical_pages = k.size(0);
  s.kv_heads = k.size(1);
  TORCH_CHECK(s.kv_heads >= 1, op, ": k must have at least one KV head, got shape ", k.sizes());
  TORCH_CHECK(s.q_heads >= 1 && s.q_heads % s.kv_heads == 0, op, ": q's head count Hq = ", s.q_heads,
              " must be a positive multiple of the KV head count Hkv = ", s.kv_heads);
  TORCH_CHECK(s.q_bf16 == (s.kv == KvFormat::kBF16), op,
              ": q and k/v dtypes do not go together: float8_e4m3fn q needs float8_e4m3fn or NVFP4 (uint8) k/v, "
              "bfloat16 q needs bfloat16 k/v; got ",
              q.scalar_type(), " and ", kv_format_name(s.kv));

  // page_table int32 [B, max_pages], seq_lens int32 [B]; Q = T / B.
  const index::PagedShape paged = index::check_paged_inputs(page_table, seq_lens, -1, q, "q", op);
  s.batch = paged.batch;
  s.max_pages = paged.max_pages;
  if (s.batch == 0) {
    TORCH_CHECK(s.tokens == 0, op, ": q has ", s.tokens, " query tokens but there are no requests (B = 0)");
  } else {
    TORCH_CHECK(s.tokens % s.batch == 0, op, ": q's token count ", s.tokens,
                " must be B * Q for the B = ", s.batch, " requests of page_table / seq_lens");
    s.q_len = s.tokens / s.batch;
    TORCH_CHECK(s.q_len >= 1 && s.q_len <= kMaxQueryLen, op, ": the query length Q = T / B = ", s.tokens, " / ",
                s.batch, " must be in [1, ", kMaxQueryLen, "], got ", s.q_len);
  }

  // topk int32 [Hkv, T, W], any strides (e.g. a transposed [T, Hkv, W] buffer).
  TORCH_CHECK(topk.scalar_type() == at::kInt, op, ": topk must be int32, got ", topk.scalar_type());
  TORCH_CHECK(topk.dim() == 3 && topk.size(0) == s.kv_heads && topk.size(1) == s.tokens, op,
              ": topk must have shape [Hkv = ", s.kv_heads, ", T = ", s.tokens, ", W] (KV heads, tokens, pages), got ",
              topk.sizes());
  s.topk_width = topk.size(2);
  TORCH_CHECK(s.topk_width >= 1 && s.topk_width <= kMaxTopK, op, ": topk's row width W must be in [1, ", kMaxTopK,
              "], got ", s.topk_width);
  check_same_device(topk, "topk", q, "q", op);

  // > 0: the CUDA union pass takes a row's max over the raw scores q . k (bench/NOTES.md, sparse v2.9)
  TORCH_CHECK(std::isfinite(sm_scale) && sm_scale > 0.0, op, ": sm_scale must be finite and positive, got ", sm_scale);

  // out bf16 [T, Hq, 128] (unit inner stride); lse fp32 [T, Hq] (any strides); workspace uint8 1-D.
  TORCH_CHECK(out.scalar_type() == at::kBFloat16, op, ": out must be bfloat16, got ", out.scalar_type());
  TORCH_CHECK(out.dim() == 3 && out.size(0) == s.tokens && out.size(1) == s.q_heads && out.size(2) == kHeadDim, op,
              ": out must have shape [", s.tokens, ", ", s.q_heads, ", ", kHeadDim, "] (like q), got ", out.sizes());
  check_inner_contiguous(out, "out", op);
  check_same_device(out, "out", q, "q", op);
  check_writable(out, "out", op);
  if (lse.has_value()) {
    const at::Tensor& l = *lse;
    TORCH_CHECK(l.scalar_type() == at::kFloat, op, ": lse must be float32, got ", l.scalar_type());
    TORCH_CHECK(l.dim() == 2 && l.size(0) == s.tokens && l.size(1) == s.q_heads, op, ": lse must have shape [",
                s.tokens, ", ", s.q_heads, "] (tokens, query heads), got ", l.sizes());
    check_same_device(l, "lse", q, "q", op);
    check_writable(l, "lse", op);
    const at::MemOverlapStatus overlap = at::get_overlap_status(out, l);
    TORCH_CHECK(overlap != at::MemOverlapStatus::Full && overlap != at::MemOverlapStatus::Partial, op,
                ": out and lse must not share memory");
  }
  if (workspace.has_value()) {
    const at::Tensor& w = *workspace;
    TORCH_CHECK(w.scalar_type() == at::kByte && w.dim() == 1 && w.is_contiguous(), op,
                ": workspace must be a contiguous 1-D uint8 tensor, got ", w.scalar_type(), " of shape ", w.sizes(),
                " and strides ", w.strides());
    check_same_device(w, "workspace", q, "q", op);
  }
  return s;
}

}  // namespace msa::attention
