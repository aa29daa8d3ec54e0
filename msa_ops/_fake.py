"""Fake (meta) kernels for every msa op, so the ops trace under torch.compile(fullgraph=True)."""

from __future__ import annotations

import torch


@torch.library.register_fake("msa::nvfp4_quantize")
def _nvfp4_quantize_fake(x: torch.Tensor, global_scale: float = 1.0):
    d = x.shape[-1]
    torch._check(d % 16 == 0, lambda: f"msa::nvfp4_quantize: last dimension must be a multiple of 16, got {d}")
    lead = tuple(x.shape[:-1])
    packed = x.new_empty(lead + (d // 2,), dtype=torch.uint8)
    scales = x.new_empty(lead + (d // 16,), dtype=torch.float8_e4m3fn)
    return packed, scales


@torch.library.register_fake("msa::nvfp4_dequantize")
def _nvfp4_dequantize_fake(packed: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype,
                           global_scale: float = 1.0):
    lead = tuple(packed.shape[:-1])
    return packed.new_empty(lead + (packed.shape[-1] * 2,), dtype=dtype)


@torch.library.register_fake("msa::index_decode")
def _index_decode_fake(q_idx, index_k, index_k_scales, page_table, seq_lens, topk, init_blocks, local_blocks, out,
                       scores_out, workspace=None) -> None:
    # Writes out (and scores_out, and the workspace) in place; shapes are checked by the Python wrapper and the
    # C++ op.
    return None


@torch.library.register_fake("msa::topk_select")
def _topk_select_fake(scores, positions, topk, init_blocks, local_blocks, out) -> None:
    return None


@torch.library.register_fake("msa::sparse_decode")
def _sparse_decode_fake(q, k, v, k_scales, v_scales, topk, page_table, seq_lens, sm_scale, out, lse,
                        workspace) -> None:
    # Writes out (and lse, and the CUDA workspace) in place; shapes are checked by the Python wrapper and the
    # C++ op.
    return None
