#!/usr/bin/env python3
"""A/B runs of a microbenchmark under kernel-variant knobs: see msa_ops/bench/ab.py.

    python3 bench/ab.py -v base -v fp8s:MSA_SPARSE_DECODE_SPLIT_FP8S=1 --repeat 2 -- \\
        bench/bench_sparse_decode.py --no-sdpa --kv nvfp4 --geometry 64/4 --cases 8:100000,32:100000
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from msa_ops.bench.ab import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
