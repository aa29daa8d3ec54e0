// Decode indexer on the CPU: page scores (max over visible keys of q . k in fp32) and the TopK row selection.
// Plain scalar C++. The contract (positions, visibility, -inf, row layout) is in msa_ops/reference/indexer.py.
//
// Two phases. Scores: one work item per (request, logical page) that some query token of the request can see;
// the page's 128 keys are decoded to fp32 once and dotted with all Q x H queries of the request (decoding once
// per page instead of once per (head, token) is what keeps long contexts fast). Selection: one work item per
// (head, token) row. Every item is computed by one thread in a fixed order, so results are bitwise repeatable.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "common/index_host.h"
#include "cpu/codec_tables.h"
#include "msa/nvfp4_codec.h"
#include "ops.h"

namespace msa {
namespace {

using index::DecodeShape;
using index::KeyFormat;
using index::kIndexDim;
using index::kPageSize;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// BF16 scores are scaled by 1/sqrt(128) (SPEC §5), applied to the fp32 dot product.
const float kBf16ScoreScale = static_cast<float>(1.0 / std::sqrt(128.0));

using cpu::e4m3_table;
using cpu::decode_e4m3_row;
using cpu::decode_nvfp4_row;

// Where the index keys of one physical page live. Strides are in elements of the key dtype (bytes for
// NVFP4 / E4M3); only the innermost row is contiguous.
struct KeyCache {
  KeyFormat format = KeyFormat::kE4M3;
  const uint8_t* bytes = nullptr;  // NVFP4 codes or E4M3 values
  const at::BFloat16* bf16 = nullptr;
  int64_t page_stride = 0, token_stride = 0;
  const uint8_t* scales = nullptr;  // NVFP4 only: E4M3 [P, 128, 8]
  int64_t scale_page_stride = 0, scale_token_stride = 0;
};

// Decodes the 128 keys of physical page `page` to fp32 rows `keys[token * 128 + d]`, exactly as the indexer
// multiplies them: NVFP4 via E4M3 (e4m3_rne_satfinite(e2m1 * scale), SPEC §2), E4M3 and BF16 widened.
void load_page_keys(const KeyCache& cache, int64_t page, float* keys) {
  for (int64_t token = 0; token < kPageSize; ++token) {
    float* row = keys + token * kIndexDim;
    switch (cache.format) {
      case KeyFormat::kNvfp4:
        decode_nvfp4_row(cache.bytes + page * cache.page_stride + token * cache.token_stride,
                         cache.scales + page * cache.scale_page_stride + token * cache.scale_token_stride,
                         kIndexDim, row);
        break;
      case KeyFormat::kE4M3:
        decode_e4m3_row(cache.bytes + page * cache.page_stride + token * cache.token_stride, kIndexDim, row);
        break;
      case KeyFormat::kBF16: {
        const at::BFloat16* src = cache.bf16 + page * cache.page_stride + token * cache.token_stride;
        for (int64_t d = 0; d < kIndexDim; ++d) row[d] = static_cast<float>(src[d]);
        break;
      }
    }
  }
}

float dot128(const float* a, const float* b) {
  float sum = 0.0f;  // fp32, in index order: deterministic (-ffp-contract=off keeps it unfused)
  for (int64_t d = 0; d < kIndexDim; ++d) sum += a[d] * b[d];
  return sum;
}

// max that propagates NaN (like torch.amax), so a NaN key shows up in the page score.
float nan_max(float m, float x) { return (x > m || std::isnan(x)) && !std::isnan(m) ? x : m; }

// The query tokens of one request: fp32 q rows [Q][H][128] and positions (pos < 0: padding).
struct RequestQueries {
  std::vector<float> q;
  std::vector<int64_t> pos;
};

// Page scores [H, B*Q, max_pages]: -inf everywhere, then every page some token can see. Reads seq_lens and
// page_table values (fine on the CPU) and checks them. `dot_products` false: the checks only (scores untouched).
void compute_scores(const DecodeShape& s, const at::Tensor& q_idx, const KeyCache& cache,
                    const at::Tensor& page_table, const at::Tensor& seq_lens, const at::Tensor& scores,
                    bool dot_products) {
  if (dot_products) scores.fill_(kNegInf);
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  const int32_t* table = page_table.data_ptr<int32_t>();
  const int64_t table_row_stride = page_table.stride(0);

  // Pages each request needs (its last token's local page + 1), checked against the page table width;
  // the work list is every (request, page < needed), flattened through a prefix sum.
  std::vector<int64_t> first_item(s.batch + 1, 0);
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t last_pos = int64_t(lens[b]) - 1;  // the last query token's position
    const int64_t needed = last_pos >= 0 ? last_pos / kPageSize + 1 : 0;
    TORCH_CHECK(needed <= s.max_pages, "msa::index_decode: request ", b, " has seq_lens ", lens[b], ", which needs ",
                needed, " pages, but page_table has max_pages = ", s.max_pages);
    first_item[b + 1] = first_item[b] + needed;
  }

  const float* e4m3 = e4m3_table().value;
  const bool q_bf16 = q_idx.scalar_type() == at::kBFloat16;
  const int64_t queries = s.q_len * s.heads;
  float* out = scores.data_ptr<float>();
  const int64_t out_head_stride = scores.stride(0), out_token_stride = scores.stride(1);

  at::parallel_for(0, first_item[s.batch], 1, [&](int64_t begin, int64_t end) {
    std::vector<float> keys(kPageSize * kIndexDim);
    std::vector<float> q(queries * kIndexDim);
    std::vector<float> page_max(queries);
    int64_t loaded_request = -1;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = std::upper_bound(first_item.begin(), first_item.end(), item) - first_item.begin() - 1;
      const int64_t page = item - first_item[b];
      if (b != loaded_request && dot_products) {  // widen this request's Q x H query rows once
        for (int64_t i = 0; i < s.q_len; ++i) {
          for (int64_t h = 0; h < s.heads; ++h) {
            float* dst = q.data() + (i * s.heads + h) * kIndexDim;
            if (q_bf16) {
              const at::BFloat16* src = q_idx.data_ptr<at::BFloat16>() + b * q_idx.stride(0) +
                                        i * q_idx.stride(1) + h * q_idx.stride(2);
              for (int64_t d = 0; d < kIndexDim; ++d) dst[d] = static_cast<float>(src[d]);
            } else {
              const uint8_t* src = reinterpret_cast<const uint8_t*>(q_idx.data_ptr()) + b * q_idx.stride(0) +
                                   i * q_idx.stride(1) + h * q_idx.stride(2);
              for (int64_t d = 0; d < kIndexDim; ++d) dst[d] = e4m3[src[d]];
            }
          }
        }
        loaded_request = b;
      }
      const int32_t physical = table[b * table_row_stride + page];
      TORCH_CHECK(physical >= 0 && physical < s.physical_pages, "msa::index_decode: page_table[", b, ", ", page,
                  "] = ", physical, " is not a page of index_k (", s.physical_pages, " pages)");
      if (!dot_products) continue;
      load_page_keys(cache, physical, keys.data());

      // Keys visible to token i on this page: all 128 before its local page, up to pos % 128 on it.
      int64_t visible[index::kMaxQueryLen];
      int64_t most_visible = 0;
      for (int64_t i = 0; i < s.q_len; ++i) {
        const int64_t pos = int64_t(lens[b]) - s.q_len + i;
        const int64_t local = pos >= 0 ? pos / kPageSize : -1;
        visible[i] = pos < 0 || page > local ? 0 : (page < local ? kPageSize : pos % kPageSize + 1);
        most_visible = std::max(most_visible, visible[i]);
      }
      std::fill(page_max.begin(), page_max.end(), kNegInf);
      for (int64_t token = 0; token < most_visible; ++token) {
        const float* key = keys.data() + token * kIndexDim;
        for (int64_t i = 0; i < s.q_len; ++i) {
          if (token >= visible[i]) continue;
          for (int64_t h = 0; h < s.heads; ++h) {
            float& m = page_max[i * s.heads + h];
            m = nan_max(m, dot128(q.data() + (i * s.heads + h) * kIndexDim, key));
          }
        }
      }
      for (int64_t i = 0; i < s.q_len; ++i) {
        if (visible[i] == 0) continue;  // stays -inf
        const int64_t t = b * s.q_len + i;
        for (int64_t h = 0; h < s.heads; ++h) {
          const float m = page_max[i * s.heads + h];
          out[h * out_head_stride + t * out_token_stride + page] = q_bf16 ? m * kBf16ScoreScale : m;
        }
      }
    }
  });
}

// The ranking order of history pages: higher score first, ties to the lower page id; NaN counts as -inf.
float rank_key(float score) { return std::isnan(score) ? kNegInf : score; }

// Writes one TopK row (layout in msa_ops/reference/indexer.py): `out[k * out_stride]`, k < topk.
// `candidates` is scratch space with room for max_pages entries.
void select_row(const float* page_scores, int64_t pos, int64_t topk, int64_t init_blocks, int64_t local_blocks,
                std::vector<int32_t>& candidates, int32_t* out, int64_t out_stride) {
  int64_t k = 0;
  if (pos >= 0) {
    const int64_t local = pos / kPageSize;
    if (local + 1 <= topk) {
      for (int64_t p = 0; p <= local; ++p) out[k++ * out_stride] = int32_t(p);
    } else {
      for (int64_t p = 0; p < init_blocks; ++p) out[k++ * out_stride] = int32_t(p);
      // History candidates: pages between the init pages and the local window.
      const int64_t first_window_page = local - local_blocks + 1;
      candidates.clear();
      for (int64_t p = init_blocks; p < first_window_page; ++p) candidates.push_back(int32_t(p));
      const int64_t history = topk - init_blocks - local_blocks;  // < candidates.size(), as local + 1 > topk
      std::partial_sort(candidates.begin(), candidates.begin() + history, candidates.end(),
                        [page_scores](int32_t a, int32_t b) {
                          const float sa = rank_key(page_scores[a]), sb = rank_key(page_scores[b]);
                          return sa > sb || (sa == sb && a < b);
                        });
      for (int64_t j = 0; j < history; ++j) out[k++ * out_stride] = candidates[j];
      for (int64_t p = first_window_page; p <= local; ++p) out[k++ * out_stride] = int32_t(p);
    }
  }
  for (; k < topk; ++k) out[k * out_stride] = -1;
}

// TopK rows for every (head, token) from scores [H, T, max_pages] and positions pos(t).
template <typename PositionOf>
void select_rows(const at::Tensor& scores, PositionOf position_of, int64_t topk, int64_t init_blocks,
                 int64_t local_blocks, const at::Tensor& out, const char* op) {
  const int64_t heads = scores.size(0), tokens = scores.size(1), max_pages = scores.size(2);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t pos = position_of(t);
    TORCH_CHECK(pos < max_pages * kPageSize, op, ": query token ", t, " at position ", pos, " is on page ",
                pos / kPageSize, ", past the ", max_pages, " pages of the scores");
  }
  const float* score_base = scores.data_ptr<float>();
  int32_t* out_base = out.data_ptr<int32_t>();
  at::parallel_for(0, heads * tokens, 16, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> candidates;
    candidates.reserve(max_pages);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t h = row / tokens, t = row % tokens;
      select_row(score_base + h * scores.stride(0) + t * scores.stride(1), position_of(t), topk, init_blocks,
                 local_blocks, candidates, out_base + h * out.stride(0) + t * out.stride(1), out.stride(2));
    }
  });
}

}  // namespace

void index_decode_cpu(const at::Tensor& q_idx, const at::Tensor& index_k,
                      const std::optional<at::Tensor>& index_k_scales, const at::Tensor& page_table,
                      const at::Tensor& seq_lens, int64_t topk, int64_t init_blocks, int64_t local_blocks,
                      const at::Tensor& out, const std::optional<at::Tensor>& scores_out,
                      const std::optional<at::Tensor>& workspace) {
  const DecodeShape s = index::check_index_decode_args(q_idx, index_k, index_k_scales, page_table, seq_lens, topk,
                                                       init_blocks, local_blocks, out, scores_out, workspace);
  TORCH_CHECK(q_idx.device().is_cpu(), "msa::index_decode: tensors must be on the CPU here, got ", q_idx.device());
  if (s.tokens() == 0) return;

  KeyCache cache;
  cache.format = s.keys;
  cache.page_stride = index_k.stride(0);
  cache.token_stride = index_k.stride(1);
  if (s.keys == KeyFormat::kBF16) {
    cache.bf16 = index_k.data_ptr<at::BFloat16>();
  } else {
    cache.bytes = reinterpret_cast<const uint8_t*>(index_k.data_ptr());
  }
  if (s.keys == KeyFormat::kNvfp4) {
    cache.scales = reinterpret_cast<const uint8_t*>(index_k_scales->data_ptr());
    cache.scale_page_stride = index_k_scales->stride(0);
    cache.scale_token_stride = index_k_scales->stride(1);
  }

  // The scores go to scores_out when given, else to the workspace or a scratch buffer. With nothing to score the
  // inputs are still checked.
  const at::Tensor scores = index::scores_buffer(s, q_idx, scores_out, workspace);
  compute_scores(s, q_idx, cache, page_table, seq_lens, scores, !index::nothing_to_score(s, topk, scores_out));

  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  const int64_t q_len = s.q_len;
  select_rows(
      scores, [lens, q_len](int64_t t) { return int64_t(lens[t / q_len]) - q_len + t % q_len; }, topk, init_blocks,
      local_blocks, out, "msa::index_decode");
}

void topk_select_cpu(const at::Tensor& scores, const at::Tensor& positions, int64_t topk, int64_t init_blocks,
                     int64_t local_blocks, const at::Tensor& out) {
  index::check_topk_select_args(scores, positions, topk, init_blocks, local_blocks, out);
  TORCH_CHECK(scores.device().is_cpu(), "msa::topk_select: tensors must be on the CPU here, got ", scores.device());
  if (out.numel() == 0) return;
  const int32_t* pos = positions.data_ptr<int32_t>();
  select_rows(
      scores, [pos](int64_t t) { return int64_t(pos[t]); }, topk, init_blocks, local_blocks, out, "msa::topk_select");
}

TORCH_LIBRARY_IMPL(msa, CPU, m) {
  m.impl("index_decode", &index_decode_cpu);
  m.impl("topk_select", &topk_select_cpu);
}

}  // namespace msa
