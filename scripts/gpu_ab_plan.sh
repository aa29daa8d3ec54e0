#!/usr/bin/env bash
# One device call of under 10 minutes (steps are cut at $DEADLINE s). Session 24's plan: the score kernel's
# per-CTA / per-SM balance trace (scripts/trace_index.cu, report_balance) on the heavy NVFP4 H4 cases, to tell
# whether late CTAs are slow or late-starting (deciding dynamic page hand-out), then the index suite defaults.
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
# The traces first (they need no library build), then, unless TRACE_ONLY=1 (a short call), the build and the suite.
CASES=("8 100000" "8 200000" "32 100000" "4 32000" "8 10000")
step trace_build nvcc -std=c++20 -O3 -DMSA_KERNEL_TRACE -Icsrc -Icsrc/include -gencode arch=compute_90a,code=sm_90a \
  scripts/trace_index.cu -o /tmp/trace_index
for c in "${CASES[@]}"; do
  step "trace_${c// /_}" /tmp/trace_index $c nvfp4 4 20
done
if [ "${TRACE_ONLY:-0}" != 1 ] && MAX_JOBS=16 step build bash scripts/install.sh; then
  step index_suite python3 bench/bench_index_decode.py --no-corner --json "$OUT/index.json"
fi

echo "==== device ===="; cat "$OUT/device.txt"
for c in "${CASES[@]}"; do
  echo "==== trace $c ===="; grep -v '^lens=' "$OUT/trace_${c// /_}.log" | tail -n 45
done
[ -f "$OUT/index_suite.log" ] && { echo "==== index_suite ===="; tail -n 40 "$OUT/index_suite.log"; }
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
