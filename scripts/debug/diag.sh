#!/usr/bin/env bash
# One-off diagnosis (2026-12-02): the CUDA-path exception crash (libstdc++ preload on/off) and dequantize unroll.
cd "$(dirname "$0")/../.."
MSA_CUDA_ARCHS=9.0a MAX_JOBS=16 bash scripts/install.sh > /tmp/b.log 2>&1 || tail -30 /tmp/b.log
echo "preload off: $(MSA_OPS_NO_LIBSTDCXX_PRELOAD=1 python3 scripts/debug/throw_check.py cuda 2>&1 | grep -E 'raised|Fatal' | head -2 | tr '\n' ' ')"
echo "preload on:  $(python3 scripts/debug/throw_check.py cuda 2>&1 | grep -E 'raised|Fatal' | head -2 | tr '\n' ' ')"
for u in 1 2 4; do
  echo "== dequant unroll $u: $(MSA_NVFP4_DEQUANT_UNROLL=$u python3 bench/bench_nvfp4.py --sizes 256M,1G --ops dequantize 2>&1 | grep -E '^dequantize' | awk '{print $2, $3, $4, $7"us", $NF"%"}' | tr '\n' ';')"
done
