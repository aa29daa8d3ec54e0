"""Timing harness shared by every msa_ops microbenchmark (shared/SPEC.md §7).

Protocol (CUDA): the caller allocates ``rotations`` distinct input sets so that the data touched between two
uses of one set exceeds 2x L2 (:func:`rotations_for`); :func:`bench_graph` captures ``calls_per_graph`` calls,
cycling over the sets, into one CUDA graph, replays it a few times to warm up, then times every further replay
with CUDA events. Per-call time = replay time / calls_per_graph. :func:`bench_events` is the same without a
graph (for ops that cannot be captured) and :func:`bench_cpu` a ``time.perf_counter`` fallback so that
benchmarks smoke-run on machines without a GPU.

Every callable's return value is kept alive in a ring of ``rotations`` slots, so outputs allocated by the op
rotate over distinct buffers too (otherwise the allocator hands back the same block each call and the writes
can stay in L2).

No performance number is typed in here: the roofline comes from :func:`device_facts` (datasheet peak computed
from memory clock x bus width) and :func:`measure_copy_bandwidth` (measured device-to-device copy).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

__all__ = ["DeviceFacts", "TimingResult", "device_facts", "rotations_for", "bench_graph", "bench_events",
           "bench_cpu", "bench", "measure_copy_bandwidth", "measure_copy_bandwidths", "format_table", "write_json"]

MakeCall = Callable[[int], Callable[[], Any]]


# ----------------------------------------------------------------------------------------------- device facts

@dataclass(frozen=True)
class DeviceFacts:
    """What the benchmark ran on. ``None`` marks a field that could not be read (always so on a CPU)."""
    kind: str                                   # "cuda" or "cpu"
    name: str
    sm_count: int | None = None
    l2_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None
    total_memory_bytes: int | None = None
    memory_clock_khz: int | None = None
    memory_bus_bits: int | None = None
    peak_dram_bytes_per_s: float | None = None  # datasheet: 2 (DDR) x memory clock x bus width / 8
    memory_info_source: str | None = None       # "cuda-python", "torch" or None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _resolve_device(device: torch.device | str | int | None) -> torch.device:
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _memory_clock_from_cuda_python(index: int) -> tuple[int, int] | None:
    """(memory clock kHz, bus width bits) through cuda-python, or None when it is missing or fails."""
    try:
        from cuda.bindings import runtime  # lazy: optional dependency
    except ImportError:
        return None
    values = []
    try:
        for attr in (runtime.cudaDeviceAttr.cudaDevAttrMemoryClockRate,
                     runtime.cudaDeviceAttr.cudaDevAttrGlobalMemoryBusWidth):
            err, value = runtime.cudaDeviceGetAttribute(attr, index)
            if err != runtime.cudaError_t.cudaSuccess or not value:
                return None
            values.append(int(value))
    except Exception:  # an older or newer binding without these names: fall back to torch
        return None
    return values[0], values[1]


def device_facts(device: torch.device | str | int | None = None) -> DeviceFacts:
    """Name, SM count, L2 size, compute capability and datasheet peak DRAM bandwidth of ``device``.

    ``device`` defaults to the current CUDA device, or the CPU when CUDA is unavailable. Never raises for a
    missing GPU or missing cuda-python: unknown fields are ``None``.
    """
    dev = _resolve_device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return DeviceFacts(kind="cpu", name=platform.processor() or platform.machine() or "cpu")
    props = torch.cuda.get_device_properties(dev)
    clock_bus, source = _memory_clock_from_cuda_python(dev.index), "cuda-python"
    if clock_bus is None:  # older torch lacks these fields; CUDA 13 dropped them from cudaDeviceProp
        clock, bus = getattr(props, "memory_clock_rate", None), getattr(props, "memory_bus_width", None)
        clock_bus, source = ((int(clock), int(bus)), "torch") if clock and bus else (None, None)
    peak = 2.0 * clock_bus[0] * 1e3 * clock_bus[1] / 8 if clock_bus else None
    return DeviceFacts(
        kind="cuda", name=props.name, sm_count=props.multi_processor_count,
        l2_bytes=getattr(props, "L2_cache_size", None) or None, compute_capability=(props.major, props.minor),
        total_memory_bytes=props.total_memory, memory_clock_khz=clock_bus[0] if clock_bus else None,
        memory_bus_bits=clock_bus[1] if clock_bus else None, peak_dram_bytes_per_s=peak, memory_info_source=source)


# ---------------------------------------------------------------------------------------------------- timing

@dataclass(frozen=True)
class TimingResult:
    """Per-call times in microseconds over ``samples`` samples (each the mean of ``calls_per_sample`` calls)."""
    us: float          # median
    min_us: float
    max_us: float
    p10_us: float
    p90_us: float
    samples: int
    calls_per_sample: int
    method: str        # "cuda_graph", "cuda_events" or "cpu_perf_counter"

    @classmethod
    def from_samples(cls, samples_us: Sequence[float], *, calls_per_sample: int, method: str) -> "TimingResult":
        if not samples_us:
            raise ValueError("no timing samples")
        s = sorted(float(v) for v in samples_us)
        return cls(us=statistics.median(s), min_us=s[0], max_us=s[-1], p10_us=_quantile(s, 0.10),
                   p90_us=_quantile(s, 0.90), samples=len(s), calls_per_sample=calls_per_sample, method=method)

    def bytes_per_s(self, nbytes: float) -> float:
        """Effective bandwidth of moving ``nbytes`` per call at the median time."""
        return nbytes / (self.us * 1e-6)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of an already sorted sequence."""
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def rotations_for(bytes_per_call: int, l2_bytes: int | None, *, factor: float = 2.0, minimum: int = 2) -> int:
    """How many distinct input sets to cycle so that, between two uses of one set, the OTHER sets touched
    exceed ``factor`` x L2: the smallest ``n >= minimum`` with ``(n - 1) * bytes_per_call > factor * l2_bytes``.
    ``l2_bytes=None`` (unknown, e.g. CPU) gives ``minimum``."""
    if bytes_per_call <= 0:
        raise ValueError(f"bytes_per_call must be positive, got {bytes_per_call}")
    if l2_bytes is None:
        return minimum
    return max(minimum, math.floor(factor * l2_bytes / bytes_per_call) + 2)


def _run_calls(calls: Sequence[Callable[[], Any]], count: int, ring: list[Any], start: int = 0) -> int:
    for k in range(start, start + count):
        ring[k % len(ring)] = calls[k % len(calls)]()   # keep the output alive: outputs rotate too
    return start + count


def bench_graph(make_call: MakeCall, *, rotations: int, calls_per_graph: int, warmup_replays: int = 5,
                replays: int = 30) -> TimingResult:
    """Time ``calls_per_graph`` calls captured in one CUDA graph (cycling over ``rotations`` input sets);
    one sample per replay, per-call time = replay time / calls_per_graph."""
    if rotations < 1 or calls_per_graph < 1 or replays < 1 or warmup_replays < 0:
        raise ValueError("rotations, calls_per_graph and replays must be >= 1, warmup_replays >= 0")
    calls = [make_call(i) for i in range(rotations)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):              # eager warm-up on a side stream before capture, as torch requires
        _run_calls(calls, rotations, [None] * rotations)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()                   # warm-up outputs live in the normal pool; capture uses its own
    graph, ring = torch.cuda.CUDAGraph(), [None] * rotations
    with torch.cuda.graph(graph):
        _run_calls(calls, calls_per_graph, ring)
    del ring                                   # the graph's private pool keeps the output buffers
    for _ in range(warmup_replays):
        graph.replay()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    samples = [start.elapsed_time(end) * 1e3 / calls_per_graph for start, end in events]
    del graph
    return TimingResult.from_samples(samples, calls_per_sample=calls_per_graph, method="cuda_graph")


def bench_events(make_call: MakeCall, *, rotations: int, calls_per_sample: int, warmup: int = 5,
                 samples: int = 30) -> TimingResult:
    """Eager launches timed with CUDA events, for ops that cannot be captured in a graph (includes launch
    overhead whenever the GPU outruns the CPU)."""
    calls, ring = [make_call(i) for i in range(rotations)], [None] * rotations
    k = _run_calls(calls, warmup * calls_per_sample, ring)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(samples)]
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        k = _run_calls(calls, calls_per_sample, ring, k)
        end.record()
    torch.cuda.synchronize()
    times = [start.elapsed_time(end) * 1e3 / calls_per_sample for start, end in events]
    return TimingResult.from_samples(times, calls_per_sample=calls_per_sample, method="cuda_events")


def bench_cpu(make_call: MakeCall, *, rotations: int, calls_per_sample: int = 1, warmup: int = 1,
              samples: int = 5) -> TimingResult:
    """Wall-clock (``time.perf_counter``) fallback for CPU tensors: smoke runs, not performance claims."""
    calls, ring = [make_call(i) for i in range(rotations)], [None] * rotations
    k = _run_calls(calls, warmup * calls_per_sample, ring)
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        k = _run_calls(calls, calls_per_sample, ring, k)
        times.append((time.perf_counter() - t0) * 1e6 / calls_per_sample)
    return TimingResult.from_samples(times, calls_per_sample=calls_per_sample, method="cpu_perf_counter")


def bench(make_call: MakeCall, device: torch.device | str, *, rotations: int, calls_per_sample: int,
          warmup: int, samples: int, graph: bool = True) -> TimingResult:
    """Dispatch: CUDA graph (or events when ``graph=False``) on a CUDA device, perf_counter on the CPU."""
    if torch.device(device).type == "cuda":
        if graph:
            return bench_graph(make_call, rotations=rotations, calls_per_graph=calls_per_sample,
                               warmup_replays=warmup, replays=samples)
        return bench_events(make_call, rotations=rotations, calls_per_sample=calls_per_sample, warmup=warmup,
                            samples=samples)
    return bench_cpu(make_call, rotations=rotations, calls_per_sample=calls_per_sample, warmup=warmup,
                     samples=samples)


def measure_copy_bandwidths(nbytes: int = 2**31, device: torch.device | str | int | None = None, *,
                            calls_per_sample: int | None = None, warmup: int = 3,
                            samples: int = 20) -> dict[str, float]:
    """Device-to-device copy bandwidth in bytes/s (bytes read + written = 2 x nbytes), three ways:

    - ``memcpy_graph``: ``dst.copy_(src)`` captured in a CUDA graph (a memcpy node; on the H200 this ran on
      the copy engines at ~2.8 TB/s, far below what SM kernels reach, so it alone is no roofline);
    - ``memcpy_events``: the same, eager, timed with events;
    - ``kernel_graph``: an SM elementwise kernel (``torch.neg(src, out=dst)`` on fp32: one read, one write)
      in a CUDA graph — the same launch protocol as the op benchmarks.
    On the CPU only ``memcpy_events`` is measured (with perf_counter)."""
    dev = _resolve_device(device)
    l2 = device_facts(dev).l2_bytes
    rotations = rotations_for(2 * nbytes, l2)
    srcs = [torch.randn(nbytes // 4, dtype=torch.float32, device=dev) for _ in range(rotations)]
    dsts = [torch.empty_like(s) for s in srcs]
    calls = calls_per_sample or rotations
    nbytes = srcs[0].numel() * 4

    def copy_call(i: int) -> Callable[[], Any]:
        return lambda: dsts[i].copy_(srcs[i])

    def kernel_call(i: int) -> Callable[[], Any]:
        return lambda: torch.neg(srcs[i], out=dsts[i])

    out: dict[str, float] = {}
    if dev.type != "cuda":
        result = bench_cpu(copy_call, rotations=rotations, calls_per_sample=calls, warmup=warmup, samples=samples)
        return {"memcpy_events": result.bytes_per_s(2 * nbytes)}
    out["memcpy_graph"] = bench_graph(copy_call, rotations=rotations, calls_per_graph=calls,
                                      warmup_replays=warmup, replays=samples).bytes_per_s(2 * nbytes)
    out["memcpy_events"] = bench_events(copy_call, rotations=rotations, calls_per_sample=calls, warmup=warmup,
                                        samples=samples).bytes_per_s(2 * nbytes)
    out["kernel_graph"] = bench_graph(kernel_call, rotations=rotations, calls_per_graph=calls,
                                      warmup_replays=warmup, replays=samples).bytes_per_s(2 * nbytes)
    return out


def measure_copy_bandwidth(nbytes: int = 2**31, device: torch.device | str | int | None = None, *,
                           calls_per_sample: int | None = None, warmup: int = 3, samples: int = 20) -> float:
    """The copy roofline: the best of :func:`measure_copy_bandwidths` (bytes/s, read + written)."""
    return max(measure_copy_bandwidths(nbytes, device, calls_per_sample=calls_per_sample, warmup=warmup,
                                       samples=samples).values())


# ---------------------------------------------------------------------------------------------------- output

Column = str | tuple[str, str] | tuple[str, str, str]   # key | (key, header) | (key, header, format spec)


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    """Aligned text table: numbers right-aligned, text left-aligned, missing values as ``-``.
    Floats use the column's format spec (e.g. ``".1f"``), else ``.4g``."""
    specs = [(c, c, "") if isinstance(c, str) else (c[0], c[1], c[2] if len(c) > 2 else "") for c in columns]

    def cell(value: Any, fmt: str) -> str:
        if value is None:
            return "-"
        if fmt:
            return format(value, fmt)
        return format(value, ".4g") if isinstance(value, float) else str(value)

    body = [[cell(row.get(key), fmt) for key, _, fmt in specs] for row in rows]
    numeric = [all(isinstance(row.get(key), (int, float)) or row.get(key) is None for row in rows)
               for key, _, _ in specs]
    widths = [max([len(header)] + [len(r[j]) for r in body]) for j, (_, header, _) in enumerate(specs)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric)).rstrip()

    out = [line([h for _, h, _ in specs]), "  ".join("-" * w for w in widths)]
    return "\n".join(out + [line(r) for r in body])


def _git_commit() -> tuple[str | None, bool | None]:
    """(HEAD commit, working tree has uncommitted changes) of the checkout this file is in, or Nones."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return head or None, bool(dirty)
    except (OSError, subprocess.SubprocessError):
        return None, None


def write_json(path: str | Path, payload: dict[str, Any], device: torch.device | str | int | None = None) -> Path:
    """Write ``payload`` plus a ``meta`` block (device facts, torch/CUDA versions, UTC date, git commit)."""
    commit, dirty = _git_commit()
    meta = {"device": device_facts(device).to_dict(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version(), "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(),
            "git_commit": commit, "git_dirty": dirty}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, **payload}, indent=2, default=str) + "\n")
    return path
