"""Reference for MSA sparse decode attention (shared/SPEC.md §2-§5): exact softmax attention of every query
token over the keys of its TopK pages, per KV head.

Written for clarity and independence from the kernels; runs on any device (the tests run it on the CPU).
The kernels follow the same contract (see :func:`msa_ops.sparse_decode`):

* **Positions.** ``q`` holds ``T = B * Q`` query tokens, request ``b = t // Q``, token ``i = t % Q`` at
  ``pos = seq_lens[b] - Q + i`` (``seq_lens`` counts this step's tokens). ``pos < 0`` is a padding token.
* **Heads.** Query head ``hq`` reads KV head ``hk = hq // (Hq / Hkv)`` and the TopK row ``topk[hk, t]``.
* **Keys.** Every entry ``p >= 0`` of the row is a logical page of request ``b``; it contributes the keys at
  positions ``p * 128 + j`` (``j`` in ``0..127``) that are ``<= pos``, read from physical page
  ``page_table[b, p]``, slot ``j``. Negative entries (the ``-1`` padding) are skipped. So history pages
  contribute all 128 keys, the local page ``pos // 128`` is causally masked, and a page past the local page
  contributes nothing (its page-table entry is not read).
* **Rows are used as given.** A well-formed row (SPEC §4, what :func:`msa_ops.index_decode` writes) has
  distinct pages, none past the local page, and the local page last. Nothing here checks that: a page listed
  twice is attended twice (its keys enter the softmax twice). Callers must pass well-formed rows.
* **Numbers.** K/V are used as the values the Q8KV4 kernels multiply: NVFP4 dequantized to E4M3 first
  (``e4m3_rne_satfinite(e2m1 * scale)``, SPEC §2), E4M3 and BF16 as stored; ``q`` E4M3 or BF16 as stored.
  ``out = softmax(sm_scale * q . k) @ v`` and ``lse = log(sum(exp(sm_scale * q . k)))`` (natural log, the
  max-subtracted form), default ``sm_scale = 1/sqrt(128)``. This reference computes in float64 and rounds
  once to float32, so it is the exact result to fp32 precision (the kernels accumulate in fp32).
* **No key.** A row that sees no key (a padding token, or a row of only ``-1``) gives ``out = 0`` and
  ``lse = -inf``: the weight ``exp(lse - lse_max)`` of such a split is 0, so an LSE-weighted combine of
  partial results (split-KV) stays correct without special cases.
"""

from __future__ import annotations

import math

import torch

from .. import formats

__all__ = ["PAGE_SIZE", "HEAD_DIM", "DEFAULT_SM_SCALE", "dequantize_kv", "sparse_decode_reference"]

PAGE_SIZE = 128
HEAD_DIM = 128
#: The default softmax scale, 1/sqrt(head_dim).
DEFAULT_SM_SCALE = 1.0 / math.sqrt(HEAD_DIM)


def dequantize_kv(cache: torch.Tensor, scales: torch.Tensor | None = None) -> torch.Tensor:
    """K or V cache pages as the values the attention multiplies, float64 ``[..., 128, 128]``.

    NVFP4 (uint8 ``[..., 64]`` + E4M3 scales ``[..., 8]``): dequantized to E4M3 first (SPEC §2), then widened;
    E4M3 and BF16: widened exactly.
    """
    if cache.dtype == torch.uint8:
        if scales is None:
            raise ValueError("NVFP4 K/V need their scales")
        return formats.dequantize_nvfp4(cache, scales, torch.float8_e4m3fn).double()
    return cache.double()


def sparse_decode_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, topk: torch.Tensor,
                            page_table: torch.Tensor, seq_lens: torch.Tensor, k_scales: torch.Tensor | None = None,
                            v_scales: torch.Tensor | None = None,
                            sm_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse decode attention: ``(out float32 [T, Hq, 128], lse float32 [T, Hq])``.

    Args:
        q: ``[T, Hq, 128]`` E4M3 or BF16, ``T = B * Q``.
        k, v: NVFP4 uint8 ``[P, Hkv, 128, 64]`` (with ``k_scales`` / ``v_scales`` E4M3 ``[P, Hkv, 128, 8]``),
            or E4M3 / BF16 ``[P, Hkv, 128, 128]``; any strides.
        topk: int ``[Hkv, T, W]`` logical page ids (``-1``: no page); any strides.
        page_table: int ``[B, max_pages]``; seq_lens: int ``[B]``.
        sm_scale: softmax scale (default ``1/sqrt(128)``).

    The module docstring defines positions, which keys each row sees, and the no-key result.
    """
    tokens, q_heads, dim = q.shape
    if dim != HEAD_DIM:
        raise ValueError(f"q must be [T, Hq, {HEAD_DIM}], got {tuple(q.shape)}")
    kv_heads = k.shape[1]
    if q_heads % kv_heads != 0:
        raise ValueError(f"Hq = {q_heads} is not a multiple of Hkv = {kv_heads}")
    group = q_heads // kv_heads
    batch = seq_lens.shape[0]
    if batch == 0 or tokens % batch != 0:
        raise ValueError(f"T = {tokens} query tokens do not split evenly over B = {batch} requests")
    q_len = tokens // batch
    scale = DEFAULT_SM_SCALE if sm_scale is None else float(sm_scale)
    device = q.device

    out = torch.zeros((tokens, q_heads, HEAD_DIM), dtype=torch.float32, device=device)
    lse = torch.full((tokens, q_heads), -math.inf, dtype=torch.float32, device=device)
    key_slot = torch.arange(PAGE_SIZE, device=device)
    for t in range(tokens):
        b = t // q_len
        pos = int(seq_lens[b]) - q_len + t % q_len
        for hk in range(kv_heads):
            pages = [p for p in topk[hk, t].tolist() if p >= 0 and p * PAGE_SIZE <= pos]
            if not pages:
                continue  # no key: out 0, lse -inf
            logical = torch.tensor(pages, device=device)
            physical = page_table[b, logical].long()
            keys = dequantize_kv(k[physical, hk], None if k_scales is None else k_scales[physical, hk])
            values = dequantize_kv(v[physical, hk], None if v_scales is None else v_scales[physical, hk])
            keys = keys.reshape(-1, HEAD_DIM)            # [pages * 128, 128], page-major like `pages`
            values = values.reshape(-1, HEAD_DIM)
            key_pos = (logical.unsqueeze(1) * PAGE_SIZE + key_slot).reshape(-1)
            visible = key_pos <= pos

            heads = slice(hk * group, (hk + 1) * group)
            logits = scale * (q[t, heads].double() @ keys.T)          # [group, pages * 128]
            logits = logits.masked_fill(~visible, -math.inf)
            row_lse = torch.logsumexp(logits, dim=-1)                  # [group]
            probs = torch.exp(logits - row_lse.unsqueeze(1))
            out[t, heads] = (probs @ values).float()
            lse[t, heads] = row_lse.float()
    return out, lse
