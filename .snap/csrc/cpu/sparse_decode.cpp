// Sparse decode attention on the CPU: exact softmax attention of each query token over the keys of the pages
// in its TopK row. Plain scalar C++. The contract (positions, which keys a row sees, rows used as given, the
// no-key result) is in msa_ops/reference/sparse_attention.py.
//
// One work item per (query token, KV head): each page of the item's TopK row is decoded to fp32 once (K and V,
// visible keys only) and shared by the Hq / Hkv query heads of the group, which run an online softmax in fp32
// page by page. Every item is computed by one thread in a fixed order, so results are bitwise repeatable.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "common/attention_host.h"
#include "cpu/codec_tables.h"
#include "msa/nvfp4_codec.h"
#include "ops.h"

namespace msa {
namespace {

using attention::DecodeShape;
using attention::kHeadDim;
using attention::KvFormat;
using attention::kPageSize;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kDotLanes = 8;  // interleaved partial sums of a dot product (see dot128)
static_assert(kHeadDim % kDotLanes == 0 && kHeadDim % nvfp4::kGroup == 0);

// Where one K or V cache lives. Strides are in elements of the cache dtype (bytes for NVFP4 / E4M3); only the
// innermost token row is contiguous, so K and V may be the two halves of one [P, Hkv, 128, 256] buffer.
struct KvCache {
  KvFormat format = KvFormat::kE4M3;
  const uint8_t* bytes = nullptr;  // NVFP4 codes or E4M3 values
  const at::BFloat16* bf16 = nullptr;
  int64_t page_stride = 0, head_stride = 0, token_stride = 0;
  const uint8_t* scales = nullptr;  // NVFP4 only: E4M3 [P, Hkv, 128, 8]
  int64_t scale_page_stride = 0, scale_head_stride = 0, scale_token_stride = 0;
};

KvCache kv_cache_of(const at::Tensor& cache, const std::optional<at::Tensor>& scales, KvFormat format) {
  KvCache c;
  c.format = format;
  c.page_stride = cache.stride(0);
  c.head_stride = cache.stride(1);
  c.token_stride = cache.stride(2);
  if (format == KvFormat::kBF16) {
    c.bf16 = cache.data_ptr<at::BFloat16>();
  } else {
    c.bytes = reinterpret_cast<const uint8_t*>(cache.data_ptr());
  }
  if (format == KvFormat::kNvfp4) {
    c.scales = reinterpret_cast<const uint8_t*>(scales->data_ptr());
    c.scale_page_stride = scales->stride(0);
    c.scale_head_stride = scales->stride(1);
    c.scale_token_stride = scales->stride(2);
  }
  return c;
}

// Decodes the first `rows` tokens of (physical page, KV head) to fp32 rows `dst[token * 128 + d]`, exactly
// the values the attention multiplies: NVFP4 via E4M3 (e4m3_rne_satfinite(e2m1 * scale), SPEC §2), E4M3 and
// BF16 widened.
void load_page_rows(const KvCache& cache, int64_t page, int64_t head, int64_t rows, float* dst) {
  const int64_t base = page * cache.page_stride + head * cache.head_stride;
  for (int64_t token = 0; token < rows; ++token) {
    float* row = dst + token * kHeadDim;
    switch (cache.format) {
      case KvFormat::kNvfp4:
        cpu::decode_nvfp4_row(cache.bytes + base + token * cache.token_stride,
                              cache.scales + page * cache.scale_page_stride + head * cache.scale_head_stride +
                                  token * cache.scale_token_stride,
                              kHeadDim, row);
        break;
      case KvFormat::kE4M3:
        cpu::decode_e4m3_row(cache.bytes + base + token * cache.token_stride, kHeadDim, row);
        break;
      case KvFormat::kBF16: {
        const at::BFloat16* src = cache.bf16 + base + token * cache.token_stride;
        for (int64_t d = 0; d < kHeadDim; ++d) row[d] = static_cast<float>(src[d]);
        break;
      }
    }
  }
}

// a . b in fp32 with kDotLanes interleaved partial sums added in a fixed tree: deterministic, and it lets the
// compiler vectorize without reassociating anything (-ffp-contract=off keeps every product rounded).
float dot128(const float* a, const float* b) {
  float lanes[kDotLanes] = {};
  for (int64_t d = 0; d < kHeadDim; d += kDotLanes) {
    for (int64_t l = 0; l < kDotLanes; ++l) lanes[l] += a[d + l] * b[d + l];
  }
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

// Online softmax state of one query head: running max and sum of exp(score - max), and the running
// sum of exp(score - max) * v.
struct SoftmaxState {
  float max = kNegInf;
  float sum = 0.0f;
  int64_t keys = 0;  // keys seen; 0 means the no-key result
  float acc[kHeadDim] = {};
};

// Folds one page's visible keys (rows x 128, K and V decoded) into a query head's state.
void attend_page(const float* q, const float* keys, const float* values, int64_t rows, float sm_scale,
                 float* scores, SoftmaxState& state) {
  float page_max = kNegInf;
  for (int64_t j = 0; j < rows; ++j) {
    scores[j] = sm_scale * dot128(q, keys + j * kHeadDim);
    if (scores[j] > page_max) page_max = scores[j];
  }
  const float new_max = page_max > state.max ? page_max : state.max;
  const float rescale = std::exp(state.max - new_max);  // 0 on the first page (max = -inf)
  state.sum *= rescale;
  for (int64_t d = 0; d < kHeadDim; ++d) state.acc[d] *= rescale;
  for (int64_t j = 0; j < rows; ++j) {
    const float p = std::exp(scores[j] - new_max);
    state.sum += p;
    const float* v = values + j * kHeadDim;
    for (int64_t d = 0; d < kHeadDim; ++d) state.acc[d] += p * v[d];
  }
  state.max = new_max;
  state.keys += rows;
}

}  // namespace

void sparse_decode_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const std::optional<at::Tensor>& k_scales, const std::optional<at::Tensor>& v_scales,
                       const at::Tensor& topk, const at::Tensor& page_table, const at::Tensor& seq_lens,
                       double sm_scale, const at::Tensor& out, const std::optional<at::Tensor>& lse,
                       const std::optional<at::Tensor>& workspace) {
  const char* op = "msa::sparse_decode";
  const DecodeShape s = attention::check_sparse_decode_args(q, k, v, k_scales, v_scales, topk, page_table, seq_lens,
                                                            sm_scale, out, lse, workspace);
  TORCH_CHECK(q.device().is_cpu(), op, ": tensors must be on the CPU here, got ", q.device());
  // `workspace` is scratch for the CUDA split-KV kernel; the CPU op needs none.
  if (s.tokens == 0) return;

  const KvCache k_cache = kv_cache_of(k, k_scales, s.kv);
  const KvCache v_cache = kv_cache_of(v, v_scales, s.kv);
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  const int32_t* table = page_table.data_ptr<int32_t>();
  const int32_t* rows_base = topk.data_ptr<int32_t>();
  const float* e4m3 = cpu::e4m3_table().value;
  const float scale = static_cast<float>(sm_scale);
  const int64_t group = s.group();
  at::BFloat16* out_base = out.data_ptr<at::BFloat16>();
  float* lse_base = lse.has_value() ? lse->data_ptr<float>() : nullptr;

  at::parallel_for(0, s.tokens * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> keys(kPageSize * kHeadDim), values(kPageSize * kHeadDim), scores(kPageSize);
    std::vector<float> queries(group * kHeadDim);
    std::vector<SoftmaxState> states(group);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / s.kv_heads, hk = item % s.kv_heads;
      const int64_t b = t / s.q_len;
      const int64_t pos = int64_t(lens[b]) - s.q_len + t % s.q_len;

      // The group's query rows, widened to fp32.
      for (int64_t g = 0; g < group; ++g) {
        const int64_t hq = hk * group + g;
        float* dst = queries.data() + g * kHeadDim;
        if (s.q_bf16) {
          const at::BFloat16* src = q.data_ptr<at::BFloat16>() + t * q.stride(0) + hq * q.stride(1);
          for (int64_t d = 0; d < kHeadDim; ++d) dst[d] = static_cast<float>(src[d]);
        } else {
          const uint8_t* src = reinterpret_cast<const uint8_t*>(q.data_ptr()) + t * q.stride(0) + hq * q.stride(1);
          for (int64_t d = 0; d < kHeadDim; ++d) dst[d] = e4m3[src[d]];
        }
        states[g] = SoftmaxState();
      }

      const int32_t* row = rows_base + hk * topk.stride(0) + t * topk.stride(1);
      for (int64_t slot = 0; slot < s.topk_width; ++slot) {
        const int64_t page = row[slot * topk.stride(2)];
        if (page < 0) continue;  // -1 padding
        TORCH_CHECK(page < s.max_pages, op, ": topk[", hk, ", ", t, ", ", slot, "] = ", page,
                    " is not a logical page of page_table (max_pages = ", s.max_pages, ")");
        const int64_t first_key = page * kPageSize;
        if (first_key > pos) continue;  // past the token's local page (or a padding token): no visible key
        const int64_t rows = std::min<int64_t>(kPageSize, pos - first_key + 1);  // causal on the local page
        const int64_t physical = table[b * page_table.stride(0) + page];
        TORCH_CHECK(physical >= 0 && physical < s.physical_pages, op, ": page_table[", b, ", ", page, "] = ",
                    physical, " (from topk[", hk, ", ", t, ", ", slot, "]) is not a page of k/v (",
                    s.physical_pages, " pages)");
        load_page_rows(k_cache, physical, hk, rows, keys.data());
        load_page_rows(v_cache, physical, hk, rows, values.data());
        for (int64_t g = 0; g < group; ++g) {
          attend_page(queries.data() + g * kHeadDim, keys.data(), values.data(), rows, scale, scores.data(),
                      states[g]);
        }
      }

      for (int64_t g = 0; g < group; ++g) {
        const int64_t hq = hk * group + g;
        const SoftmaxState& st = states[g];
        at::BFloat16* dst = out_base + t * out.stride(0) + hq * out.stride(1);
        if (st.keys == 0) {  // no key: zeros and lse = -inf (an LSE-weighted combine then gives it weight 0)
          for (int64_t d = 0; d < kHeadDim; ++d) dst[d] = at::BFloat16(0.0f);
        } else {
          for (int64_t d = 0; d < kHeadDim; ++d) dst[d] = at::BFloat16(st.acc[d] / st.sum);  // rounded once
        }
        if (lse_base != nullptr) {
          lse_base[t * lse->stride(0) + hq * lse->stride(1)] = st.keys == 0 ? kNegInf : st.max + std::log(st.sum);
        }
      }
    }
  });
}

TORCH_LIBRARY_IMPL(msa, CPU, m) { m.impl("sparse_decode", &sparse_decode_cpu); }

}  // namespace msa
