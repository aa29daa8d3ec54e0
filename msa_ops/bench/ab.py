"""A/B runs of one microbenchmark under several environments (kernel-variant knobs), one table per case.

Each variant is a name and a set of environment assignments (``fp8s:MSA_SPARSE_DECODE_SPLIT_FP8S=1``; a bare
name runs with the environment as it is; ``@root=DIR`` runs DIR's copy of the benchmark, i.e. another checkout's
build). The benchmark runs once per variant and repeat, variants interleaved
(A B C A B C ...) so that a drift of the machine hits them alike, each writing its ``--json``; the table gives
per case the median over repeats of each variant's median µs and its ratio to the first variant, then each
variant's summary figures (weighted MBU and the other bars' numbers) per format and geometry.

    python3 bench/ab.py -v base -v fp8s:MSA_SPARSE_DECODE_SPLIT_FP8S=1 --repeat 2 --out $OUT/ab -- \\
        bench/bench_sparse_decode.py --no-sdpa --kv nvfp4 --geometry 64/4 --cases 8:100000,32:100000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .timing import format_table

# Row fields that name a case (whichever of them a benchmark's rows have), in display order.
CASE_FIELDS = ("op", "kv", "keys", "geometry", "H", "Q", "B", "N", "size_mib", "suite")
# Summary fields worth comparing across variants (whichever exist).
SUMMARY_FIELDS = ("weighted_mbu", "mix_mbu", "min_mbu", "max_us_low_latency", "max_us_n1000")


@dataclass
class Variant:
    """A name, environment assignments and optionally another checkout (``@root=DIR``: the benchmark script at
    the same relative path under DIR, so that it imports DIR's msa_ops build: an A/B against older code)."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    root: str | None = None

    @classmethod
    def parse(cls, text: str) -> "Variant":
        name, _, assignments = text.partition(":")
        if not name or "=" in name:
            raise ValueError(f"variant {text!r}: expected NAME or NAME:VAR=VALUE[,VAR=VALUE...]")
        env, root = {}, None
        for item in filter(None, assignments.split(",")):
            var, eq, value = item.partition("=")
            if not eq or not var:
                raise ValueError(f"variant {text!r}: {item!r} is not VAR=VALUE")
            if var == "@root":
                root = value
            else:
                env[var] = value
        return cls(name, env, root)

    def script(self, bench_script: str) -> str:
        if self.root is None:
            return bench_script
        return str(Path(self.root) / Path(bench_script).resolve().relative_to(Path.cwd().resolve()))


def case_key(row: dict[str, Any]) -> tuple:
    return tuple((f, row[f]) for f in CASE_FIELDS if f in row)


def group_key(summary: dict[str, Any]) -> tuple:
    return tuple((f, v) for f, v in summary.items() if f in ("op", "kv", "keys", "geometry", "H"))


def compare(runs: dict[str, list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """runs: variant name -> its benchmark JSON documents (one per repeat), first variant the reference.
    Returns (per-case rows, per-group summary rows) for format_table."""
    names = list(runs)
    per_case: dict[tuple, dict[str, list[float]]] = {}
    for name in names:
        for doc in runs[name]:
            for row in doc.get("rows", []):
                if isinstance(row.get("us"), (int, float)):
                    per_case.setdefault(case_key(row), {}).setdefault(name, []).append(float(row["us"]))
    cases = []
    for key, times in per_case.items():
        row: dict[str, Any] = dict(key)
        ref = statistics.median(times[names[0]]) if names[0] in times else None
        for name in names:
            us = statistics.median(times[name]) if name in times else None
            row[f"{name} us"] = us
            if name != names[0]:
                row[f"{name}/{names[0]}"] = us / ref if us is not None and ref else None
        cases.append(row)
    groups: list[dict[str, Any]] = []  # one row per (format / geometry group, variant)
    for name in names:
        for doc in runs[name][-1:]:  # the last repeat's summary
            for s in doc.get("summary", []):
                g: dict[str, Any] = {**dict(group_key(s)), "variant": name}
                for f in SUMMARY_FIELDS:
                    if isinstance(s.get(f), (int, float)):
                        g[f] = s[f]  # the benchmarks give MBU in % already
                groups.append(g)
    groups.sort(key=lambda g: (tuple(str(v) for k, v in g.items() if k not in SUMMARY_FIELDS and k != "variant"),
                               names.index(g["variant"])))
    return cases, groups


def run_variants(bench: Sequence[str], variants: Sequence[Variant], repeat: int, out: Path,
                 python: str = sys.executable) -> dict[str, list[dict[str, Any]]]:
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {v.name: [] for v in variants}
    for r in range(repeat):
        for v in variants:
            stem = f"{v.name}-{r}"
            json_path, log_path = out / f"{stem}.json", out / f"{stem}.log"
            env = {**os.environ, **v.env}
            with open(log_path, "w") as log:
                cmd = [python, v.script(bench[0]), *bench[1:], "--json", str(json_path)]
                rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
            if rc != 0 or not json_path.exists():
                print(f"variant {v.name} (repeat {r}) failed with exit code {rc}: see {log_path}", file=sys.stderr)
                continue
            runs[v.name].append(json.loads(json_path.read_text()))
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-v", "--variant", action="append", required=True, type=Variant.parse,
                    help="NAME or NAME:VAR=VALUE[,VAR=VALUE...]; the first is the reference")
    ap.add_argument("--repeat", type=int, default=1, help="runs per variant, interleaved (default 1)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-out")) / "ab",
                    help="folder for each run's JSON and log (default $OUT/ab)")
    ap.add_argument("--json", type=Path, help="also write the comparison here")
    ap.add_argument("bench", nargs=argparse.REMAINDER, help="-- benchmark script and its arguments")
    args = ap.parse_args(argv)
    bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not bench:
        ap.error("give the benchmark after --, e.g. -- bench/bench_index_decode.py --cases 8:100000")
    if "--json" in bench:
        ap.error("the benchmark's --json is set per run; leave it out")
    names = [v.name for v in args.variant]
    if len(set(names)) != len(names):
        ap.error(f"variant names must differ: {names}")
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")

    runs = run_variants(bench, args.variant, args.repeat, args.out)
    if not runs[names[0]]:
        print(f"the reference variant {names[0]} produced no results", file=sys.stderr)
        return 1
    cases, groups = compare(runs)
    first = names[0]
    case_cols: list = [f for f in CASE_FIELDS if any(f in c for c in cases)]
    for name in names:
        case_cols.append((f"{name} us", f"{name} us", ".2f"))
        if name != first:
            case_cols.append((f"{name}/{first}", f"{name}/{first}", ".3f"))
    print(" ".join(f"{v.name}={','.join(f'{k}={x}' for k, x in v.env.items()) or '(env as is)'}"
                   + (f" from {v.root}" if v.root else "") for v in args.variant))
    print(f"median of {args.repeat} run(s) per variant, each the benchmark's median µs")
    print(format_table(cases, case_cols))
    if groups:
        group_cols: list = [f for f in ("op", "kv", "keys", "geometry", "H") if any(f in g for g in groups)]
        group_cols.append("variant")
        group_cols += [(f, f.replace("_", " ") + (" %" if "mbu" in f else ""), ".2f")
                       for f in SUMMARY_FIELDS if any(f in g for g in groups)]
        print()
        print(format_table(groups, group_cols))
    if args.json:
        args.json.write_text(json.dumps({"variants": [v.__dict__ for v in args.variant], "repeat": args.repeat,
                                         "cases": cases, "groups": groups}, indent=1))
    missing = [n for n in names if len(runs[n]) < args.repeat]
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
