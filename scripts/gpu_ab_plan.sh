#!/usr/bin/env bash
# One device call of under 10 minutes (steps are cut at $DEADLINE s). Session 25's plan: the score kernel's
# balance trace (scripts/trace_index.cu, report_balance) on B8 N100K / B32 N100K NVFP4 H4, static runs and with the
# page pool (MSA_INDEX_FLAT_POOL); the library build; the pool's correctness tests (the knob reruns); then the A/B
# of pool shares and chunk sizes on the heavy NVFP4 H4 cases, and the index suite's NVFP4 H4 defaults.
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
# The build in the background while the traces (their own small binary) run.
(MAX_JOBS=14 bash scripts/install.sh > "$OUT/build.log" 2>&1; echo "rc=$?" >> "$OUT/build.log") &
build_pid=$!
TRACES=("8 100000" "32 100000")
if step trace_build nvcc -std=c++20 -O3 -DMSA_KERNEL_TRACE -Icsrc -Icsrc/include -gencode arch=compute_90a,code=sm_90a \
  scripts/trace_index.cu -o /tmp/trace_index; then
  for c in "${TRACES[@]}"; do
    step "trace_${c// /_}" /tmp/trace_index $c nvfp4 4 20
    MSA_INDEX_FLAT_POOL=25 step "trace_pool25_${c// /_}" /tmp/trace_index $c nvfp4 4 20
  done
fi
wait $build_pid
summary+=("$(printf '%-22s %s' build "$(tail -n 1 "$OUT/build.log")")")
if grep -q '^rc=0' "$OUT/build.log"; then
  step pool_tests python3 -m pytest tests/test_index_decode.py -q -p no:logging -k "knob and pool"
  HEAVY=8:100000,8:200000,32:100000,8:50000,32:50000,64:50000,8:10000,4:32000
  step pool_ab python3 bench/ab.py --out "$OUT/ab" -v base -v p25:MSA_INDEX_FLAT_POOL=25 \
    -v p50:MSA_INDEX_FLAT_POOL=50 -v p100:MSA_INDEX_FLAT_POOL=100 \
    -v p25c1:MSA_INDEX_FLAT_POOL=25,MSA_INDEX_FLAT_CHUNK=1 \
    -- bench/bench_index_decode.py --keys nvfp4 --heads 4 --no-corner --cases $HEAVY
  step index_suite python3 bench/bench_index_decode.py --keys nvfp4 --heads 4 --no-corner --json "$OUT/index.json"
fi

echo "==== device ===="; cat "$OUT/device.txt"
for f in "$OUT"/trace_*.log; do
  [ "$(basename "$f")" = trace_build.log ] && continue
  echo "==== $(basename "$f" .log) ===="; grep -v '^lens=' "$f" | tail -n 30
done
[ -f "$OUT/pool_tests.log" ] && { echo "==== pool_tests ===="; tail -n 15 "$OUT/pool_tests.log"; }
[ -f "$OUT/pool_ab.log" ] && { echo "==== pool_ab ===="; tail -n 45 "$OUT/pool_ab.log"; }
[ -f "$OUT/index_suite.log" ] && { echo "==== index_suite ===="; tail -n 12 "$OUT/index_suite.log"; }
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
