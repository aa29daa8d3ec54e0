"""Pieces shared by the decode microbenchmarks (``bench_index_decode.py``, ``bench_sparse_decode.py``).

The SPEC §7 workloads (official MSA v1 decode suite with its weights, low-latency suite), the CLI helpers
(``B:N`` case lists), the device / copy-roofline preamble, the CUDA-graph timing plan, the weighted-MBU
summary and the PASS/FAIL wording. The timing itself is :mod:`msa_ops.bench.timing`.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # use this checkout's msa_ops

import torch  # noqa: E402

from msa_ops.bench import DeviceFacts, bench, device_facts, measure_copy_bandwidths, write_json  # noqa: E402
from msa_ops.testing.paged import PAGE_SIZE  # noqa: E402

MiB, GiB = 2**20, 2**30

# ------------------------------------------------------------------------------------------ workloads (SPEC §7)
OFFICIAL_B = (8, 32, 64, 128)
OFFICIAL_N = (1000, 4000, 5000, 10000, 50000, 100000, 200000)
#: SPEC §7 weights per N, for B = 8 / 32 / 64 / 128 (sum 10,000).
OFFICIAL_WEIGHTS = {
    1000: (30, 90, 180, 300), 4000: (40, 120, 240, 400), 5000: (50, 150, 300, 500),
    10000: (140, 350, 490, 420), 50000: (500, 800, 500, 200), 100000: (1260, 980, 420, 140),
    200000: (910, 350, 112, 28),
}
assert sum(sum(w) for w in OFFICIAL_WEIGHTS.values()) == 10000
LOW_LATENCY_B = (1, 2, 4)
LOW_LATENCY_N = (1000, 4000, 8000, 32000)
Q_LEN = 8                       # query tokens per request per step (official benchmark)
TOPK = 16

# -------------------------------------------------------------------------------------------- timing knobs
MEMORY_BUDGET = 40 * GiB        # every input set + output + workspace of one case, all rotations together
REPLAY_TARGET_BYTES = 2 * GiB   # bytes-model traffic per graph replay (~0.5 ms or more per replay)
MAX_CALLS_PER_GRAPH = 256       # before rounding up to a multiple of the rotations (every set used equally)


def official_weight(batch: int, nominal: int) -> int:
    """SPEC §7 weight of the official case (B, N)."""
    return OFFICIAL_WEIGHTS[nominal][OFFICIAL_B.index(batch)]


def suite_of(batch: int, nominal: int) -> str:
    if batch in OFFICIAL_B and nominal in OFFICIAL_N:
        return "official"
    if batch in LOW_LATENCY_B and nominal in LOW_LATENCY_N:
        return "low-latency"
    return "custom"


def suite_pairs() -> list[tuple[int, int]]:
    """Every (B, N) of the official suite (N-major), then of the low-latency suite."""
    return ([(b, n) for n in OFFICIAL_N for b in OFFICIAL_B] +
            [(b, n) for n in LOW_LATENCY_N for b in LOW_LATENCY_B])


def timing_plan(model_bytes: int, rotations: int, device: torch.device, quick: bool) -> tuple[int, int, int]:
    """(calls per sample, warm-up samples, samples): on CUDA, enough calls per graph replay to move about
    REPLAY_TARGET_BYTES (at most MAX_CALLS_PER_GRAPH), rounded up to a multiple of the rotations so that every
    input set is used equally, in order; on the CPU one call per sample."""
    if device.type != "cuda":
        return 1, 1, 3
    calls = min(MAX_CALLS_PER_GRAPH, max(1, math.ceil(REPLAY_TARGET_BYTES / model_bytes)))
    calls = math.ceil(calls / rotations) * rotations
    return (calls, 3, 15) if quick else (calls, 5, 30)


def error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------------ CLI

def parse_list(text: str) -> list[str]:
    return [t.strip().lower() for t in text.split(",") if t.strip()]


def parse_cases(text: str) -> list[tuple[int, int]]:
    out = []
    for t in parse_list(text):
        b, _, n = t.partition(":")
        try:
            out.append((int(b), int(n)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"cases are B:N pairs, e.g. 8:10000,1:32000; got {t!r}") from None
        if out[-1][0] < 1 or out[-1][1] < Q_LEN or math.ceil(out[-1][1] * 1.25 / PAGE_SIZE) > 8192:
            raise argparse.ArgumentTypeError(f"case {t!r}: need B >= 1 and {Q_LEN} <= N <= ~838000")
    return out


# ---------------------------------------------------------------------------------------- device + roofline

def pick_device(cpu_smoke: bool) -> tuple[bool, torch.device, DeviceFacts]:
    """``(cpu, device, facts)``: the CPU with ``cpu_smoke`` or without CUDA, else the current CUDA device;
    prints what it is (a CPU run says loudly that its numbers are not GPU numbers)."""
    cpu = cpu_smoke or not torch.cuda.is_available()
    device = torch.device("cpu") if cpu else torch.device("cuda", torch.cuda.current_device())
    facts = device_facts(device)
    if cpu:
        print("*** CPU SMOKE RUN" + ("" if cpu_smoke else " (CUDA is not available)") +
              ": wall-clock numbers of the CPU kernel (time.perf_counter), NOT GPU performance ***")
        print(f"device: CPU ({facts.name}), torch {torch.__version__}")
    else:
        cc = ".".join(map(str, facts.compute_capability or ()))
        print(f"device: {facts.name} (sm_{cc.replace('.', '')}, {facts.sm_count} SMs, "
              f"L2 {f'{facts.l2_bytes / MiB:.0f}' if facts.l2_bytes else '?'} MiB), torch {torch.__version__}")
    return cpu, device, facts


def copy_roofline(device: torch.device, facts: DeviceFacts, copy_mib: int) -> tuple[int, dict[str, float], float]:
    """``(copy_bytes, copy_ways, copy_bps)``: measure the copy bandwidth (every way of
    :func:`msa_ops.bench.measure_copy_bandwidths`; CPU buffers at most 32 MiB) and print it; the roofline
    ``copy_bps`` is the best way (bytes read + written per second)."""
    cpu = device.type != "cuda"
    copy_bytes = (min(copy_mib, 32) if cpu else copy_mib) * MiB
    copy_ways = measure_copy_bandwidths(copy_bytes, device)
    copy_bps = max(copy_ways.values())
    print("copy bandwidth measured: " + ", ".join(f"{k} {v / 1e9:.1f} GB/s" for k, v in copy_ways.items()) +
          " -> roofline = the best")
    peak = facts.peak_dram_bytes_per_s
    print(f"roofline: measured {'CPU memory' if cpu else 'device-to-device'} copy {copy_bps / 1e9:.1f} GB/s "
          f"(read + written, {copy_bytes // MiB} MiB buffers)" +
          (f"; datasheet peak {peak / 1e9:.1f} GB/s ({facts.memory_info_source}), copy = "
           f"{100 * copy_bps / peak:.1f}% of it" if peak else "; datasheet peak unknown"))
    return copy_bytes, copy_ways, copy_bps


def timing_protocol(cpu: bool, per_set: str) -> str:
    """The 'timing:' line; ``per_set`` says what each rotated input set owns."""
    return "timing: " + ("time.perf_counter, median of 3 calls" if cpu else
                         f"CUDA graph of `calls` op calls cycling over `rot` input sets ({per_set}), reuse "
                         "distance > 2x L2 by the bytes model (at least 2 sets, at most "
                         f"{MEMORY_BUDGET // GiB} GiB per case), warm-up replays then timed replays; per-call µs "
                         "= replay time / calls: median, p10, p90 over replays")


# ------------------------------------------------------------------------------------------------- summary

def weighted_mbu(rows: list[dict[str, Any]], copy_bps: float) -> dict[str, Any]:
    """Weighted MBU of official rows that have one (``weight`` = SPEC §7 weight, ``mbu`` in %, ``bytes``,
    ``us``): ``weighted_mbu = sum(w * MBU_case) / sum(w)`` (the bars' number) and, for information,
    ``mix_mbu = sum(w * bytes_case) / sum(w * seconds_case) / copy`` (the MBU of the weighted workload mix).
    Empty dict without such rows."""
    rows = [r for r in rows if "mbu" in r and r.get("weight")]
    if not rows:
        return {}
    w = sum(r["weight"] for r in rows)
    return {"weight_sum": w,
            "weighted_mbu": sum(r["weight"] * r["mbu"] for r in rows) / w,
            "mix_mbu": 100 * (sum(r["weight"] * r["bytes"] for r in rows) /
                              sum(r["weight"] * r["us"] * 1e-6 for r in rows)) / copy_bps}


def fmt_case(r: dict[str, Any]) -> str:
    return f"B={r['B']} N={r['N']}"


def verdict(v: bool | None) -> str:
    return "n/a" if v is None else ("PASS" if v else "FAIL")


def parse_choices(text: str, choices: Sequence[str], aliases: dict[str, str], what: str) -> list[str]:
    """Comma-separated names (aliases allowed) that must be among ``choices``; for argparse ``type=``."""
    out = []
    for t in parse_list(text):
        t = aliases.get(t, t)
        if t not in choices:
            raise argparse.ArgumentTypeError(f"unknown {what} {t!r}; choose from {', '.join(choices)}")
        out.append(t)
    return out


def overall_verdict(summary: list[dict[str, Any]], cpu: bool, label: Callable[[dict[str, Any]], str],
                    complete: bool, cpu_bad: str, cpu_ok: str) -> str:
    """PASS only when every bar that applies was measured and met; a partial suite (``complete`` False) says
    so. The bars are GPU bars: a CPU run only reports whether every case ran and passed its output check."""
    if cpu:
        bad = sum(s["errors"] + s["bad_checks"] for s in summary)
        return "n/a on the CPU (GPU bars); " + (f"{bad} case(s) failed or {cpu_bad}" if bad else cpu_ok)
    verdicts = [(f"{label(s)}:{k}", v) for s in summary for k, v in s["bars"].items()]
    failed = [name for name, v in verdicts if v is False]
    if not any(v is not None for _, v in verdicts):
        return "n/a (no case of the bars measured)"
    overall = "FAIL (" + ", ".join(failed) + ")" if failed else "PASS"
    return overall if complete else overall + " [partial suite: indicative only]"


def guarded(row: dict[str, Any], device: torch.device, work: Callable[[], None]) -> dict[str, Any]:
    """Runs one case's ``work()`` (which fills ``row``); a failure is reported in ``row["error"]`` so that one bad
    case does not lose the whole sweep, and the case's device memory is released either way."""
    try:
        work()
    except Exception as err:  # report and go on
        row["error"] = error_text(err)
    finally:
        release(device)
    return row


def time_sets(row: dict[str, Any], op: Callable[..., Any], build: Callable[[], Any], check: Callable[[Any], str],
              device: torch.device, *, rotations: int, calls: int, warmup: int, samples: int, model_bytes: float,
              flops: float) -> dict[str, Any]:
    """Builds the input sets (``build()``, whose ``.args(i)`` gives set i's call arguments), times ``op`` over
    them with the shared protocol, checks the outputs the timed calls wrote (``check(sets)``) and fills ``row``
    (:func:`guarded`)."""
    def work() -> None:
        sets = build()
        bound = [sets.args(i) for i in range(rotations)]  # the graph captures exactly these tensors

        def make_call(i: int):
            args, kwargs = bound[i]
            return lambda: op(*args, **kwargs)

        result = bench(make_call, device, rotations=rotations, calls_per_sample=calls, warmup=warmup,
                       samples=samples)
        row.update(result.to_dict())
        row["tbps"] = result.bytes_per_s(model_bytes) / 1e12
        row["tflops"] = flops / (result.us * 1e-6) / 1e12
        row["check"] = check(sets)

    return guarded(row, device, work)


def finish(json_path: Path | None, payload: dict[str, Any], device: torch.device, rows: list[dict[str, Any]],
           show_summary: Callable[[], None]) -> int:
    """Writes the JSON (when asked), prints the summary last (its final line is the verdict that
    scripts/gpu_check.sh shows) and returns the exit status: 1 when a case errored or failed its check."""
    if json_path:
        print(f"[json] wrote {write_json(json_path, payload, device)}")
    show_summary()
    return 1 if any("error" in r for r in rows) or any(r.get("check", "ok") != "ok" for r in rows) else 0
