"""Sparse decode attention (sparse_decode) against msa_ops.reference.sparse_attention, on the CPU always and on
CUDA when present. Bars from shared/SPEC.md §6: atol = rtol = 5e-2 and cosine >= 0.999 on the same quantized
inputs, LSE within 1e-3 (plus 1e-3 relative where S may run on FP8 tensor cores), poisoned outputs, bitwise
repeatability; the CPU kernel is also held to one bf16 rounding of the reference."""

from __future__ import annotations

import math
import os

import pytest
import torch

import msa_ops
from msa_ops.reference import sparse_attention as R
from msa_ops.testing import DEVICES, poison_cuda_allocator, requires_cuda, skip_cuda_without_kernel
from msa_ops.testing.attention import assert_attention_close, poison_attention_out, poison_lse
from msa_ops.testing.paged import (KV_FORMATS, PAGE_LAYOUTS, PAGE_SIZE, SparseDecodeCase, make_kv_cache,
                                   make_attention_queries, make_sparse_decode_case, random_topk_rows)

# 2049 = 16 * 128 + 1: the first length whose last token has history pages to leave out (local + 1 > 16).
LENGTHS = [1, 127, 128, 129, 2047, 2048, 2049]
# (Hq, Hkv): MiniMax-M3 at TP1 and TP4 (GQA 16), TP2 per 2 ranks and TP8 (GQA 8).
GEOMETRIES = [(64, 4), (16, 1), (32, 4), (8, 1)]
# The CUDA op's defaults of its FP8-S knobs (csrc/cuda/attention/sparse_decode.cu; the split kernel's "2": by a
# rule on the shapes, so FP8 S may run).
UNION_FP8S_DEFAULT, SPLIT_FP8S_DEFAULT = "1", "2"


@pytest.fixture(autouse=True)
def _skip_cuda_until_kernel_lands(request):
    skip_cuda_without_kernel(request, "sparse_decode")


def _reference(case: SparseDecodeCase, sm_scale: float | None = None):
    cpu = case.to("cpu")
    return R.sparse_decode_reference(cpu.q, cpu.k, cpu.v, cpu.topk, cpu.page_table, cpu.seq_lens, cpu.k_scales,
                                     cpu.v_scales, sm_scale)


def _check_case(case: SparseDecodeCase, sm_scale: float | None = None, out=None, lse=None, what: str = ""):
    """Runs sparse_decode with poisoned outputs (the kernel first, then the reference) and checks everything."""
    device = case.q.device
    poison_cuda_allocator()
    if out is None:
        out = poison_attention_out(case.tokens, case.q_heads, device)
    if lse is None:
        lse = poison_lse(case.tokens, case.q_heads, device)
    result = msa_ops.sparse_decode(*case.call_args(), **case.call_kwargs(), sm_scale=sm_scale, out=out,
                                   return_lse=True, lse=lse)
    assert result[0] is out and result[1] is lse
    ref_out, ref_lse = _reference(case, sm_scale)
    assert_attention_close(out, ref_out, lse, ref_lse, bf16_exact=device.type == "cpu", lse_rtol=_lse_rtol(case),
                           what=what)
    # Without an LSE output (and with out allocated by the wrapper) the output is the same, bit for bit.
    again = msa_ops.sparse_decode(*case.call_args(), **case.call_kwargs(), sm_scale=sm_scale)
    assert torch.equal(again.view(torch.int16), out.view(torch.int16)), f"{what}: out differs without lse"
    return out, lse, ref_out, ref_lse


def _fp8_scores(case: SparseDecodeCase) -> bool:
    """Whether the CUDA op may compute S = q K^T on FP8 tensor cores for this case (E4M3 q; the union pass's and
    the split kernel's FP8 S, by their knobs' current values)."""
    if case.q.device.type != "cuda" or case.q.dtype != torch.float8_e4m3fn:
        return False
    return (os.environ.get("MSA_SPARSE_DECODE_UNION_FP8S", UNION_FP8S_DEFAULT) == "1"
            or os.environ.get("MSA_SPARSE_DECODE_SPLIT_FP8S", SPLIT_FP8S_DEFAULT) in ("1", "2"))


def _lse_rtol(case: SparseDecodeCase) -> float:
    # Hopper's FP8 MMA sums the 32 products of a k-step at reduced precision: scores (and so the LSE) off by up to
    # ~2^-11 relative (measured 4.5e-4 at LSE 13.3, H200, 2026-12-04), against 2^-4 for E4M3 q and K themselves.
    # fp16 / bf16 S keeps the absolute 1e-3 alone (the variants with both knobs 0).
    return 1e-3 if _fp8_scores(case) else 0.0


# ---- the reference itself, against a key-by-key loop -------------------------------------------------------

def test_reference_brute_force():
    # Padding tokens, a short and a long request, random rows with -1 holes, a duplicate and a page past local.
    case = make_sparse_decode_case([2300, 5, 129], q_len=2, q_heads=4, kv_heads=2, kv_format="nvfp4",
                                   layout="shared_prefix", seed=1)
    case.topk[0, 0, 3] = -1                      # a hole in a row
    case.topk[1, 1, 0] = case.topk[1, 1, 1]      # a page listed twice (attended twice)
    case.topk[0, 5, 1] = 1                       # pos 128: page 1 is its local page; page 1 now listed twice
    ref_out, ref_lse = R.sparse_decode_reference(case.q, case.k, case.v, case.topk, case.page_table, case.seq_lens,
                                                 case.k_scales, case.v_scales)
    keys = R.dequantize_kv(case.k, case.k_scales)
    values = R.dequantize_kv(case.v, case.v_scales)
    group = case.q_heads // case.kv_heads
    for t in range(case.tokens):
        b = t // case.q_len
        pos = int(case.seq_lens[b]) - case.q_len + t % case.q_len
        for hq in range(case.q_heads):
            hk = hq // group
            logits, rows = [], []
            for page in case.topk[hk, t].tolist():
                for j in range(128):
                    if page >= 0 and page * 128 + j <= pos:
                        physical = int(case.page_table[b, page])
                        logits.append(R.DEFAULT_SM_SCALE * float(case.q[t, hq].double() @ keys[physical, hk, j]))
                        rows.append(values[physical, hk, j])
            if not logits:
                assert ref_lse[t, hq].item() == -math.inf and bool((ref_out[t, hq] == 0).all()), (t, hq)
                continue
            top = max(logits)
            weights = torch.tensor([math.exp(x - top) for x in logits], dtype=torch.float64)
            expected = (weights.unsqueeze(1) * torch.stack(rows)).sum(0) / weights.sum()
            assert ref_lse[t, hq].item() == pytest.approx(top + math.log(weights.sum().item()), rel=1e-6), (t, hq)
            torch.testing.assert_close(ref_out[t, hq], expected.float(), rtol=1e-5, atol=1e-6)


# ---- against the reference ------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv_format", KV_FORMATS)
@pytest.mark.parametrize("index", range(len(LENGTHS)), ids=[str(n) for n in LENGTHS])
def test_lengths(device, kv_format, index):
    length = LENGTHS[index]
    q_len = [1, 2, 8, 16][index % 4]
    q_heads, kv_heads = GEOMETRIES[(index + KV_FORMATS.index(kv_format)) % len(GEOMETRIES)]
    seq_lens = [length, max(1, length * 7 // 8), length + 3]
    case = make_sparse_decode_case(seq_lens, q_len=q_len, q_heads=q_heads, kv_heads=kv_heads, kv_format=kv_format,
                                   topk_source="indexer" if index % 2 else "random", seed=10 + index, device=device)
    _check_case(case, what=f"{kv_format} len {length} Q {q_len} {q_heads}/{kv_heads}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("q_len", [1, 2, 8, 16])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[f"{a}-{b}" for a, b in GEOMETRIES])
def test_query_lengths_and_gqa(device, q_len, geometry):
    q_heads, kv_heads = geometry
    g = torch.Generator().manual_seed(100 * q_len + q_heads)
    seq_lens = torch.randint(1, 6000, (3,), generator=g).tolist()
    kv_format = KV_FORMATS[(q_len + kv_heads) % 3]
    case = make_sparse_decode_case(seq_lens, q_len=q_len, q_heads=q_heads, kv_heads=kv_heads, kv_format=kv_format,
                                   seed=q_len + q_heads, device=device)
    _check_case(case, what=f"Q {q_len} {q_heads}/{kv_heads} {kv_format}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", PAGE_LAYOUTS)
@pytest.mark.parametrize("kv_format", KV_FORMATS)
def test_page_layouts(device, layout, kv_format):
    case = make_sparse_decode_case([2500, 300, 2049, 1800, 129], q_len=8, q_heads=16, kv_heads=2,
                                   kv_format=kv_format, layout=layout, seed=7, device=device)
    _check_case(case, what=f"{layout} {kv_format}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv_format", KV_FORMATS)
def test_topk_from_indexer(device, kv_format):
    # The real pipeline: TopK rows written by index_decode (its [Hkv, T, 16] output, used as is).
    case = make_sparse_decode_case([9000, 2049, 700], q_len=8, q_heads=64, kv_heads=4, kv_format=kv_format,
                                   topk_source="indexer", seed=17, device=device)
    _check_case(case, what=f"indexer rows {kv_format}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv_format", KV_FORMATS)
def test_long_context_100k(device, kv_format):
    case = make_sparse_decode_case([100_000, 1000], q_len=4, q_heads=8, kv_heads=1, kv_format=kv_format, seed=31,
                                   device=device)
    _check_case(case, what=f"100K {kv_format}")


@pytest.mark.parametrize("device", DEVICES)
def test_long_positions_up_to_1m(device):
    # Positions up to the page-table limit (8192 pages = 1M tokens) without a 1M-token cache: the page table maps
    # the logical pages onto 40 physical pages (aliasing is legal for the op, only the mapping matters).
    g = torch.Generator().manual_seed(33)
    seq_lens = torch.tensor([8192 * 128, 512 * 1024, 300_001], dtype=torch.int32)
    q_len, kv_heads = 8, 2
    k, v, k_scales, v_scales = make_kv_cache(40, kv_heads, "nvfp4", generator=g)
    page_table = torch.randint(0, 40, (3, 8192), generator=g, dtype=torch.int32)
    q = make_attention_queries(3 * q_len, 16, torch.float8_e4m3fn, generator=g)
    topk = random_topk_rows(seq_lens, q_len, kv_heads, generator=g)
    case = SparseDecodeCase(q, k, v, k_scales, v_scales, topk, page_table, seq_lens).to(device)
    _check_case(case, what="1M positions")


@pytest.mark.parametrize("device", DEVICES)
def test_padding_tokens_and_empty_rows(device):
    # pos = seq_lens - Q + i < 0 marks padding: seq_lens < Q (partially), 0 or negative (entirely).
    q_len = 8
    seq_lens = [0, 1, 5, q_len - 1, q_len, -3, 2100, 129]
    case = make_sparse_decode_case(seq_lens, q_len=q_len, q_heads=8, kv_heads=2, kv_format="nvfp4", seed=5,
                                   device=device)
    # A padding token's row is all -1 (SPEC §4); give one padding token page ids anyway: it still sees no key
    # (every key is past its position), and the page table (-1 for a request of length 0) is not read.
    case.topk[:, 0, :3] = torch.tensor([0, 1, 2], dtype=torch.int32, device=device)
    # A real token whose row holds no page (all -1): no key either.
    case.topk[1, 6 * q_len + 3] = -1
    out, lse, _, _ = _check_case(case, what="padding")
    positions = torch.tensor(seq_lens).repeat_interleave(q_len) - q_len + torch.arange(q_len).repeat(len(seq_lens))
    padding = positions < 0
    assert int(padding.sum()) == 8 + 7 + 3 + 1 + 0 + 8
    out, lse = out.cpu(), lse.cpu()
    assert bool((out[padding] == 0).all()) and bool((lse[padding] == -math.inf).all())
    assert bool((out[6 * q_len + 3, 4:] == 0).all()) and bool((lse[6 * q_len + 3, 4:] == -math.inf).all())
    assert bool(lse[6 * q_len + 3, :4].isfinite().all())
    # An all-padding batch (e.g. CUDA-graph padding requests): every row zero.
    idle = make_sparse_decode_case([0, 0], q_len=4, q_heads=8, kv_heads=1, kv_format="e4m3", seed=6, device=device)
    out, lse, _, _ = _check_case(idle, what="all padding")
    assert bool((out == 0).all()) and bool((lse == -math.inf).all())


@pytest.mark.parametrize("device", DEVICES)
def test_rows_are_used_as_given(device):
    # Not well-formed rows (SPEC §4 rows never look like this): the documented behaviour is that every entry
    # >= 0 contributes its keys at positions <= pos, however the row is ordered; -1 may sit anywhere.
    case = make_sparse_decode_case([5000, 3000], q_len=4, q_heads=8, kv_heads=2, kv_format="e4m3", seed=9,
                                   device=device)
    g = torch.Generator().manual_seed(10)
    rows = case.topk.cpu()
    rows[:, :, :] = rows[:, :, torch.randperm(16, generator=g)]       # local page anywhere in the row
    rows[0, 1, 2] = -1                                                 # holes
    rows[1, 5, 7] = -1
    rows[0, 2, 4] = rows[0, 2, 5]                                      # a duplicate, attended twice
    rows[1, 5, 0] = 30   # request 1 (pos 2997, local page 23): a page past local contributes nothing, and its
    #                      page-table entry (-1: past the request's pages) is not read
    case.topk.copy_(rows)
    _check_case(case, what="rows as given")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pipe", ["0", "1", "1-fp8s"])
def test_union_token_groups_apart(device, pipe, monkeypatch):
    # The union pass runs tokens 0-3 and 4-7 as two consumer warpgroups; here they list disjoint history pages
    # (0-14, then 15-28 with page 15 twice), so on one CTA (one split) each group skips a long run of the other's
    # units: the pipelined consumers hold a unit's tiles across skipped units and must not wait for a unit of the
    # same tile set. The CPU op ignores the knobs (the twin).
    monkeypatch.setenv("MSA_SPARSE_DECODE_UNION", "1")
    monkeypatch.setenv("MSA_SPARSE_DECODE_UNION_PIPE", pipe[0])
    monkeypatch.setenv("MSA_SPARSE_DECODE_UNION_FP8S", "1" if pipe.endswith("fp8s") else "0")
    monkeypatch.setenv("MSA_SPARSE_DECODE_SPLITS", "1")
    q_len = 8
    case = make_sparse_decode_case([6000, 4200], q_len=q_len, q_heads=16, kv_heads=2, kv_format="e4m3", seed=12,
                                   device=device)
    rows = case.topk.cpu()
    for b, n in enumerate(case.seq_lens.tolist()):
        local = (n - 1) // PAGE_SIZE  # every token's local page (no token crosses a page edge here)
        assert (n - q_len) // PAGE_SIZE == local
        first, second = list(range(15)), [15] + list(range(15, 29))
        for t in range(q_len):
            history = first if t < 4 else second
            rows[:, b * q_len + t] = torch.tensor(history + [local], dtype=rows.dtype)
    case.topk.copy_(rows)
    _check_case(case, what=f"token groups apart, pipe {pipe}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sm_scale", [0.02, 0.3])
def test_sm_scale(device, sm_scale):
    case = make_sparse_decode_case([3000, 129], q_len=2, q_heads=16, kv_heads=1, kv_format="bf16", seed=13,
                                   device=device)
    _check_case(case, sm_scale=sm_scale, what=f"sm_scale {sm_scale}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("topk_width", [1, 5, 64])
def test_topk_widths(device, topk_width):
    case = make_sparse_decode_case([9000, 640, 3], q_len=2, q_heads=8, kv_heads=2, kv_format="nvfp4",
                                   topk=topk_width, seed=15 + topk_width, device=device)
    assert case.topk.shape[2] == topk_width
    _check_case(case, what=f"W {topk_width}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv_format", KV_FORMATS)
def test_views(device, kv_format):
    # K and V are views of one K-then-V buffer; topk is a transposed [T, Hkv, 16] buffer; q, out and lse are
    # views into bigger allocations.
    case = make_sparse_decode_case([3000, 129, 2200], q_len=8, q_heads=16, kv_heads=2, kv_format=kv_format,
                                   fused_kv=True, seed=21, device=device)
    assert case.k.untyped_storage().data_ptr() == case.v.untyped_storage().data_ptr()
    assert not case.k.is_contiguous() and not case.v.is_contiguous()
    t_major = case.topk.transpose(0, 1).contiguous()
    q_buf = torch.zeros((case.tokens, case.q_heads + 2, 160), dtype=case.q.dtype, device=device)
    q_buf[:, 1:-1, 16:144] = case.q
    strided = SparseDecodeCase(q_buf[:, 1:-1, 16:144], case.k, case.v, case.k_scales, case.v_scales,
                               t_major.transpose(0, 1), case.page_table, case.seq_lens)
    out_buf = torch.full((case.tokens, case.q_heads + 3, 128), math.nan, dtype=torch.bfloat16, device=device)
    lse_buf = torch.full((case.q_heads, case.tokens), math.nan, device=device)
    out, lse, _, _ = _check_case(strided, out=out_buf[:, 2:-1], lse=lse_buf.t(), what=f"views {kv_format}")
    assert bool(out_buf[:, :2].isnan().all()) and bool(out_buf[:, -1].isnan().all()), "wrote outside out"
    dense = msa_ops.sparse_decode(case.q.contiguous(), case.k.contiguous(), case.v.contiguous(),
                                  case.topk.contiguous(), case.page_table, case.seq_lens,
                                  k_scales=None if case.k_scales is None else case.k_scales.contiguous(),
                                  v_scales=None if case.v_scales is None else case.v_scales.contiguous())
    assert torch.equal(out.view(torch.int16), dense.view(torch.int16)), "views vs contiguous"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", ["splits1", "splits2", "splits4", "splits8", "v1", "eager", "warps4",
                                    "warps6", "union", "union-splits1", "union-splits2", "union-splits8",
                                    "union-pipe0", "union-pipe1", "union-fp8s", "union-fp16s", "fp8s",
                                    "fp8s-splits1", "fp8s-splits8"])
@pytest.mark.parametrize("kv_format", KV_FORMATS)
def test_split_variants(device, kernel, kv_format, monkeypatch):
    # The CUDA op splits each token's TopK row over a cluster of 1, 2, 4 or 8 CTAs (chosen from the shapes) and
    # merges the parts by their LSE; MSA_SPARSE_DECODE_SPLITS forces a split count, MSA_SPARSE_DECODE_KERNEL=1
    # the unsplit v1 kernel, MSA_SPARSE_DECODE_LAZY=0 eager O rescaling and MSA_SPARSE_DECODE_WARPS=4|6 four or
    # six warps per CTA (default: by the shapes; all read at every call).
    # MSA_SPARSE_DECODE_UNION=1 forces the union pass (one decode of each page for all tokens of a request, its
    # pages split over the cluster), =0 keeps it off; MSA_SPARSE_DECODE_UNION_PIPE=0|1 turns its pipelined
    # consumers off / on (NVFP4 / E4M3; default by format), MSA_SPARSE_DECODE_UNION_FP8S=1 its FP8 S = q K^T (NVFP4 /
    # E4M3). The CPU op ignores them: its run is the same case's twin.
    union, _, splits = kernel.partition("-") if kernel.startswith("union") else ("", "", kernel)
    monkeypatch.setenv("MSA_SPARSE_DECODE_UNION", "1" if union else "0")
    monkeypatch.setenv("MSA_SPARSE_DECODE_SPLIT_FP8S", "1" if kernel.startswith("fp8s") else "0")
    if splits.startswith("pipe"):
        monkeypatch.setenv("MSA_SPARSE_DECODE_UNION_PIPE", splits.removeprefix("pipe"))
    elif splits in ("fp8s", "fp16s") and union:
        monkeypatch.setenv("MSA_SPARSE_DECODE_UNION_FP8S", "1" if splits == "fp8s" else "0")
    elif kernel.startswith("fp8s"):  # the split kernel's S^T = K Q^T by FP8 wgmma (4 warps); splits by rule / forced
        if "splits" in kernel:
            monkeypatch.setenv("MSA_SPARSE_DECODE_SPLITS", kernel.rpartition("splits")[2])
    elif kernel == "v1":
        monkeypatch.setenv("MSA_SPARSE_DECODE_KERNEL", "1")
    elif kernel == "eager":  # O rescaled at every growth of a row's max (default: lazy, within 8 in log2 units)
        monkeypatch.setenv("MSA_SPARSE_DECODE_LAZY", "0")
    elif kernel.startswith("warps"):  # 4 warps per CTA (3 CTAs per SM) or 6 (2 per SM); NVFP4 / E4M3 (BF16: 4)
        monkeypatch.setenv("MSA_SPARSE_DECODE_WARPS", kernel.removeprefix("warps"))
    elif splits:
        monkeypatch.setenv("MSA_SPARSE_DECODE_SPLITS", splits.removeprefix("splits"))
    # GQA 16 with one 16-row block, GQA 32 (two blocks), GQA 8 (half a block); a row of 64 pages (at least two
    # CTAs: one walks <= 32 slots) and a row of 5 (more splits than slots); short, page-edge and long lengths.
    for i, (q_heads, kv_heads, topk) in enumerate([(32, 2, 16), (32, 1, 5), (16, 2, 64)]):
        case = make_sparse_decode_case([9000, 2049, 129, 1], q_len=4, q_heads=q_heads, kv_heads=kv_heads,
                                       kv_format=kv_format, topk=topk, seed=70 + i, device=device)
        _check_case(case, what=f"{kernel} {kv_format} {q_heads}/{kv_heads} W {topk}")
    if union:  # Q = 8 (every warp of the union CTA owns a token), pages shared by most tokens, an odd Q; Q = 1 and
        # Q = 5 (a warpgroup of the union CTA with no token / one token of four)
        for i, (lens, q_len) in enumerate([([3000, 777, 8], 8), ([1500, 130], 7), ([600, 2000], 1), ([4000], 5)]):
            case = make_sparse_decode_case(lens, q_len=q_len, q_heads=16, kv_heads=2, kv_format=kv_format,
                                           seed=80 + i, device=device)
            _check_case(case, what=f"{kernel} {kv_format} Q {q_len}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv_format", ["nvfp4", "e4m3"])
def test_split_fp8s_rule(device, kv_format, monkeypatch):
    # MSA_SPARSE_DECODE_SPLIT_FP8S=2 (the default) takes the split kernel's FP8 S from 512 (token, KV head, 16-head
    # block) units for NVFP4, from 128 for E4M3 with a page table wider than 64 pages (csrc/cuda/attention/
    # sparse_decode.cu, split_fp8s_pays): on each side of the thresholds the default's output must equal, bit for
    # bit, that of the knob forced to the side the rule picks (=1 / =0, the same split count), and all must match
    # the reference. The CPU op has no such choice: its run of the same cases is the twin.
    monkeypatch.setenv("MSA_SPARSE_DECODE_UNION", "0")
    # (units, page-table width or None for the longest request's, FP8 S expected); 16/1, Q = 8, W = 16
    sides = ([(496, None, False), (512, None, True)] if kv_format == "nvfp4" else
             [(112, 129, False), (128, 65, True), (128, 64, False), (128, None, False)])
    gen = torch.Generator().manual_seed(5)
    for units, width, fp8s in sides:
        lens = torch.randint(129, 1200, (units // 8,), generator=gen).tolist()
        case = make_sparse_decode_case(lens, q_len=8, q_heads=16, kv_heads=1, kv_format=kv_format, seed=units,
                                       max_pages=width, device=device)
        what = f"{kv_format} {units} units, table width {case.page_table.shape[1]}"
        runs = {}
        for knob in ("0", "1", "2") if case.q.is_cuda else ("2",):
            monkeypatch.setenv("MSA_SPARSE_DECODE_SPLIT_FP8S", knob)
            runs[knob] = _check_case(case, what=f"{what}, knob {knob}")[0].view(torch.int16)
        if case.q.is_cuda:  # FP8 S and fp16 S differ somewhere, else the comparison could not tell them apart
            assert not torch.equal(runs["0"], runs["1"]), f"{what}: FP8 S gave fp16 S's bits"
            assert torch.equal(runs["2"], runs["1" if fp8s else "0"]), f"{what}: the rule"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lazy", ["0", "1", "fp8s", "union"])
@pytest.mark.parametrize("kv_format", KV_FORMATS)
def test_late_score_spike(device, lazy, kv_format, monkeypatch):
    # One key of each request's local page (the last slot of every TopK row, so among the last chunks a warp walks)
    # scaled by 16: its scores jump far past the running max built over the history pages (by more than lazy
    # rescaling's slack of 8 in log2 units), so O must be rescaled late in the walk. With MSA_SPARSE_DECODE_LAZY=1
    # (lazy rescaling, the default) and =0 the split kernel must match the reference, and so must the union pass
    # (always lazy; "union": MSA_SPARSE_DECODE_UNION=1); the CPU op ignores the knobs (the twin).
    # "fp8s": the split kernel with FP8 S (lazy; its per-thread check of the slack, MSA_SPARSE_DECODE_SPLIT_FP8S=1).
    monkeypatch.setenv("MSA_SPARSE_DECODE_UNION", "1" if lazy == "union" else "0")
    monkeypatch.setenv("MSA_SPARSE_DECODE_LAZY", "0" if lazy == "0" else "1")
    monkeypatch.setenv("MSA_SPARSE_DECODE_SPLIT_FP8S", "1" if lazy.startswith("fp8s") else "0")
    q_len = 4
    case = make_sparse_decode_case([5000, 3000], q_len=q_len, q_heads=16, kv_heads=2, kv_format=kv_format, seed=97,
                                   device=device)
    for b, n in enumerate(case.seq_lens.tolist()):
        key = n - q_len                   # the request's first query token: visible to all its tokens
        physical, row = int(case.page_table[b, key // PAGE_SIZE]), key % PAGE_SIZE
        # x16 is exact (an exponent step) and stays in range: NVFP4 scales and E4M3 keys are far below 448 / 16
        target = case.k_scales if case.k_scales is not None else case.k
        target[physical, :, row] = (target[physical, :, row].float() * 16).to(target.dtype)
    _check_case(case, what=f"score spike, lazy={lazy}, {kv_format}")


@requires_cuda
@pytest.mark.parametrize("union", ["0", "1"])
def test_cuda_bad_page_ids_give_nan(union, monkeypatch):
    # The CUDA op cannot check topk / page_table values (no host sync): a (token, KV head) whose row meets a
    # visible page past the page table, or a page-table entry outside the cache, gets NaN; every other row is exact.
    if not torch._C._dispatch_has_kernel_for_dispatch_key("msa::sparse_decode", "CUDA"):
        pytest.skip("msa::sparse_decode has no CUDA kernel in this build")
    monkeypatch.setenv("MSA_SPARSE_DECODE_UNION", union)
    q_len, kv_heads = 4, 2
    case = make_sparse_decode_case([3000, 2000], q_len=q_len, q_heads=16, kv_heads=kv_heads, kv_format="nvfp4",
                                   seed=91, device="cuda")
    ref_out, ref_lse = _reference(case)
    bad_page = int(case.topk[1, q_len + 2, 3])           # request 1: a page token 6 lists for KV head 1
    case.page_table[1, bad_page] = case.k.shape[0]       # ... now maps outside the cache
    # A table cut to 22 pages: request 0 (3000 tokens, local page 23) lists its local page past it.
    q, k, v, topk, page_table, seq_lens = case.call_args()
    out, lse = msa_ops.sparse_decode(q, k, v, topk, page_table[:, :22], seq_lens, **case.call_kwargs(),
                                     return_lse=True)
    broken = torch.zeros(case.tokens, kv_heads, dtype=torch.bool)
    broken[:q_len] = True
    topk = topk.cpu()
    for t in range(q_len, 2 * q_len):
        pos = int(seq_lens[1]) - q_len + t % q_len
        for hk in range(kv_heads):
            broken[t, hk] = bool(((topk[hk, t] == bad_page) & (bad_page <= pos // 128)).any())
    assert bool(broken[q_len + 2, 1])
    rows = broken.repeat_interleave(case.q_heads // kv_heads, dim=1)
    out, lse = out.cpu(), lse.cpu()
    assert bool(out[rows].isnan().all()) and bool(lse[rows].isnan().all())
    assert_attention_close(out[~rows], ref_out[~rows], lse[~rows], ref_lse[~rows], what=f"union {union}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv_format", KV_FORMATS)
@pytest.mark.parametrize("union", ["0", "0-fp8s", "1", "1-pipe", "1-pipe-fp8s"])
def test_repeatable(device, kv_format, union, monkeypatch):
    monkeypatch.setenv("MSA_SPARSE_DECODE_UNION", union[0])  # the CUDA op's union pass off / forced
    monkeypatch.setenv("MSA_SPARSE_DECODE_UNION_PIPE", "1" if union.startswith("1-pipe") else "0")
    monkeypatch.setenv("MSA_SPARSE_DECODE_UNION_FP8S", "1" if union == "1-pipe-fp8s" else "0")
    monkeypatch.setenv("MSA_SPARSE_DECODE_SPLIT_FP8S", "1" if union == "0-fp8s" else "0")
    case = make_sparse_decode_case([20_000, 3000, 700], q_len=8, q_heads=64, kv_heads=4, kv_format=kv_format,
                                   seed=61, device=device)
    runs = []
    for _ in range(3):
        out = poison_attention_out(case.tokens, case.q_heads, device)
        lse = poison_lse(case.tokens, case.q_heads, device)
        msa_ops.sparse_decode(*case.call_args(), **case.call_kwargs(), out=out, lse=lse)
        runs.append((out, lse))
    for out, lse in runs[1:]:
        assert torch.equal(out.view(torch.int16), runs[0][0].view(torch.int16))
        assert torch.equal(lse.view(torch.int32), runs[0][1].view(torch.int32))


# ---- contract, errors, compile --------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_raise_clear_errors(device):
    kw = dict(q_len=2, q_heads=4, kv_heads=2, seed=71, device=device)
    case = make_sparse_decode_case([300, 200], kv_format="nvfp4", **kw)
    e4m3 = make_sparse_decode_case([300, 200], kv_format="e4m3", **kw)
    bf16 = make_sparse_decode_case([300, 200], kv_format="bf16", **kw)
    q, k, v, topk, pt, sl = case.call_args()
    ks, vs = case.k_scales, case.v_scales
    i32 = dict(dtype=torch.int32, device=device)

    def raises(exc, match, q=q, k=k, v=v, topk=topk, pt=pt, sl=sl, **kwargs):
        kwargs.setdefault("k_scales", ks)
        kwargs.setdefault("v_scales", vs)
        with pytest.raises(exc, match=match):
            msa_ops.sparse_decode(q, k, v, topk, pt, sl, **kwargs)

    raises(TypeError, "q must be a torch.Tensor", q=[1.0])
    raises(TypeError, "topk must be a torch.Tensor", topk=None)
    raises(TypeError, "q must be float8_e4m3fn or bfloat16", q=q.float())
    raises(ValueError, r"q must have shape \[B \* Q, Hq, 128\]", q=q[..., :64])
    raises(ValueError, "last dimension of q must be contiguous",
           q=torch.zeros(4, 4, 256, device=device).to(torch.float8_e4m3fn)[..., ::2])
    raises(TypeError, "k must be uint8", k=k.to(torch.int16))
    raises(ValueError, r"k must have shape \[P, Hkv, 128, 64\]", k=k[..., :32])
    raises(ValueError, r"v must have shape \[P, Hkv, 128, 64\]", v=v[:, :, :64])
    raises(ValueError, "NVFP4 \\(uint8\\) k needs k_scales", k_scales=None)
    raises(ValueError, "NVFP4 \\(uint8\\) v needs v_scales", v_scales=None)
    raises(TypeError, "k_scales must be float8_e4m3fn", k_scales=ks.view(torch.uint8))
    raises(ValueError, "v_scales must have shape", v_scales=vs[:1])
    raises(ValueError, "k_scales is only used with NVFP4", k=e4m3.k, v=e4m3.v)
    raises(TypeError, "k and v must have the same dtype", v=e4m3.v, v_scales=None)
    raises(ValueError, "k and v must have the same shape", v=v[:1], v_scales=vs[:1])
    raises(ValueError, "multiple of the KV head count Hkv = 2", q=q[:, :3])
    raises(TypeError, "do not go together", q=bf16.q)
    raises(TypeError, "do not go together", k=bf16.k, v=bf16.v, k_scales=None, v_scales=None)
    raises(TypeError, "page_table must be int32", pt=pt.long())
    raises(ValueError, r"page_table must have shape \[B, max_pages\]", pt=pt[0])
    raises(ValueError, "max_pages must be in", pt=torch.zeros(2, 8193, **i32))
    raises(ValueError, "last dimension of page_table must be contiguous", pt=pt.t().contiguous().t())
    raises(TypeError, "seq_lens must be int32", sl=sl.long())
    raises(ValueError, r"seq_lens must have shape \[B = 2\]", sl=sl[:1])
    raises(ValueError, "seq_lens must be contiguous", sl=torch.zeros(4, **i32)[::2])
    raises(ValueError, r"T = 3 must be B \* Q", q=q[:3])
    raises(ValueError, r"Q in \[1, 16\]", q=q[:1].expand(34, 4, 128), topk=topk[:, :1].expand(2, 34, 16))
    raises(TypeError, "topk must be int32", topk=topk.long())
    raises(ValueError, r"topk must have shape \[Hkv = 2, T = 4, W\]", topk=topk[:1])
    raises(ValueError, "row width W must be in", topk=torch.zeros(2, 4, 65, **i32))
    raises(TypeError, "sm_scale must be a Python float", sm_scale="0.1")
    for bad in (0.0, -1.0, math.inf, math.nan):
        raises(ValueError, "sm_scale must be a finite positive number", sm_scale=bad)
    raises(TypeError, "return_lse must be a bool", return_lse=1)
    raises(TypeError, "out must be bfloat16", out=torch.empty(4, 4, 128, device=device))
    raises(ValueError, r"out must have shape \(4, 4, 128\)", out=torch.empty(4, 2, 128, dtype=torch.bfloat16,
                                                                             device=device))
    raises(ValueError, "last dimension of out must be contiguous",
           out=torch.empty(4, 4, 256, dtype=torch.bfloat16, device=device)[..., ::2])
    raises(TypeError, "lse must be float32", lse=torch.empty(4, 4, dtype=torch.float64, device=device))
    raises(ValueError, r"lse must have shape \(4, 4\)", lse=torch.empty(4, 2, device=device))
    raises(TypeError, "workspace must be uint8", workspace=torch.empty(16, device=device))
    raises(ValueError, "workspace must be a contiguous 1-D", workspace=torch.empty(4, 4, dtype=torch.uint8,
                                                                                   device=device))
    # The C++ op checks too (for callers that use torch.ops.msa directly).
    out = torch.empty(4, 4, 128, dtype=torch.bfloat16, device=device)
    op = torch.ops.msa.sparse_decode
    with pytest.raises(RuntimeError, match="NVFP4 \\(uint8\\) k needs k_scales"):
        op(q, k, v, None, vs, topk, pt, sl, 0.1, out, None, None)
    with pytest.raises(RuntimeError, match="do not go together"):
        op(bf16.q, e4m3.k, e4m3.v, None, None, topk, pt, sl, 0.1, out, None, None)
    with pytest.raises(RuntimeError, match="k and v must have the same format"):
        op(e4m3.q, e4m3.k, bf16.v, None, None, topk, pt, sl, 0.1, out, None, None)
    with pytest.raises(RuntimeError, match=r"the query length Q = T / B = 34 / 2 must be in \[1, 16\], got 17"):
        op(q[:1].expand(34, 4, 128), k, v, ks, vs, topk[:, :1].expand(2, 34, 16), pt, sl, 0.1,
           out[:1].expand(34, 4, 128), None, None)
    with pytest.raises(RuntimeError, match=r"topk must have shape \[Hkv = 2, T = 4, W\]"):
        op(q, k, v, ks, vs, topk[:, :3], pt, sl, 0.1, out, None, None)
    for bad in (math.nan, -0.1, 0.0):
        with pytest.raises(RuntimeError, match="sm_scale must be finite and positive"):
            op(q, k, v, ks, vs, topk, pt, sl, bad, out, None, None)
    with pytest.raises(RuntimeError, match="out has overlapping elements"):
        op(q, k, v, ks, vs, topk, pt, sl, 0.1, out[:1].expand(4, 4, 128), None, None)
    with pytest.raises(RuntimeError, match="out and lse must not share memory"):
        op(q, k, v, ks, vs, topk, pt, sl, 0.1, out, out.view(torch.float32).flatten()[:16].view(4, 4), None)
    with pytest.raises(RuntimeError, match="workspace must be a contiguous 1-D uint8"):
        op(q, k, v, ks, vs, topk, pt, sl, 0.1, out, None, torch.empty(8, device=device))


def test_bad_values_raise_on_cpu():
    # The CPU op reads topk / page_table values and checks them (the CUDA op cannot without a sync).
    case = make_sparse_decode_case([300, 200], q_len=2, q_heads=4, kv_heads=2, kv_format="e4m3", seed=81)
    q, k, v, topk, pt, sl = case.call_args()
    bad_topk = topk.clone()
    bad_topk[1, 2, 0] = 3  # max_pages is 3
    with pytest.raises(RuntimeError, match=r"topk\[1, 2, 0\] = 3 is not a logical page of page_table"):
        msa_ops.sparse_decode(q, k, v, bad_topk, pt, sl)
    bad_table = pt.clone()
    bad_table[1, 0] = k.shape[0]
    with pytest.raises(RuntimeError, match=r"page_table\[1, 0\] = .* is not a page of k/v"):
        msa_ops.sparse_decode(q, k, v, topk, bad_table, sl)
    bad_table[1, 0] = -1
    with pytest.raises(RuntimeError, match=r"page_table\[1, 0\] = -1 .* is not a page of k/v"):
        msa_ops.sparse_decode(q, k, v, topk, bad_table, sl)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv_format", KV_FORMATS)
def test_opcheck(device, kv_format):
    case = make_sparse_decode_case([700, 129], q_len=2, q_heads=8, kv_heads=2, kv_format=kv_format, seed=91,
                                   device=device)
    out = torch.empty(case.tokens, case.q_heads, 128, dtype=torch.bfloat16, device=device)
    lse = torch.empty(case.tokens, case.q_heads, device=device)
    inputs = (case.q, case.k, case.v, case.k_scales, case.v_scales, case.topk, case.page_table, case.seq_lens)
    # test_schema needs inputs that torch's SchemaCheckMode can compare, which float8 tensors are not
    # ("mul_cpu_reduced_float"); so it runs for BF16 only. The point, no unexpected mutation, is checked below.
    utils = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    if kv_format != "bf16":
        utils = utils[1:]
    before = [t.clone() for t in inputs if t is not None]
    op = torch.ops.msa.sparse_decode.default
    torch.library.opcheck(op, inputs + (0.1, out, lse, None), test_utils=utils)
    torch.library.opcheck(op, inputs + (0.1, out, None, None), test_utils=utils)
    workspace = torch.empty(1024, dtype=torch.uint8, device=device)
    torch.library.opcheck(op, inputs + (0.1, out, lse, workspace), test_utils=utils)
    for a, b in zip(before, [t for t in inputs if t is not None]):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    def attention(q, k, v, topk, page_table, seq_lens, k_scales, v_scales):
        out, lse = msa_ops.sparse_decode(q, k, v, topk, page_table, seq_lens, k_scales=k_scales,
                                         v_scales=v_scales, return_lse=True)
        return out.float() * 2, lse + 1

    torch._dynamo.reset()
    compiled = torch.compile(attention, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    case = make_sparse_decode_case([2500, 129, 7], q_len=8, q_heads=16, kv_heads=2, kv_format="nvfp4", seed=101,
                                   device=device)
    args = (*case.call_args(), case.k_scales, case.v_scales)
    for got, expected in zip(compiled(*args), attention(*args)):
        assert torch.equal(got, expected)


@requires_cuda
@pytest.mark.parametrize("kv_format", KV_FORMATS)
def test_cuda_graph_replay_sees_in_place_updates(kv_format):
    # The page table is built for the longest lengths; capture with shorter ones, then change seq_lens, topk and
    # q in place and replay.
    if not torch._C._dispatch_has_kernel_for_dispatch_key("msa::sparse_decode", "CUDA"):
        pytest.skip("msa::sparse_decode has no CUDA kernel in this build")
    longest = [10_000, 300, 4097]
    kw = dict(q_len=8, q_heads=64, kv_heads=4, kv_format=kv_format)
    case = make_sparse_decode_case(longest, seed=111, device="cuda", **kw)
    shorter = torch.tensor([5000, 300, 2049], dtype=torch.int32)
    case.seq_lens.copy_(shorter)
    case.topk.copy_(random_topk_rows(shorter, 8, 4, generator=torch.Generator().manual_seed(1)))
    out = torch.empty(case.tokens, case.q_heads, 128, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(case.tokens, case.q_heads, device="cuda")

    def call():
        msa_ops.sparse_decode(*case.call_args(), **case.call_kwargs(), out=out, lse=lse)

    call()  # warm up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    updated = torch.tensor([10_000, 7, 4097], dtype=torch.int32)
    case.seq_lens.copy_(updated)
    case.topk.copy_(random_topk_rows(updated, 8, 4, generator=torch.Generator().manual_seed(2)))
    case.q.copy_(make_sparse_decode_case(longest, seed=112, **kw).q)
    out.fill_(math.nan)
    lse.fill_(math.nan)
    graph.replay()
    torch.cuda.synchronize()
    ref_out, ref_lse = _reference(case)
    assert_attention_close(out, ref_out, lse, ref_lse, what="graph")
    eager_out, eager_lse = msa_ops.sparse_decode(*case.call_args(), **case.call_kwargs(), return_lse=True)
    assert torch.equal(out.view(torch.int16), eager_out.view(torch.int16))
    assert torch.equal(lse.view(torch.int32), eager_lse.view(torch.int32))
