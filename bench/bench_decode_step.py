#!/usr/bin/env python
"""Microbenchmark: one MSA decode step as an engine runs it, ``msa_ops.index_decode`` then
``msa_ops.sparse_decode`` on the TopK rows it wrote, against the two ops timed alone on the same inputs.

What it answers: the latency of a step (what a user waits for per layer), and how much of the two ops' launch
and tail the pair overlaps inside one CUDA graph (programmatic dependent launch: each kernel starts while its
predecessor finishes and waits for it before touching memory). ``overlap = index µs + sparse µs - step µs``.

Workloads (shared/SPEC.md §7): the official decode suite and the low-latency suite (``B:N`` pairs, lengths
from SPEC §7's generator), Q = 8 tokens per request, head dim 128, page 128, top-16. Geometry 64/4 (Hq/Hkv,
TP1: H = 4 index heads, one per KV head) or 16/1 (TP4: H = 1). Formats: ``nvfp4`` = NVFP4 index keys and NVFP4
K/V (Q8KV4), ``fp8`` = E4M3 index keys and E4M3 K/V (Q8KV8); q and q_idx E4M3. Every request's whole context
is in the caches (the indexer scores every page); physical pages are a seeded random permutation of a pool
shared by the rotated input sets (disjoint pages per set).

Per case: µs per call (median, p10, p90; SPEC §7 CUDA-graph protocol with rotated input sets, preallocated
TopK / scores workspace / output, so a step allocates nothing) of the step, of index_decode alone and of
sparse_decode alone (on the TopK rows the step wrote), and the overlap. Checks: every TopK row's structure
(SPEC §4) and request 0's attention output against the fp64 reference on those rows (atol = rtol = 5e-2,
cosine >= 0.999). No bar: issues 3 and 4 set their bars per op (bench_index_decode.py, bench_sparse_decode.py).

    python bench/bench_decode_step.py --cases 1:32000,4:32000,8:100000     # on the current CUDA device
    python bench/bench_decode_step.py --low-latency --geometry 64/4,16/1 --json $OUT/decode_step.json
    python bench/bench_decode_step.py --cpu-smoke                          # tiny CPU run: not GPU numbers
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # use this checkout's msa_ops
sys.path.insert(0, str(Path(__file__).resolve().parent))      # bench/_suite.py and the two op benchmarks

import torch  # noqa: E402

import msa_ops  # noqa: E402
import bench_index_decode as index_bench  # noqa: E402
import bench_sparse_decode as sparse_bench  # noqa: E402
from _suite import (MEMORY_BUDGET, Q_LEN, TOPK, finish, guarded, parse_cases, parse_choices,  # noqa: E402
                    pick_device, suite_of, suite_pairs, timing_plan, timing_protocol)
from msa_ops.bench import bench, format_table, rotations_for  # noqa: E402
from msa_ops.testing.paged import HEAD_DIM, PAGE_SIZE  # noqa: E402

GEOMETRIES = {"64/4": (64, 4), "16/1": (16, 1)}
FORMATS = ("nvfp4", "fp8")          # index keys and K/V in the same format (index_bench.KEYS / sparse_bench.KV)
LOW_LATENCY = [(b, n) for n in (1000, 4000, 8000, 32000) for b in (1, 2, 4)]
CPU_CASES = [(1, 1000), (2, 4000)]
SPARE_PAGES = 3


# A case: bench_sparse_decode's (suite, B, N, Hq, Hkv, kv), `kv` naming the format of the index keys too.
Case = sparse_bench.Case


@dataclass
class StepSets:
    """``rotations`` argument sets of one case: each its own q_idx, q, page table, seq_lens, TopK, scores
    workspace and output; index keys and K/V of all sets in one pool (disjoint physical pages per set). The
    attribute names of the attention side are those bench_sparse_decode.check_output reads."""
    index_k: torch.Tensor
    index_k_scales: torch.Tensor | None
    k: torch.Tensor
    v: torch.Tensor
    k_scales: torch.Tensor | None
    v_scales: torch.Tensor | None
    q_idx: torch.Tensor       # [R, B, Q, H, 128]
    q: torch.Tensor           # [R, B*Q, Hq, 128]
    tables: torch.Tensor      # [R, B, width]
    seq_lens: torch.Tensor    # [R, B]
    topk: torch.Tensor        # [R, Hkv, B*Q, 16] (index_decode's out, sparse_decode's topk)
    workspace: torch.Tensor   # uint8 [R, bytes]
    out: torch.Tensor         # [R, B*Q, Hq, 128] bf16
    lse = None

    def index_call(self, i: int):
        args = (self.q_idx[i], self.index_k, self.tables[i], self.seq_lens[i])
        kwargs = {"index_k_scales": self.index_k_scales, "out": self.topk[i], "workspace": self.workspace[i]}
        return lambda: msa_ops.index_decode(*args, **kwargs)

    def sparse_call(self, i: int):
        args = (self.q[i], self.k, self.v, self.topk[i], self.tables[i], self.seq_lens[i])
        kwargs = {"k_scales": self.k_scales, "v_scales": self.v_scales, "out": self.out[i]}
        return lambda: msa_ops.sparse_decode(*args, **kwargs)

    def step_call(self, i: int):
        index, sparse = self.index_call(i), self.sparse_call(i)

        def step():
            index()
            return sparse()
        return step


def build_sets(case: Case, geo: index_bench.Geometry, rotations: int, device: torch.device, seed: int) -> StepSets:
    cpu_gen = torch.Generator().manual_seed(seed)
    dev_gen = torch.Generator(device=device).manual_seed(seed + 1)
    total_pages = rotations * geo.pages + SPARE_PAGES
    index_k, index_scales = index_bench.make_key_pool(total_pages, case.kv, device, dev_gen)
    k, v, k_scales, v_scales = sparse_bench.make_kv_pool(total_pages, case.kv_heads, case.kv, device, dev_gen)
    tables = index_bench.make_page_tables(geo, rotations, total_pages, cpu_gen).to(device)
    e4m3 = torch.float8_e4m3fn
    q_idx = torch.randn((rotations, case.batch, Q_LEN, case.kv_heads, HEAD_DIM), generator=dev_gen, device=device)
    q = torch.randn((rotations, case.tokens, case.q_heads, HEAD_DIM), generator=dev_gen, device=device)
    q *= torch.exp2(torch.rand((rotations, case.tokens, case.q_heads, 1), generator=dev_gen, device=device) * 3 - 1)
    return StepSets(
        index_k=index_k, index_k_scales=index_scales, k=k, v=v, k_scales=k_scales, v_scales=v_scales,
        q_idx=q_idx.to(e4m3), q=q.to(e4m3), tables=tables,
        seq_lens=geo.lens.to(device).repeat(rotations, 1).contiguous(),
        topk=torch.full((rotations, case.kv_heads, case.tokens, TOPK), index_bench.POISON, dtype=torch.int32,
                        device=device),
        workspace=torch.empty((rotations, geo.ws_alloc_bytes), dtype=torch.uint8, device=device),
        out=torch.full((rotations, case.tokens, case.q_heads, HEAD_DIM), float("nan"), dtype=torch.bfloat16,
                       device=device))


def kv_bytes_estimate(case: Case, geo: index_bench.Geometry) -> int:
    """K+V bytes a step reads, at most: per (request, KV head) the pages its Q tokens' rows can list (Q x 15
    history pages + the local pages), capped by its pages; for the rotation count only."""
    token_head = sparse_bench.KV[case.kv][1]
    pages = sum(min(n, Q_LEN * (TOPK - 1) + 2) for n in geo.needed)
    return pages * case.kv_heads * PAGE_SIZE * token_head


def run_case(case: Case, device: torch.device, l2_bytes: int | None, quick: bool) -> dict[str, Any]:
    """Times the step and each op alone; returns a result row (``error`` set instead of timings on failure)."""
    geo = index_bench.geometry(index_bench.Case(case.suite, case.batch, case.nominal, Q_LEN, case.kv_heads,
                                                case.kv))
    kv_per_page = case.kv_heads * PAGE_SIZE * sparse_bench.KV[case.kv][1]
    q_bytes = case.tokens * case.q_heads * HEAD_DIM
    out_bytes = 2 * q_bytes
    step_bytes = geo.model_bytes + kv_bytes_estimate(case, geo) + q_bytes + out_bytes
    per_set = (geo.key_bytes + geo.pages * kv_per_page + geo.q_bytes + q_bytes + out_bytes + geo.out_bytes +
               geo.ws_alloc_bytes + geo.table_bytes + case.batch * 4)
    rotations = rotations_for(step_bytes, l2_bytes)
    rotations = max(2, min(rotations, MEMORY_BUDGET // per_set))
    calls, warmup, samples = timing_plan(step_bytes, rotations, device, quick)
    row: dict[str, Any] = {"fmt": case.kv, "geometry": case.geometry, "B": case.batch, "N": case.nominal,
                           "suite": case.suite, "pages": geo.pages, "max_pages": geo.width,
                           "rotations": rotations, "calls": calls}
    seed = 1701 + 1009 * case.batch + case.nominal + 7919 * case.kv_heads

    def work() -> None:
        sets = build_sets(case, geo, rotations, device, seed)
        timed = {}
        # index alone first: its calls also fill every set's TopK rows, which sparse_decode alone then reads
        for name, make_call in (("index", sets.index_call), ("sparse", sets.sparse_call), ("step", sets.step_call)):
            timed[name] = bench(make_call, device, rotations=rotations, calls_per_sample=calls, warmup=warmup,
                                samples=samples)
        step = timed["step"]
        row.update({"us": step.us, "p10_us": step.p10_us, "p90_us": step.p90_us,
                    "index_us": timed["index"].us, "sparse_us": timed["sparse"].us})
        row["overlap_us"] = row["index_us"] + row["sparse_us"] - row["us"]
        checks = [index_bench.check_topk(sets.topk, geo.pos), sparse_bench.check_output(sets)]
        bad = [c for c in checks if c != "ok"]
        row["check"] = "ok" if not bad else "; ".join(bad)

    return guarded(row, device, work)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=parse_cases, help="comma-separated B:N pairs (default: both suites)")
    ap.add_argument("--low-latency", action="store_true", help="the low-latency suite only")
    ap.add_argument("--geometry", type=lambda t: parse_choices(t, list(GEOMETRIES), {}, "geometry"),
                    default=["64/4"], help="comma-separated Hq/Hkv: 64/4 (H = 4), 16/1 (H = 1); default 64/4")
    ap.add_argument("--fmt", type=lambda t: parse_choices(t, FORMATS, {"e4m3": "fp8"}, "format"),
                    default=["nvfp4"], help="comma-separated formats of the index keys and K/V: nvfp4, fp8")
    ap.add_argument("--quick", action="store_true", help="fewer replays")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny CPU run (automatic when CUDA is unavailable)")
    ap.add_argument("--json", type=Path, help="write results (plus device facts, versions, git commit) here")
    args = ap.parse_args(argv)

    cpu, device, facts = pick_device(args.cpu_smoke)
    print(timing_protocol(cpu, "own q_idx, q, page table, seq_lens, TopK, scores workspace, out; index keys and "
                               "K/V on disjoint pages of one pool"))
    print("step = index_decode then sparse_decode on its TopK rows; overlap = index + sparse - step (µs)")
    pairs = args.cases or (CPU_CASES if cpu else LOW_LATENCY if args.low_latency else suite_pairs())
    cases = [Case(suite_of(b, n), b, n, *GEOMETRIES[g], fmt) for fmt in args.fmt for g in args.geometry
             for b, n in pairs]
    rows = []
    for case in cases:
        row = run_case(case, device, facts.l2_bytes, args.quick)
        rows.append(row)
        if "error" in row or row.get("check") != "ok":
            print(f"  {case.kv} {case.geometry} B={case.batch} N={case.nominal}: "
                  f"{row.get('error') or row.get('check')}", flush=True)

    columns = [("fmt", "fmt"), ("geometry", "geom"), ("B", "B"), ("N", "N"), ("suite", "suite"),
               ("pages", "pages"), ("rotations", "rot"), ("calls", "calls"), ("us", "step us", ".2f"),
               ("p10_us", "p10", ".2f"), ("p90_us", "p90", ".2f"), ("index_us", "index us", ".2f"),
               ("sparse_us", "sparse us", ".2f"), ("overlap_us", "overlap us", ".2f"), ("check", "check"),
               ("error", "error")]
    if not any("error" in r for r in rows):
        columns.pop()
    print()
    print(format_table(rows, columns))
    print()

    def show_summary() -> None:
        tag = " [CPU smoke: not a GPU result]" if cpu else ""
        for fmt in args.fmt:
            for g in args.geometry:
                mine = [r for r in rows if r["fmt"] == fmt and r["geometry"] == g and "us" in r]
                low = [r for r in mine if r["suite"] == "low-latency"]
                if low:
                    worst = max(low, key=lambda r: r["us"])
                    print(f"summary {fmt} {g}: low-latency step max {worst['us']:.2f} us (B={worst['B']} "
                          f"N={worst['N']}; index {worst['index_us']:.2f} + sparse {worst['sparse_us']:.2f}){tag}")
        bad = sum("error" in r or r.get("check") != "ok" for r in rows)
        print(f"summary: {len(rows) - bad} of {len(rows)} cases ran and passed their checks{tag}")

    payload = {"benchmark": "decode_step", "mode": "cpu-smoke" if cpu else "cuda", "quick": args.quick,
               "rows": rows}
    return finish(args.json, payload, device, rows, show_summary)


if __name__ == "__main__":
    sys.exit(main())
