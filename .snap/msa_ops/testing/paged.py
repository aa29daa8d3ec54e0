"""Case generators for the paged ops (decode indexer, sparse decode attention): request lengths, page tables with a
chosen physical layout, random index-key and KV caches in every format, queries, well-formed TopK rows.

Everything is built on the CPU from a seed (``torch.Generator``) and moved to the device at the end, so a
case is the same on every machine. Data is random normal (never zeros) quantized to the op's format.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

__all__ = [
    "PAGE_SIZE", "INDEX_DIM", "KEY_FORMATS", "PAGE_LAYOUTS",
    "IndexDecodeCase", "pages_needed", "official_decode_lengths", "random_seq_lens", "make_page_table",
    "make_index_keys", "make_index_queries", "make_index_decode_case",
    "HEAD_DIM", "KV_FORMATS", "TOPK_SOURCES", "SparseDecodeCase", "make_kv_cache", "make_attention_queries",
    "random_topk_rows", "make_sparse_decode_case",
]

PAGE_SIZE = 128
INDEX_DIM = 128
#: Index-key cache formats: NVFP4 (uint8 codes + E4M3 scales), E4M3, BF16.
KEY_FORMATS = ("nvfp4", "e4m3", "bf16")
#: Physical page layouts of a batch's page table (see :func:`make_page_table`).
PAGE_LAYOUTS = ("disjoint", "permuted", "shared_prefix")


def pages_needed(seq_lens: torch.Tensor | list[int]) -> list[int]:
    """Logical pages each request's decode step reads: ``ceil(seq_len / 128)`` (0 for ``seq_len <= 0``)."""
    lens = seq_lens.tolist() if isinstance(seq_lens, torch.Tensor) else list(seq_lens)
    return [(n + PAGE_SIZE - 1) // PAGE_SIZE if n > 0 else 0 for n in lens]


def official_decode_lengths(batch: int, nominal: int) -> torch.Tensor:
    """Per-request lengths of the official MSA v1 decode suite case ``(B, N)`` (shared/SPEC.md §7), int32 [B]."""
    g = torch.Generator().manual_seed(1701 + 1009 * batch + nominal)
    lo = max(1, nominal // 20)
    hi = max(lo, nominal // 4)
    d = torch.randint(lo, hi + 1, (batch // 2,), generator=g, dtype=torch.int64)
    lens = torch.cat([nominal - d, nominal + d] + ([torch.tensor([nominal])] if batch % 2 else []))
    return lens[torch.randperm(batch, generator=g)].to(torch.int32)


def random_seq_lens(batch: int, low: int, high: int, *, generator: torch.Generator) -> torch.Tensor:
    """int32 [batch] lengths drawn uniformly from ``[low, high]``."""
    return torch.randint(low, high + 1, (batch,), generator=generator, dtype=torch.int64).to(torch.int32)


def make_page_table(seq_lens: torch.Tensor | list[int], layout: str = "permuted", *, max_pages: int | None = None,
                    shared_prefix_pages: int | None = None, spare_pages: int = 3, fill: int = -1,
                    generator: torch.Generator) -> tuple[torch.Tensor, int]:
    """A page table for requests of the given lengths: ``(page_table int32 [B, max_pages], physical_pages)``.

    Layouts:
        ``"disjoint"``: request ``b``'s pages are one ascending run of physical pages, requests one after the
        other (the friendliest layout for prefetching).
        ``"permuted"``: every request owns distinct physical pages, scattered by a random permutation.
        ``"shared_prefix"``: all requests share their first ``shared_prefix_pages`` logical pages (the same
        physical pages; default: half the shortest request's pages, at least 1), the rest is permuted.

    ``spare_pages`` extra physical pages are never referenced (so physical ids do not simply end at the last
    page used); entries past each request's needed pages hold ``fill`` (-1: any read of them is a bug).
    """
    if layout not in PAGE_LAYOUTS:
        raise ValueError(f"layout must be one of {PAGE_LAYOUTS}, got {layout!r}")
    needed = pages_needed(seq_lens)
    batch = len(needed)
    width = max_pages if max_pages is not None else max([1] + needed)
    if max(needed + [0]) > width:
        raise ValueError(f"max_pages {width} is smaller than the {max(needed)} pages a request needs")
    shared = 0
    if layout == "shared_prefix":
        shortest = min([n for n in needed if n > 0], default=0)
        shared = shared_prefix_pages if shared_prefix_pages is not None else max(1, shortest // 2)
        shared = min(shared, shortest)
    own = [n - shared if n > 0 else 0 for n in needed]
    physical_pages = shared + sum(own) + spare_pages
    if layout == "disjoint":
        ids = torch.arange(physical_pages)
    else:
        ids = torch.randperm(physical_pages, generator=generator)
    table = torch.full((batch, width), fill, dtype=torch.int32)
    prefix, cursor = ids[:shared], shared
    for b in range(batch):
        if needed[b] == 0:
            continue
        table[b, :shared] = prefix
        table[b, shared:needed[b]] = ids[cursor:cursor + own[b]]
        cursor += own[b]
    return table, max(physical_pages, 1)


def make_index_keys(num_pages: int, key_format: str, *, generator: torch.Generator, strided: bool = False,
                    pages_per_chunk: int = 512) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A random index-key cache ``(index_k, index_k_scales)`` on the CPU (shared/SPEC.md §3).

    ``"nvfp4"``: uint8 ``[P, 128, 64]`` + E4M3 ``[P, 128, 8]``, from random normal keys through
    :func:`msa_ops.nvfp4_quantize`; ``"e4m3"`` / ``"bf16"``: ``[P, 128, 128]`` random normal keys rounded to
    the format, scales None. Per-token magnitudes vary (x0.25..x4) so that page maxima differ.

    ``strided=True`` returns views into a bigger allocation instead of contiguous tensors: NVFP4 codes and
    scales side by side in one uint8 buffer ``[P + 1, 128, 80]``; E4M3/BF16 keys as the second half of a
    ``[P + 1, 2, 128, 144]`` buffer at a column offset (other page and token strides, a non-zero offset).
    """
    import msa_ops  # the NVFP4 quantizer (bit-exact, tested in tests/test_nvfp4.py)

    if key_format not in KEY_FORMATS:
        raise ValueError(f"key_format must be one of {KEY_FORMATS}, got {key_format!r}")
    chunks_k, chunks_s = [], []
    for start in range(0, num_pages, pages_per_chunk):
        n = min(pages_per_chunk, num_pages - start)
        keys = torch.randn((n, PAGE_SIZE, INDEX_DIM), generator=generator)
        keys *= 2.0 ** (torch.rand((n, PAGE_SIZE, 1), generator=generator) * 4 - 2)
        if key_format == "nvfp4":
            packed, scales = msa_ops.nvfp4_quantize(keys)
            chunks_k.append(packed)
            chunks_s.append(scales)
        else:
            chunks_k.append(keys.to(torch.float8_e4m3fn if key_format == "e4m3" else torch.bfloat16))
    index_k = torch.cat(chunks_k)
    index_k_scales = torch.cat(chunks_s) if chunks_s else None
    if not strided:
        return index_k, index_k_scales
    if key_format == "nvfp4":
        buf = torch.randint(0, 256, (num_pages + 1, PAGE_SIZE, 80), generator=generator, dtype=torch.uint8)
        buf[1:, :, :64] = index_k
        buf[1:, :, 64:72] = index_k_scales.view(torch.uint8)
        return buf[1:, :, :64], buf[1:, :, 64:72].view(torch.float8_e4m3fn)
    buf = torch.randn((num_pages + 1, 2, PAGE_SIZE, INDEX_DIM + 16), generator=generator).to(index_k.dtype)
    view = buf[1:, 1, :, 16:]
    view.copy_(index_k)
    return view, None


def make_index_queries(batch: int, q_len: int, heads: int, dtype: torch.dtype, *,
                       generator: torch.Generator, strided: bool = False) -> torch.Tensor:
    """Random normal index queries ``[B, Q, H, 128]`` in ``dtype`` (E4M3 or BF16) on the CPU.

    ``strided=True`` returns a view of a ``[B, Q, H + 1, 160]`` buffer (other strides, a non-zero offset).
    """
    q = torch.randn((batch, q_len, heads, INDEX_DIM), generator=generator).to(dtype)
    if not strided:
        return q
    buf = torch.randn((batch, q_len, heads + 1, INDEX_DIM + 32), generator=generator).to(dtype)
    view = buf[:, :, 1:, 32:]
    view.copy_(q)
    return view


@dataclass
class IndexDecodeCase:
    """The inputs of one :func:`msa_ops.index_decode` call (kwargs order of the op)."""

    q_idx: torch.Tensor
    index_k: torch.Tensor
    index_k_scales: torch.Tensor | None
    page_table: torch.Tensor
    seq_lens: torch.Tensor

    @property
    def batch(self) -> int:
        return self.q_idx.shape[0]

    @property
    def q_len(self) -> int:
        return self.q_idx.shape[1]

    @property
    def heads(self) -> int:
        return self.q_idx.shape[2]

    @property
    def tokens(self) -> int:
        return self.batch * self.q_len

    @property
    def max_pages(self) -> int:
        return self.page_table.shape[1]

    def to(self, device: torch.device | str) -> "IndexDecodeCase":
        """The same case on ``device``, keeping every view's strides (the whole base buffer is moved)."""
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            if t is None or t.device == torch.device(device):
                return t
            whole = t.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
            return whole.to(device).as_strided(t.shape, t.stride(), t.storage_offset())
        return replace(self, q_idx=move(self.q_idx), index_k=move(self.index_k),
                       index_k_scales=move(self.index_k_scales), page_table=move(self.page_table),
                       seq_lens=move(self.seq_lens))

    def call_args(self) -> tuple:
        """Positional args of ``msa_ops.index_decode`` (``index_k_scales`` goes as a keyword)."""
        return self.q_idx, self.index_k, self.page_table, self.seq_lens


def make_index_decode_case(seq_lens: torch.Tensor | list[int], *, q_len: int, heads: int, key_format: str,
                           layout: str = "permuted", seed: int = 0, max_pages: int | None = None,
                           strided: bool = False, device: torch.device | str = "cpu") -> IndexDecodeCase:
    """A complete random decode-indexer case for requests of the given lengths (``seq_lens`` counts the
    step's ``q_len`` tokens; lengths < q_len give padding tokens).

    E4M3 queries for NVFP4/E4M3 keys, BF16 queries for BF16 keys. ``strided=True``: queries, keys (and
    scales) and the page table are views into bigger allocations.
    """
    g = torch.Generator().manual_seed(seed)
    seq_lens = torch.as_tensor(seq_lens, dtype=torch.int32)
    page_table, physical = make_page_table(seq_lens, layout, max_pages=max_pages, generator=g)
    if strided:
        big = torch.full((page_table.shape[0] + 2, page_table.shape[1] + 5), -1, dtype=torch.int32)
        big[1:-1, 2:-3] = page_table
        page_table = big[1:-1, 2:-3]
    index_k, index_k_scales = make_index_keys(physical, key_format, generator=g, strided=strided)
    q_dtype = torch.bfloat16 if key_format == "bf16" else torch.float8_e4m3fn
    q_idx = make_index_queries(len(seq_lens), q_len, heads, q_dtype, generator=g, strided=strided)
    return IndexDecodeCase(q_idx, index_k, index_k_scales, page_table, seq_lens).to(device)


# ---- sparse decode attention ------------------------------------------------------------------------------

HEAD_DIM = 128
#: KV cache formats of the sparse attention: NVFP4 (Q8KV4), E4M3 (Q8KV8), BF16.
KV_FORMATS = ("nvfp4", "e4m3", "bf16")
#: Where a sparse-decode case's TopK rows come from (see :func:`make_sparse_decode_case`).
TOPK_SOURCES = ("random", "indexer")


def make_kv_cache(num_pages: int, kv_heads: int, kv_format: str, *, generator: torch.Generator,
                  fused: bool = False, pages_per_chunk: int = 256):
    """A random paged KV cache ``(k, v, k_scales, v_scales)`` on the CPU (shared/SPEC.md §3).

    ``"nvfp4"``: uint8 ``[P, Hkv, 128, 64]`` + E4M3 ``[P, Hkv, 128, 8]`` each, quantized from random normal
    data with :func:`msa_ops.nvfp4_quantize`; ``"e4m3"`` / ``"bf16"``: ``[P, Hkv, 128, 128]`` random normal
    data rounded to the format, scales None. Key magnitudes vary per token (x0.5..x2).

    ``fused=True`` returns views into one allocation per page, as engines store them: E4M3/BF16 K and V as the
    halves of a ``[P, Hkv, 128, 256]`` K-then-V buffer; NVFP4 as one uint8 ``[P, Hkv, 128, 144]`` buffer
    holding K codes, V codes, K scales, V scales side by side.
    """
    import msa_ops  # the NVFP4 quantizer (bit-exact, tested in tests/test_nvfp4.py)

    if kv_format not in KV_FORMATS:
        raise ValueError(f"kv_format must be one of {KV_FORMATS}, got {kv_format!r}")
    parts: dict[str, list[torch.Tensor]] = {"k": [], "v": [], "k_scales": [], "v_scales": []}
    for start in range(0, num_pages, pages_per_chunk):
        n = min(pages_per_chunk, num_pages - start)
        keys = torch.randn((n, kv_heads, PAGE_SIZE, HEAD_DIM), generator=generator)
        keys *= 2.0 ** (torch.rand((n, kv_heads, PAGE_SIZE, 1), generator=generator) * 2 - 1)
        values = torch.randn((n, kv_heads, PAGE_SIZE, HEAD_DIM), generator=generator)
        for name, data in (("k", keys), ("v", values)):
            if kv_format == "nvfp4":
                packed, scales = msa_ops.nvfp4_quantize(data)
                parts[name].append(packed)
                parts[name + "_scales"].append(scales)
            else:
                parts[name].append(data.to(torch.float8_e4m3fn if kv_format == "e4m3" else torch.bfloat16))
    k, v = torch.cat(parts["k"]), torch.cat(parts["v"])
    k_scales = torch.cat(parts["k_scales"]) if parts["k_scales"] else None
    v_scales = torch.cat(parts["v_scales"]) if parts["v_scales"] else None
    if not fused:
        return k, v, k_scales, v_scales
    if kv_format == "nvfp4":
        buf = torch.empty((num_pages, kv_heads, PAGE_SIZE, 144), dtype=torch.uint8)
        buf[..., :64], buf[..., 64:128] = k, v
        buf[..., 128:136], buf[..., 136:] = k_scales.view(torch.uint8), v_scales.view(torch.uint8)
        return (buf[..., :64], buf[..., 64:128], buf[..., 128:136].view(torch.float8_e4m3fn),
                buf[..., 136:].view(torch.float8_e4m3fn))
    buf = torch.cat([k, v], dim=-1)  # [P, Hkv, 128, 256], K then V
    return buf[..., :HEAD_DIM], buf[..., HEAD_DIM:], None, None


def make_attention_queries(tokens: int, heads: int, dtype: torch.dtype, *,
                           generator: torch.Generator) -> torch.Tensor:
    """Random attention queries ``[T, Hq, 128]`` in ``dtype`` (E4M3 or BF16) on the CPU.

    Magnitudes vary per (token, head) (x0.5..x4), so some softmax rows are flat and others peaked.
    """
    q = torch.randn((tokens, heads, HEAD_DIM), generator=generator)
    q *= 2.0 ** (torch.rand((tokens, heads, 1), generator=generator) * 3 - 1)
    return q.to(dtype)


def random_topk_rows(seq_lens: torch.Tensor | list[int], q_len: int, kv_heads: int, topk: int = 16, *,
                     generator: torch.Generator) -> torch.Tensor:
    """Well-formed random TopK rows, int32 ``[Hkv, B*Q, topk]`` (shared/SPEC.md §4; the official benchmark's
    attention inputs, SPEC §7).

    Token ``t = b*Q + i`` at ``pos = seq_lens[b] - Q + i``, local page ``pos // 128``: when ``local + 1 <=
    topk`` the row is ``0 .. local``; otherwise ``topk - 1`` distinct history pages drawn uniformly from
    ``[0, local)`` in random order, then the local page. Padding tokens (``pos < 0``) get all -1.
    """
    lens = seq_lens.tolist() if isinstance(seq_lens, torch.Tensor) else list(seq_lens)
    rows = torch.full((kv_heads, len(lens) * q_len, topk), -1, dtype=torch.int32)
    for b, n in enumerate(lens):
        for i in range(q_len):
            pos = n - q_len + i
            if pos < 0:
                continue
            local = pos // PAGE_SIZE
            t = b * q_len + i
            for h in range(kv_heads):
                if local + 1 <= topk:
                    rows[h, t, :local + 1] = torch.arange(local + 1, dtype=torch.int32)
                else:
                    history = torch.randperm(local, generator=generator)[:topk - 1]
                    rows[h, t] = torch.cat([history, torch.tensor([local])]).to(torch.int32)
    return rows


def _move(t: torch.Tensor | None, device, moved: dict) -> torch.Tensor | None:
    """``t`` on ``device`` with the same strides and offset; views of one storage stay views of one storage."""
    if t is None or t.device == torch.device(device):
        return t
    storage = t.untyped_storage()
    key = storage.data_ptr()
    if key not in moved:
        whole = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)  # the whole storage, as bytes
        moved[key] = whole.to(device)
    return moved[key].view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())


@dataclass
class SparseDecodeCase:
    """The inputs of one :func:`msa_ops.sparse_decode` call."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    k_scales: torch.Tensor | None
    v_scales: torch.Tensor | None
    topk: torch.Tensor
    page_table: torch.Tensor
    seq_lens: torch.Tensor

    @property
    def batch(self) -> int:
        return self.seq_lens.shape[0]

    @property
    def tokens(self) -> int:
        return self.q.shape[0]

    @property
    def q_len(self) -> int:
        return self.tokens // self.batch

    @property
    def q_heads(self) -> int:
        return self.q.shape[1]

    @property
    def kv_heads(self) -> int:
        return self.k.shape[1]

    @property
    def max_pages(self) -> int:
        return self.page_table.shape[1]

    def to(self, device: torch.device | str) -> "SparseDecodeCase":
        """The same case on ``device``, keeping every view's strides (whole storages are moved, so K and V
        that are views of one buffer stay views of one buffer)."""
        moved: dict = {}
        return replace(self, **{name: _move(getattr(self, name), device, moved) for name in
                                ("q", "k", "v", "k_scales", "v_scales", "topk", "page_table", "seq_lens")})

    def call_args(self) -> tuple:
        """Positional args of ``msa_ops.sparse_decode``."""
        return self.q, self.k, self.v, self.topk, self.page_table, self.seq_lens

    def call_kwargs(self) -> dict:
        """The scale keywords of ``msa_ops.sparse_decode``."""
        return {"k_scales": self.k_scales, "v_scales": self.v_scales}


def make_sparse_decode_case(seq_lens: torch.Tensor | list[int], *, q_len: int, q_heads: int, kv_heads: int,
                            kv_format: str, layout: str = "permuted", topk_source: str = "random", topk: int = 16,
                            seed: int = 0, max_pages: int | None = None, fused_kv: bool = False,
                            device: torch.device | str = "cpu") -> SparseDecodeCase:
    """A complete random sparse-decode case for requests of the given lengths (``seq_lens`` counts the step's
    ``q_len`` tokens; lengths < q_len give padding tokens).

    E4M3 queries for NVFP4/E4M3 K/V, BF16 queries for BF16 K/V. TopK rows: ``"random"`` from
    :func:`random_topk_rows`; ``"indexer"`` from :func:`msa_ops.index_decode` (on the CPU) over a random NVFP4
    index-key cache sharing the page table (one index head per KV head, so ``kv_heads`` in {1, 2, 4}).
    ``fused_kv``: K and V are views of one buffer (:func:`make_kv_cache`).
    """
    import msa_ops

    if topk_source not in TOPK_SOURCES:
        raise ValueError(f"topk_source must be one of {TOPK_SOURCES}, got {topk_source!r}")
    g = torch.Generator().manual_seed(seed)
    seq_lens = torch.as_tensor(seq_lens, dtype=torch.int32)
    batch = seq_lens.shape[0]
    page_table, physical = make_page_table(seq_lens, layout, max_pages=max_pages, generator=g)
    k, v, k_scales, v_scales = make_kv_cache(physical, kv_heads, kv_format, generator=g, fused=fused_kv)
    q_dtype = torch.bfloat16 if kv_format == "bf16" else torch.float8_e4m3fn
    q = make_attention_queries(batch * q_len, q_heads, q_dtype, generator=g)
    if topk_source == "random":
        rows = random_topk_rows(seq_lens, q_len, kv_heads, topk, generator=g)
    else:
        index_k, index_k_scales = make_index_keys(physical, "nvfp4", generator=g)
        q_idx = make_index_queries(batch, q_len, kv_heads, torch.float8_e4m3fn, generator=g)
        rows = msa_ops.index_decode(q_idx, index_k, page_table, seq_lens, index_k_scales=index_k_scales, topk=topk)
    return SparseDecodeCase(q, k, v, k_scales, v_scales, rows, page_table, seq_lens).to(device)
