// Host-side argument checks shared by the CPU and CUDA indexer ops (index_decode, topk_select).
// Shapes, dtypes, devices and strides only: nothing here reads tensor data, so the CUDA op stays free of
// host-device synchronisation. The contract is documented in msa_ops/ops.py and msa_ops/reference/indexer.py.
#pragma once

#include <optional>

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

namespace msa::index {

constexpr int64_t kPageSize = 128;   // tokens per page (= MSA block)
constexpr int64_t kIndexDim = 128;   // index head dim
constexpr int64_t kMaxPages = 8192;  // logical pages per request: 1M tokens
constexpr int64_t kMaxQueryLen = 16;
constexpr int64_t kMaxTopK = 64;

enum class KeyFormat { kNvfp4, kE4M3, kBF16 };

// What index_decode learned from its arguments' shapes.
struct DecodeShape {
  int64_t batch = 0;
  int64_t q_len = 0;
  int64_t heads = 0;
  int64_t physical_pages = 0;
  int64_t max_pages = 0;
  KeyFormat keys = KeyFormat::kE4M3;
  int64_t tokens() const { return batch * q_len; }
  // Bytes of the fp32 scores [H, B*Q, max_pages] (the workspace when scores_out is absent).
  int64_t workspace_bytes() const { return 4 * heads * tokens() * max_pages; }
};

inline void check_topk_options(int64_t topk, int64_t init_blocks, int64_t local_blocks, const char* op) {
  TORCH_CHECK(topk >= 1 && topk <= kMaxTopK, op, ": topk must be in [1, ", kMaxTopK, "], got ", topk);
  TORCH_CHECK(init_blocks >= 0, op, ": init_blocks must be >= 0, got ", init_blocks);
  TORCH_CHECK(local_blocks >= 1, op, ": local_blocks must be >= 1 (the local page is always selected), got ",
              local_blocks);
  TORCH_CHECK(init_blocks + local_blocks <= topk, op, ": init_blocks + local_blocks must be <= topk, got ",
              init_blocks, " + ", local_blocks, " > ", topk);
}

inline void check_same_device(const at::Tensor& t, const char* name, const at::Tensor& ref, const char* ref_name,
                              const char* op) {
  TORCH_CHECK(t.device() == ref.device(), op, ": ", name, " must be on the device of ", ref_name, " (",
              ref.device(), "), got ", t.device());
}

inline void check_inner_contiguous(const at::Tensor& t, const char* name, const char* op) {
  TORCH_CHECK(t.size(-1) <= 1 || t.stride(-1) == 1, op, ": the last dimension of ", name,
              " must be contiguous (stride 1), got strides ", t.strides());
}

inline void check_writable(const at::Tensor& t, const char* name, const char* op) {
  TORCH_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, op, ": ", name,
              " has overlapping elements (e.g. an expanded tensor); outputs need one element per index");
}

// out: int32 [heads, tokens, topk], any strides (e.g. a transposed [tokens, heads, topk] buffer).
inline void check_topk_out(const at::Tensor& out, int64_t heads, int64_t tokens, int64_t topk,
                           const at::Tensor& ref, const char* ref_name, const char* op) {
  TORCH_CHECK(out.scalar_type() == at::kInt, op, ": out must be int32, got ", out.scalar_type());
  TORCH_CHECK(out.dim() == 3 && out.size(0) == heads && out.size(1) == tokens && out.size(2) == topk, op,
              ": out must have shape [", heads, ", ", tokens, ", ", topk, "] (heads, tokens, topk), got ",
              out.sizes());
  check_same_device(out, "out", ref, ref_name, op);
  check_writable(out, "out", op);
}

struct PagedShape {
  int64_t batch = 0;
  int64_t max_pages = 0;
};

// page_table int32 [B, max_pages] (unit inner stride), seq_lens int32 [B] (contiguous), on ref's device.
// expected_batch < 0: B is taken from page_table.
inline PagedShape check_paged_inputs(const at::Tensor& page_table, const at::Tensor& seq_lens,
                                     int64_t expected_batch, const at::Tensor& ref, const char* ref_name,
                                     const char* op) {
  PagedShape p;
  TORCH_CHECK(page_table.scalar_type() == at::kInt, op, ": page_table must be int32, got ",
              page_table.scalar_type());
  TORCH_CHECK(page_table.dim() == 2 && (expected_batch < 0 || page_table.size(0) == expected_batch), op,
              ": page_table must have shape [B", expected_batch < 0 ? "" : c10::str(" = ", expected_batch),
              ", max_pages], got ", page_table.sizes());
  p.batch = page_table.size(0);
  p.max_pages = page_table.size(1);
  TORCH_CHECK(p.max_pages >= 1 && p.max_pages <= kMaxPages, op, ": page_table's max_pages must be in [1, ",
              kMaxPages, "], got ", p.max_pages);
  check_inner_contiguous(page_table, "page_table", op);
  check_same_device(page_table, "page_table", ref, ref_name, op);
  TORCH_CHECK(seq_lens.scalar_type() == at::kInt, op, ": seq_lens must be int32, got ", seq_lens.scalar_type());
  TORCH_CHECK(seq_lens.dim() == 1 && seq_lens.size(0) == p.batch, op, ": seq_lens must have shape [B = ", p.batch,
              "] (page_table's rows), got ", seq_lens.sizes());
  TORCH_CHECK(p.batch <= 1 || seq_lens.stride(0) == 1, op, ": seq_lens must be contiguous, got stride ",
              seq_lens.stride(0));
  check_same_device(seq_lens, "seq_lens", ref, ref_name, op);
  return p;
}

inline DecodeShape check_index_decode_args(const at::Tensor& q_idx, const at::Tensor& index_k,
                                           const std::optional<at::Tensor>& index_k_scales,
                                           const at::Tensor& page_table, const at::Tensor& seq_lens, int64_t topk,
                                           int64_t init_blocks, int64_t local_blocks, const at::Tensor& out,
                                           const std::optional<at::Tensor>& scores_out,
                                           const std::optional<at::Tensor>& workspace) {
  const char* op = "msa::index_decode";
  DecodeShape s;

  // q_idx [B, Q, H, 128], E4M3 or BF16.
  TORCH_CHECK(q_idx.scalar_type() == at::kFloat8_e4m3fn || q_idx.scalar_type() == at::kBFloat16, op,
              ": q_idx must be float8_e4m3fn or bfloat16, got ", q_idx.scalar_type());
  TORCH_CHECK(q_idx.dim() == 4 && q_idx.size(3) == kIndexDim, op, ": q_idx must have shape [B, Q, H, ",
              kIndexDim, "], got ", q_idx.sizes());
  s.batch = q_idx.size(0);
  s.q_len = q_idx.size(1);
  s.heads = q_idx.size(2);
  TORCH_CHECK(s.q_len >= 1 && s.q_len <= kMaxQueryLen, op, ": q_idx's query length Q (dim 1) must be in [1, ",
              kMaxQueryLen, "], got ", s.q_len);
  TORCH_CHECK(s.heads == 1 || s.heads == 2 || s.heads == 4, op,
              ": q_idx's index head count H (dim 2) must be 1, 2 or 4, got ", s.heads);
  check_inner_contiguous(q_idx, "q_idx", op);

  // index keys: NVFP4 uint8 [P, 128, 64] + E4M3 scales [P, 128, 8], or E4M3 / BF16 [P, 128, 128].
  const auto kd = index_k.scalar_type();
  TORCH_CHECK(kd == at::kByte || kd == at::kFloat8_e4m3fn || kd == at::kBFloat16, op,
              ": index_k must be uint8 (NVFP4), float8_e4m3fn or bfloat16, got ", kd);
  s.keys = kd == at::kByte ? KeyFormat::kNvfp4 : (kd == at::kBFloat16 ? KeyFormat::kBF16 : KeyFormat::kE4M3);
  const int64_t key_width = s.keys == KeyFormat::kNvfp4 ? kIndexDim / 2 : kIndexDim;
  TORCH_CHECK(index_k.dim() == 3 && index_k.size(1) == kPageSize && index_k.size(2) == key_width, op,
              ": index_k must have shape [P, ", kPageSize, ", ", key_width, "] for ",
              s.keys == KeyFormat::kNvfp4 ? "NVFP4" : "E4M3/BF16", " keys, got ", index_k.sizes());
  check_inner_contiguous(index_k, "index_k", op);
  check_same_device(index_k, "index_k", q_idx, "q_idx", op);
  s.physical_pages = index_k.size(0);
  if (s.keys == KeyFormat::kNvfp4) {
    TORCH_CHECK(index_k_scales.has_value(), op, ": NVFP4 (uint8) index_k needs index_k_scales");
    const at::Tensor& sc = *index_k_scales;
    TORCH_CHECK(sc.scalar_type() == at::kFloat8_e4m3fn, op, ": index_k_scales must be float8_e4m3fn, got ",
                sc.scalar_type());
    TORCH_CHECK(sc.dim() == 3 && sc.size(0) == s.physical_pages && sc.size(1) == kPageSize &&
                    sc.size(2) == kIndexDim / 16,
                op, ": index_k_scales must have shape [", s.physical_pages, ", ", kPageSize, ", ", kIndexDim / 16,
                "] to match index_k, got ", sc.sizes());
    check_inner_contiguous(sc, "index_k_scales", op);
    check_same_device(sc, "index_k_scales", q_idx, "q_idx", op);
  } else {
    TORCH_CHECK(!index_k_scales.has_value(), op,
                ": index_k_scales is only used with NVFP4 (uint8) index_k; E4M3/BF16 index keys are unscaled");
  }
  const bool q_fp8 = q_idx.scalar_type() == at::kFloat8_e4m3fn;
  TORCH_CHECK(q_fp8 == (s.keys != KeyFormat::kBF16), op,
              ": q_idx and index_k dtypes do not go together: float8_e4m3fn q_idx needs float8_e4m3fn or NVFP4 "
              "index_k, bfloat16 q_idx needs bfloat16 index_k; got ",
              q_idx.scalar_type(), " and ", kd);

  const PagedShape paged = check_paged_inputs(page_table, seq_lens, s.batch, q_idx, "q_idx", op);
  s.max_pages = paged.max_pages;

  check_topk_options(topk, init_blocks, local_blocks, op);
  check_topk_out(out, s.heads, s.tokens(), topk, q_idx, "q_idx", op);
  if (scores_out.has_value()) {
    const at::Tensor& so = *scores_out;
    TORCH_CHECK(so.scalar_type() == at::kFloat, op, ": scores_out must be float32, got ", so.scalar_type());
    TORCH_CHECK(so.dim() == 3 && so.size(0) == s.heads && so.size(1) == s.tokens() && so.size(2) == s.max_pages,
                op, ": scores_out must have shape [", s.heads, ", ", s.tokens(), ", ", s.max_pages,
                "] (heads, B * Q, max_pages), got ", so.sizes());
    check_inner_contiguous(so, "scores_out", op);
    check_same_device(so, "scores_out", q_idx, "q_idx", op);
    check_writable(so, "scores_out", op);
    const at::MemOverlapStatus overlap = at::get_overlap_status(out, so);
    TORCH_CHECK(overlap != at::MemOverlapStatus::Full && overlap != at::MemOverlapStatus::Partial, op,
                ": out and scores_out must not share memory");
  }
  if (workspace.has_value()) {
    const at::Tensor& ws = *workspace;
    TORCH_CHECK(ws.scalar_type() == at::kByte, op, ": workspace must be uint8, got ", ws.scalar_type());
    TORCH_CHECK(ws.dim() == 1 && ws.is_contiguous(), op, ": workspace must be a contiguous 1-D tensor, got shape ",
                ws.sizes(), " and strides ", ws.strides());
    TORCH_CHECK(ws.numel() >= s.workspace_bytes(), op, ": workspace needs at least ", s.workspace_bytes(),
                " bytes (4 * H * B*Q * max_pages), got ", ws.numel());
    TORCH_CHECK(reinterpret_cast<uintptr_t>(ws.data_ptr()) % 16 == 0, op,
                ": workspace must start on a 16-byte boundary");
    check_same_device(ws, "workspace", q_idx, "q_idx", op);
    const at::MemOverlapStatus overlap = at::get_overlap_status(out, ws);
    TORCH_CHECK(overlap != at::MemOverlapStatus::Full && overlap != at::MemOverlapStatus::Partial, op,
                ": out and workspace must not share memory");
  }
  return s;
}

// Nothing to score: without scores_out and with max_pages <= topk every valid TopK row is 0 .. local (SPEC
// section 4) whatever the scores, so both ops skip the dot products (the CUDA op launches only the select kernel).
inline bool nothing_to_score(const DecodeShape& s, int64_t topk, const std::optional<at::Tensor>& scores_out) {
  return !scores_out.has_value() && s.max_pages <= topk;
}

// The fp32 scores [H, B*Q, max_pages]: scores_out when given, else the caller's workspace, else a new tensor.
inline at::Tensor scores_buffer(const DecodeShape& s, const at::Tensor& q_idx,
                                const std::optional<at::Tensor>& scores_out,
                                const std::optional<at::Tensor>& workspace) {
  if (scores_out.has_value()) return *scores_out;
  if (workspace.has_value()) {
    return workspace->narrow(0, 0, s.workspace_bytes()).view(at::kFloat).view({s.heads, s.tokens(), s.max_pages});
  }
  return at::empty({s.heads, s.tokens(), s.max_pages}, q_idx.options().dtype(at::kFloat));
}

// topk_select: scores float32 [H, T, max_pages] (unit inner stride), positions int32 [T] (contiguous).
inline void check_topk_select_args(const at::Tensor& scores, const at::Tensor& positions, int64_t topk,
                                   int64_t init_blocks, int64_t local_blocks, const at::Tensor& out) {
  const char* op = "msa::topk_select";
  TORCH_CHECK(scores.scalar_type() == at::kFloat, op, ": scores must be float32, got ", scores.scalar_type());
  TORCH_CHECK(scores.dim() == 3, op, ": scores must have shape [H, T, max_pages], got ", scores.sizes());
  TORCH_CHECK(scores.size(2) >= 1 && scores.size(2) <= kMaxPages, op, ": scores' max_pages must be in [1, ",
              kMaxPages, "], got ", scores.size(2));
  check_inner_contiguous(scores, "scores", op);
  TORCH_CHECK(positions.scalar_type() == at::kInt, op, ": positions must be int32, got ",
              positions.scalar_type());
  TORCH_CHECK(positions.dim() == 1 && positions.size(0) == scores.size(1), op,
              ": positions must have shape [T = ", scores.size(1), "], got ", positions.sizes());
  TORCH_CHECK(positions.size(0) <= 1 || positions.stride(0) == 1, op, ": positions must be contiguous, got stride ",
              positions.stride(0));
  check_same_device(positions, "positions", scores, "scores", op);
  check_topk_options(topk, init_blocks, local_blocks, op);
  check_topk_out(out, scores.size(0), scores.size(1), topk, scores, "scores", op);
}

}  // namespace msa::index
