"""The typed Python API: one documented function per op.

Each function checks its arguments (raising ``TypeError`` / ``ValueError`` that name the argument), then
calls ``torch.ops.msa.<op>``, which dispatches to the CPU or CUDA kernel by the tensors' device. Checks
here never read device memory, so they add no host-device synchronisation.
"""

from __future__ import annotations

import math

import torch

__all__ = ["cuda_archs", "nvfp4_quantize", "nvfp4_dequantize", "index_decode", "index_decode_workspace_bytes",
           "topk_select", "sparse_decode"]

_QUANT_INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_DEQUANT_OUTPUT_DTYPES = (torch.float8_e4m3fn, torch.bfloat16, torch.float32)


def cuda_archs() -> list[str]:
    """CUDA targets compiled into this build (e.g. ``["9.0a", "10.0a"]``); empty for a CPU-only build."""
    archs = torch.ops.msa.cuda_archs()
    return [a for a in archs.split(",") if a]


def _require_tensor(name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def _check_global_scale(global_scale) -> float:
    if isinstance(global_scale, bool) or not isinstance(global_scale, (int, float)):
        raise TypeError(f"global_scale must be a Python float, got {type(global_scale).__name__}")
    g = float(global_scale)
    if not math.isfinite(g) or g <= 0.0:
        raise ValueError(f"global_scale must be a finite positive number, got {global_scale}")
    return g


def nvfp4_quantize(x: torch.Tensor, global_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to NVFP4 along its last dimension (shared/SPEC.md §2).

    Args:
        x: bfloat16, float16 or float32 tensor ``[..., D]``, ``D`` a positive multiple of 16, on the CPU
            or a CUDA device. Any strides: leading dims that cannot be viewed as rows of one stride (and an
            inner stride other than 1) cost one contiguous copy.
        global_scale: fp32 global scale ``G`` (finite, > 0); the scales encode ``G * amax / 6``.

    Returns:
        ``(packed, scales)``: ``packed`` uint8 ``[..., D/2]`` (element ``2i`` in the low nibble of byte
        ``i``), ``scales`` float8_e4m3fn ``[..., D/16]``, both contiguous on ``x``'s device.

    Numerics, per 16-element group ``g`` (all arithmetic in fp32, each step rounded as written):
        ``s = e4m3_rne_satfinite(G * amax(|x_g|) / 6)``; ``q = e2m1_rne_satfinite(x * G / s)``.
        A negative value whose quotient rounds to zero keeps its sign (code 8, -0), as the Blackwell
        converter does. A group whose scale rounds to 0 encodes as all code 0. **NaN/Inf:** a group that
        holds any NaN or +-Inf gets the NaN scale (0x7F) and all-zero codes, so it dequantizes to NaN
        everywhere and never disturbs other groups. Finite inputs never produce NaN: ``G * amax``
        overflowing fp32 saturates the scale to 448 and the codes to +-6.
    """
    x = _require_tensor("x", x)
    if x.dtype not in _QUANT_INPUT_DTYPES:
        raise TypeError(f"x must be bfloat16, float16 or float32, got {x.dtype}")
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension")
    if x.shape[-1] <= 0 or x.shape[-1] % 16 != 0:
        raise ValueError(f"the last dimension of x must be a positive multiple of 16, got {x.shape[-1]}")
    g = _check_global_scale(global_scale)
    return torch.ops.msa.nvfp4_quantize(x, g)


def nvfp4_dequantize(packed: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16,
                     global_scale: float = 1.0) -> torch.Tensor:
    """Expand NVFP4 ``(packed, scales)`` to ``dtype`` along the last dimension (shared/SPEC.md §2).

    Args:
        packed: uint8 ``[..., D/2]``; scales: float8_e4m3fn ``[..., D/16]``, same leading shape and device.
            Any strides with the same copy rule as :func:`nvfp4_quantize`.
        dtype: ``torch.float8_e4m3fn`` gives ``e4m3_rne_satfinite(e2m1 * s)`` (the MSA Q8KV4 dequant; the
            global scale is NOT applied); ``torch.bfloat16`` / ``torch.float32`` give ``e2m1 * s / G``
            computed in fp32 (exact for G = 1), then rounded once to the output type.
        global_scale: the ``G`` used at quantization (finite, > 0).

    Returns:
        ``[..., D]`` tensor of ``dtype``, contiguous. A NaN scale gives NaN for its whole group; ``-0``
        codes give ``-0``.
    """
    packed = _require_tensor("packed", packed)
    scales = _require_tensor("scales", scales)
    if packed.dtype != torch.uint8:
        raise TypeError(f"packed must be uint8, got {packed.dtype}")
    if scales.dtype != torch.float8_e4m3fn:
        raise TypeError(f"scales must be float8_e4m3fn, got {scales.dtype}")
    if dtype not in _DEQUANT_OUTPUT_DTYPES:
        raise TypeError(f"dtype must be torch.float8_e4m3fn, torch.bfloat16 or torch.float32, got {dtype}")
    if packed.dim() < 1 or packed.dim() != scales.dim():
        raise ValueError(f"packed {tuple(packed.shape)} and scales {tuple(scales.shape)} must have the same "
                         "number of dimensions (>= 1)")
    if packed.shape[:-1] != scales.shape[:-1]:
        raise ValueError(f"leading shapes of packed {tuple(packed.shape)} and scales {tuple(scales.shape)} differ")
    if packed.shape[-1] <= 0 or packed.shape[-1] % 8 != 0:
        raise ValueError(f"the last dimension of packed must be a positive multiple of 8, got {packed.shape[-1]}")
    if scales.shape[-1] * 8 != packed.shape[-1]:
        raise ValueError(f"scales must have packed.shape[-1] / 8 = {packed.shape[-1] // 8} entries in the last "
                         f"dimension, got {scales.shape[-1]}")
    if packed.device != scales.device:
        raise ValueError(f"packed and scales must be on one device, got {packed.device} and {scales.device}")
    g = _check_global_scale(global_scale)
    return torch.ops.msa.nvfp4_dequantize(packed, scales, dtype, g)


# ---- decode indexer (shared/SPEC.md §4-§5) ---------------------------------------------------------------

PAGE_SIZE = 128       # tokens per page (= MSA block)
INDEX_DIM = 128       # index head dim
MAX_PAGES = 8192      # logical pages per request (1M tokens)
MAX_QUERY_LEN = 16
MAX_TOPK = 64
_INDEX_HEADS = (1, 2, 4)


def _check_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a Python int, got {type(value).__name__}")
    return value


def _check_topk_options(topk, init_blocks, local_blocks) -> None:
    topk = _check_int("topk", topk)
    init_blocks = _check_int("init_blocks", init_blocks)
    local_blocks = _check_int("local_blocks", local_blocks)
    if not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"topk must be in [1, {MAX_TOPK}], got {topk}")
    if init_blocks < 0:
        raise ValueError(f"init_blocks must be >= 0, got {init_blocks}")
    if local_blocks < 1:
        raise ValueError(f"local_blocks must be >= 1 (the local page is always selected), got {local_blocks}")
    if init_blocks + local_blocks > topk:
        raise ValueError(f"init_blocks + local_blocks must be <= topk, got {init_blocks} + {local_blocks} > {topk}")


def _check_device(name: str, t: torch.Tensor, ref: torch.Tensor, ref_name: str) -> None:
    if t.device != ref.device:
        raise ValueError(f"{name} must be on the device of {ref_name} ({ref.device}), got {t.device}")


def _check_inner_contiguous(name: str, t: torch.Tensor) -> None:
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"the last dimension of {name} must be contiguous (stride 1), got strides {t.stride()}")


def _check_workspace(workspace, ref: torch.Tensor, ref_name: str) -> torch.Tensor:
    """A caller's scratch buffer: a contiguous 1-D uint8 tensor on ``ref``'s device."""
    workspace = _require_tensor("workspace", workspace)
    if workspace.dtype != torch.uint8:
        raise TypeError(f"workspace must be uint8, got {workspace.dtype}")
    if workspace.dim() != 1 or not workspace.is_contiguous():
        raise ValueError(f"workspace must be a contiguous 1-D tensor, got shape {tuple(workspace.shape)} and "
                         f"strides {workspace.stride()}")
    _check_device("workspace", workspace, ref, ref_name)
    return workspace


def _check_paged(page_table: torch.Tensor, seq_lens: torch.Tensor, batch: int | None, ref: torch.Tensor,
                 ref_name: str) -> tuple[int, int]:
    """page_table int32 [B, max_pages] (unit inner stride) and seq_lens int32 [B] (contiguous) on ref's device;
    B is ``batch`` when given, else taken from page_table. Returns (B, max_pages)."""
    if page_table.dtype != torch.int32:
        raise TypeError(f"page_table must be int32, got {page_table.dtype}")
    if page_table.dim() != 2 or (batch is not None and page_table.shape[0] != batch):
        b = "B" if batch is None else f"B = {batch}"
        raise ValueError(f"page_table must have shape [{b}, max_pages], got {tuple(page_table.shape)}")
    batch, max_pages = page_table.shape
    if not 1 <= max_pages <= MAX_PAGES:
        raise ValueError(f"page_table's max_pages must be in [1, {MAX_PAGES}], got {max_pages}")
    _check_inner_contiguous("page_table", page_table)
    _check_device("page_table", page_table, ref, ref_name)
    if seq_lens.dtype != torch.int32:
        raise TypeError(f"seq_lens must be int32, got {seq_lens.dtype}")
    if seq_lens.dim() != 1 or seq_lens.shape[0] != batch:
        raise ValueError(f"seq_lens must have shape [B = {batch}] (page_table's rows), got {tuple(seq_lens.shape)}")
    if batch > 1 and seq_lens.stride(0) != 1:
        raise ValueError(f"seq_lens must be contiguous, got stride {seq_lens.stride(0)}")
    _check_device("seq_lens", seq_lens, ref, ref_name)
    return batch, max_pages


def _check_topk_out(out, heads: int, tokens: int, topk: int, ref: torch.Tensor, ref_name: str) -> torch.Tensor:
    if out is None:
        return torch.empty((heads, tokens, topk), dtype=torch.int32, device=ref.device)
    out = _require_tensor("out", out)
    if out.dtype != torch.int32:
        raise TypeError(f"out must be int32, got {out.dtype}")
    if tuple(out.shape) != (heads, tokens, topk):
        raise ValueError(f"out must have shape {(heads, tokens, topk)} (heads, tokens, topk), got {tuple(out.shape)}")
    _check_device("out", out, ref, ref_name)
    return out


def index_decode(q_idx: torch.Tensor, index_k: torch.Tensor, page_table: torch.Tensor, seq_lens: torch.Tensor, *,
                 index_k_scales: torch.Tensor | None = None, topk: int = 16, init_blocks: int = 0,
                 local_blocks: int = 1, out: torch.Tensor | None = None,
                 scores_out: torch.Tensor | None = None, workspace: torch.Tensor | None = None) -> torch.Tensor:
    """MSA decode indexer: score every visible page, select the TopK pages per (index head, query token).

    Args:
        q_idx: ``[B, Q, H, 128]`` index queries, float8_e4m3fn or bfloat16; Q in 1..16, H in {1, 2, 4} index
            heads (each selects for its own KV head; one shared index-key head). Any strides with a
            contiguous last dimension.
        index_k: the paged index-key cache, one of: NVFP4 uint8 ``[P, 128, 64]`` (with ``index_k_scales``),
            float8_e4m3fn ``[P, 128, 128]``, bfloat16 ``[P, 128, 128]``. E4M3 ``q_idx`` goes with NVFP4 or
            E4M3 keys, BF16 ``q_idx`` with BF16 keys. Any strides with a contiguous last dimension (e.g. a view
            into a bigger cache allocation).
        page_table: int32 ``[B, max_pages]`` (max_pages in 1..8192), contiguous last dimension: logical page
            ``j`` of request ``b`` is physical page ``page_table[b, j]``. Entries past each request's last
            needed page (its last token's local page) are never used and may hold anything (e.g. -1).
        seq_lens: int32 ``[B]``, contiguous: the request's length *including* this step's Q tokens.
        index_k_scales: float8_e4m3fn ``[P, 128, 8]`` for NVFP4 keys (one scale per 16 elements), else None.
        topk, init_blocks, local_blocks: the TopK row layout (below); defaults give the MSA v1 contract.
        out: optional int32 ``[H, B*Q, topk]`` to write into; any strides (e.g. ``buf.transpose(0, 1)`` of a
            ``[B*Q, H, topk]`` buffer). Allocated when None.
        scores_out: optional float32 ``[H, B*Q, max_pages]`` (contiguous last dimension) that receives every
            page score (for tests, and for engines that want them). Every element is written.
        workspace: optional contiguous 1-D uint8 tensor of at least
            :func:`index_decode_workspace_bytes` ``(H, B*Q, max_pages)`` bytes, 16-byte aligned, that holds the
            page scores when ``scores_out`` is None (ignored otherwise). Size it once for the largest shapes
            and reuse it: with it the call allocates nothing (CUDA-graph capture).

    Returns:
        ``out``: int32 ``[H, B*Q, topk]`` logical page ids, head-major.

    Semantics (shared/SPEC.md §4-§5; :mod:`msa_ops.reference.indexer` is the executable definition):
        Token ``i`` of request ``b`` (row ``t = b*Q + i``) sits at ``pos = seq_lens[b] - Q + i``; its local
        page is ``pos // 128`` and it sees keys at positions ``<= pos``. ``pos < 0`` (``seq_lens[b] < Q``,
        e.g. graph padding with ``seq_lens = 0``) marks a padding token: all scores ``-inf``, TopK row all -1.
        Page score (index head h) = max over the page's visible keys of the fp32 dot product
        ``q_idx[b, i, h] . k``, with NVFP4 keys dequantized to E4M3 first (``e4m3_rne_satfinite(e2m1 * s)``);
        FP8/NVFP4 scores are unscaled, BF16 scores are multiplied by ``1/sqrt(128)``. Pages past the local
        page score ``-inf``. The TopK row has ``n = min(topk, local + 1)`` valid entries then -1: when
        ``local + 1 <= topk`` it is ``0, 1, ..., local``; otherwise ``[0 .. init_blocks-1]`` (forced), then the
        ``topk - init_blocks - local_blocks`` highest-scoring history pages among
        ``init_blocks .. local - local_blocks`` (ties to the lower page id, NaN ranks as -inf; written best
        first, but only the set is part of the contract), then ``[local - local_blocks + 1 .. local]``
        (forced, ascending: the local page is the last valid entry).

    Requires ``seq_lens[b] <= max_pages * 128`` and valid physical page ids for the pages read; the CPU op
    checks these values and raises, the CUDA op does not read device values on the host (no sync): there a
    page with an out-of-range id scores NaN (so it ranks last), and a token whose local page lies past the
    page table gets an all -1 row. Without ``scores_out`` or ``workspace`` the CUDA op takes its scores buffer
    from torch's caching allocator. With ``max_pages <= topk`` and no ``scores_out`` there is nothing to score
    (every valid row is ``0 .. local``): only the selection kernel runs and no scores buffer is used.
    """
    q_idx = _require_tensor("q_idx", q_idx)
    index_k = _require_tensor("index_k", index_k)
    page_table = _require_tensor("page_table", page_table)
    seq_lens = _require_tensor("seq_lens", seq_lens)
    _check_topk_options(topk, init_blocks, local_blocks)

    if q_idx.dtype not in (torch.float8_e4m3fn, torch.bfloat16):
        raise TypeError(f"q_idx must be float8_e4m3fn or bfloat16, got {q_idx.dtype}")
    if q_idx.dim() != 4 or q_idx.shape[3] != INDEX_DIM:
        raise ValueError(f"q_idx must have shape [B, Q, H, {INDEX_DIM}], got {tuple(q_idx.shape)}")
    batch, q_len, heads, _ = q_idx.shape
    if not 1 <= q_len <= MAX_QUERY_LEN:
        raise ValueError(f"q_idx's query length Q (dim 1) must be in [1, {MAX_QUERY_LEN}], got {q_len}")
    if heads not in _INDEX_HEADS:
        raise ValueError(f"q_idx's index head count H (dim 2) must be 1, 2 or 4, got {heads}")
    _check_inner_contiguous("q_idx", q_idx)

    index_k_scales = _check_paged_cache("index_k", index_k, "index_k_scales", index_k_scales, ("P",), INDEX_DIM,
                                        "index keys", q_idx, "q_idx")
    if (q_idx.dtype == torch.bfloat16) != (index_k.dtype == torch.bfloat16):
        raise TypeError(f"q_idx ({q_idx.dtype}) and index_k ({index_k.dtype}) do not go together: float8_e4m3fn "
                        "q_idx needs float8_e4m3fn or NVFP4 (uint8) index_k, bfloat16 q_idx needs bfloat16 index_k")

    _, max_pages = _check_paged(page_table, seq_lens, batch, q_idx, "q_idx")

    tokens = batch * q_len
    out = _check_topk_out(out, heads, tokens, topk, q_idx, "q_idx")
    if scores_out is not None:
        scores_out = _require_tensor("scores_out", scores_out)
        if scores_out.dtype != torch.float32:
            raise TypeError(f"scores_out must be float32, got {scores_out.dtype}")
        if tuple(scores_out.shape) != (heads, tokens, max_pages):
            raise ValueError(f"scores_out must have shape {(heads, tokens, max_pages)} (heads, B * Q, max_pages), "
                             f"got {tuple(scores_out.shape)}")
        _check_inner_contiguous("scores_out", scores_out)
        _check_device("scores_out", scores_out, q_idx, "q_idx")
    if workspace is not None:
        workspace = _check_workspace(workspace, q_idx, "q_idx")
        need = index_decode_workspace_bytes(heads, tokens, max_pages)
        if workspace.numel() < need:
            raise ValueError(f"workspace needs at least {need} bytes (4 * H * B*Q * max_pages), got "
                             f"{workspace.numel()}")
    torch.ops.msa.index_decode(q_idx, index_k, index_k_scales, page_table, seq_lens, topk, init_blocks,
                               local_blocks, out, scores_out, workspace)
    return out


def index_decode_workspace_bytes(heads: int, tokens: int, max_pages: int) -> int:
    """Bytes of :func:`index_decode`'s ``workspace`` for H index heads, B*Q query tokens and a page table of
    width max_pages: the fp32 page scores ``[H, B*Q, max_pages]``."""
    return 4 * heads * tokens * max_pages


def topk_select(scores: torch.Tensor, positions: torch.Tensor, *, topk: int = 16, init_blocks: int = 0,
                local_blocks: int = 1, out: torch.Tensor | None = None) -> torch.Tensor:
    """The selection step of :func:`index_decode` on its own, for page scores computed elsewhere.

    Args:
        scores: float32 ``[H, T, max_pages]`` page scores (max_pages in 1..8192), contiguous last dimension.
            Only the history candidates ``init_blocks .. local - local_blocks`` of each row are read.
        positions: int32 ``[T]``, contiguous: each query token's position (decode: ``seq_lens[b] - Q + i``;
            prefill: ``prefix_len + i``); its local page is ``pos // 128``; ``pos < 0`` marks a padding token
            (TopK row all -1). Requires ``pos < max_pages * 128`` (checked by the CPU op only).
        topk, init_blocks, local_blocks, out: as in :func:`index_decode` (``out`` int32 ``[H, T, topk]``, any
            strides).

    Returns:
        ``out``: int32 ``[H, T, topk]``, rows exactly as :func:`index_decode` builds them from its scores.
    """
    scores = _require_tensor("scores", scores)
    positions = _require_tensor("positions", positions)
    _check_topk_options(topk, init_blocks, local_blocks)
    if scores.dtype != torch.float32:
        raise TypeError(f"scores must be float32, got {scores.dtype}")
    if scores.dim() != 3:
        raise ValueError(f"scores must have shape [H, T, max_pages], got {tuple(scores.shape)}")
    heads, tokens, max_pages = scores.shape
    if not 1 <= max_pages <= MAX_PAGES:
        raise ValueError(f"scores' max_pages must be in [1, {MAX_PAGES}], got {max_pages}")
    _check_inner_contiguous("scores", scores)
    if positions.dtype != torch.int32:
        raise TypeError(f"positions must be int32, got {positions.dtype}")
    if positions.dim() != 1 or positions.shape[0] != tokens:
        raise ValueError(f"positions must have shape [T = {tokens}], got {tuple(positions.shape)}")
    if tokens > 1 and positions.stride(0) != 1:
        raise ValueError(f"positions must be contiguous, got stride {positions.stride(0)}")
    _check_device("positions", positions, scores, "scores")
    out = _check_topk_out(out, heads, tokens, topk, scores, "scores")
    torch.ops.msa.topk_select(scores, positions, topk, init_blocks, local_blocks, out)
    return out


# ---- sparse decode attention (shared/SPEC.md §4-§5) ------------------------------------------------------

HEAD_DIM = 128        # q / k / v head dim
DEFAULT_SM_SCALE = 1.0 / math.sqrt(HEAD_DIM)


def _check_paged_cache(name: str, cache: torch.Tensor, scales_name: str, scales, lead: tuple[str, ...], dim: int,
                       what: str, ref: torch.Tensor, ref_name: str):
    """Checks a paged cache ``[*lead, 128, 64 (NVFP4) or 128]`` (index keys: lead ``("P",)``; K or V:
    ``("P", "Hkv")``) and its NVFP4 scales ``[*lead, 128, 8]``; returns the scales (None unless NVFP4)."""
    if cache.dtype not in (torch.uint8, torch.float8_e4m3fn, torch.bfloat16):
        raise TypeError(f"{name} must be uint8 (NVFP4), float8_e4m3fn or bfloat16, got {cache.dtype}")
    nvfp4 = cache.dtype == torch.uint8
    width = dim // 2 if nvfp4 else dim
    rank = len(lead) + 2
    if cache.dim() != rank or tuple(cache.shape[len(lead):]) != (PAGE_SIZE, width):
        raise ValueError(f"{name} must have shape [{', '.join(lead)}, {PAGE_SIZE}, {width}] for "
                         f"{'NVFP4' if nvfp4 else 'E4M3/BF16'} {what}, got {tuple(cache.shape)}")
    _check_inner_contiguous(name, cache)
    _check_device(name, cache, ref, ref_name)
    if nvfp4:
        if scales is None:
            raise ValueError(f"NVFP4 (uint8) {name} needs {scales_name}")
        scales = _require_tensor(scales_name, scales)
        if scales.dtype != torch.float8_e4m3fn:
            raise TypeError(f"{scales_name} must be float8_e4m3fn, got {scales.dtype}")
        expected = (*cache.shape[:len(lead)], PAGE_SIZE, dim // 16)
        if tuple(scales.shape) != expected:
            raise ValueError(f"{scales_name} must have shape {expected} to match {name}, got {tuple(scales.shape)}")
        _check_inner_contiguous(scales_name, scales)
        _check_device(scales_name, scales, ref, ref_name)
    elif scales is not None:
        raise ValueError(f"{scales_name} is only used with NVFP4 (uint8) {name}; E4M3/BF16 {what} are unscaled")
    return scales


def sparse_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, topk: torch.Tensor, page_table: torch.Tensor,
                  seq_lens: torch.Tensor, *, k_scales: torch.Tensor | None = None,
                  v_scales: torch.Tensor | None = None, sm_scale: float | None = None,
                  out: torch.Tensor | None = None, return_lse: bool = False, lse: torch.Tensor | None = None,
                  workspace: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """MSA sparse decode attention: each query token attends to the keys of the pages in its TopK row.

    Args:
        q: ``[B*Q, Hq, 128]`` queries (token ``t = b*Q + i``), float8_e4m3fn or bfloat16; ``Q = T / B`` in 1..16
            (B from ``seq_lens``). Any strides with a contiguous last dimension.
        k, v: the paged KV cache, one of: NVFP4 uint8 ``[P, Hkv, 128, 64]`` (with ``k_scales`` / ``v_scales``
            float8_e4m3fn ``[P, Hkv, 128, 8]``), float8_e4m3fn ``[P, Hkv, 128, 128]``, bfloat16
            ``[P, Hkv, 128, 128]``; the same format and shape for both. E4M3 ``q`` goes with NVFP4 or E4M3 K/V,
            BF16 ``q`` with BF16 K/V. ``Hq`` must be a multiple of ``Hkv`` (query head ``hq`` reads KV head
            ``hq // (Hq / Hkv)``; GQA 8 and 16 are the MiniMax-M3 cases). Any strides with a contiguous token
            row, e.g. ``buf[..., :128]`` and ``buf[..., 128:]`` of one ``[P, Hkv, 128, 256]`` K-then-V buffer.
        topk: int32 ``[Hkv, B*Q, W]`` logical page ids (W in 1..64; 16 in MSA v1), ``-1`` for no page, as
            :func:`index_decode` writes them; any strides (e.g. ``buf.transpose(0, 1)`` of a ``[B*Q, Hkv, W]``
            buffer).
        page_table: int32 ``[B, max_pages]`` (max_pages in 1..8192), contiguous last dimension: logical page
            ``j`` of request ``b`` is physical page ``page_table[b, j]``. Only entries of pages some row
            attends to are read.
        seq_lens: int32 ``[B]``, contiguous: the request's length *including* this step's Q tokens.
        k_scales, v_scales: float8_e4m3fn ``[P, Hkv, 128, 8]`` for NVFP4 K/V, else None.
        sm_scale: softmax scale (finite, > 0); default ``1/sqrt(128)``.
        out: optional bfloat16 ``[B*Q, Hq, 128]`` (contiguous last dimension) to write into; allocated when None.
        return_lse: also return the log-sum-exp.
        lse: optional float32 ``[B*Q, Hq]`` (any strides) to write the log-sum-exp into; allocated when None and
            ``return_lse``.
        workspace: reserved; accepted (a contiguous 1-D uint8 tensor on q's device) and ignored. No kernel
            needs one: the CUDA kernels split a token's (or a request's) pages over a thread-block cluster and
            merge the parts in distributed shared memory, so a CUDA-graph-captured call allocates nothing.

    CUDA kernels: per token (the TopK row of each token and KV head, split over a cluster), or on Hopper the union
    pass: each page of a request's rows is loaded and decoded once for all its Q <= 8 tokens, and 4 tokens share
    each warpgroup MMA. ``MSA_SPARSE_DECODE_UNION=2`` (default) picks it by a rule measured on the H200 (E4M3
    re-fit on an H100): Q = 8, enough (request, KV head) pairs to fill the GPU, and a ``page_table`` no wider than
    16-128 pages depending on the KV format (the union's size, and its time, grow with the context; the per-token
    kernel's do not); ``=1`` whenever it can serve the call, ``=0`` never. Engines that keep a wide page table get the rule by passing the
    table cut to the batch's longest request (``page_table[:, :max_pages_needed]``, a view). Both kernels give
    the same results within the tolerances below, not bit for bit.

    Returns:
        ``out`` bfloat16 ``[B*Q, Hq, 128]``, or ``(out, lse)`` with ``lse`` float32 ``[B*Q, Hq]`` when
        ``return_lse``.

    Semantics (shared/SPEC.md §2-§5; :mod:`msa_ops.reference.sparse_attention` is the executable definition):
        Token ``t = b*Q + i`` sits at ``pos = seq_lens[b] - Q + i``. For query head ``hq`` and its KV head
        ``hk``, the keys are those of every entry ``p >= 0`` of ``topk[hk, t]``: positions ``p*128 + j <= pos``
        of physical page ``page_table[b, p]`` (history pages whole, the local page ``pos // 128`` causally
        masked, pages past it nothing). ``out = softmax(sm_scale * q . k) @ v``, ``lse = log(sum(exp(sm_scale
        * q . k)))`` (natural log). NVFP4 K/V are dequantized to E4M3 first (``e4m3_rne_satfinite(e2m1 * s)``,
        as the MSA Q8KV4 kernels do); products and softmax are accumulated in fp32; ``out`` is rounded to
        bfloat16 once. On Hopper, with E4M3 ``q``, the CUDA op may compute ``q . k`` on the FP8 tensor cores
        (the union pass by default, knob ``MSA_SPARSE_DECODE_UNION_FP8S``; the per-token kernel on multi-wave
        grids by default, knob ``MSA_SPARSE_DECODE_SPLIT_FP8S``): the products are exact but each 32-product partial sum is kept at
        reduced precision, so scores and ``lse`` are off by up to ~2^-11 relative (tests allow 1e-3 + 1e-3
        ``|lse|``), far inside the 2^-4 rounding that E4M3 ``q`` and ``k`` already carry; ``out`` stays within
        the SPEC's 5e-2 / cosine 0.999 bar. Knobs at 0 give fp16 products of the same E4M3 values.
        **Rows are used as given**: a well-formed row (SPEC §4: distinct pages, the local page last, then -1)
        is what :func:`index_decode` writes; a page listed twice would be attended twice.
        **No key** (a padding token with ``pos < 0``, or a row of only -1): ``out`` is 0 and ``lse`` is
        ``-inf``, so an LSE-weighted combine of partial results gives such a part weight 0.

    The CPU op checks the topk and page_table values it reads (a page id outside ``page_table`` or outside
    ``k``/``v`` raises); the CUDA op does not read device values on the host (no sync): a token that meets
    such an id gets NaN in ``out`` and ``lse``.
    """
    q = _require_tensor("q", q)
    k = _require_tensor("k", k)
    v = _require_tensor("v", v)
    topk = _require_tensor("topk", topk)
    page_table = _require_tensor("page_table", page_table)
    seq_lens = _require_tensor("seq_lens", seq_lens)

    if q.dtype not in (torch.float8_e4m3fn, torch.bfloat16):
        raise TypeError(f"q must be float8_e4m3fn or bfloat16, got {q.dtype}")
    if q.dim() != 3 or q.shape[2] != HEAD_DIM:
        raise ValueError(f"q must have shape [B * Q, Hq, {HEAD_DIM}], got {tuple(q.shape)}")
    tokens, q_heads, _ = q.shape
    _check_inner_contiguous("q", q)

    k_scales = _check_paged_cache("k", k, "k_scales", k_scales, ("P", "Hkv"), HEAD_DIM, "values", q, "q")
    v_scales = _check_paged_cache("v", v, "v_scales", v_scales, ("P", "Hkv"), HEAD_DIM, "values", q, "q")
    if k.dtype != v.dtype:
        raise TypeError(f"k and v must have the same dtype, got {k.dtype} and {v.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    kv_heads = k.shape[1]
    if kv_heads < 1:
        raise ValueError(f"k must have at least one KV head, got shape {tuple(k.shape)}")
    if q_heads < 1 or q_heads % kv_heads != 0:
        raise ValueError(f"q's head count Hq = {q_heads} must be a positive multiple of the KV head count "
                         f"Hkv = {kv_heads}")
    if (q.dtype == torch.bfloat16) != (k.dtype == torch.bfloat16):
        raise TypeError(f"q ({q.dtype}) and k/v ({k.dtype}) do not go together: float8_e4m3fn q needs "
                        "float8_e4m3fn or NVFP4 (uint8) k/v, bfloat16 q needs bfloat16 k/v")

    batch, _ = _check_paged(page_table, seq_lens, None, q, "q")
    if batch == 0:
        if tokens != 0:
            raise ValueError(f"q has {tokens} query tokens but there are no requests (B = 0)")
    elif tokens % batch != 0 or not 1 <= tokens // batch <= MAX_QUERY_LEN:
        raise ValueError(f"q's token count T = {tokens} must be B * Q with B = {batch} requests (page_table / "
                         f"seq_lens) and Q in [1, {MAX_QUERY_LEN}]")

    if topk.dtype != torch.int32:
        raise TypeError(f"topk must be int32, got {topk.dtype}")
    if topk.dim() != 3 or tuple(topk.shape[:2]) != (kv_heads, tokens):
        raise ValueError(f"topk must have shape [Hkv = {kv_heads}, T = {tokens}, W] (KV heads, tokens, pages), "
                         f"got {tuple(topk.shape)}")
    if not 1 <= topk.shape[2] <= MAX_TOPK:
        raise ValueError(f"topk's row width W must be in [1, {MAX_TOPK}], got {topk.shape[2]}")
    _check_device("topk", topk, q, "q")

    if sm_scale is None:
        sm_scale = DEFAULT_SM_SCALE
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)):
        raise TypeError(f"sm_scale must be a Python float or None, got {type(sm_scale).__name__}")
    sm_scale = float(sm_scale)
    if not math.isfinite(sm_scale) or sm_scale <= 0.0:
        raise ValueError(f"sm_scale must be a finite positive number, got {sm_scale}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}")

    if out is None:
        out = torch.empty((tokens, q_heads, HEAD_DIM), dtype=torch.bfloat16, device=q.device)
    else:
        out = _require_tensor("out", out)
        if out.dtype != torch.bfloat16:
            raise TypeError(f"out must be bfloat16, got {out.dtype}")
        if tuple(out.shape) != (tokens, q_heads, HEAD_DIM):
            raise ValueError(f"out must have shape {(tokens, q_heads, HEAD_DIM)} (like q), got {tuple(out.shape)}")
        _check_inner_contiguous("out", out)
        _check_device("out", out, q, "q")
    if lse is None:
        if return_lse:
            lse = torch.empty((tokens, q_heads), dtype=torch.float32, device=q.device)
    else:
        lse = _require_tensor("lse", lse)
        if lse.dtype != torch.float32:
            raise TypeError(f"lse must be float32, got {lse.dtype}")
        if tuple(lse.shape) != (tokens, q_heads):
            raise ValueError(f"lse must have shape {(tokens, q_heads)} (tokens, query heads), got {tuple(lse.shape)}")
        _check_device("lse", lse, q, "q")
    if workspace is not None:
        workspace = _check_workspace(workspace, q, "q")

    torch.ops.msa.sparse_decode(q, k, v, k_scales, v_scales, topk, page_table, seq_lens, sm_scale, out, lse,
                                workspace)
    return (out, lse) if return_lse else out
