#!/usr/bin/env bash
# One device call of under 10 minutes (steps are cut at $DEADLINE s): build, the CUDA index tests (session 22: the
# fix for out-of-range page ids in the score kernel), memcheck of those cases, then the defaults at the
# heaviest-weight index cases. Logs and JSON under $OUT (./gpu-out when unset); a summary with exit codes prints
# last. `STAGE=tests|bench` runs only that half.
# Rewrite it when the plan changes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MSA_CUDA_ARCHS=${MSA_CUDA_ARCHS:-9.0a} MAX_JOBS=${MAX_JOBS:-16}
STAGE=${STAGE:-all}
# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
if ! step build bash scripts/install.sh; then tail -n 40 "$OUT/build.log"; printf '%s\n' "${summary[@]}"; exit 1; fi

if [ "$STAGE" != bench ]; then
  step tests timeout 420 python3 -m pytest -q -p no:logging -m cuda tests/test_index_decode.py
  step memcheck timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 --target-processes all \
    python3 -m pytest -q -p no:logging -m cuda tests/test_index_decode.py -k "out_of_range or nan_keys"
fi

if [ "$STAGE" != tests ]; then
  # The defaults at the heaviest-weight cases (compare on one machine: add a baseline build with bench/ab.py).
  step bench_index python3 bench/bench_index_decode.py --no-corner --keys nvfp4 --heads 4,1 \
    --cases 8:100000,32:100000,8:200000,32:50000,8:50000,128:200000,64:10000,8:10000,4:32000 \
    --json "$OUT/bench_index.json"
fi

echo "==== device ===="; cat "$OUT/device.txt"
for log in tests memcheck; do [ -f "$OUT/$log.log" ] && { echo "==== $log (tail) ===="; tail -n 8 "$OUT/$log.log"; }; done
[ -f "$OUT/bench_index.log" ] && { echo "==== bench_index ===="; cat "$OUT/bench_index.log"; }
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
