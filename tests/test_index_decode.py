"""Decode indexer (index_decode, topk_select) against msa_ops.reference.indexer, on the CPU always and on CUDA
when present. Bars from shared/SPEC.md §6: scores abs/rel 1e-4 with poisoned outputs, TopK structure exact and
history sets equal up to ties within 1e-5 relative, bitwise repeatability."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

import msa_ops
from msa_ops.reference import indexer as R
from msa_ops.testing import DEVICES, poison_cuda_allocator, requires_cuda, skip_cuda_without_kernel
from msa_ops.testing.indexer import (assert_scores_close, assert_topk_contract, assert_topk_equal, poison_scores,
                                     poison_topk)
from msa_ops.testing.paged import KEY_FORMATS, PAGE_LAYOUTS, make_index_decode_case

# 2049 = 16 * 128 + 1: the first length whose last token has a page to choose (local + 1 > 16).
LENGTHS = [1, 127, 128, 129, 2047, 2048, 2049, 12_877]


@pytest.fixture(autouse=True)
def _skip_cuda_until_kernel_lands(request):
    skip_cuda_without_kernel(request, "index_decode")


def _check_case(case, topk: int = 16, init_blocks: int = 0, local_blocks: int = 1, out=None, scores_out=None,
                what: str = ""):
    """Runs index_decode with poisoned outputs (the kernel first, then the reference) and checks everything."""
    device = case.q_idx.device
    poison_cuda_allocator()
    if out is None:
        out = poison_topk(case.heads, case.tokens, topk, device)
    if scores_out is None:
        scores_out = poison_scores(case.heads, case.tokens, case.max_pages, device)
    result = msa_ops.index_decode(*case.call_args(), index_k_scales=case.index_k_scales, topk=topk,
                                  init_blocks=init_blocks, local_blocks=local_blocks, out=out, scores_out=scores_out)
    assert result is out

    cpu = case.to("cpu")
    ref_scores = R.index_scores_decode(cpu.q_idx, cpu.index_k, cpu.page_table, cpu.seq_lens, cpu.index_k_scales)
    positions = R.decode_positions(cpu.seq_lens, case.q_len)
    assert_scores_close(scores_out, ref_scores, what=f"{what} scores")
    assert_topk_contract(out, ref_scores, positions, topk, init_blocks, local_blocks, what=f"{what} topk")
    # The selection on the kernel's own scores is exactly defined (ties to the lower page id).
    own = R.topk_select_reference(scores_out.cpu(), positions, topk, init_blocks, local_blocks)
    assert_topk_equal(out, own, topk, init_blocks, local_blocks, positions, what=f"{what} topk vs own scores")
    # Without scores_out (scores in an internal buffer, or in the caller's poisoned workspace; with
    # max_pages <= topk nothing is scored at all) the TopK is the same.
    again = msa_ops.index_decode(*case.call_args(), index_k_scales=case.index_k_scales, topk=topk,
                                 init_blocks=init_blocks, local_blocks=local_blocks)
    assert_topk_equal(again, out, what=f"{what} topk without scores_out")
    need = msa_ops.index_decode_workspace_bytes(case.heads, case.tokens, case.max_pages)
    workspace = torch.full((need + 64,), 0xFF, dtype=torch.uint8, device=device)  # 0xFFFFFFFF: NaN scores
    again = msa_ops.index_decode(*case.call_args(), index_k_scales=case.index_k_scales, topk=topk,
                                 init_blocks=init_blocks, local_blocks=local_blocks,
                                 out=poison_topk(case.heads, case.tokens, topk, device), workspace=workspace)
    assert_topk_equal(again, out, what=f"{what} topk with a workspace")
    assert bool((workspace[need:] == 0xFF).all()), "wrote past the workspace's scores"
    if case.max_pages <= topk:
        assert bool((workspace == 0xFF).all()), "nothing to score, yet the workspace was written"
    else:
        # Each request's needed pages are scored in the workspace exactly as in scores_out (the CUDA op runs
        # them through its flat grid of length-sized runs, scores_out through the 2-D grid).
        ws_scores = workspace[:need].view(torch.float32).view(case.heads, case.tokens, case.max_pages).cpu()
        needed = [(int(n) - 1) // 128 + 1 if int(n) >= 1 else 0 for n in cpu.seq_lens]
        for t in range(case.tokens):
            n = needed[t // case.q_len]
            torch.testing.assert_close(ws_scores[:, t, :n], scores_out[:, t, :n].cpu(), rtol=0, atol=0,
                                       equal_nan=True, msg=lambda m: f"{what} workspace scores, token {t}: {m}")
    return out, scores_out, ref_scores


# ---- the reference itself, against a brute-force loop ----------------------------------------------------

def test_reference_scores_brute_force():
    case = make_index_decode_case([300, 5, 129], q_len=8, heads=2, key_format="nvfp4", layout="shared_prefix",
                                  seed=1)
    ref = R.index_scores_decode(case.q_idx, case.index_k, case.page_table, case.seq_lens, case.index_k_scales)
    keys = R.dequantize_index_keys(case.index_k, case.index_k_scales).double()
    q = case.q_idx.double()
    for b, seq_len in enumerate(case.seq_lens.tolist()):
        for i in range(case.q_len):
            t, pos = b * case.q_len + i, seq_len - case.q_len + i
            for h in range(case.heads):
                for j in range(case.max_pages):
                    dots = [float(q[b, i, h] @ keys[int(case.page_table[b, j]), k])
                            for k in range(128) if j * 128 + k <= pos]
                    expected = max(dots) if dots else -math.inf
                    assert ref[h, t, j].item() == pytest.approx(expected, rel=1e-6, abs=1e-6), (b, i, h, j)


def test_reference_topk_brute_force():
    g = torch.Generator().manual_seed(3)
    scores = torch.randint(-3, 4, (2, 40, 30), generator=g).float()  # many ties
    scores[0, :, 5] = math.nan
    positions = torch.randint(-200, 30 * 128, (40,), generator=g, dtype=torch.int32)
    for topk, init_blocks, local_blocks in [(16, 0, 1), (16, 2, 3), (8, 1, 1), (4, 0, 4)]:
        got = R.topk_select_reference(scores, positions, topk, init_blocks, local_blocks)
        for h in range(2):
            for t, pos in enumerate(positions.tolist()):
                row = [-1] * topk
                if pos >= 0:
                    local = pos // 128
                    if local + 1 <= topk:
                        row[:local + 1] = range(local + 1)
                    else:
                        first_window = local - local_blocks + 1
                        key = {p: (-math.inf if math.isnan(s) else s)
                               for p, s in enumerate(scores[h, t].tolist())}
                        history = sorted(range(init_blocks, first_window), key=lambda p: (-key[p], p))
                        chosen = list(range(init_blocks)) + history[:topk - init_blocks - local_blocks]
                        row = chosen + list(range(first_window, local + 1))
                assert got[h, t].tolist() == row, (topk, init_blocks, local_blocks, h, t, pos)


# ---- scores and TopK against the reference ----------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("key_format", KEY_FORMATS)
@pytest.mark.parametrize("index", range(len(LENGTHS)), ids=[str(n) for n in LENGTHS])
def test_lengths(device, key_format, index):
    length = LENGTHS[index]
    q_len, heads = [1, 2, 8, 16][index % 4], [1, 2, 4][index % 3]
    seq_lens = [length, max(1, length * 7 // 8), length + 3]
    case = make_index_decode_case(seq_lens, q_len=q_len, heads=heads, key_format=key_format, seed=10 + index,
                                  device=device)
    _check_case(case, what=f"{key_format} len {length} Q {q_len} H {heads}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("q_len", [1, 2, 8, 16])
@pytest.mark.parametrize("heads", [1, 2, 4])
def test_query_lengths_and_heads(device, q_len, heads):
    g = torch.Generator().manual_seed(100 * q_len + heads)
    seq_lens = torch.randint(1, 4000, (4,), generator=g).tolist()
    case = make_index_decode_case(seq_lens, q_len=q_len, heads=heads, key_format="e4m3", seed=q_len + heads,
                                  device=device)
    _check_case(case, what=f"Q {q_len} H {heads}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", PAGE_LAYOUTS)
@pytest.mark.parametrize("key_format", KEY_FORMATS)
def test_page_layouts(device, layout, key_format):
    case = make_index_decode_case([2500, 300, 2049, 1800, 129], q_len=8, heads=4, key_format=key_format,
                                  layout=layout, seed=7, device=device)
    _check_case(case, what=f"{layout} {key_format}")


@pytest.mark.parametrize("device", DEVICES)
def test_padding_rows(device):
    # pos = seq_lens - Q + i < 0 marks padding: seq_lens < Q (partially), 0 or negative (entirely).
    q_len = 8
    seq_lens = [0, 1, 5, q_len - 1, q_len, -3, 2100, 129]
    case = make_index_decode_case(seq_lens, q_len=q_len, heads=2, key_format="nvfp4", seed=5, device=device)
    out, scores, _ = _check_case(case, what="padding")
    positions = R.decode_positions(case.seq_lens.cpu(), q_len)
    padding = positions < 0
    assert int(padding.sum()) == 8 + 7 + 3 + 1 + 0 + 8
    assert bool((out.cpu()[:, padding] == -1).all())
    assert bool((scores.cpu()[:, padding] == -math.inf).all())
    # An all-padding batch (e.g. CUDA-graph padding requests): every row -1.
    idle = make_index_decode_case([0, 0], q_len=4, heads=4, key_format="e4m3", seed=6, device=device)
    out, scores, _ = _check_case(idle, what="all padding")
    assert bool((out == -1).all()) and bool((scores == -math.inf).all())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("topk,init_blocks,local_blocks", [
    (16, 1, 1), (16, 2, 3), (16, 0, 4), (16, 4, 2), (16, 15, 1), (16, 0, 16), (8, 1, 2), (32, 2, 2), (1, 0, 1)])
def test_init_and_local_blocks(device, topk, init_blocks, local_blocks):
    # Lengths around local + 1 = topk (the row switches from 0..local to a selection) and well past it.
    seq_lens = [topk * 128, topk * 128 + 1, topk * 128 + 130, 5000, 300]
    case = make_index_decode_case(seq_lens, q_len=2, heads=2, key_format="nvfp4", seed=topk + 10 * init_blocks,
                                  device=device)
    out, _, _ = _check_case(case, topk, init_blocks, local_blocks, what=f"K {topk} I {init_blocks} L {local_blocks}")
    # Spot-check the documented layout on the longest request: init pages, history, window ending at local.
    row = out[0, 6].tolist()  # request 3, token 0: pos 4998, local page 39
    assert row[:init_blocks] == list(range(init_blocks))
    assert row[topk - local_blocks:] == list(range(40 - local_blocks, 40))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("key_format", KEY_FORMATS)
def test_strided_views(device, key_format):
    # q, keys, scales and the page table are views into bigger allocations; out is a transposed [T, H, 16]
    # buffer and scores_out a column slice of a wider one.
    case = make_index_decode_case([3000, 129, 2200], q_len=8, heads=4, key_format=key_format, strided=True,
                                  seed=21, device=device)
    assert not case.q_idx.is_contiguous() and not case.index_k.is_contiguous()
    assert not case.page_table.is_contiguous()
    out_buf = torch.full((case.tokens, case.heads, 16), -7, dtype=torch.int32, device=device)
    scores_buf = torch.full((case.heads, case.tokens, case.max_pages + 9), math.nan, device=device)
    out, scores, _ = _check_case(case, out=out_buf.transpose(0, 1), scores_out=scores_buf[..., 4:4 + case.max_pages],
                                 what=f"views {key_format}")
    assert bool(scores_buf[..., :4].isnan().all()) and bool(scores_buf[..., 4 + case.max_pages:].isnan().all()), \
        "wrote outside scores_out"
    dense = [t.contiguous() for t in case.call_args()]
    scales = None if case.index_k_scales is None else case.index_k_scales.contiguous()
    assert_topk_equal(out, msa_ops.index_decode(*dense, index_k_scales=scales), what="views vs contiguous")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch, q_len, heads", [(24, 2, 4), (128, 2, 4), (130, 2, 4), (128, 8, 4), (128, 8, 1)])
def test_many_uneven_requests(device, batch, q_len, heads):
    # Lengths spread over orders of magnitude, padding requests among them: the CUDA op sizes its runs from the
    # true lengths (flat grid: 2..128 requests and runs of >= 8 pages on the 2-D grid, so max_pages >= 8 x 528 /
    # B on the H200; 130 requests take the 2-D grid; 128 requests of Q x H = 32 or 8 rows with a table of <= 128
    # pages take 4-page runs on the 2-D grid), and _check_case compares the workspace's scores with scores_out's page
    # by page.
    g = torch.Generator().manual_seed(batch + q_len)
    lens = torch.randint(1, 24_000 if batch <= 24 else 4_500, (batch,), generator=g)
    lens[torch.randperm(batch, generator=g)[:3]] = torch.tensor([0, 3, 2049 + batch])
    case = make_index_decode_case(lens.tolist(), q_len=q_len, heads=heads, key_format="nvfp4",
                                  seed=41 + batch + q_len + heads, device=device)
    _check_case(case, what=f"{batch} uneven requests, Q {q_len}, H {heads}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("key_format", KEY_FORMATS)
def test_long_context_100k(device, key_format):
    case = make_index_decode_case([100_000, 61_234], q_len=2, heads=1, key_format=key_format, seed=31,
                                  device=device)
    _check_case(case, what=f"100K {key_format}")


@pytest.mark.parametrize("device", DEVICES)
def test_long_context_1m(device):
    # 8192 pages = the page-table limit; one request, full width.
    case = make_index_decode_case([8192 * 128], q_len=1, heads=1, key_format="nvfp4", seed=41, device=device)
    assert case.max_pages == 8192
    _check_case(case, what="1M nvfp4")


@pytest.mark.parametrize("device", DEVICES)
def test_nan_keys(device):
    # A NaN key (NVFP4 scale 0x7F, what the quantizer writes for a NaN/Inf group) makes the scores of the
    # tokens that see it NaN; a NaN page ranks like -inf, so it is only chosen when nothing else is left.
    case = make_index_decode_case([5000, 5000], q_len=2, heads=2, key_format="nvfp4", layout="disjoint", seed=121)
    scales = case.index_k_scales.view(torch.uint8)
    nan_pages = [int(case.page_table[0, j]) for j in (3, 20)] + [int(case.page_table[1, 39])]
    scales[nan_pages[0], 5, 2] = 0x7F      # one group of one key of history page 3 (request 0)
    scales[nan_pages[1], :, :] = 0x7F      # all of history page 20 (request 0)
    scales[nan_pages[2], 127, 0] = 0x7F    # the last key of request 1's local page 39: visible to no token
    case = case.to(device)
    out, scores, ref = _check_case(case, what="NaN keys")
    ref = ref.cpu()
    assert bool(ref[:, :2, [3, 20]].isnan().all()) and not bool(ref[:, 2:].isnan().any())
    assert not bool((out.cpu()[:, :2] == 3).any()) and not bool((out.cpu()[:, :2] == 20).any())


# ---- topk_select on its own -------------------------------------------------------------------------------

def _tied_scores(heads, tokens, max_pages, seed, device):
    """Scores with many exact ties, -inf, NaN, +0 and -0."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(-4, 5, (heads, tokens, max_pages), generator=g).float() * 0.5
    special = torch.tensor([-math.inf, math.nan, 0.0, -0.0, 1e30])
    pick = torch.randint(0, 40, scores.shape, generator=g)
    scores = torch.where(pick < 5, special[pick.clamp(max=4)], scores)
    return scores.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("topk,init_blocks,local_blocks", [(16, 0, 1), (16, 2, 3), (8, 0, 8), (64, 3, 1)])
def test_topk_select_ties_and_specials(device, topk, init_blocks, local_blocks):
    heads, tokens, max_pages = 3, 200, 300
    scores = _tied_scores(heads, tokens, max_pages, seed=topk + init_blocks, device=device)
    g = torch.Generator().manual_seed(9)
    positions = torch.randint(-300, max_pages * 128, (tokens,), generator=g, dtype=torch.int32)
    positions[:6] = torch.tensor([-1, 0, topk * 128 - 1, topk * 128, max_pages * 128 - 1, 127], dtype=torch.int32)
    positions = positions.to(device)
    out = poison_topk(heads, tokens, topk, device)
    result = msa_ops.topk_select(scores, positions, topk=topk, init_blocks=init_blocks, local_blocks=local_blocks,
                                 out=out)
    assert result is out
    expected = R.topk_select_reference(scores.cpu(), positions.cpu(), topk, init_blocks, local_blocks)
    assert_topk_equal(out, expected, topk, init_blocks, local_blocks, positions, what="topk_select")
    assert_topk_contract(out, scores, positions, topk, init_blocks, local_blocks, tie_rtol=0.0)


def _long_row_scores(heads, tokens, max_pages, seed, device):
    """Rows of seven kinds, by token: exact ties and specials (_tied_scores), all equal, all NaN or -inf, 0 with a
    rare 1 (one page in 256: the threshold mostly falls among the tied zeros), distinct, increasing and decreasing
    with the page id (the best pages at one end, in the first or last quarter of a row split over 4 warps). Head 1
    holds the negated scores (+inf where head 0 has -inf)."""
    g = torch.Generator().manual_seed(seed)
    pages = torch.arange(max_pages, dtype=torch.float32)
    kinds = [
        _tied_scores(1, 1, max_pages, seed, "cpu")[0, 0],
        torch.full((max_pages,), 0.5),
        torch.where(torch.rand(max_pages, generator=g) < 0.5, math.nan, -math.inf),
        (torch.rand(max_pages, generator=g) < 1 / 256).float(),
        torch.randn(max_pages, generator=g),
        pages,
        -pages,
    ]
    rows = torch.stack([kinds[t % len(kinds)] for t in range(tokens)])
    return torch.stack([rows, -rows][:heads]).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("max_pages", [258, 782, 1563, 2049, 3000, 8192])
@pytest.mark.parametrize("topk,init_blocks,local_blocks", [(16, 0, 1), (16, 2, 3), (8, 0, 1), (32, 2, 2), (64, 3, 1)])
def test_topk_select_long_rows(device, max_pages, topk, init_blocks, local_blocks):
    # Rows of more than 256 candidates: the CUDA op gives each one warp with 16, 32 or 64 registers a lane (one CTA
    # past 2048 candidates); history 7 / 11 / 15 / 28 / 60 take the kept-keys step or the bitwise search.
    # Positions: padding, every page fits, the first rows with a choice, short rows and rows up to the full width.
    heads, tokens = 2, 28
    scores = _long_row_scores(heads, tokens, max_pages, seed=max_pages + topk + init_blocks, device=device)
    g = torch.Generator().manual_seed(max_pages)
    positions = torch.randint(max_pages * 96, max_pages * 128, (tokens,), generator=g, dtype=torch.int32)
    positions[4:10] = torch.randint(0, max_pages * 128, (6,), generator=g, dtype=torch.int32)
    positions[:4] = torch.tensor([-5, topk * 128 - 1, topk * 128 + 5, max_pages // 3 * 128 + 7], dtype=torch.int32)
    positions[-7:] = max_pages * 128 - 1  # the widest row, once per kind
    positions = positions.to(device)
    out = poison_topk(heads, tokens, topk, device)
    msa_ops.topk_select(scores, positions, topk=topk, init_blocks=init_blocks, local_blocks=local_blocks, out=out)
    expected = R.topk_select_reference(scores.cpu(), positions.cpu(), topk, init_blocks, local_blocks)
    assert_topk_equal(out, expected, topk, init_blocks, local_blocks, positions, what=f"long rows, {max_pages} pages")
    assert_topk_contract(out, scores, positions, topk, init_blocks, local_blocks, tie_rtol=0.0)


@pytest.mark.parametrize("device", DEVICES)
def test_topk_select_views_and_index_decode_agree(device):
    case = make_index_decode_case([5000, 2100, 3, 129], q_len=4, heads=2, key_format="e4m3", seed=51, device=device)
    scores = poison_scores(case.heads, case.tokens, case.max_pages, device)
    out = msa_ops.index_decode(*case.call_args(), scores_out=scores)
    positions = R.decode_positions(case.seq_lens, case.q_len).to(torch.int32)
    assert_topk_equal(msa_ops.topk_select(scores, positions), out, what="topk_select vs index_decode")
    # scores given as a [T, H, max_pages] buffer viewed head-major, out as a transposed buffer.
    t_major = scores.transpose(0, 1).contiguous().transpose(0, 1)
    out_buf = torch.full((case.tokens, case.heads, 16), -7, dtype=torch.int32, device=device)
    msa_ops.topk_select(t_major, positions, out=out_buf.transpose(0, 1))
    assert_topk_equal(out_buf.transpose(0, 1), out, what="topk_select views")


# ---- contract, errors, repeatability, compile ----------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("key_format", KEY_FORMATS)
def test_repeatable(device, key_format):
    case = make_index_decode_case([20_000, 3000, 700], q_len=8, heads=4, key_format=key_format, seed=61,
                                  device=device)
    runs = []
    for _ in range(3):
        scores = poison_scores(case.heads, case.tokens, case.max_pages, device)
        out = msa_ops.index_decode(*case.call_args(), index_k_scales=case.index_k_scales, scores_out=scores)
        runs.append((out, scores))
    for out, scores in runs[1:]:
        assert torch.equal(out, runs[0][0])
        assert torch.equal(scores.view(torch.int32), runs[0][1].view(torch.int32))


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_raise_clear_errors(device):
    case = make_index_decode_case([300, 200], q_len=2, heads=2, key_format="nvfp4", seed=71, device=device)
    e4m3 = make_index_decode_case([300, 200], q_len=2, heads=2, key_format="e4m3", seed=71, device=device)
    bf16 = make_index_decode_case([300, 200], q_len=2, heads=2, key_format="bf16", seed=71, device=device)
    q, k, pt, sl, ks = case.q_idx, case.index_k, case.page_table, case.seq_lens, case.index_k_scales

    def call(q=q, k=k, pt=pt, sl=sl, **kw):
        kw.setdefault("index_k_scales", ks)
        return msa_ops.index_decode(q, k, pt, sl, **kw)

    def raises(exc, match, **kw):
        with pytest.raises(exc, match=match):
            call(**kw)

    raises(TypeError, "q_idx must be a torch.Tensor", q=[1.0])
    raises(TypeError, "q_idx must be float8_e4m3fn or bfloat16", q=q.float())
    raises(ValueError, r"q_idx must have shape \[B, Q, H, 128\]", q=q[..., :64])
    raises(ValueError, "query length Q", q=torch.zeros(2, 17, 2, 128, device=device).to(torch.float8_e4m3fn))
    raises(ValueError, "index head count H", q=q[:, :, :1].expand(2, 2, 3, 128))
    raises(ValueError, "last dimension of q_idx must be contiguous",
           q=torch.zeros(2, 2, 2, 256, device=device).to(torch.float8_e4m3fn)[..., ::2])
    raises(TypeError, "index_k must be uint8", k=k.to(torch.int16))
    raises(ValueError, r"index_k must have shape \[P, 128, 64\]", k=k[:, :, :32])
    raises(ValueError, "needs index_k_scales", index_k_scales=None)
    raises(TypeError, "index_k_scales must be float8_e4m3fn", index_k_scales=ks.view(torch.uint8))
    raises(ValueError, "index_k_scales must have shape", index_k_scales=ks[:1])
    raises(ValueError, "only used with NVFP4", k=e4m3.index_k)
    raises(TypeError, "do not go together", k=bf16.index_k, index_k_scales=None)
    raises(TypeError, "do not go together", q=bf16.q_idx, k=e4m3.index_k, index_k_scales=None)
    raises(TypeError, "page_table must be int32", pt=pt.long())
    raises(ValueError, r"page_table must have shape \[B = 2", pt=pt[:1])
    raises(ValueError, "max_pages must be in", pt=torch.zeros(2, 8193, dtype=torch.int32, device=device))
    raises(ValueError, "last dimension of page_table must be contiguous", pt=pt.t().contiguous().t())
    raises(TypeError, "seq_lens must be int32", sl=sl.long())
    raises(ValueError, r"seq_lens must have shape \[B = 2\]", sl=sl[:1])
    raises(ValueError, "seq_lens must be contiguous", sl=torch.zeros(4, dtype=torch.int32, device=device)[::2])
    for bad in (0, 65):
        raises(ValueError, "topk must be in", topk=bad)
    raises(TypeError, "topk must be a Python int", topk=16.0)
    raises(ValueError, "init_blocks must be >= 0", init_blocks=-1)
    raises(ValueError, "local_blocks must be >= 1", local_blocks=0)
    raises(ValueError, "init_blocks \\+ local_blocks must be <= topk", init_blocks=10, local_blocks=7)
    raises(TypeError, "out must be int32", out=torch.empty(2, 4, 16, device=device))
    raises(ValueError, r"out must have shape \(2, 4, 16\)", out=torch.empty(4, 2, 16, dtype=torch.int32,
                                                                             device=device))
    raises(TypeError, "scores_out must be float32", scores_out=torch.empty(2, 4, 3, dtype=torch.float64,
                                                                           device=device))
    raises(ValueError, "scores_out must have shape", scores_out=torch.empty(2, 4, 2, device=device))
    raises(ValueError, "last dimension of scores_out must be contiguous",
           scores_out=torch.empty(2, 4, 6, device=device)[..., ::2])
    need = msa_ops.index_decode_workspace_bytes(2, 4, case.max_pages)
    raises(TypeError, "workspace must be uint8", workspace=torch.empty(need, device=device))
    raises(ValueError, "workspace must be a contiguous 1-D tensor",
           workspace=torch.empty(2, need, dtype=torch.uint8, device=device))
    raises(ValueError, f"workspace needs at least {need} bytes",
           workspace=torch.empty(need - 1, dtype=torch.uint8, device=device))
    # topk_select
    scores = torch.zeros(2, 4, 10, device=device)
    positions = torch.zeros(4, dtype=torch.int32, device=device)
    with pytest.raises(TypeError, match="scores must be float32"):
        msa_ops.topk_select(scores.double(), positions)
    with pytest.raises(ValueError, match=r"scores must have shape \[H, T, max_pages\]"):
        msa_ops.topk_select(scores[0], positions)
    with pytest.raises(TypeError, match="positions must be int32"):
        msa_ops.topk_select(scores, positions.long())
    with pytest.raises(ValueError, match=r"positions must have shape \[T = 4\]"):
        msa_ops.topk_select(scores, positions[:3])
    with pytest.raises(ValueError, match=r"out must have shape \(2, 4, 8\)"):
        msa_ops.topk_select(scores, positions, topk=8, out=torch.empty(2, 4, 16, dtype=torch.int32, device=device))
    # The C++ ops check too (for callers that use torch.ops.msa directly).
    out = torch.empty(2, 4, 16, dtype=torch.int32, device=device)
    with pytest.raises(RuntimeError, match="needs index_k_scales"):
        torch.ops.msa.index_decode(q, k, None, pt, sl, 16, 0, 1, out, None)
    with pytest.raises(RuntimeError, match="do not go together"):
        torch.ops.msa.index_decode(bf16.q_idx, e4m3.index_k, None, pt, sl, 16, 0, 1, out, None)
    with pytest.raises(RuntimeError, match="init_blocks \\+ local_blocks must be <= topk"):
        torch.ops.msa.index_decode(q, k, ks, pt, sl, 16, 8, 9, out, None)
    with pytest.raises(RuntimeError, match="out has overlapping elements"):
        torch.ops.msa.index_decode(q, k, ks, pt, sl, 16, 0, 1, out[:, :1].expand(2, 4, 16), None)
    workspace = torch.empty(need + 16, dtype=torch.uint8, device=device)
    with pytest.raises(RuntimeError, match="workspace needs at least"):
        torch.ops.msa.index_decode(q, k, ks, pt, sl, 16, 0, 1, out, None, workspace[:need - 4])
    with pytest.raises(RuntimeError, match="workspace must start on a 16-byte boundary"):
        torch.ops.msa.index_decode(q, k, ks, pt, sl, 16, 0, 1, out, None, workspace[4:])
    with pytest.raises(RuntimeError, match="out and workspace must not share memory"):
        big = torch.empty(1024, dtype=torch.uint8, device=device)
        torch.ops.msa.index_decode(q, k, ks, pt, sl, 16, 0, 1, big.view(torch.int32)[:128].view(2, 4, 16), None, big)
    with pytest.raises(RuntimeError, match="positions must have shape"):
        torch.ops.msa.topk_select(scores, positions[:3], 16, 0, 1, out)


def test_bad_values_raise_on_cpu():
    # The CPU op reads seq_lens / page_table / positions and checks them (the CUDA op cannot without a sync).
    case = make_index_decode_case([300, 200], q_len=2, heads=1, key_format="e4m3", seed=81)
    args = case.call_args()
    with pytest.raises(RuntimeError, match="needs 4 pages, but page_table has max_pages = 3"):
        msa_ops.index_decode(args[0], args[1], args[2], torch.tensor([385, 200], dtype=torch.int32))
    bad_table = case.page_table.clone()
    bad_table[1, 0] = case.index_k.shape[0]
    with pytest.raises(RuntimeError, match=r"page_table\[1, 0\] = .* is not a page of index_k"):
        msa_ops.index_decode(args[0], args[1], bad_table, args[3])
    with pytest.raises(RuntimeError, match="past the 10 pages"):
        msa_ops.topk_select(torch.zeros(1, 2, 10), torch.tensor([5, 10 * 128], dtype=torch.int32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("key_format", KEY_FORMATS)
def test_opcheck(device, key_format):
    case = make_index_decode_case([700, 129], q_len=2, heads=2, key_format=key_format, seed=91, device=device)
    out = torch.empty(case.heads, case.tokens, 16, dtype=torch.int32, device=device)
    scores = torch.empty(case.heads, case.tokens, case.max_pages, device=device)
    args = (case.q_idx, case.index_k, case.index_k_scales, case.page_table, case.seq_lens, 16, 1, 2, out, scores)
    # test_schema needs inputs that torch's SchemaCheckMode can compare, which float8 tensors are not
    # ("mul_cpu_reduced_float"); so it runs for BF16 only. The point, no unexpected mutation, is checked below.
    utils = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    if key_format != "bf16":
        utils = utils[1:]
    inputs_before = [t.clone() for t in args[:5] if t is not None]
    torch.library.opcheck(torch.ops.msa.index_decode.default, args, test_utils=utils)
    torch.library.opcheck(torch.ops.msa.index_decode.default, args[:-1] + (None,), test_utils=utils)
    workspace = torch.empty(msa_ops.index_decode_workspace_bytes(case.heads, case.tokens, case.max_pages),
                            dtype=torch.uint8, device=device)
    torch.library.opcheck(torch.ops.msa.index_decode.default, args[:-1] + (None, workspace), test_utils=utils)
    for before, after in zip(inputs_before, [t for t in args[:5] if t is not None]):
        assert torch.equal(before.view(torch.uint8), after.view(torch.uint8))
    positions = R.decode_positions(case.seq_lens, case.q_len).to(torch.int32)
    torch.library.opcheck(torch.ops.msa.topk_select.default, (scores, positions, 16, 0, 1, out))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    def indexer(q, k, page_table, seq_lens, scales):
        scores = torch.empty(q.shape[2], q.shape[0] * q.shape[1], page_table.shape[1], device=q.device)
        top = msa_ops.index_decode(q, k, page_table, seq_lens, index_k_scales=scales, scores_out=scores)
        positions = (seq_lens.unsqueeze(1) - q.shape[1] + torch.arange(q.shape[1], device=q.device)).flatten()
        again = msa_ops.topk_select(scores, positions.to(torch.int32))
        return top + 1, again, scores

    torch._dynamo.reset()
    compiled = torch.compile(indexer, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    case = make_index_decode_case([2500, 129, 7], q_len=8, heads=2, key_format="nvfp4", seed=101, device=device)
    args = (*case.call_args(), case.index_k_scales)
    for got, expected in zip(compiled(*args), indexer(*args)):
        assert torch.equal(got, expected)


@requires_cuda
def test_cuda_graph_replay_sees_in_place_updates():
    # The page table is built for the longest lengths; capture with shorter ones, then change seq_lens and
    # q_idx in place and replay.
    longest = [10_000, 300, 4097]
    case = make_index_decode_case(longest, q_len=8, heads=4, key_format="nvfp4", seed=111, device="cuda")
    case.seq_lens.copy_(torch.tensor([5000, 300, 2049], dtype=torch.int32))
    out = torch.empty(case.heads, case.tokens, 16, dtype=torch.int32, device="cuda")
    scores = torch.empty(case.heads, case.tokens, case.max_pages, device="cuda")
    # The same call with the scores in a workspace, and a short one with nothing to score (max_pages <= 16).
    out_ws = torch.empty_like(out)
    workspace = torch.empty(msa_ops.index_decode_workspace_bytes(case.heads, case.tokens, case.max_pages),
                            dtype=torch.uint8, device="cuda")
    short = make_index_decode_case([2048, 1, 900], q_len=8, heads=4, key_format="nvfp4", seed=113, device="cuda")
    short.seq_lens.copy_(torch.tensor([5, 1000, 2048], dtype=torch.int32))
    out_short = torch.empty(short.heads, short.tokens, 16, dtype=torch.int32, device="cuda")

    def call():
        msa_ops.index_decode(*case.call_args(), index_k_scales=case.index_k_scales, out=out, scores_out=scores)
        msa_ops.index_decode(*case.call_args(), index_k_scales=case.index_k_scales, out=out_ws, workspace=workspace)
        msa_ops.index_decode(*short.call_args(), index_k_scales=short.index_k_scales, out=out_short)

    call()  # warm up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    case.seq_lens.copy_(torch.tensor([10_000, 7, 4097], dtype=torch.int32))
    case.q_idx.copy_(make_index_decode_case(longest, q_len=8, heads=4, key_format="nvfp4", seed=112).q_idx)
    short.seq_lens.copy_(torch.tensor([2048, 7, 900], dtype=torch.int32))
    scores.fill_(math.nan)
    out.fill_(-7)
    out_ws.fill_(-7)
    out_short.fill_(-7)
    graph.replay()
    torch.cuda.synchronize()
    cpu = case.to("cpu")
    ref_scores = R.index_scores_decode(cpu.q_idx, cpu.index_k, cpu.page_table, cpu.seq_lens, cpu.index_k_scales)
    positions = R.decode_positions(cpu.seq_lens, case.q_len)
    assert_scores_close(scores, ref_scores, what="graph scores")
    assert_topk_contract(out, ref_scores, positions, what="graph topk")
    eager = msa_ops.index_decode(*case.call_args(), index_k_scales=case.index_k_scales)
    assert_topk_equal(out, eager, what="graph vs eager")
    assert_topk_equal(out_ws, eager, what="graph with a workspace vs eager")
    short_cpu = short.to("cpu")
    short_ref = R.topk_select_reference(torch.zeros(short.heads, short.tokens, short.max_pages),
                                        R.decode_positions(short_cpu.seq_lens, short.q_len))
    assert torch.equal(out_short.cpu(), short_ref), "graph, nothing to score: TopK rows"


@requires_cuda
@pytest.mark.parametrize("key_format", KEY_FORMATS)
def test_cuda_out_of_range_page_ids(key_format):
    # The CUDA op reads no device values on the host: a history page whose id lies outside the cache scores NaN
    # (it ranks last) and every other page scores as with valid ids. (The CPU op raises instead:
    # test_bad_values_raise_on_cpu.) The Hopper score kernel skips such a page's loads; its fragments, built
    # anyway, must not index past the NVFP4 scale tables (until session 22 they came from stale registers: an
    # illegal-instruction fault in some runs of this test).
    case = make_index_decode_case([20000, 9000], q_len=2, heads=4, key_format=key_format, layout="permuted",
                                  seed=131).to("cuda")
    cpu = case.to("cpu")
    ref = R.index_scores_decode(cpu.q_idx, cpu.index_k, cpu.page_table, cpu.seq_lens, cpu.index_k_scales)
    pool = case.index_k.shape[0]
    bad = case.page_table.clone()
    bad_pages = [(0, 5, -1), (0, 6, pool), (1, 30, pool + 1000), (1, 31, -7)]
    for b, page, value in bad_pages:
        bad[b, page] = value
    scores = poison_scores(case.heads, case.tokens, case.max_pages, "cuda")
    out = poison_topk(case.heads, case.tokens, 16, "cuda")
    msa_ops.index_decode(case.q_idx, case.index_k, bad, case.seq_lens, index_k_scales=case.index_k_scales, out=out,
                         scores_out=scores)
    got = scores.cpu()
    expected = ref.clone()
    for b, page, _ in bad_pages:
        rows = slice(b * case.q_len, (b + 1) * case.q_len)
        assert bool(got[:, rows, page].isnan().all()), f"page {page} of request {b}: out-of-range id, not NaN"
        got[:, rows, page] = 0.0
        expected[:, rows, page] = 0.0
        assert not bool((out.cpu()[:, rows] == page).any()), f"page {page} of request {b} selected"
    assert_scores_close(got, expected, what="valid pages beside out-of-range ids")


@requires_cuda
@pytest.mark.parametrize("knob, choice", [("MSA_INDEX_SCORES", "1"), ("MSA_INDEX_PAGES_PER_CTA", "64"),
                                          ("MSA_PDL", "0"), ("MSA_INDEX_FLAT_GRID", "0"), ("MSA_INDEX_FLAT_RUN", "4"),
                                          ("MSA_INDEX_FLAT_BALANCE", "0"), ("MSA_INDEX_SELECT_TRIGGER", "1"),
                                          ("MSA_INDEX_SCORE_TRIGGER", "0")],
                         ids=["mma-sync", "64-pages-per-cta", "no-pdl", "no-flat-grid", "flat-runs-4",
                              "flat-even-runs", "select-trigger", "score-trigger-end"])
def test_cuda_score_kernel_knob(knob, choice):
    # MSA_INDEX_SCORES=1 forces the mma.sync score kernel (the path of non-Hopper GPUs) on any GPU;
    # MSA_INDEX_PAGES_PER_CTA=64 the longest runs per CTA of the Hopper kernel (odd page counts per run, runs
    # ending mid-request); MSA_PDL=0 plain launches (no programmatic dependent launch); MSA_INDEX_FLAT_GRID=0
    # the 2-D grid without scores_out too; MSA_INDEX_FLAT_RUN=4 the flat grid wherever it serves, in runs of <= 4
    # pages; MSA_INDEX_FLAT_BALANCE=0 the flat grid's earlier even runs (ceil(P / CTAs) pages, the last CTAs idle);
    # MSA_INDEX_SELECT_TRIGGER=1 the select kernel letting the next kernel launch at its start (the graph
    # replay case chains calls); MSA_INDEX_SCORE_TRIGGER=0 the score CTAs letting the select kernel launch only after
    # their runs (the default: one page before their end). Knobs are read once per process, so the CUDA score
    # cases rerun in a subprocess.
    selection = ("cuda and (lengths or query_lengths or page_layouts or padding or nan_keys or strided or uneven or "
                 "graph_replay or out_of_range)")
    result = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:logging", "-k", selection],
                            env={**os.environ, knob: choice}, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
