"""Reference for the MSA decode indexer (shared/SPEC.md §3-§5): page scores and TopK page selection.

Written for clarity and independence from the kernels; runs on any device (the tests run it on the CPU).

Definitions used throughout (the kernels follow the same contract, see :func:`msa_ops.index_decode`):

* **Positions.** Request ``b`` contributes ``Q`` query tokens; token ``i`` sits at
  ``pos = seq_lens[b] - Q + i`` (``seq_lens`` counts the tokens of this step). Flattened token index
  ``t = b * Q + i``. A token with ``pos < 0`` is padding (e.g. ``seq_lens[b] < Q``, or CUDA-graph padding
  requests with ``seq_lens[b] = 0``): its scores are all ``-inf`` and its TopK row is all ``-1``.
* **Visibility.** The token's local page is ``local = pos // 128``. A key at position ``p`` is visible iff
  ``p <= pos``; so pages ``< local`` are fully visible, the local page is visible up to ``pos % 128``, and
  pages ``> local`` are not visible at all.
* **Page score.** For index head ``h``: the max over the page's visible keys of the dot product
  ``q_idx[b, i, h] . k[key]``. E4M3 queries with E4M3 keys, or NVFP4 keys first dequantized to E4M3
  (``e4m3_rne_satfinite(e2m1 * scale)``, SPEC §2), are unscaled; BF16 queries with BF16 keys are multiplied
  by ``1/sqrt(128)``. Pages with no visible key (beyond the local page, or every page of a padding token)
  score ``-inf``.
* **TopK row** (``topk`` = K, ``init_blocks`` = I, ``local_blocks`` = L; I >= 0, L >= 1, I + L <= K):

  - ``n = min(K, local + 1)`` valid entries, then ``-1`` padding;
  - if ``local + 1 <= K`` the row is ``0, 1, ..., local`` (nothing to choose);
  - otherwise the row is ``[0 .. I-1]`` (the init pages, forced, at the front), then the
    ``K - I - L`` best *history* pages among ``I .. local - L`` (highest score first, ties to the lower page
    id; a NaN score counts as ``-inf``; ``+0 == -0``), then ``[local - L + 1 .. local]`` (the local window,
    forced, ascending, so the local page is the last valid entry).

  ``local_blocks > 1`` therefore forces the ``L`` pages ending at the local page (a sliding window of
  pages), always at the end of the row in ascending order; the public MSA v1 contract is the default
  ``I = 0, L = 1`` (15 ranked history pages + the local page). Only the *set* of history pages is part of
  the contract (SPEC §4: "any order"); this reference (and the CPU kernel) write them best first.
"""

from __future__ import annotations

import math

import torch

from .. import formats

__all__ = [
    "PAGE_SIZE", "INDEX_DIM", "BF16_SCORE_SCALE",
    "decode_positions", "dequantize_index_keys", "index_scores_decode", "topk_select_reference",
    "index_decode_reference",
]

PAGE_SIZE = 128
INDEX_DIM = 128
#: The score scale applied to BF16 inputs (FP8/NVFP4 inputs are unscaled).
BF16_SCORE_SCALE = 1.0 / math.sqrt(INDEX_DIM)


def decode_positions(seq_lens: torch.Tensor, q_len: int) -> torch.Tensor:
    """int64 ``[B * Q]`` positions ``seq_lens[b] - Q + i`` of the decode query tokens (``< 0``: padding)."""
    offsets = torch.arange(q_len, device=seq_lens.device, dtype=torch.int64) - q_len
    return (seq_lens.to(torch.int64).unsqueeze(1) + offsets).reshape(-1)


def dequantize_index_keys(index_k: torch.Tensor, index_k_scales: torch.Tensor | None = None) -> torch.Tensor:
    """Index keys as the values the indexer multiplies, in float32 ``[..., 128, 128]``.

    NVFP4 (uint8 ``[..., 128, 64]`` + E4M3 scales ``[..., 128, 8]``): dequantized to E4M3 first (SPEC §2),
    then widened; E4M3 and BF16 keys: widened exactly.
    """
    if index_k.dtype == torch.uint8:
        if index_k_scales is None:
            raise ValueError("NVFP4 index keys need index_k_scales")
        return formats.dequantize_nvfp4(index_k, index_k_scales, torch.float8_e4m3fn).float()
    return index_k.float()


def index_scores_decode(q_idx: torch.Tensor, index_k: torch.Tensor, page_table: torch.Tensor,
                        seq_lens: torch.Tensor, index_k_scales: torch.Tensor | None = None,
                        pages_per_chunk: int = 256) -> torch.Tensor:
    """Page scores of every (index head, query token, logical page): float32 ``[H, B * Q, max_pages]``.

    Args:
        q_idx: ``[B, Q, H, 128]`` E4M3 or BF16.
        index_k: NVFP4 uint8 ``[P, 128, 64]`` (with ``index_k_scales`` E4M3 ``[P, 128, 8]``), or E4M3 / BF16
            ``[P, 128, 128]``; any strides.
        page_table: int ``[B, max_pages]``: logical page ``j`` of request ``b`` is physical page
            ``page_table[b, j]``. Only the entries of pages up to each request's last local page are read.
        seq_lens: int ``[B]``, counting this step's ``Q`` tokens.
        pages_per_chunk: keys are dequantized this many pages at a time (bounds the memory used).

    The dot products are computed in float64 and rounded once to float32: for E4M3 inputs that is the exact
    dot product correctly rounded (products of two E4M3 values and their sum over 128 terms fit in 53 bits),
    for BF16 it is within an ulp of it. The module docstring defines visibility and ``-inf``.
    """
    batch, q_len, heads, dim = q_idx.shape
    if dim != INDEX_DIM:
        raise ValueError(f"q_idx must be [B, Q, H, {INDEX_DIM}], got {tuple(q_idx.shape)}")
    max_pages = page_table.shape[1]
    bf16 = q_idx.dtype == torch.bfloat16
    device = q_idx.device
    scores = torch.full((heads, batch * q_len, max_pages), -math.inf, dtype=torch.float32, device=device)
    positions = decode_positions(seq_lens, q_len).view(batch, q_len)
    token_offsets = torch.arange(PAGE_SIZE, device=device)

    for b in range(batch):
        pos = positions[b]                                   # [Q]
        valid = pos >= 0
        if not bool(valid.any()):
            continue
        last_page = int(pos.max()) // PAGE_SIZE                # the last query token's local page
        if last_page >= max_pages:
            raise ValueError(f"request {b}: seq_lens {int(seq_lens[b])} needs {last_page + 1} pages, "
                             f"page_table has {max_pages}")
        q = q_idx[b].double()                                   # [Q, H, 128]
        for start in range(0, last_page + 1, pages_per_chunk):
            pages = torch.arange(start, min(start + pages_per_chunk, last_page + 1), device=device)
            physical = page_table[b, pages].long()
            keys = dequantize_index_keys(
                index_k[physical], None if index_k_scales is None else index_k_scales[physical])
            dots = torch.einsum("qhd,ptd->hqpt", q, keys.double())  # [H, Q, pages, 128]
            key_pos = pages.unsqueeze(1) * PAGE_SIZE + token_offsets  # [pages, 128]
            visible = (key_pos.unsqueeze(0) <= pos.view(q_len, 1, 1)) & valid.view(q_len, 1, 1)
            dots = dots.masked_fill(~visible.unsqueeze(0), -math.inf)
            page_max = dots.amax(dim=-1)                              # [H, Q, pages]
            if bf16:
                page_max = page_max * BF16_SCORE_SCALE
            scores[:, b * q_len:(b + 1) * q_len, start:start + pages.numel()] = page_max.float()
    return scores


def topk_select_reference(scores: torch.Tensor, positions: torch.Tensor, topk: int = 16, init_blocks: int = 0,
                          local_blocks: int = 1) -> torch.Tensor:
    """TopK rows from page scores: int32 ``[H, T, topk]`` (the row contract is in the module docstring).

    Args:
        scores: float ``[H, T, max_pages]``; only the history candidates ``I .. local - L`` of each row are
            read.
        positions: int ``[T]``, the query tokens' positions (``< 0``: padding row, all ``-1``).
    """
    if not (init_blocks >= 0 and local_blocks >= 1 and init_blocks + local_blocks <= topk):
        raise ValueError(f"need init_blocks >= 0, local_blocks >= 1, init_blocks + local_blocks <= topk; got "
                         f"{init_blocks}, {local_blocks}, {topk}")
    heads, tokens, max_pages = scores.shape
    device = scores.device
    out = torch.full((heads, tokens, topk), -1, dtype=torch.int32, device=device)
    history = topk - init_blocks - local_blocks
    page_ids = torch.arange(max_pages, device=device)
    for t in range(tokens):
        pos = int(positions[t])
        if pos < 0:
            continue
        local = pos // PAGE_SIZE
        if local >= max_pages:
            raise ValueError(f"token {t}: position {pos} is on page {local}, scores have {max_pages} pages")
        if local + 1 <= topk:
            out[:, t, :local + 1] = torch.arange(local + 1, dtype=torch.int32, device=device)
            continue
        init = torch.arange(init_blocks, device=device)
        window = torch.arange(local - local_blocks + 1, local + 1, device=device)
        candidates = page_ids[init_blocks:local - local_blocks + 1]
        for h in range(heads):
            s = scores[h, t, candidates].float()
            s = torch.where(s.isnan(), torch.full_like(s, -math.inf), s)
            # Stable sort on descending score keeps ascending page ids among equal scores.
            order = torch.sort(s, descending=True, stable=True).indices[:history]
            out[h, t] = torch.cat([init, candidates[order], window]).to(torch.int32)
    return out


def index_decode_reference(q_idx: torch.Tensor, index_k: torch.Tensor, page_table: torch.Tensor,
                           seq_lens: torch.Tensor, index_k_scales: torch.Tensor | None = None, topk: int = 16,
                           init_blocks: int = 0, local_blocks: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole decode indexer: ``(topk int32 [H, B*Q, topk], scores float32 [H, B*Q, max_pages])``."""
    scores = index_scores_decode(q_idx, index_k, page_table, seq_lens, index_k_scales)
    positions = decode_positions(seq_lens, q_idx.shape[1])
    return topk_select_reference(scores, positions, topk, init_blocks, local_blocks), scores
