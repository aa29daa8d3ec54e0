#!/usr/bin/env python
"""Microbenchmark: NVFP4 quantize (bf16 -> NVFP4) and dequantize (NVFP4 -> E4M3 / BF16).

For every op and size (bytes of the equivalent bf16 tensor ``[n/128, 128]``, 16 MiB .. 4 GiB) it reports the
per-call time (median and spread, SPEC §7 CUDA-graph protocol with rotated inputs), the effective bandwidth
counting each distinct byte read and written once, and that bandwidth as a fraction of the measured
device-to-device copy bandwidth (%copy). The bar: >= 85 % of copy bandwidth at every size >= 256 MiB.

    python bench/bench_nvfp4.py                 # full sweep on the current CUDA device
    python bench/bench_nvfp4.py --quick --json $OUT/nvfp4.json --plot $OUT/nvfp4.png
    python bench/bench_nvfp4.py --cpu-smoke     # tiny CPU run (automatic without CUDA): not performance numbers
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # use this checkout's msa_ops

import torch  # noqa: E402

import msa_ops  # noqa: E402
from msa_ops.bench import (bench, device_facts, format_table, measure_copy_bandwidths,  # noqa: E402
                           rotations_for, write_json)

KiB, MiB, GiB = 2**10, 2**20, 2**30
FULL_SIZES = [16 * MiB << k for k in range(9)]            # 16 MiB, 32 MiB, ..., 4 GiB
QUICK_SIZES = [16 * MiB, 256 * MiB, 1 * GiB]
CPU_SIZES = [256 * KiB, 1 * MiB, 4 * MiB]
BAR_MIN_BYTES, BAR_FRACTION = 256 * MiB, 0.85
MEMORY_BUDGET = 40 * GiB        # inputs + rotated outputs of one case
REPLAY_TARGET_BYTES = 4 * GiB   # traffic per graph replay, so that a replay lasts ~1 ms or more
MAX_CALLS_PER_GRAPH = 256
ROW = 128                       # elements per row of the [n/128, 128] tensors
SCALE_BYTES_PER_ELEM = 1 / 16   # one E4M3 scale per 16 elements
PACKED_BYTES_PER_ELEM = 0.5     # two E2M1 codes per byte


@dataclass(frozen=True)
class OpSpec:
    """One benchmarked op: how to build one input set of ``n`` elements, how to call it, its byte model."""
    name: str
    read_bytes_per_elem: float
    write_bytes_per_elem: float
    make_inputs: Callable[[int, torch.device, torch.Generator], tuple[Any, ...]]
    run: Callable[..., Any]

    def traffic_bytes(self, n: int) -> float:
        return n * (self.read_bytes_per_elem + self.write_bytes_per_elem)


def _random_bf16(n: int, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    return torch.randn((n // ROW, ROW), dtype=torch.bfloat16, device=device, generator=gen)


def _random_nvfp4(n: int, device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Realistic codes and scales: random normal data quantized by the op under test's sibling."""
    packed, scales = msa_ops.nvfp4_quantize(_random_bf16(n, device, gen))
    return packed, scales


NVFP4_BYTES_PER_ELEM = PACKED_BYTES_PER_ELEM + SCALE_BYTES_PER_ELEM   # 0.5625
OPS = [
    OpSpec("quantize bf16->nvfp4", 2.0, NVFP4_BYTES_PER_ELEM,
           lambda n, dev, gen: (_random_bf16(n, dev, gen),), msa_ops.nvfp4_quantize),
    OpSpec("dequantize nvfp4->e4m3", NVFP4_BYTES_PER_ELEM, 1.0, _random_nvfp4,
           lambda p, s: msa_ops.nvfp4_dequantize(p, s, torch.float8_e4m3fn)),
    OpSpec("dequantize nvfp4->bf16", NVFP4_BYTES_PER_ELEM, 2.0, _random_nvfp4,
           lambda p, s: msa_ops.nvfp4_dequantize(p, s, torch.bfloat16)),
]


def parse_size(text: str) -> int:
    """``"16M"``, ``"1G"``, ``"512K"`` (binary units) or a bare number of MiB."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    units = {"K": KiB, "M": MiB, "G": GiB}
    value = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text) * MiB
    size = int(value)
    if size <= 0 or size % (2 * ROW) != 0:
        raise argparse.ArgumentTypeError(f"size {text!r} must be a positive multiple of {2 * ROW} bytes")
    return size


def fmt_size(nbytes: int) -> str:
    return f"{nbytes // GiB} GiB" if nbytes >= GiB and nbytes % GiB == 0 else (
        f"{nbytes // MiB} MiB" if nbytes % MiB == 0 else f"{nbytes // KiB} KiB")


def run_case(op: OpSpec, size: int, device: torch.device, l2_bytes: int | None, quick: bool) -> dict[str, Any]:
    """Time one op at one size; returns a result row (with ``error`` set instead of timings on failure)."""
    n = size // 2
    traffic = op.traffic_bytes(n)
    out_bytes = n * op.write_bytes_per_elem
    set_bytes = n * op.read_bytes_per_elem
    rotations = rotations_for(int(traffic), l2_bytes)
    # Memory cap: inputs of every set + (rotations + 1) live outputs (harness ring plus the one being written).
    rotations = max(2, min(rotations, int((MEMORY_BUDGET - out_bytes) // (set_bytes + out_bytes))))
    row: dict[str, Any] = {"op": op.name, "size": fmt_size(size), "size_bytes": size, "elements": n,
                           "bytes_moved": traffic, "rotations": rotations}
    if device.type == "cuda":
        calls = min(MAX_CALLS_PER_GRAPH, max(1, math.ceil(REPLAY_TARGET_BYTES / traffic)))
        calls = math.ceil(calls / rotations) * rotations              # every input set used equally
        warmup, samples = (2, 10) if quick else (5, 30)
    else:
        calls, warmup, samples = 1, 1, 3
    row["calls"] = calls
    inputs: list[tuple[Any, ...]] = []
    try:
        for i in range(rotations):
            gen = torch.Generator(device=device).manual_seed(1701 + 1009 * i + size // KiB)
            inputs.append(op.make_inputs(n, device, gen))
        result = bench(lambda i: (lambda: op.run(*inputs[i])), device, rotations=rotations,
                       calls_per_sample=calls, warmup=warmup, samples=samples)
        row.update(result.to_dict())
        row["gbps"] = result.bytes_per_s(traffic) / 1e9
    except Exception as err:  # report and go on: one failing size must not lose the whole sweep
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    finally:
        inputs.clear()
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return row


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per op: min %copy over sizes >= 256 MiB and whether it meets the 85 % bar."""
    out = []
    for op in OPS:
        big = [r for r in rows if r["op"] == op.name and r["size_bytes"] >= BAR_MIN_BYTES]
        ok = [r for r in big if "pct_copy" in r]
        min_pct = min((r["pct_copy"] for r in ok), default=None)
        passed = None if not big else (len(ok) == len(big) and min_pct >= 100 * BAR_FRACTION)
        out.append({"op": op.name, "sizes": len(big), "min_pct_copy": min_pct, "pass": passed})
    return out


def plot(path: Path, rows: list[dict[str, Any]], copy_bps: float, peak_bps: float | None, title: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"[plot] matplotlib is not installed: skipping {path}")
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    for op in OPS:
        pts = [(r["size_bytes"], r["gbps"]) for r in rows if r["op"] == op.name and "gbps" in r]
        if pts:
            ax.plot([p[0] / MiB for p in pts], [p[1] for p in pts], marker="o", label=op.name)
    ax.axhline(copy_bps / 1e9, color="black", label=f"measured D2D copy ({copy_bps / 1e9:.0f} GB/s)")
    ax.axhline(BAR_FRACTION * copy_bps / 1e9, color="gray", linestyle=":", label=f"{BAR_FRACTION:.0%} of copy")
    if peak_bps:
        ax.axhline(peak_bps / 1e9, color="red", linestyle="--", label=f"datasheet peak ({peak_bps / 1e9:.0f} GB/s)")
    ax.set_xscale("log", base=2)
    sizes = sorted({r["size_bytes"] for r in rows})
    ax.set_xticks([b / MiB for b in sizes], [fmt_size(b) for b in sizes], rotation=30)
    ax.minorticks_off()
    ax.set_xlabel("size (MiB of the equivalent bf16 tensor)")
    ax.set_ylabel("effective GB/s (bytes read + written once)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    print(f"[plot] wrote {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="sizes 16 MiB, 256 MiB, 1 GiB; fewer replays")
    ap.add_argument("--sizes", type=lambda s: [parse_size(t) for t in s.split(",") if t.strip()],
                    help="comma-separated sizes of the bf16 tensor, e.g. 16M,256M,1G (bare numbers are MiB)")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny CPU run (automatic when CUDA is unavailable)")
    ap.add_argument("--copy-bytes", type=parse_size, default=2 * GiB, help="buffer size of the copy roofline")
    ap.add_argument("--ops", type=lambda s: [t.strip() for t in s.split(",") if t.strip()],
                    help="comma-separated op name prefixes to run (e.g. quantize), default all")
    ap.add_argument("--json", type=Path, help="write results (plus device facts, versions, git commit) here")
    ap.add_argument("--plot", type=Path, help="write a PNG of GB/s vs size here (needs matplotlib)")
    args = ap.parse_args(argv)

    cpu = args.cpu_smoke or not torch.cuda.is_available()
    device = torch.device("cpu") if cpu else torch.device("cuda", torch.cuda.current_device())
    sizes = args.sizes or (CPU_SIZES if cpu else QUICK_SIZES if args.quick else FULL_SIZES)
    copy_bytes = min(args.copy_bytes, 32 * MiB) if cpu else args.copy_bytes
    facts = device_facts(device)
    if cpu:
        print("*** CPU SMOKE RUN" + ("" if args.cpu_smoke else " (CUDA is not available)") +
              ": wall-clock numbers of the CPU kernels, NOT GPU performance ***")
    else:
        cc = ".".join(map(str, facts.compute_capability or ()))
        print(f"device: {facts.name} (sm_{cc.replace('.', '')}, {facts.sm_count} SMs, "
              f"L2 {f'{facts.l2_bytes / MiB:.0f}' if facts.l2_bytes else '?'} MiB), torch {torch.__version__}")
    if args.ops:
        global OPS
        OPS = [op for op in OPS if any(op.name.startswith(p) for p in args.ops)]
    copy_ways = measure_copy_bandwidths(copy_bytes, device)
    copy_bps = max(copy_ways.values())
    print("copy bandwidth measured: " + ", ".join(f"{k} {v / 1e9:.1f} GB/s" for k, v in copy_ways.items()) +
          " -> roofline = the best")
    peak = facts.peak_dram_bytes_per_s
    copy_kind = "CPU memory" if cpu else "device-to-device"
    print(f"roofline: measured {copy_kind} copy {copy_bps / 1e9:.1f} GB/s (read + written, "
          f"{fmt_size(copy_bytes)} buffers)" +
          (f"; datasheet peak {peak / 1e9:.1f} GB/s (memory clock x bus width, {facts.memory_info_source}), "
           f"copy = {100 * copy_bps / peak:.1f}% of it" if peak else "; datasheet peak unknown"))
    print("bytes model per element: " + "; ".join(
        f"{op.name}: {op.read_bytes_per_elem:g} read + {op.write_bytes_per_elem:g} written" for op in OPS))
    print("timing: " + ("time.perf_counter, median of 3 calls" if cpu else
                        "CUDA graph of many calls, rotated inputs (reuse distance > 2x L2), median of replays"))

    rows = []
    for op in OPS:
        for size in sizes:
            row = run_case(op, size, device, facts.l2_bytes, args.quick)
            if "gbps" in row:
                row["pct_copy"] = 100 * row["gbps"] * 1e9 / copy_bps
            rows.append(row)
            if "error" in row:
                print(f"  {op.name} {row['size']}: FAILED {row['error']}", flush=True)

    columns = [("op", "op"), ("size", "size"), ("rotations", "rot"), ("calls", "calls"), ("us", "median us", ".2f"),
               ("p10_us", "p10", ".2f"), ("p90_us", "p90", ".2f"), ("min_us", "min", ".2f"), ("max_us", "max", ".2f"),
               ("gbps", "GB/s", ".1f"), ("pct_copy", "%copy", ".1f"), ("error", "error")]
    if not any("error" in r for r in rows):
        columns.pop()
    print()
    print(format_table(rows, columns))
    print()
    summary = summarize(rows)
    tag = " [CPU smoke: not a GPU result]" if cpu else ""
    for s in summary:
        if s["pass"] is None:
            verdict = f"n/a (no size >= {fmt_size(BAR_MIN_BYTES)} measured)"
        else:
            verdict = (f"min %copy {s['min_pct_copy']:.1f}% over {s['sizes']} sizes -> "
                       f"{'PASS' if s['pass'] else 'FAIL'}" if s["min_pct_copy"] is not None else "FAIL (errors)")
        print(f"summary {s['op']}: >= {BAR_FRACTION:.0%} of copy bandwidth at >= {fmt_size(BAR_MIN_BYTES)}: "
              f"{verdict}{tag}")

    payload = {"benchmark": "nvfp4", "mode": "cpu-smoke" if cpu else "cuda", "quick": args.quick,
               "copy_bytes": copy_bytes, "copy_bandwidth_bytes_per_s": copy_bps,
               "bar": {"min_size_bytes": BAR_MIN_BYTES, "fraction_of_copy": BAR_FRACTION},
               "rows": rows, "summary": summary}
    if args.json:
        print(f"[json] wrote {write_json(args.json, payload, device)}")
    if args.plot:
        plot(args.plot, rows, copy_bps, peak, f"NVFP4 quantize / dequantize on {facts.name}" + tag)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
