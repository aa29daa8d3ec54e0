#!/usr/bin/env python3
"""Time floors of the issue-3 / issue-4 bars from the benchmarks' own byte models (no GPU needed).

For each case the benchmarks count the bytes a call must move (bench_sparse_decode.py: distinct K+V pages of each
(request, KV head) + q + out; bench_index_decode.py: index keys up to each request's local page + q + out). At 100 %
MBU a call takes bytes / copy bandwidth; no kernel can be faster. This prints that floor next to what a bar asks:

* sparse decode, low-latency suite: <= 12 µs per call. Where the floor itself passes 12 µs, the bar cannot be met
  on that device by any kernel.
* index decode, cases with N >= 4000: MBU >= 40 %, i.e. a call within bytes / (0.4 x bandwidth). Compare that
  budget with the measured time of a call that has nothing to score (N = 1000: the select kernel alone writes
  0..local), the cost of launching and running one kernel that writes its rows.

    python3 scripts/floors.py                      # both, at the H200's and the H100's measured copy bandwidth
    python3 scripts/floors.py --bandwidth H200=4279e9 --sets 8

Needs torch and msa_ops importable (a CPU build is enough). The bandwidths are measured figures (bench/NOTES.md,
"Rooflines" for the H200, 2026-12-02; "Sessions 20-21" for the H100, 2026-12-06), not datasheet peaks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_index_decode as bid  # noqa: E402
import bench_sparse_decode as bsd  # noqa: E402
from _suite import LOW_LATENCY_B, LOW_LATENCY_N, OFFICIAL_B, OFFICIAL_N  # noqa: E402

BANDWIDTHS = {"H200": 4279e9, "H100": 3044e9}  # measured D2D copy, bytes/s (see the docstring)


def parse_bandwidth(text: str) -> tuple[str, float]:
    name, _, value = text.partition("=")
    if not name or not value:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=BYTES_PER_S")
    return name, float(value)


def sparse_bytes(batch: int, nominal: int, kv: str, geometry: str, sets: int) -> float:
    """bench_sparse_decode.py's MBU numerator, the mean over `sets` random TopK sets (its seed for set 0)."""
    q_heads, kv_heads = bsd.GEOMETRIES[geometry]
    case = bsd.Case("low-latency", batch, nominal, q_heads, kv_heads, kv)
    plan, gen = bsd.make_plan(case, seed=0, lse=False)
    bsd.extend_plan(case, plan, sets, gen)
    return plan.model_bytes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bandwidth", type=parse_bandwidth, action="append",
                    help="NAME=BYTES_PER_S (repeatable; default: the H200 and H100 measured copy bandwidths)")
    ap.add_argument("--sets", type=int, default=4, help="random TopK sets averaged per sparse case (default 4)")
    args = ap.parse_args()
    bws = dict(args.bandwidth) if args.bandwidth else BANDWIDTHS

    print("sparse decode, low-latency suite: floor = bytes / copy bandwidth (µs); bar 12 µs")
    head = f"{'kv':6} {'geom':5} {'B':>2} {'N':>6} {'MB':>7}" + "".join(f" {n + ' µs':>9}" for n in bws)
    print(head)
    for kv in bsd.KV:
        for geometry in bsd.GEOMETRIES:
            for batch in LOW_LATENCY_B:
                for nominal in LOW_LATENCY_N:
                    nbytes = sparse_bytes(batch, nominal, kv, geometry, args.sets)
                    floors = [nbytes / bw * 1e6 for bw in bws.values()]
                    flag = "  <- over 12 µs at 100 % MBU" if any(f > bsd.BAR_MAX_US for f in floors) else ""
                    print(f"{kv:6} {geometry:5} {batch:2} {nominal:6} {nbytes / 1e6:7.2f}" +
                          "".join(f" {f:9.2f}" for f in floors) + flag)

    print("\nindex decode, N >= 4000: the 40 % bar's time budget = bytes / (0.4 x copy bandwidth) (µs)")
    print(f"{'keys':6} {'H':>1} {'B':>3} {'N':>6} {'MB':>7}" + "".join(f" {n + ' µs':>9}" for n in bws))
    for keys in ("nvfp4", "fp8"):
        for heads in (4, 1):
            budgets = []
            for batch in OFFICIAL_B:
                for nominal in OFFICIAL_N:
                    if nominal < bid.BAR_MIN_N:
                        continue
                    geo = bid.geometry(bid.Case("official", batch, nominal, bsd.Q_LEN, heads, keys))
                    budgets.append((geo.model_bytes, batch, nominal))
            for nbytes, batch, nominal in sorted(budgets)[:3]:  # the tightest three
                print(f"{keys:6} {heads} {batch:3} {nominal:6} {nbytes / 1e6:7.2f}" +
                      "".join(f" {nbytes / (0.4 * bw) * 1e6:9.2f}" for bw in bws.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
