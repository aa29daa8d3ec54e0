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


# ---- bench/ab.py: A/B runs under kernel-variant knobs ------------------------------------------------------

def test_ab_variant_parse():
    from msa_ops.bench.ab import Variant

    assert Variant.parse("base") == Variant("base", {})
    assert Variant.parse("x:A=1,B=two") == Variant("x", {"A": "1", "B": "two"})
    assert Variant.parse("y:A=") == Variant("y", {"A": ""})
    assert Variant.parse("old:@root=/tmp/base,A=1") == Variant("old", {"A": "1"}, "/tmp/base")
    assert Variant("old", {}, "/tmp/base").script("bench/x.py") == "/tmp/base/bench/x.py"
    assert Variant("new").script("bench/x.py") == "bench/x.py"
    for bad in ("", ":A=1", "A=1", "x:A", "x:=1"):
        with pytest.raises(ValueError):
            Variant.parse(bad)


def test_ab_compare_medians_ratios_and_missing_cases():
    from msa_ops.bench.ab import compare

    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from _suite import weighted_mbu   # the summaries' MBU comes from the benchmarks' own helper (in %)

    def doc(times, mbu):
        rows = [{"kv": "nvfp4", "B": b, "N": n, "us": us, "mbu": mbu, "weight": 1, "bytes": 1.0}
                for (b, n), us in times.items()]
        s = weighted_mbu(rows, copy_bps=1e6)
        return {"rows": rows, "summary": [{"kv": "nvfp4", "geometry": "64/4", **s, "x": 1}]}

    runs = {"a": [doc({(8, 1000): 10.0, (8, 4000): 20.0}, 30.0), doc({(8, 1000): 12.0, (8, 4000): 22.0}, 31.0)],
            "b": [doc({(8, 1000): 5.0}, 50.0), doc({(8, 1000): 7.0}, 52.0)]}
    cases, groups = compare(runs)
    by = {(c["B"], c["N"]): c for c in cases}
    assert by[(8, 1000)]["a us"] == 11.0 and by[(8, 1000)]["b us"] == 6.0        # median over repeats
    assert by[(8, 1000)]["b/a"] == pytest.approx(6.0 / 11.0)
    assert by[(8, 4000)]["b us"] is None and by[(8, 4000)]["b/a"] is None       # b did not run that case
    assert [g["variant"] for g in groups] == ["a", "b"]
    assert groups[0]["weighted_mbu"] == pytest.approx(31.0) and groups[1]["weighted_mbu"] == pytest.approx(52.0)
    assert "x" not in groups[0]


def test_ab_runs_each_variant_with_its_environment(tmp_path, capsys, monkeypatch):
    from msa_ops.bench.ab import main

    fake = tmp_path / "fake_bench.py"   # a benchmark whose time is the knob's value
    fake.write_text(
        "import json, os, sys\n"
        "path = sys.argv[sys.argv.index('--json') + 1]\n"
        "us = float(os.environ.get('FAKE_US', '10'))\n"
        "rows = [{'keys': 'nvfp4', 'B': 8, 'N': int(sys.argv[1]), 'us': us}]\n"
        "json.dump({'rows': rows, 'summary': [{'keys': 'nvfp4', 'H': 4, 'weighted_mbu': 1000 / us}]}, open(path, 'w'))\n")
    out = tmp_path / "ab"
    rc = main(["-v", "base", "-v", "fast:FAKE_US=4", "--repeat", "2", "--out", str(out),
               "--json", str(tmp_path / "ab.json"), "--", str(fake), "1000"])
    assert rc == 0
    assert sorted(p.name for p in out.glob("*.json")) == ["base-0.json", "base-1.json", "fast-0.json", "fast-1.json"]
    result = json.loads((tmp_path / "ab.json").read_text())
    (case,) = result["cases"]
    assert (case["N"], case["base us"], case["fast us"], case["fast/base"]) == (1000, 10.0, 4.0, 0.4)
    assert [g["weighted_mbu"] for g in result["groups"]] == [pytest.approx(100.0), pytest.approx(250.0)]
    text = capsys.readouterr().out
    assert "fast/base" in text and "0.400" in text

    other = tmp_path / "other"        # @root: the same script path under another checkout
    other.mkdir()
    (other / fake.name).write_text(fake.read_text().replace("'10'", "'20'"))
    monkeypatch.chdir(tmp_path)
    assert main(["-v", "new", "-v", f"old:@root={other}", "--out", str(out), "--json", "ab2.json", "--",
                 fake.name, "1000"]) == 0
    (case,) = json.loads((tmp_path / "ab2.json").read_text())["cases"]
    assert (case["new us"], case["old us"]) == (10.0, 20.0)

    failing = tmp_path / "failing_bench.py"
    failing.write_text("import sys\nsys.exit(3)\n")
    assert main(["-v", "base", "--out", str(out), "--", str(failing)]) == 1
    with pytest.raises(SystemExit):
        main(["-v", "a", "-v", "a", "--", str(fake), "1"])        # duplicate names
    with pytest.raises(SystemExit):
        main(["-v", "a", "--", str(fake), "--json", "x"])          # --json is set per run
