"""CPU-side checks of the benchmark harness (msa_ops.bench.timing); the CUDA paths run in bench/ on a GPU."""

from __future__ import annotations

import json
import math

import pytest
import torch

from msa_ops.bench import (DeviceFacts, TimingResult, bench, bench_cpu, device_facts, format_table,
                           measure_copy_bandwidth, rotations_for, write_json)

MiB = 2**20


def test_rotations_for_makes_reuse_distance_exceed_twice_l2():
    l2 = 60 * MiB
    for per_call in (1, 4096, 7 * MiB, 16 * MiB, 20 * MiB, 40 * MiB, 60 * MiB, 120 * MiB, 121 * MiB, 4 << 30):
        n = rotations_for(per_call, l2)
        assert n >= 2
        assert (n - 1) * per_call > 2 * l2 or n == 2 and per_call > 2 * l2
        assert n == 2 or (n - 2) * per_call <= 2 * l2          # and it is the smallest such count
    assert rotations_for(40 * MiB, l2) == 5                     # 4 other sets = 160 MiB > 120 MiB; 3 = 120 is not
    assert rotations_for(120 * MiB, l2) == 3                    # exactly 2x L2 is not enough
    assert rotations_for(121 * MiB, l2) == 2
    assert rotations_for(1 << 30, None) == 2                    # unknown L2 (CPU)
    assert rotations_for(1 << 30, l2, minimum=4) == 4
    with pytest.raises(ValueError):
        rotations_for(0, l2)


def test_timing_result_stats():
    r = TimingResult.from_samples([5.0, 1.0, 3.0, 2.0, 4.0], calls_per_sample=10, method="test")
    assert (r.us, r.min_us, r.max_us, r.samples) == (3.0, 1.0, 5.0, 5)
    assert r.p10_us == pytest.approx(1.4) and r.p90_us == pytest.approx(4.6)   # numpy's linear quantiles
    assert r.bytes_per_s(3e6) == pytest.approx(1e12)
    d = r.to_dict()
    assert d["us"] == 3.0 and d["calls_per_sample"] == 10 and d["method"] == "test"
    json.dumps(d)
    even = TimingResult.from_samples([1.0, 2.0, 3.0, 10.0], calls_per_sample=1, method="test")
    assert even.us == 2.5
    with pytest.raises(ValueError):
        TimingResult.from_samples([], calls_per_sample=1, method="test")


def test_format_table_aligns_columns():
    rows = [{"op": "quantize", "us": 12.345, "n": 7}, {"op": "dq", "us": 1234.5, "n": 123, "extra": "x"},
            {"op": "missing", "us": None, "n": 1}]
    text = format_table(rows, ["op", ("us", "time us", ".1f"), ("n", "count")])
    lines = text.splitlines()
    assert len(lines) == 5
    assert lines[0].split() == ["op", "time", "us", "count"]
    assert set(lines[1]) <= {"-", " "}
    assert "12.3" in lines[2] and "1234.5" in lines[3] and "-" in lines[4]
    assert lines[2].startswith("quantize")                        # text left-aligned
    ends = {lines[2].index("12.3") + 4, lines[3].index("1234.5") + 6}   # numbers right-aligned
    assert len(ends) == 1


def test_cpu_timer_rotates_inputs_and_keeps_outputs():
    used = []

    def make_call(i):
        def call():
            used.append(i)
            return torch.full((4,), float(i))
        return call

    r = bench_cpu(make_call, rotations=3, calls_per_sample=2, warmup=1, samples=4)
    assert r.method == "cpu_perf_counter" and r.samples == 4 and r.calls_per_sample == 2
    assert 0 <= r.min_us <= r.p10_us <= r.us <= r.p90_us <= r.max_us and math.isfinite(r.max_us)
    assert used == [k % 3 for k in range(2 + 4 * 2)]             # cycles over the input sets in order
    r2 = bench(make_call, "cpu", rotations=2, calls_per_sample=1, warmup=0, samples=3)
    assert r2.method == "cpu_perf_counter" and r2.samples == 3


def test_cpu_copy_bandwidth_is_positive():
    assert measure_copy_bandwidth(1 * MiB, "cpu", samples=3) > 0


def test_device_facts_on_cpu_does_not_crash():
    facts = device_facts("cpu")
    assert isinstance(facts, DeviceFacts) and facts.kind == "cpu" and facts.name
    assert facts.peak_dram_bytes_per_s is None and facts.l2_bytes is None
    if not torch.cuda.is_available():
        assert device_facts().kind == "cpu"
    json.dumps(facts.to_dict())


def test_write_json_adds_meta(tmp_path):
    path = write_json(tmp_path / "sub" / "r.json", {"rows": [{"a": 1}]}, "cpu")
    doc = json.loads(path.read_text())
    assert doc["rows"] == [{"a": 1}]
    meta = doc["meta"]
    assert meta["torch"] == torch.__version__ and meta["device"]["kind"] == "cpu"
    assert "date_utc" in meta and "git_commit" in meta
