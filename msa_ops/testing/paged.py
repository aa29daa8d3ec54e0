"""Case generators for the paged ops (indexer now, sparse attention later): request lengths, page tables with a
chosen physical layout, random index-key caches in every format, index queries.

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
