#!/usr/bin/env python
"""Microbenchmark: the MSA decode indexer ``msa_ops.index_decode`` (score every visible page, select the TopK).

Workloads (shared/SPEC.md §7): the official MSA v1 decode suite, B in {8, 32, 64, 128} x N in {1000, 4000,
5000, 10000, 50000, 100000, 200000} with the suite's weights, plus the low-latency suite, B in {1, 2, 4} x N
in {1000, 4000, 8000, 32000}; Q = 8 query tokens per request; H = 4 index heads (TP1) and H = 1 (TP4); NVFP4
and FP8 (E4M3) index keys (BF16 with ``--keys ...,bf16``). Per-request lengths come from SPEC §7's generator
(``msa_ops.testing.paged.official_decode_lengths``), physical pages are a seeded random permutation, q and keys
are random normal data quantized to the op's formats. A compute-heavy corner (Q = 16, H = 4) also reports
TFLOP/s of useful dot products.

Per case: µs per op call (median, p10, p90; SPEC §7 CUDA-graph protocol with rotated inputs, preallocated
``out`` and ``workspace`` (no ``scores_out``, as an engine calls it), so the call allocates nothing), the bytes
model (index-key bytes of each request's pages up to its last token's local page, read once, + q + TopK out),
effective TB/s and MBU = bytes / time / measured copy bandwidth. Summary: weighted MBU over the official cases
with N >= 4000, min MBU, max µs of the N = 1000 and low-latency cases, and PASS/FAIL against issue 3's bars.

    python bench/bench_index_decode.py                       # full suite on the current CUDA device
    python bench/bench_index_decode.py --quick --json $OUT/index_decode.json
    python bench/bench_index_decode.py --keys nvfp4 --heads 4 --cases 128:200000,1:32000
    python bench/bench_index_decode.py --cpu-smoke           # tiny CPU run (automatic without CUDA): not GPU numbers
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # use this checkout's msa_ops
sys.path.insert(0, str(Path(__file__).resolve().parent))      # bench/_suite.py

import torch  # noqa: E402

import msa_ops  # noqa: E402
from _suite import (LOW_LATENCY_B, LOW_LATENCY_N, MEMORY_BUDGET, OFFICIAL_B, OFFICIAL_N,  # noqa: E402
                    OFFICIAL_WEIGHTS, Q_LEN, TOPK, copy_roofline, finish, fmt_case, official_weight,
                    overall_verdict, parse_cases, parse_choices, parse_list, pick_device, suite_of,
                    suite_pairs, time_sets, timing_plan,
                    timing_protocol, verdict, weighted_mbu)
from msa_ops.bench import format_table, rotations_for  # noqa: E402
from msa_ops.testing.paged import INDEX_DIM, PAGE_SIZE, official_decode_lengths, pages_needed  # noqa: E402

# ------------------------------------------------------------------------------------------ workloads (SPEC §7)
# The suites, weights, Q_LEN and TOPK are in bench/_suite.py (shared with bench_sparse_decode.py).
CORNER_Q, CORNER_HEADS = 16, 4  # compute-heavy corner: 64 query rows per key
CORNER_FULL = [(8, 50000), (64, 50000), (128, 200000)]
CORNER_QUICK = [(64, 50000)]
QUICK_OFFICIAL = [(8, 1000), (8, 10000), (64, 50000), (128, 200000)]
QUICK_LOW_LATENCY = [(1, 32000)]
CPU_OFFICIAL = [(8, 1000), (8, 4000)]
CPU_LOW_LATENCY = [(1, 8000)]

# ------------------------------------------------------------------------------------------------- the bars
BAR_WEIGHTED_MBU = 70.0         # % : weighted MBU over the official cases with N >= 4000, NVFP4 keys, H = 4
BAR_MIN_MBU = 40.0              # % : every official case with N >= 4000 (NVFP4 and FP8 configs)
BAR_MAX_US = 12.0               # µs: every N = 1000 official case and every low-latency case (NVFP4 and FP8)
BAR_MIN_N = 4000

# ------------------------------------------------------------------------------------------------ key formats
#: CLI name -> (msa_ops.testing.paged format name, bytes of one 128-token page of index keys, q dtype)
KEYS = {
    "nvfp4": ("nvfp4", PAGE_SIZE * (INDEX_DIM // 2 + INDEX_DIM // 16), torch.float8_e4m3fn),  # 128 x 72
    "fp8": ("e4m3", PAGE_SIZE * INDEX_DIM, torch.float8_e4m3fn),                               # 128 x 128
    "bf16": ("bf16", PAGE_SIZE * INDEX_DIM * 2, torch.bfloat16),                               # 128 x 256
}
KEY_ALIASES = {"e4m3": "fp8", "fp4": "nvfp4"}

# -------------------------------------------------------------------------------------------- timing knobs
# MEMORY_BUDGET and the calls per graph replay: bench/_suite.py.
KEY_CHUNK_PAGES = 2048          # pages generated per step (fp32 staging: 2048 x 128 x 128 x 4 B = 128 MiB)
SPARE_PAGES = 3                 # physical pages never referenced
POISON = -7                     # written into `out` before timing: a row still holding it was never written


@dataclass(frozen=True)
class Case:
    suite: str        # "official", "low-latency", "corner" or "custom"
    batch: int
    nominal: int      # N
    q_len: int
    heads: int
    keys: str         # key of KEYS

    @property
    def weight(self) -> int | None:
        if self.suite != "official":
            return None
        return official_weight(self.batch, self.nominal)


@dataclass(frozen=True)
class Geometry:
    """Lengths and the byte / FLOP model of one case (independent of the device)."""
    lens: torch.Tensor        # int32 [B]
    needed: list[int]         # pages each request reads: 0 .. its last token's local page
    width: int                # page_table width (max_pages) = max(needed)
    pos: torch.Tensor         # int64 [B*Q] position of every query token (row t = b*Q + i)
    key_bytes: int
    q_bytes: int
    out_bytes: int
    ws_bytes: int             # scores workspace: needed pages written + candidates read by the select step
    ws_alloc_bytes: int       # size of the workspace tensor (rounded up to 256 B per set)
    table_bytes: int          # page_table [B, width] int32 (allocated per set; its reads are not counted)
    flops: int                # 2 * 128 per (query row, visible key)

    @property
    def pages(self) -> int:
        return sum(self.needed)

    @property
    def model_bytes(self) -> int:
        """The MBU numerator: index keys read once + q + TopK out."""
        return self.key_bytes + self.q_bytes + self.out_bytes


def geometry(case: Case) -> Geometry:
    lens = official_decode_lengths(case.batch, case.nominal)
    needed = pages_needed(lens)
    width = max(needed)
    q_len, heads = case.q_len, case.heads
    pos = (lens.to(torch.int64)[:, None] - q_len + torch.arange(q_len)[None, :]).reshape(-1)
    local = torch.where(pos >= 0, pos // PAGE_SIZE, torch.full_like(pos, -1))
    # The select step reads the history candidates (pages 0 .. local) of a row only when they do not all fit.
    candidates = torch.where(local + 1 > TOPK, local + 1, torch.zeros_like(local))
    tokens = case.batch * q_len
    page_bytes, q_dtype = KEYS[case.keys][1], KEYS[case.keys][2]
    q_elt = torch.empty((), dtype=q_dtype).element_size()
    ws_alloc = -(-msa_ops.index_decode_workspace_bytes(heads, tokens, width) // 256) * 256
    # Scores are written for each request's needed pages, and not at all when nothing is scored (width <= 16).
    ws_written = 4 * heads * q_len * sum(needed) if width > TOPK else 0
    return Geometry(
        lens=lens, needed=needed, width=width, pos=pos,
        key_bytes=sum(needed) * page_bytes,
        q_bytes=tokens * heads * INDEX_DIM * q_elt,
        out_bytes=heads * tokens * TOPK * 4,
        ws_bytes=ws_written + 4 * heads * int(candidates.sum()),
        ws_alloc_bytes=ws_alloc,
        table_bytes=case.batch * width * 4,
        flops=2 * INDEX_DIM * heads * int(torch.clamp(pos + 1, min=0).sum()))


# ------------------------------------------------------------------------------------------------- inputs

def make_key_pool(num_pages: int, keys: str, device: torch.device,
                  gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Random normal index keys (per-token magnitude x0.25..x4, as msa_ops.testing.paged.make_index_keys)
    quantized to the format, generated on ``device`` in chunks: NVFP4 through msa_ops.nvfp4_quantize."""
    fmt = KEYS[keys][0]
    if fmt == "nvfp4":
        index_k = torch.empty((num_pages, PAGE_SIZE, INDEX_DIM // 2), dtype=torch.uint8, device=device)
        scales = torch.empty((num_pages, PAGE_SIZE, INDEX_DIM // 16), dtype=torch.float8_e4m3fn, device=device)
    else:
        dtype = torch.float8_e4m3fn if fmt == "e4m3" else torch.bfloat16
        index_k, scales = torch.empty((num_pages, PAGE_SIZE, INDEX_DIM), dtype=dtype, device=device), None
    chunk = KEY_CHUNK_PAGES if device.type == "cuda" else 256
    for start in range(0, num_pages, chunk):
        n = min(chunk, num_pages - start)
        x = torch.randn((n, PAGE_SIZE, INDEX_DIM), generator=gen, device=device)
        x *= torch.exp2(torch.rand((n, PAGE_SIZE, 1), generator=gen, device=device) * 4 - 2)
        if scales is not None:
            packed, sc = msa_ops.nvfp4_quantize(x)
            index_k[start:start + n].copy_(packed)
            scales[start:start + n].copy_(sc)
        else:
            index_k[start:start + n].copy_(x.to(index_k.dtype))
        del x
    return index_k, scales


def make_page_tables(geo: Geometry, rotations: int, total_pages: int, gen: torch.Generator) -> torch.Tensor:
    """int32 [rotations, B, width]: one seeded random permutation of the pool's physical pages, dealt out to
    the sets (disjoint pages per set) and within a set to the requests in order; -1 past a request's pages."""
    needed = torch.tensor(geo.needed, dtype=torch.int64)
    per_set = int(needed.sum())
    ids = torch.randperm(total_pages, generator=gen)[:rotations * per_set].view(rotations, per_set)
    j = torch.arange(geo.width)
    valid = j[None, :] < needed[:, None]                                    # [B, width]
    idx = torch.where(valid, (torch.cumsum(needed, 0) - needed)[:, None] + j[None, :], torch.zeros_like(j))
    tables = torch.where(valid, ids[:, idx], torch.full_like(ids[:, idx], -1))
    return tables.to(torch.int32).contiguous()


@dataclass
class InputSets:
    """``rotations`` independent argument sets of one case (each with its own q, page table, seq_lens, out and
    scores workspace, as an engine would call it: no scores_out; the keys of all sets live in one pool, on
    disjoint physical pages)."""
    index_k: torch.Tensor
    index_k_scales: torch.Tensor | None
    q: torch.Tensor           # [R, B, Q, H, 128]
    tables: torch.Tensor      # [R, B, width]
    seq_lens: torch.Tensor    # [R, B]
    out: torch.Tensor         # [R, H, B*Q, 16]
    workspace: torch.Tensor   # uint8 [R, ws_alloc_bytes]

    def args(self, i: int) -> tuple[tuple, dict]:
        return ((self.q[i], self.index_k, self.tables[i], self.seq_lens[i]),
                {"index_k_scales": self.index_k_scales, "out": self.out[i], "workspace": self.workspace[i]})


def build_sets(case: Case, geo: Geometry, rotations: int, device: torch.device, seed: int) -> InputSets:
    cpu_gen = torch.Generator().manual_seed(seed)
    dev_gen = torch.Generator(device=device).manual_seed(seed + 1)
    total_pages = rotations * geo.pages + SPARE_PAGES
    index_k, scales = make_key_pool(total_pages, case.keys, device, dev_gen)
    tables = make_page_tables(geo, rotations, total_pages, cpu_gen).to(device)
    q = torch.randn((rotations, case.batch, case.q_len, case.heads, INDEX_DIM), generator=dev_gen,
                    device=device).to(KEYS[case.keys][2])
    tokens = case.batch * case.q_len
    return InputSets(
        index_k=index_k, index_k_scales=scales, q=q, tables=tables,
        seq_lens=geo.lens.to(device).repeat(rotations, 1).contiguous(),
        out=torch.full((rotations, case.heads, tokens, TOPK), POISON, dtype=torch.int32, device=device),
        workspace=torch.empty((rotations, geo.ws_alloc_bytes), dtype=torch.uint8, device=device))


def check_topk(out: torch.Tensor, pos: torch.Tensor) -> str:
    """Structure of every TopK row (SPEC §4) in ``out`` [..., H, T, 16] for token positions ``pos`` [T]:
    ``min(16, local + 1)`` valid entries, distinct, history < local, the local page last, then -1; rows with
    local + 1 <= 16 are exactly 0 .. local. Catches a kernel that did not run (POISON left) or wrote garbage;
    the scores themselves are checked by the tests, not here."""
    pos = pos.to(out.device)
    local = torch.where(pos >= 0, pos // PAGE_SIZE, torch.full_like(pos, -1))[:, None]   # [T, 1]
    n = torch.clamp(local + 1, max=TOPK)                                                 # [T, 1]
    k = torch.arange(TOPK, device=out.device)[None, :]                                   # [1, 16]
    o = out.to(torch.int64)
    valid = k < n
    problems = []
    if not torch.all(torch.where(valid, o >= 0, o == -1)):
        problems.append("valid/-1 layout")
    if not torch.all(torch.where(k == n - 1, o == local, True)):
        problems.append("local page not last")
    if not torch.all(torch.where(k < n - 1, o < local, True)):
        problems.append("history >= local")
    if not torch.all(torch.where(valid & (local + 1 <= TOPK), o == k, True)):
        problems.append("short row != 0..local")
    s = torch.sort(o, dim=-1).values
    if torch.any((s[..., 1:] == s[..., :-1]) & (s[..., 1:] >= 0)):
        problems.append("duplicates")
    return "ok" if not problems else "BAD: " + ", ".join(problems)


# ------------------------------------------------------------------------------------------------- one case

def run_case(case: Case, device: torch.device, l2_bytes: int | None, quick: bool) -> dict[str, Any]:
    """Time one case; returns a result row (with ``error`` set instead of timings on failure)."""
    geo = geometry(case)
    per_set = geo.key_bytes + geo.q_bytes + geo.out_bytes + geo.ws_alloc_bytes + geo.table_bytes + case.batch * 4
    rotations = rotations_for(geo.model_bytes, l2_bytes)           # reuse distance > 2x L2 by the bytes model
    rotations = max(2, min(rotations, MEMORY_BUDGET // per_set))   # memory cap (2 sets: one alone is > 2x L2)
    row: dict[str, Any] = {
        "keys": case.keys, "H": case.heads, "Q": case.q_len, "B": case.batch, "N": case.nominal,
        "suite": case.suite, "weight": case.weight, "pages": geo.pages, "max_pages": geo.width,
        "bytes": geo.model_bytes, "key_bytes": geo.key_bytes, "q_bytes": geo.q_bytes, "out_bytes": geo.out_bytes,
        "ws_bytes": geo.ws_bytes, "flops": geo.flops, "mb": geo.model_bytes / 1e6, "ws_mb": geo.ws_bytes / 1e6,
        "rotations": rotations}
    calls, warmup, samples = timing_plan(geo.model_bytes, rotations, device, quick)
    row["calls"] = calls
    seed = 1701 + 1009 * case.batch + case.nominal + 7919 * case.heads + 104729 * case.q_len
    time_sets(row, msa_ops.index_decode, lambda: build_sets(case, geo, rotations, device, seed),
              lambda sets: check_topk(sets.out, geo.pos), device, rotations=rotations, calls=calls,
              warmup=warmup, samples=samples, model_bytes=geo.model_bytes, flops=geo.flops)
    return row


# ------------------------------------------------------------------------------------------------- summary

def summarize_config(rows: list[dict[str, Any]], keys: str, heads: int, copy_bps: float) -> dict[str, Any]:
    """Summary of one (keys, H) config over its Q = 8 official and low-latency rows.

    Weighting (SPEC §7 weights w of the official (N, B) cases with N >= 4000, 24 cases, sum of w 9,400):
    ``weighted_mbu = sum(w * MBU_case) / sum(w)`` (the bar's number) and, for information,
    ``mix_mbu = sum(w * bytes_case) / sum(w * seconds_case) / copy`` (the MBU of the weighted workload mix)."""
    mine = [r for r in rows if r["keys"] == keys and r["H"] == heads and r["Q"] == Q_LEN]
    big = [r for r in mine if r["suite"] == "official" and r["N"] >= BAR_MIN_N]
    small = [r for r in mine if (r["suite"] == "official" and r["N"] == 1000) or r["suite"] == "low-latency"]
    big_ok = [r for r in big if "mbu" in r]
    full_big = len(OFFICIAL_B) * sum(n >= BAR_MIN_N for n in OFFICIAL_N)
    full_small = len(OFFICIAL_B) + len(LOW_LATENCY_B) * len(LOW_LATENCY_N)
    s: dict[str, Any] = {"keys": keys, "H": heads, "official_cases_n_ge_4000": len(big),
                         "complete": len(big_ok) == len(big) == full_big and len(small) == full_small,
                         "errors": sum("error" in r for r in mine),
                         "bad_checks": sum("error" not in r and r.get("check") != "ok" for r in mine)}
    if big_ok:
        s.update(weighted_mbu(big_ok, copy_bps))
        worst = min(big_ok, key=lambda r: r["mbu"])
        s["min_mbu"], s["min_mbu_case"] = worst["mbu"], fmt_case(worst)
    n1000 = [r for r in small if r["suite"] == "official" and "us" in r]
    low = [r for r in small if r["suite"] == "low-latency" and "us" in r]
    if n1000:
        worst = max(n1000, key=lambda r: r["us"])
        s["max_us_n1000"], s["max_us_n1000_case"] = worst["us"], fmt_case(worst)
    if low:
        worst = max(low, key=lambda r: r["us"])
        s["max_us_low_latency"], s["max_us_low_latency_case"] = worst["us"], fmt_case(worst)

    # Bars (issue 3): the weighted MBU bar only for NVFP4 H = 4; min MBU and latency for every NVFP4 / FP8
    # config measured (BF16 keys are optional and get no bar). A failed case or a bad TopK row fails its bar.
    def good(r: dict[str, Any]) -> bool:
        return "us" in r and r.get("check") == "ok"

    bars: dict[str, bool | None] = {}
    if keys == "nvfp4" and heads == 4:
        bars["weighted_mbu"] = None if not big else (all(map(good, big)) and s["weighted_mbu"] >= BAR_WEIGHTED_MBU)
    if keys in ("nvfp4", "fp8"):
        bars["min_mbu"] = None if not big else (all(map(good, big)) and s["min_mbu"] >= BAR_MIN_MBU)
        bars["max_us"] = None if not small else all(good(r) and r["us"] <= BAR_MAX_US for r in small)
    s["bars"] = bars
    return s


def summarize(rows: list[dict[str, Any]], configs: list[tuple[str, int]], copy_bps: float) -> list[dict[str, Any]]:
    return [summarize_config(rows, keys, heads, copy_bps) for keys, heads in configs]


def print_summary(summary: list[dict[str, Any]], overall: str, cpu: bool) -> None:
    tag = " [CPU smoke: not a GPU result]" if cpu else ""
    for s in summary:
        head = f"summary keys={s['keys']} H={s['H']} Q={Q_LEN}"
        part = "" if s["complete"] else f" (partial suite: {s['official_cases_n_ge_4000']} of 24 N>=4000 cases)"
        if "weighted_mbu" in s:
            print(f"{head}: weighted MBU (N >= {BAR_MIN_N}, SPEC §7 weights, sum {s['weight_sum']}){part}: "
                  f"mean of per-case MBU {s['weighted_mbu']:.1f}%, weighted mix (sum w*bytes / sum w*time / copy) "
                  f"{s['mix_mbu']:.1f}%; min MBU {s['min_mbu']:.1f}% ({s['min_mbu_case']})")
        else:
            print(f"{head}: no official case with N >= {BAR_MIN_N} measured")
        lat = []
        if "max_us_n1000" in s:
            lat.append(f"max us N=1000 {s['max_us_n1000']:.2f} ({s['max_us_n1000_case']})")
        if "max_us_low_latency" in s:
            lat.append(f"max us low-latency {s['max_us_low_latency']:.2f} ({s['max_us_low_latency_case']})")
        if lat:
            print(f"{head}: " + ", ".join(lat))
        if s["errors"] or s["bad_checks"]:
            print(f"{head}: {s['errors']} case(s) failed, {s['bad_checks']} with a bad TopK structure")
        names = {"weighted_mbu": f"weighted MBU >= {BAR_WEIGHTED_MBU:.0f}%",
                 "min_mbu": f"every N>={BAR_MIN_N} case >= {BAR_MIN_MBU:.0f}% MBU",
                 "max_us": f"every N=1000 / low-latency case <= {BAR_MAX_US:g} us"}
        if s["bars"] and not cpu:
            print(f"{head}: bars: " + "; ".join(f"{names[k]}: {verdict(v)}" for k, v in s["bars"].items()) + tag)
    print(f"summary: issue 3 bars: {overall}{tag}")


def overall_verdict_of(summary: list[dict[str, Any]], cpu: bool) -> str:
    configs = {(s["keys"], s["H"]) for s in summary}
    complete = (all(s["complete"] for s in summary if s["keys"] in ("nvfp4", "fp8"))
                and configs >= {(k, h) for k in ("nvfp4", "fp8") for h in (4, 1)})
    return overall_verdict(summary, cpu, lambda s: f"{s['keys']}/H{s['H']}", complete,
                           "gave malformed TopK rows", "every case ran, TopK rows well-formed")


# ------------------------------------------------------------------------------------------------------ CLI

def parse_keys(text: str) -> list[str]:
    return parse_choices(text, KEYS, KEY_ALIASES, "key format")


def parse_heads(text: str) -> list[int]:
    out = [int(t) for t in parse_list(text)]
    if any(h not in (1, 2, 4) for h in out):
        raise argparse.ArgumentTypeError(f"heads must be 1, 2 or 4, got {text!r}")
    return out


def build_cases(args: argparse.Namespace, cpu: bool) -> list[Case]:
    if args.cases:
        pairs, corner = args.cases, []
    elif cpu:
        pairs, corner = CPU_OFFICIAL + CPU_LOW_LATENCY, []
    elif args.quick:
        pairs, corner = QUICK_OFFICIAL + QUICK_LOW_LATENCY, CORNER_QUICK
    else:
        pairs = suite_pairs()
        corner = CORNER_FULL
    if args.no_corner:
        corner = []
    cases = []
    for keys in args.keys:
        for heads in args.heads:
            cases += [Case(suite_of(b, n), b, n, Q_LEN, heads, keys) for b, n in pairs]
        if CORNER_HEADS in args.heads:
            cases += [Case("corner", b, n, CORNER_Q, CORNER_HEADS, keys) for b, n in corner]
    return cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="representative cases only: B:N = " + ", ".join(
                        f"{b}:{n}" for b, n in QUICK_OFFICIAL + QUICK_LOW_LATENCY) +
                    f", corner Q={CORNER_Q} " + ", ".join(f"{b}:{n}" for b, n in CORNER_QUICK) + "; fewer replays")
    ap.add_argument("--keys", type=parse_keys, default=["nvfp4", "fp8"],
                    help="comma-separated index-key formats: nvfp4, fp8 (= e4m3), bf16 (default nvfp4,fp8)")
    ap.add_argument("--heads", type=parse_heads, default=[4, 1],
                    help="comma-separated index-head counts H: 4 = TP1, 1 = TP4 (default 4,1)")
    ap.add_argument("--cases", type=parse_cases,
                    help="comma-separated B:N pairs instead of the suite (lengths from the SPEC §7 generator)")
    ap.add_argument("--no-corner", action="store_true", help=f"skip the compute-heavy Q={CORNER_Q}, H=4 corner")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny CPU run (automatic when CUDA is unavailable)")
    ap.add_argument("--copy-mib", type=int, default=2048, help="buffer size (MiB) of the copy roofline")
    ap.add_argument("--json", type=Path, help="write results (plus device facts, versions, git commit) here")
    args = ap.parse_args(argv)

    cpu, device, facts = pick_device(args.cpu_smoke)
    copy_bytes, copy_ways, copy_bps = copy_roofline(device, facts, args.copy_mib)
    print("bytes model per call (MBU numerator): index keys of each request's pages 0 .. its last token's local "
          "page, read once (" + ", ".join(f"{k} {v[1]} B/page" for k, v in KEYS.items() if k in args.keys) +
          ") + q (B*Q*H*128 x 1 B E4M3, 2 B BF16) + TopK out (H*B*Q*16*4 B); not counted: page_table / seq_lens "
          "reads (4 B per page), and the fp32 scores workspace [H, B*Q, max_pages] (needed pages written, candidate "
          "pages read back by the select step, nothing when max_pages <= 16: column 'ws MB', an estimate)")
    print("MBU = bytes model / median time / copy roofline; TB/s = bytes model / median time; TFLOP/s = "
          f"2*{INDEX_DIM} FLOP per (query row, visible key) / median time")
    print(timing_protocol(cpu, "own q, page table, seq_lens, out, scores workspace; keys on disjoint pages of "
                               "one pool"))

    cases = build_cases(args, cpu)
    rows = []
    for case in cases:
        row = run_case(case, device, facts.l2_bytes, args.quick)
        if "us" in row:
            row["mbu"] = 100 * row["bytes"] / (row["us"] * 1e-6) / copy_bps
        rows.append(row)
        if "error" in row:
            print(f"  {case.keys} H={case.heads} Q={case.q_len} B={case.batch} N={case.nominal}: "
                  f"FAILED {row['error']}", flush=True)
        elif row.get("check") != "ok":
            print(f"  {case.keys} H={case.heads} Q={case.q_len} B={case.batch} N={case.nominal}: "
                  f"TopK {row['check']}", flush=True)

    columns = [("keys", "keys"), ("H", "H"), ("Q", "Q"), ("B", "B"), ("N", "N"), ("suite", "suite"),
               ("weight", "w"), ("pages", "pages"), ("rotations", "rot"), ("calls", "calls"),
               ("us", "median us", ".2f"), ("p10_us", "p10", ".2f"), ("p90_us", "p90", ".2f"),
               ("mb", "MB", ".3f"), ("ws_mb", "ws MB", ".3f"), ("tbps", "TB/s", ".3f"), ("mbu", "MBU %", ".1f"),
               ("tflops", "TFLOP/s", ".1f"), ("check", "topk"), ("error", "error")]
    if not any("error" in r for r in rows):
        columns.pop()
    print()
    print(format_table(rows, columns))
    print()
    configs = list(dict.fromkeys((c.keys, c.heads) for c in cases if c.q_len == Q_LEN))
    summary = summarize(rows, configs, copy_bps)
    overall = overall_verdict_of(summary, cpu)

    payload = {"benchmark": "index_decode", "mode": "cpu-smoke" if cpu else "cuda", "quick": args.quick,
               "copy_bytes": copy_bytes, "copy_bandwidths_bytes_per_s": copy_ways,
               "copy_bandwidth_bytes_per_s": copy_bps,
               "q_len": Q_LEN, "topk": TOPK, "weights": {str(n): dict(zip(map(str, OFFICIAL_B), w))
                                                          for n, w in OFFICIAL_WEIGHTS.items()},
               "weighting": "weighted_mbu = sum(w * MBU) / sum(w) over the official cases with N >= 4000 "
                            "(w = SPEC §7 weight of (N, B)); mix_mbu = sum(w * bytes) / sum(w * seconds) / copy",
               "bars": {"weighted_mbu_pct": BAR_WEIGHTED_MBU, "min_mbu_pct": BAR_MIN_MBU, "max_us": BAR_MAX_US,
                        "min_n": BAR_MIN_N},
               "rows": rows, "summary": summary, "overall": overall}
    return finish(args.json, payload, device, rows, lambda: print_summary(summary, overall, cpu))


if __name__ == "__main__":
    sys.exit(main())
