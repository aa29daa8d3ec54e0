#!/usr/bin/env bash
# One device call of under 10 minutes (steps are cut at $DEADLINE s). Session 27's plan: the sparse-decode rule
# re-fit (NOTES "Next GPU session" items 2-3) on NVFP4 and E4M3 KV, Q = 8.
#   PART=1: 64/4, the default rules against FP8 S forced (with and without 2 splits: 4 CTAs = 16 warps per SM
#     instead of the 6-warp kernel's 12) and the union pass forced, on the cases the rules decide (one-wave B8 at
#     large N, N 5000-10000 where tokens share pages).
#   PART=2 (after the E4M3 re-fit): the rules' CUDA tests, 16/1 E4M3 at N 5000-10000 against the union pass and
#     FP8 S turned off, the full sparse suites (both geometries, three formats) under the new rules, then the
#     low-latency cases at 4 / 8 splits.
# Logs and JSON under $OUT (./gpu-out when unset); a summary with exit codes prints last.
# Rewrite it when the plan changes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MSA_CUDA_ARCHS=${MSA_CUDA_ARCHS:-9.0a}
# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
if ! MAX_JOBS=16 step build bash scripts/install.sh; then tail -n 40 "$OUT/build.log"; printf '%s\n' "${summary[@]}"; exit 1; fi

S=MSA_SPARSE_DECODE
logs=()
if [ "${PART:-1}" = 1 ]; then
logs=(ab_nvfp4 ab_fp8)
variants=(-v base -v fp8s:${S}_SPLIT_FP8S=1 -v fp8s2:${S}_SPLIT_FP8S=1,${S}_SPLITS=2 -v union:${S}_UNION=1)
step ab_nvfp4 python3 bench/ab.py "${variants[@]}" --repeat 1 --out "$OUT/ab_nvfp4" --json "$OUT/ab_nvfp4.json" -- \
  bench/bench_sparse_decode.py --no-sdpa --kv nvfp4 --geometry 64/4 \
  --cases 8:100000,8:200000,8:50000,32:5000,64:5000,128:5000,32:10000,64:10000,128:10000,4:32000
step ab_fp8 python3 bench/ab.py -v base -v union:${S}_UNION=1 -v fp8s:${S}_SPLIT_FP8S=1 --repeat 1 \
  --out "$OUT/ab_fp8" --json "$OUT/ab_fp8.json" -- \
  bench/bench_sparse_decode.py --no-sdpa --kv fp8 --geometry 64/4 \
  --cases 32:5000,64:5000,128:5000,32:10000,64:10000,128:10000
else
logs=(tests ab_fp8_16 suite ab_lowlat)
step tests python3 -m pytest tests/test_sparse_decode.py -q -p no:logging -k "fp8s_rule or union or repeatable"
step ab_fp8_16 python3 bench/ab.py -v base -v nounion:${S}_UNION=0 -v nofp8s:${S}_SPLIT_FP8S=0 --repeat 1 \
  --out "$OUT/ab_fp8_16" --json "$OUT/ab_fp8_16.json" -- \
  bench/bench_sparse_decode.py --no-sdpa --kv fp8 --geometry 16/1 \
  --cases 32:5000,64:5000,128:5000,32:10000,64:10000,128:10000
step suite python3 bench/bench_sparse_decode.py --no-sdpa --kv nvfp4,fp8,bf16 --geometry 64/4,16/1 \
  --json "$OUT/sparse_suite.json"
step ab_lowlat python3 bench/ab.py -v base -v s4:${S}_SPLITS=4 -v s8:${S}_SPLITS=8 \
  -v fp8s4:${S}_SPLIT_FP8S=1,${S}_SPLITS=4 --repeat 1 --out "$OUT/ab_lowlat" --json "$OUT/ab_lowlat.json" -- \
  bench/bench_sparse_decode.py --no-sdpa --kv nvfp4,fp8 --geometry 64/4 --cases 1:32000,2:32000,4:32000,4:8000
fi

echo "==== device ===="; cat "$OUT/device.txt"
for f in "${logs[@]}"; do [ -f "$OUT/$f.log" ] && { echo "==== $f ===="; tail -n 30 "$OUT/$f.log"; }; done
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
