#!/usr/bin/env bash
# One device call of under 10 minutes (steps are cut at $DEADLINE s). Session 26's plan: the shared-memory-keys
# variant of the NVFP4 index score kernel (knob MSA_INDEX_WGMMA_SS=1): its knob test rerun (every CUDA score case
# under the knob), then an A/B against the default on the heavy NVFP4 H4 / H1 cases, then the whole NVFP4 H4 suite
# under the knob.
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
if ! MAX_JOBS=8 step build bash scripts/install.sh; then tail -n 40 "$OUT/build.log"; printf '%s\n' "${summary[@]}"; exit 1; fi
CASES=8:100000,32:100000,8:200000,128:200000,8:50000,32:50000,8:10000,4:32000,128:10000,64:50000
step ab_index python3 bench/ab.py -v base -v ss:MSA_INDEX_WGMMA_SS=1 --repeat 1 --out "$OUT/ab" \
  --json "$OUT/ab_index.json" -- bench/bench_index_decode.py --no-corner --keys nvfp4 --heads 4,1 --cases "$CASES"
step test_knob python3 -m pytest tests/test_index_decode.py -q -p no:logging -k "knob and smem"
MSA_INDEX_WGMMA_SS=1 step suite_ss python3 bench/bench_index_decode.py --no-corner --keys nvfp4 --heads 4 \
  --json "$OUT/suite_ss.json"
step test_default python3 -m pytest tests/test_index_decode.py -q -p no:logging -x -k cuda

echo "==== device ===="; cat "$OUT/device.txt"
for f in ab_index test_knob suite_ss test_default; do
  [ -f "$OUT/$f.log" ] && { echo "==== $f ===="; tail -n 30 "$OUT/$f.log"; }
done
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
