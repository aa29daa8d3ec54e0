#!/usr/bin/env python
"""Microbenchmark: MSA sparse decode attention ``msa_ops.sparse_decode`` (each query token attends to the keys
of its 16 TopK pages, per KV head).

Workloads (shared/SPEC.md §7): the official MSA v1 decode suite, B in {8, 32, 64, 128} x N in {1000, 4000,
5000, 10000, 50000, 100000, 200000} with the suite's weights, plus the low-latency suite, B in {1, 2, 4} x N
in {1000, 4000, 8000, 32000}; Q = 8 query tokens per request; head dim 128, page 128, top-16; geometry 64/4
(Hq/Hkv, TP1) and 16/1 (TP4); KV formats NVFP4 (Q8KV4, E4M3 q), FP8 E4M3 (Q8KV8, E4M3 q) and BF16 (BF16 q).
Per-request lengths come from SPEC §7's generator (``msa_ops.testing.paged.official_decode_lengths``); every
(KV head, token) TopK row holds 15 distinct history pages drawn uniformly at random plus the local page (fewer
when the context is short: ``msa_ops.testing.paged.random_topk_rows``); physical pages are a seeded random
permutation; q and the caches are random normal data quantized to the formats.

Per case: µs per op call (median, p10, p90; SPEC §7 CUDA-graph protocol with rotated inputs and preallocated
``out`` (and ``lse``), so the call allocates nothing), the bytes model (the distinct (request,
physical page, KV head) K+V bytes the step must read, computed on the host from the TopK rows, + q + out
(+ lse)), effective TB/s, MBU = bytes / time / measured copy bandwidth, and the speedup over dense BF16
attention on the same context two ways: torch's scaled_dot_product_attention timed the same way, and the
dense BF16 KV bytes at copy bandwidth (a dense-attention roofline). Summary: weighted MBU per (KV format,
geometry) over the official suite (SPEC §7 weights), every low-latency case's µs, and PASS/FAIL against
issue 4's bars.

    python bench/bench_sparse_decode.py                       # full suite on the current CUDA device
    python bench/bench_sparse_decode.py --quick --json $OUT/sparse_decode.json
    python bench/bench_sparse_decode.py --kv nvfp4 --geometry 64/4 --cases 128:200000,1:32000
    python bench/bench_sparse_decode.py --cpu-smoke           # tiny CPU run (automatic without CUDA): not GPU numbers
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # use this checkout's msa_ops
sys.path.insert(0, str(Path(__file__).resolve().parent))      # bench/_suite.py

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import msa_ops  # noqa: E402
from _suite import (GiB, LOW_LATENCY_B, LOW_LATENCY_N, MEMORY_BUDGET, OFFICIAL_B, OFFICIAL_N,  # noqa: E402
                    OFFICIAL_WEIGHTS, Q_LEN, TOPK, copy_roofline, finish, error_text, fmt_case, official_weight,
                    overall_verdict, parse_cases, parse_choices, parse_list, pick_device, release, suite_of,
                    suite_pairs, time_sets, timing_plan,
                    timing_protocol, verdict, weighted_mbu)
from msa_ops.bench import bench, format_table, rotations_for, write_json  # noqa: E402
from msa_ops.reference.sparse_attention import sparse_decode_reference  # noqa: E402
from msa_ops.testing.paged import HEAD_DIM, PAGE_SIZE, official_decode_lengths, random_topk_rows  # noqa: E402

OP = "msa::sparse_decode"

# ------------------------------------------------------------------------------------------ workloads (SPEC §7)
# The suites, weights, Q_LEN and TOPK are in bench/_suite.py (shared with bench_index_decode.py).
GEOMETRIES = {"64/4": (64, 4), "16/1": (16, 1)}     # Hq / Hkv: TP1, TP4
QUICK_OFFICIAL = [(8, 1000), (8, 10000), (64, 50000), (128, 200000)]
QUICK_LOW_LATENCY = [(1, 32000)]
CPU_OFFICIAL = [(8, 1000), (8, 4000)]
CPU_LOW_LATENCY = [(1, 8000)]

# ------------------------------------------------------------------------------------------------- the bars
BAR_WEIGHTED_MBU = {"nvfp4": 70.0, "fp8": 70.0, "bf16": 80.0}   # % : weighted MBU over the official suite
BAR_MAX_US = 12.0                                                # µs: every low-latency case

# ------------------------------------------------------------------------------------------------ KV formats
#: CLI name -> (msa_ops.testing.paged format name, K+V bytes of one token of one KV head, q dtype)
KV = {
    "nvfp4": ("nvfp4", 2 * (HEAD_DIM // 2 + HEAD_DIM // 16), torch.float8_e4m3fn),  # (64 + 8) B each for K, V
    "fp8": ("e4m3", 2 * HEAD_DIM, torch.float8_e4m3fn),                             # 128 B each
    "bf16": ("bf16", 2 * 2 * HEAD_DIM, torch.bfloat16),                             # 256 B each
}
KV_ALIASES = {"e4m3": "fp8", "fp4": "nvfp4", "kv4": "nvfp4", "kv8": "fp8"}
DENSE_TOKEN_HEAD_BYTES = 2 * 2 * HEAD_DIM   # dense BF16 K + V of one token of one KV head

# -------------------------------------------------------------------------------------------- timing knobs
# MEMORY_BUDGET and the calls per graph replay: bench/_suite.py.
DENSE_MAX_BYTES = 16 * GiB      # the SDPA comparison runs only where one set of dense K + V fits in this
KV_CHUNK_PAGE_HEADS = 2048      # page-heads generated per step on CUDA (fp32 staging: 2048 x 128 x 128 x 4 B)
SPARE_PAGES = 3                 # physical pages never referenced
ATOL = RTOL = 5e-2              # spot check against the reference (SPEC §6 sparse decode bar)
MIN_COSINE = 0.999


@dataclass(frozen=True)
class Case:
    suite: str        # "official", "low-latency" or "custom"
    batch: int
    nominal: int      # N
    q_heads: int
    kv_heads: int
    kv: str           # key of KV

    @property
    def weight(self) -> int | None:
        return official_weight(self.batch, self.nominal) if self.suite == "official" else None

    @property
    def geometry(self) -> str:
        return f"{self.q_heads}/{self.kv_heads}"

    @property
    def tokens(self) -> int:
        return self.batch * Q_LEN


# ------------------------------------------------------------------------------------------- the bytes model

@dataclass(frozen=True)
class RowStats:
    """What one set of TopK rows makes the step read (independent of the device)."""
    distinct: int            # distinct (request, logical page, KV head) triples over the request's tokens' rows
    kv_tokens: int           # the K/V token rows of those pages the step must read (a partial last page counts
                             # only its tokens < seq_len), summed over KV heads
    visible_keys: int        # sum over (KV head, token) rows of the keys the row attends to
    referenced: torch.Tensor  # int64 sorted keys b * width + logical page referenced by any head (the pool)


def row_stats(rows: torch.Tensor, lens: torch.Tensor, pos: torch.Tensor, width: int) -> RowStats:
    """Distinct pages of ``rows`` int32 [Hkv, B*Q, 16] per (request, KV head): the union over the request's Q
    tokens' rows (pages its tokens share, the local page at least, are read once)."""
    hkv, tokens, w = rows.shape
    batch = lens.shape[0]
    r = rows.to(torch.int64)
    s = r.view(hkv, batch, (tokens // batch) * w).sort(dim=-1).values
    first = torch.ones_like(s, dtype=torch.bool)
    first[..., 1:] = s[..., 1:] != s[..., :-1]
    keep = first & (s >= 0)
    # tokens of logical page p that exist at this step: positions p*128 .. seq_len - 1
    page_tokens = (lens.to(torch.int64)[None, :, None] - s * PAGE_SIZE).clamp(0, PAGE_SIZE)
    # keys row (hk, t) attends to: the whole history page, the local page up to pos
    keys = (pos[None, :, None] - r * PAGE_SIZE + 1).clamp(0, PAGE_SIZE)
    req = torch.arange(batch, dtype=torch.int64)[None, :, None].expand_as(s)
    referenced = torch.unique(req[s >= 0] * width + s[s >= 0])
    return RowStats(distinct=int(keep.sum()), kv_tokens=int((page_tokens * keep).sum()),
                    visible_keys=int(keys[r >= 0].sum()), referenced=referenced)


@dataclass
class Plan:
    """Host-side inputs and the byte / FLOP model of one case over all its rotated sets."""
    lens: torch.Tensor           # int32 [B]
    width: int                   # page_table width = pages of the longest request
    pos: torch.Tensor            # int64 [B*Q]
    rows: list[torch.Tensor]     # per set int32 [Hkv, B*Q, 16] (CPU)
    stats: list[RowStats]        # per set
    token_head_bytes: int        # K+V bytes of one token of one KV head in the case's format
    q_bytes: int
    out_bytes: int
    lse_bytes: int               # 0 unless --lse
    dense_bytes: int             # dense BF16 K+V of every request's full context (seq_len tokens)

    @property
    def kv_bytes(self) -> float:
        """Distinct K+V bytes per call, the mean over the sets (each set has its own random rows)."""
        return self.token_head_bytes * sum(s.kv_tokens for s in self.stats) / len(self.stats)

    @property
    def distinct(self) -> float:
        return sum(s.distinct for s in self.stats) / len(self.stats)

    @property
    def model_bytes(self) -> float:
        """The MBU numerator: distinct K+V bytes + q + out (+ lse)."""
        return self.kv_bytes + self.q_bytes + self.out_bytes + self.lse_bytes

    def flops(self, group: int) -> float:
        """2 x 2 x 128 FLOP (q.k and p.v) per (query head, visible key), mean over the sets."""
        return 4 * HEAD_DIM * group * sum(s.visible_keys for s in self.stats) / len(self.stats)


def make_plan(case: Case, seed: int, lse: bool) -> tuple[Plan, torch.Generator]:
    """The plan of set 0 (more sets: :func:`extend_plan`) and the CPU generator that made it."""
    lens = official_decode_lengths(case.batch, case.nominal)
    width = max((int(n) + PAGE_SIZE - 1) // PAGE_SIZE for n in lens.tolist())
    pos = (lens.to(torch.int64)[:, None] - Q_LEN + torch.arange(Q_LEN)[None, :]).reshape(-1)
    gen = torch.Generator().manual_seed(seed)
    rows = random_topk_rows(lens, Q_LEN, case.kv_heads, TOPK, generator=gen)
    q_elt = torch.empty((), dtype=KV[case.kv][2]).element_size()
    plan = Plan(lens=lens, width=width, pos=pos, rows=[rows], stats=[row_stats(rows, lens, pos, width)],
                token_head_bytes=KV[case.kv][1],
                q_bytes=case.tokens * case.q_heads * HEAD_DIM * q_elt,
                out_bytes=case.tokens * case.q_heads * HEAD_DIM * 2,
                lse_bytes=case.tokens * case.q_heads * 4 if lse else 0,
                dense_bytes=int(lens.to(torch.int64).sum()) * case.kv_heads * DENSE_TOKEN_HEAD_BYTES)
    return plan, gen


def extend_plan(case: Case, plan: Plan, rotations: int, gen: torch.Generator) -> None:
    while len(plan.rows) < rotations:
        rows = random_topk_rows(plan.lens, Q_LEN, case.kv_heads, TOPK, generator=gen)
        plan.rows.append(rows)
        plan.stats.append(row_stats(rows, plan.lens, plan.pos, plan.width))


def set_bytes(case: Case, plan: Plan, pool_pages: float) -> float:
    """Device memory of one input set: its pool pages (every head, K + V) + q + out (+ lse) + TopK + page table
    + seq_lens."""
    return (pool_pages * case.kv_heads * PAGE_SIZE * plan.token_head_bytes + plan.q_bytes + plan.out_bytes +
            plan.lse_bytes + case.kv_heads * case.tokens * TOPK * 4 + case.batch * (plan.width + 1) * 4)


# ------------------------------------------------------------------------------------------------- inputs

def make_kv_pool(num_pages: int, kv_heads: int, kv: str, device: torch.device, gen: torch.Generator):
    """Random K/V pages ``(k, v, k_scales, v_scales)`` generated on ``device`` in chunks, as
    msa_ops.testing.paged.make_kv_cache makes them (keys random normal x0.5..x2 per token, values random
    normal), quantized to the format: NVFP4 through msa_ops.nvfp4_quantize, E4M3 / BF16 by rounding."""
    fmt = KV[kv][0]
    shape = (num_pages, kv_heads, PAGE_SIZE)
    if fmt == "nvfp4":
        k, v = (torch.empty(shape + (HEAD_DIM // 2,), dtype=torch.uint8, device=device) for _ in range(2))
        k_scales, v_scales = (torch.empty(shape + (HEAD_DIM // 16,), dtype=torch.float8_e4m3fn, device=device)
                              for _ in range(2))
    else:
        dtype = torch.float8_e4m3fn if fmt == "e4m3" else torch.bfloat16
        k, v = (torch.empty(shape + (HEAD_DIM,), dtype=dtype, device=device) for _ in range(2))
        k_scales = v_scales = None
    chunk = max(1, (KV_CHUNK_PAGE_HEADS if device.type == "cuda" else 256) // kv_heads)
    for start in range(0, num_pages, chunk):
        n = min(chunk, num_pages - start)
        keys = torch.randn((n, kv_heads, PAGE_SIZE, HEAD_DIM), generator=gen, device=device)
        keys *= torch.exp2(torch.rand((n, kv_heads, PAGE_SIZE, 1), generator=gen, device=device) * 2 - 1)
        values = torch.randn((n, kv_heads, PAGE_SIZE, HEAD_DIM), generator=gen, device=device)
        for data, dst, dst_scales in ((keys, k, k_scales), (values, v, v_scales)):
            if dst_scales is not None:
                packed, sc = msa_ops.nvfp4_quantize(data)
                dst[start:start + n].copy_(packed)
                dst_scales[start:start + n].copy_(sc)
            else:
                dst[start:start + n].copy_(data.to(dst.dtype))
        del keys, values
    return k, v, k_scales, v_scales


def make_page_tables(plan: Plan, total_pages: int, gen: torch.Generator) -> torch.Tensor:
    """int32 [rotations, B, width]: one seeded random permutation of the pool's physical pages dealt out to the
    (request, logical page) pairs some TopK row of the set references (disjoint pages per set). Entries of
    pages no row references hold -1: the op never reads them (SPEC: only entries of attended pages are read),
    and the pool holds only the pages the step can touch."""
    ids = torch.randperm(total_pages, generator=gen)
    tables = torch.full((len(plan.stats), len(plan.lens) * plan.width), -1, dtype=torch.int32)
    offset = 0
    for i, st in enumerate(plan.stats):
        n = st.referenced.numel()
        tables[i, st.referenced] = ids[offset:offset + n].to(torch.int32)
        offset += n
    return tables.view(len(plan.stats), len(plan.lens), plan.width)


@dataclass
class InputSets:
    """``rotations`` independent argument sets of one case (each with its own q, TopK rows, page table,
    seq_lens, out and lse; the K/V pages of all sets live in one pool, on disjoint physical pages)."""
    k: torch.Tensor
    v: torch.Tensor
    k_scales: torch.Tensor | None
    v_scales: torch.Tensor | None
    q: torch.Tensor                     # [R, B*Q, Hq, 128]
    topk: torch.Tensor                  # [R, Hkv, B*Q, 16]
    tables: torch.Tensor                # [R, B, width]
    seq_lens: torch.Tensor              # [R, B]
    out: torch.Tensor                   # [R, B*Q, Hq, 128] bf16
    lse: torch.Tensor | None            # [R, B*Q, Hq] fp32

    def args(self, i: int) -> tuple[tuple, dict]:
        return ((self.q[i], self.k, self.v, self.topk[i], self.tables[i], self.seq_lens[i]),
                {"k_scales": self.k_scales, "v_scales": self.v_scales, "out": self.out[i],
                 "return_lse": self.lse is not None, "lse": None if self.lse is None else self.lse[i]})


def build_sets(case: Case, plan: Plan, device: torch.device, seed: int) -> InputSets:
    rotations = len(plan.stats)
    cpu_gen = torch.Generator().manual_seed(seed + 2)
    dev_gen = torch.Generator(device=device).manual_seed(seed + 1)
    total_pages = sum(st.referenced.numel() for st in plan.stats) + SPARE_PAGES
    k, v, k_scales, v_scales = make_kv_pool(total_pages, case.kv_heads, case.kv, device, dev_gen)
    tables = make_page_tables(plan, total_pages, cpu_gen).to(device)
    q = torch.randn((rotations, case.tokens, case.q_heads, HEAD_DIM), generator=dev_gen, device=device)
    q *= torch.exp2(torch.rand((rotations, case.tokens, case.q_heads, 1), generator=dev_gen, device=device) * 3 - 1)
    nan = float("nan")   # poison: a row still NaN after timing was never written
    return InputSets(
        k=k, v=v, k_scales=k_scales, v_scales=v_scales, q=q.to(KV[case.kv][2]),
        topk=torch.stack(plan.rows).to(device), tables=tables,
        seq_lens=plan.lens.to(device).repeat(rotations, 1).contiguous(),
        out=torch.full((rotations, case.tokens, case.q_heads, HEAD_DIM), nan, dtype=torch.bfloat16, device=device),
        lse=(torch.full((rotations, case.tokens, case.q_heads), nan, dtype=torch.float32, device=device)
             if plan.lse_bytes else None))


def check_output(sets: InputSets) -> str:
    """Every set's ``out`` (and ``lse``) written and finite (the NaN poison catches a call that did not run or a
    row it skipped), and request 0 of set 0 against the fp64 reference (atol = rtol = 5e-2, cosine >= 0.999;
    the tests check the numerics thoroughly, this catches a benchmark timing a broken kernel)."""
    problems = []
    if not bool(torch.isfinite(sets.out).all()):
        problems.append("out not written / not finite")
    if sets.lse is not None and not bool(torch.isfinite(sets.lse).all()):
        problems.append("lse not written / not finite")
    q_len = sets.q.shape[1] // sets.tables.shape[1]
    ref_out, ref_lse = sparse_decode_reference(sets.q[0, :q_len], sets.k, sets.v, sets.topk[0, :, :q_len],
                                               sets.tables[0, :1], sets.seq_lens[0, :1], sets.k_scales,
                                               sets.v_scales)
    got = sets.out[0, :q_len].float()
    if not torch.allclose(got, ref_out, atol=ATOL, rtol=RTOL):
        problems.append(f"request 0 vs reference: max |diff| {float((got - ref_out).abs().max()):.3g}")
    cos = F.cosine_similarity(got.flatten(), ref_out.flatten(), dim=0)
    if not float(cos) >= MIN_COSINE:
        problems.append(f"request 0 cosine {float(cos):.5f}")
    if sets.lse is not None and not torch.allclose(sets.lse[0, :q_len], ref_lse, atol=ATOL, rtol=RTOL):
        problems.append("request 0 lse vs reference")
    return "ok" if not problems else "BAD: " + ", ".join(problems)


# ------------------------------------------------------------------------------------------------- one case

def run_case(case: Case, device: torch.device, l2_bytes: int | None, quick: bool, lse: bool) -> dict[str, Any]:
    """Time one case; returns a result row (with ``error`` set instead of timings on failure)."""
    seed = 1701 + 1009 * case.batch + case.nominal + 7919 * case.kv_heads + 104729 * case.q_heads
    plan, gen = make_plan(case, seed, lse)
    rotations = rotations_for(math.ceil(plan.model_bytes), l2_bytes)   # reuse distance > 2x L2 by the bytes model
    per_set = set_bytes(case, plan, 1.05 * plan.stats[0].referenced.numel())   # 5 %: other sets' rows differ
    rotations = max(2, min(rotations, int(MEMORY_BUDGET // per_set)))  # memory cap (2 sets: one alone is > 2x L2)
    extend_plan(case, plan, rotations, gen)
    row: dict[str, Any] = {
        "kv": case.kv, "geometry": case.geometry, "Hq": case.q_heads, "Hkv": case.kv_heads, "Q": Q_LEN,
        "B": case.batch, "N": case.nominal, "suite": case.suite, "weight": case.weight,
        "distinct_pages": plan.distinct, "max_pages": plan.width,
        "bytes": plan.model_bytes, "kv_bytes": plan.kv_bytes, "q_bytes": plan.q_bytes, "out_bytes": plan.out_bytes,
        "lse_bytes": plan.lse_bytes, "dense_bytes": plan.dense_bytes,
        "flops": plan.flops(case.q_heads // case.kv_heads), "mb": plan.model_bytes / 1e6,
        "dense_mb": plan.dense_bytes / 1e6, "rotations": rotations}
    calls, warmup, samples = timing_plan(math.ceil(plan.model_bytes), rotations, device, quick)
    row["calls"] = calls
    time_sets(row, msa_ops.sparse_decode, lambda: build_sets(case, plan, device, seed), check_output, device,
              rotations=rotations, calls=calls, warmup=warmup, samples=samples, model_bytes=plan.model_bytes,
              flops=row["flops"])
    return row


def run_dense(case: Case, device: torch.device, l2_bytes: int | None, quick: bool) -> dict[str, Any]:
    """Dense BF16 attention on the same context with torch's scaled_dot_product_attention, timed the same way.

    What it measures: per request one SDPA call (a Python loop over the B requests, all captured in the graph)
    over the request's whole context, K and V bf16 ``[1, Hkv, seq_len, 128]`` (views of one buffer per set);
    the GQA group is folded into the query length (q ``[1, Hkv, (Hq / Hkv) * Q, 128]``, plain multi-head
    attention per KV head, as decode kernels do), no mask (the step's Q tokens see all seq_len keys: at most
    Q - 1 = 7 keys more than causal), torch's default backend choice. So: dense attention's work and traffic
    (each request's full K/V read once), plus B kernel launches per call."""
    group = case.q_heads // case.kv_heads
    lens = [int(n) for n in official_decode_lengths(case.batch, case.nominal).tolist()]
    dense_bytes = sum(lens) * case.kv_heads * DENSE_TOKEN_HEAD_BYTES
    per_set = dense_bytes + case.batch * case.kv_heads * group * Q_LEN * HEAD_DIM * 2 * 2   # K, V + q, out
    out: dict[str, Any] = {}
    if dense_bytes > DENSE_MAX_BYTES:
        out["sdpa_skip"] = f"dense K+V {dense_bytes / GiB:.1f} GiB > {DENSE_MAX_BYTES / GiB:.0f} GiB"
        return out
    rotations = rotations_for(dense_bytes, l2_bytes)
    rotations = max(2, min(rotations, int(MEMORY_BUDGET // per_set)))
    calls, warmup, samples = timing_plan(dense_bytes, rotations, device, quick)
    out.update({"sdpa_rotations": rotations, "sdpa_calls": calls})
    kvs = qs = None
    try:
        gen = torch.Generator(device=device).manual_seed(4242 + case.batch + case.nominal)
        total = sum(lens)
        kvs = [torch.randn((2, case.kv_heads, total, HEAD_DIM), generator=gen, device=device, dtype=torch.bfloat16)
               for _ in range(rotations)]
        qs = torch.randn((rotations, case.batch, case.kv_heads, group * Q_LEN, HEAD_DIM), generator=gen,
                         device=device, dtype=torch.bfloat16)
        starts = [sum(lens[:b]) for b in range(case.batch)]
        bound = [[(qs[i, b:b + 1], kvs[i][0, :, s:s + n].unsqueeze(0), kvs[i][1, :, s:s + n].unsqueeze(0))
                  for b, (s, n) in enumerate(zip(starts, lens))] for i in range(rotations)]
        try:   # private torch API: only for the report
            out["sdpa_backend"] = torch.nn.attention.SDPBackend(torch._fused_sdp_choice(*bound[0][0])).name
        except Exception:
            out["sdpa_backend"] = "unknown"

        def make_call(i: int):
            per_request = bound[i]
            return lambda: [F.scaled_dot_product_attention(q, k, v) for q, k, v in per_request]

        result = bench(make_call, device, rotations=rotations, calls_per_sample=calls, warmup=warmup,
                       samples=samples)
        out.update({"sdpa_us": result.us, "sdpa_p10_us": result.p10_us, "sdpa_p90_us": result.p90_us})
    except Exception as err:
        out["sdpa_error"] = error_text(err)
    finally:
        del kvs, qs
        release(device)
    return out


# ------------------------------------------------------------------------------------------------- summary

def summarize_config(rows: list[dict[str, Any]], kv: str, geometry: str, copy_bps: float) -> dict[str, Any]:
    """Summary of one (KV format, geometry) config over its official and low-latency rows.

    Weighting: SPEC §7 weights w of the 28 official (N, B) cases (sum 10,000), the same definition as
    bench_index_decode.py: ``weighted_mbu = sum(w * MBU_case) / sum(w)`` (the bar's number) and, for
    information, ``mix_mbu = sum(w * bytes_case) / sum(w * seconds_case) / copy``."""
    mine = [r for r in rows if r["kv"] == kv and r["geometry"] == geometry]
    official = [r for r in mine if r["suite"] == "official"]
    low = [r for r in mine if r["suite"] == "low-latency"]
    official_ok = [r for r in official if "mbu" in r]
    full_official, full_low = len(OFFICIAL_B) * len(OFFICIAL_N), len(LOW_LATENCY_B) * len(LOW_LATENCY_N)
    s: dict[str, Any] = {"kv": kv, "geometry": geometry, "official_cases": len(official),
                         "low_latency_cases": len(low),
                         "complete": len(official_ok) == len(official) == full_official and len(low) == full_low,
                         "errors": sum("error" in r for r in mine),
                         "bad_checks": sum("error" not in r and r.get("check") != "ok" for r in mine)}
    s.update(weighted_mbu(official_ok, copy_bps))
    if official_ok:
        worst = min(official_ok, key=lambda r: r["mbu"])
        s["min_mbu"], s["min_mbu_case"] = worst["mbu"], fmt_case(worst)
    low_ok = [r for r in low if "us" in r]
    s["low_latency_us"] = {fmt_case(r): r["us"] for r in low_ok}
    if low_ok:
        worst = max(low_ok, key=lambda r: r["us"])
        s["max_us_low_latency"], s["max_us_low_latency_case"] = worst["us"], fmt_case(worst)
    for way in ("roofline", "sdpa"):
        sp = [r[f"speedup_{way}"] for r in mine if f"speedup_{way}" in r]
        if sp:
            s[f"speedup_{way}_min"], s[f"speedup_{way}_max"] = min(sp), max(sp)
            s[f"speedup_{way}_geomean"] = math.exp(sum(map(math.log, sp)) / len(sp))

    # Bars (issue 4), for every config measured: weighted MBU (70 % KV4 / KV8, 80 % BF16) and every low-latency
    # case <= 12 µs. A failed case or a bad output check fails its bar.
    def good(r: dict[str, Any]) -> bool:
        return "us" in r and r.get("check") == "ok"

    s["bars"] = {
        "weighted_mbu": None if not official else (all(map(good, official)) and
                                                   s["weighted_mbu"] >= BAR_WEIGHTED_MBU[kv]),
        "max_us": None if not low else all(good(r) and r["us"] <= BAR_MAX_US for r in low)}
    return s


def print_summary(summary: list[dict[str, Any]], overall: str, cpu: bool) -> None:
    tag = " [CPU smoke: not a GPU result]" if cpu else ""
    for s in summary:
        head = f"summary kv={s['kv']} {s['geometry']} Q={Q_LEN}"
        if "weighted_mbu" in s:
            part = "" if s["complete"] else f" (partial suite: {s['official_cases']} of 28 official cases)"
            print(f"{head}: weighted MBU (official suite, SPEC §7 weights, sum {s['weight_sum']}){part}: mean of "
                  f"per-case MBU {s['weighted_mbu']:.1f}%, weighted mix (sum w*bytes / sum w*time / copy) "
                  f"{s['mix_mbu']:.1f}%; min MBU {s['min_mbu']:.1f}% ({s['min_mbu_case']})")
        else:
            print(f"{head}: no official case measured")
        if s["low_latency_us"]:
            print(f"{head}: low-latency us: " + ", ".join(f"{k} {v:.2f}" for k, v in s["low_latency_us"].items()) +
                  f"; max {s['max_us_low_latency']:.2f} ({s['max_us_low_latency_case']})")
        sp = [f"{name} x{s[f'speedup_{way}_min']:.2f}..x{s[f'speedup_{way}_max']:.2f} (geomean "
              f"x{s[f'speedup_{way}_geomean']:.2f})" for way, name in
              (("roofline", "dense BF16 bytes at copy bandwidth"), ("sdpa", "torch SDPA dense BF16"))
              if f"speedup_{way}_min" in s]
        if sp:
            print(f"{head}: speedup over dense: " + "; ".join(sp) + tag)
        if s["errors"] or s["bad_checks"]:
            print(f"{head}: {s['errors']} case(s) failed, {s['bad_checks']} with a bad output check")
        names = {"weighted_mbu": f"weighted MBU >= {BAR_WEIGHTED_MBU[s['kv']]:.0f}%",
                 "max_us": f"every low-latency case <= {BAR_MAX_US:g} us"}
        if not cpu:
            print(f"{head}: bars: " + "; ".join(f"{names[k]}: {verdict(v)}" for k, v in s["bars"].items()))
    print(f"summary: issue 4 bars: {overall}{tag}")


def overall_verdict_of(summary: list[dict[str, Any]], cpu: bool) -> str:
    configs = {(s["kv"], s["geometry"]) for s in summary}
    complete = all(s["complete"] for s in summary) and configs >= {(k, g) for k in KV for g in GEOMETRIES}
    return overall_verdict(summary, cpu, lambda s: f"{s['kv']}/{s['geometry']}", complete, "gave a bad output",
                           "every case ran, outputs check out")


# ------------------------------------------------------------------------------------------------------ CLI

def parse_kv(text: str) -> list[str]:
    return parse_choices(text, KV, KV_ALIASES, "KV format")


def parse_geometry(text: str) -> list[tuple[int, int]]:
    out = []
    for t in parse_list(text):
        hq, _, hkv = t.partition("/")
        try:
            out.append((int(hq), int(hkv)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"geometries are Hq/Hkv pairs, e.g. 64/4,16/1; got {t!r}") from None
        if out[-1][1] < 1 or out[-1][0] < 1 or out[-1][0] % out[-1][1]:
            raise argparse.ArgumentTypeError(f"geometry {t!r}: Hq must be a positive multiple of Hkv >= 1")
    return out


def build_cases(args: argparse.Namespace, cpu: bool) -> list[Case]:
    if args.cases:
        pairs = args.cases
    elif cpu:
        pairs = CPU_OFFICIAL + CPU_LOW_LATENCY
    elif args.quick:
        pairs = QUICK_OFFICIAL + QUICK_LOW_LATENCY
    else:
        pairs = suite_pairs()
    return [Case(suite_of(b, n), b, n, hq, hkv, kv) for kv in args.kv for hq, hkv in args.geometry for b, n in pairs]


def has_cuda_kernel() -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(OP, "CUDA")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="representative cases only: B:N = " + ", ".join(
                        f"{b}:{n}" for b, n in QUICK_OFFICIAL + QUICK_LOW_LATENCY) + "; fewer replays")
    ap.add_argument("--kv", type=parse_kv, default=list(KV),
                    help="comma-separated KV formats: nvfp4 (= kv4), fp8 (= e4m3, kv8), bf16 (default all three)")
    ap.add_argument("--geometry", type=parse_geometry, default=list(GEOMETRIES.values()),
                    help="comma-separated Hq/Hkv: 64/4 = TP1, 16/1 = TP4 (default 64/4,16/1)")
    ap.add_argument("--cases", type=parse_cases,
                    help="comma-separated B:N pairs instead of the suite (lengths from the SPEC §7 generator)")
    ap.add_argument("--lse", action="store_true", help="also return the LSE (preallocated; its bytes are counted)")
    ap.add_argument("--no-sdpa", action="store_true", help="skip the torch SDPA dense-attention comparison")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny CPU run (automatic when CUDA is unavailable)")
    ap.add_argument("--copy-mib", type=int, default=2048, help="buffer size (MiB) of the copy roofline")
    ap.add_argument("--json", type=Path, help="write results (plus device facts, versions, git commit) here")
    args = ap.parse_args(argv)

    cpu, device, facts = pick_device(args.cpu_smoke)
    payload: dict[str, Any] = {"benchmark": "sparse_decode", "mode": "cpu-smoke" if cpu else "cuda",
                               "quick": args.quick}
    if not cpu and not has_cuda_kernel():
        reason = (f"{OP} has no CUDA kernel in this build (msa_ops CUDA targets: {msa_ops.cuda_archs()}): "
                  "nothing to time on the GPU yet; `--cpu-smoke` times the CPU op")
        print(reason)
        if args.json:
            print(f"[json] wrote {write_json(args.json, {**payload, 'skipped': reason}, device)}")
        print(f"summary: issue 4 bars: n/a ({OP} has no CUDA kernel yet)")
        return 0
    copy_bytes, copy_ways, copy_bps = copy_roofline(device, facts, args.copy_mib)
    print("bytes model per call (MBU numerator): the distinct (request, physical page, KV head) K+V bytes the step "
          "must read, i.e. per request and KV head the union of its Q tokens' TopK pages, read once (" +
          ", ".join(f"{k} {v[1]} B per token per KV head = {PAGE_SIZE * v[1]} B per page" for k, v in KV.items()
                    if k in args.kv) +
          "; a request's last page counts only its tokens < seq_len) + q (T*Hq*128 x 1 B E4M3, 2 B BF16) + out "
          "(T*Hq*128*2 B)" + (" + lse (T*Hq*4 B)" if args.lse else "") +
          "; not counted: TopK rows, page_table entries, seq_lens (4 B each)")
    print("MBU = bytes model / median time / copy roofline; TB/s = bytes model / median time; TFLOP/s = 2*2*128 "
          "FLOP per (query head, visible key) / median time")
    print(f"speedup over dense BF16 attention on the same context (every request's seq_len tokens, K+V "
          f"{DENSE_TOKEN_HEAD_BYTES} B per token per KV head): 'roof x' = (dense bytes / copy roofline) / our "
          "time; 'sdpa x' = torch scaled_dot_product_attention time / our time, SDPA timed the same way: one "
          "call per request (loop captured in the graph), GQA group folded into the query length, no mask, "
          f"default backend; run where one set of dense K+V <= {DENSE_MAX_BYTES // GiB} GiB" +
          (" (--no-sdpa: skipped)" if args.no_sdpa else ""))
    print("inputs: TopK rows of 15 random distinct history pages + the local page per (KV head, token); the pool "
          "holds only the pages some row references (a seeded random permutation, disjoint per set); "
          "page_table entries of unreferenced pages are -1 (never read)")
    print(timing_protocol(cpu, "own q, TopK rows, page table, seq_lens, out" + (", lse" if args.lse else "") +
                          "; K/V on disjoint pages of one pool"))

    cases = build_cases(args, cpu)
    rows = []
    for case in cases:
        row = run_case(case, device, facts.l2_bytes, args.quick, args.lse)
        if "us" in row:
            row["mbu"] = 100 * row["bytes"] / (row["us"] * 1e-6) / copy_bps
            row["dense_roofline_us"] = row["dense_bytes"] / copy_bps * 1e6
            row["speedup_roofline"] = row["dense_roofline_us"] / row["us"]
            if not args.no_sdpa:
                row.update(run_dense(case, device, facts.l2_bytes, args.quick))
                if "sdpa_us" in row:
                    row["sdpa_mbu"] = 100 * row["dense_bytes"] / (row["sdpa_us"] * 1e-6) / copy_bps
                    row["speedup_sdpa"] = row["sdpa_us"] / row["us"]
        rows.append(row)
        name = f"  {case.kv} {case.geometry} B={case.batch} N={case.nominal}"
        if "error" in row:
            print(f"{name}: FAILED {row['error']}", flush=True)
        elif row.get("check") != "ok":
            print(f"{name}: output {row['check']}", flush=True)
        if "sdpa_error" in row:
            print(f"{name}: SDPA comparison failed: {row['sdpa_error']}", flush=True)

    columns = [("kv", "kv"), ("geometry", "geom"), ("B", "B"), ("N", "N"), ("suite", "suite"), ("weight", "w"),
               ("distinct_pages", "pages", ".0f"), ("rotations", "rot"), ("calls", "calls"),
               ("us", "median us", ".2f"), ("p10_us", "p10", ".2f"), ("p90_us", "p90", ".2f"),
               ("mb", "MB", ".3f"), ("tbps", "TB/s", ".3f"), ("mbu", "MBU %", ".1f"), ("tflops", "TFLOP/s", ".1f"),
               ("dense_mb", "dense MB", ".1f"), ("speedup_roofline", "roof x", ".2f"),
               ("sdpa_us", "sdpa us", ".1f"), ("sdpa_mbu", "sdpa MBU %", ".1f"), ("speedup_sdpa", "sdpa x", ".2f"),
               ("check", "check"), ("error", "error")]
    if not any("error" in r for r in rows):
        columns.pop()
    print()
    print(format_table(rows, columns))
    backends = sorted({r["sdpa_backend"] for r in rows if "sdpa_backend" in r})
    skipped = [f"{r['kv']} {r['geometry']} {fmt_case(r)}" for r in rows if "sdpa_skip" in r]
    if backends:
        print(f"SDPA backend chosen by torch: {', '.join(backends)}")
    if skipped:
        print(f"SDPA comparison skipped (dense K+V > {DENSE_MAX_BYTES // GiB} GiB): " + ", ".join(skipped))
    print()
    configs = list(dict.fromkeys((c.kv, c.geometry) for c in cases))
    summary = [summarize_config(rows, kv, geometry, copy_bps) for kv, geometry in configs]
    overall = overall_verdict_of(summary, cpu)

    payload.update({
        "copy_bytes": copy_bytes, "copy_bandwidths_bytes_per_s": copy_ways, "copy_bandwidth_bytes_per_s": copy_bps,
        "q_len": Q_LEN, "topk": TOPK, "lse": args.lse,
        "kv_token_head_bytes": {k: v[1] for k, v in KV.items()},
        "weights": {str(n): dict(zip(map(str, OFFICIAL_B), w)) for n, w in OFFICIAL_WEIGHTS.items()},
        "weighting": "weighted_mbu = sum(w * MBU) / sum(w) over the official cases (w = SPEC §7 weight of (N, B)); "
                     "mix_mbu = sum(w * bytes) / sum(w * seconds) / copy",
        "bytes_model": "distinct (request, physical page, KV head) K+V bytes over the request's tokens' TopK rows "
                       "(last page: tokens < seq_len only) + q + out (+ lse)",
        "dense": "roofline: sum(seq_len) * Hkv * 512 B (bf16 K+V) / copy bandwidth; sdpa: one "
                 "scaled_dot_product_attention per request over its full context, GQA folded into the query "
                 "length, no mask, in the CUDA graph",
        "bars": {"weighted_mbu_pct": BAR_WEIGHTED_MBU, "max_us_low_latency": BAR_MAX_US},
        "rows": rows, "summary": summary, "overall": overall})
    return finish(args.json, payload, device, rows, lambda: print_summary(summary, overall, cpu))


if __name__ == "__main__":
    sys.exit(main())
