#!/usr/bin/env bash
# Stall breakdown of the sparse split kernel (session 29): one launch, per-issue stall ratios.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MSA_CUDA_ARCHS=9.0a MAX_JOBS=16
[ -n "${NO_BUILD:-}" ] || bash scripts/install.sh > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
M='regex:^(smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio|sm__inst_executed_pipe_(alu|fma|fmaheavy|lsu|uniform)\.avg\.pct_of_peak_sustained_active|smsp__issue_active\.avg\.pct_of_peak_sustained_active|gpu__time_duration\.sum)$'
for c in "64/4 8:100000" "64/4 8:10000" "16/1 8:100000"; do
  set -- $c
  name=$(echo "$1_$2" | tr '/:' '__')
  ncu --clock-control none -k regex:sparse_decode_split --launch-skip 2 --launch-count 1 --metrics "$M" \
    python3 bench/bench_sparse_decode.py --kv nvfp4 --geometry $1 --no-sdpa --cases $2 > "$OUT/ncu_$name.log" 2>&1
  echo "==== $name (rc=$?) ===="
  grep -E "sparse_decode_split_kernel<|stalled|pipe|issue_active|duration" "$OUT/ncu_$name.log" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{ if ($NF+0 >= 0.05 || $0 ~ /kernel|pipe|issue|duration/) print }'
done
