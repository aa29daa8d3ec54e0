"""Benchmark helpers shared by the ``bench/bench_*.py`` microbenchmarks (timing protocol of SPEC §7)."""

from .timing import (DeviceFacts, TimingResult, bench, bench_cpu, bench_events, bench_graph, device_facts,
                     format_table, measure_copy_bandwidth, measure_copy_bandwidths, rotations_for, write_json)

__all__ = ["DeviceFacts", "TimingResult", "bench", "bench_cpu", "bench_events", "bench_graph", "device_facts",
           "format_table", "measure_copy_bandwidth", "measure_copy_bandwidths", "rotations_for", "write_json"]
