#!/usr/bin/env bash
# One device call of under 10 minutes (steps are cut at $DEADLINE s), as planned in bench/NOTES.md ("Next GPU
# session"): build, the CUDA tests of the unrun code (session 22: the indexer's bulk-copy page ring,
# MSA_INDEX_WGMMA_TMA=4 / 5), memcheck of it, the A/B at the heaviest cases, then the full index suite under
# $SUITE_ENV (e.g. SUITE_ENV=MSA_INDEX_WGMMA_TMA=5; default: the defaults). Logs and JSON under $OUT (./gpu-out when
# unset); a summary with exit codes prints last. `STAGE=tests|bench` runs only that half.
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
  step tests timeout 300 python3 -m pytest -q -p no:logging -m cuda tests/test_index_decode.py -k "(knob and tma) or out_of_range"
  step memcheck env MSA_INDEX_WGMMA_TMA=5 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 \
    --target-processes all python3 -m pytest -q -p no:logging -m cuda tests/test_index_decode.py \
    -k "cuda and (lengths or page_layouts or nan_keys or uneven or out_of_range) and not large"
fi

if [ "$STAGE" != tests ]; then
  # Indexer, heaviest-weight cases first: register loads (default) against the bulk-copy ring at 4 and 5 CTAs/SM.
  step ab_index_tma python3 bench/ab.py --out "$OUT/ab_index_tma" --json "$OUT/ab_index_tma.json" \
    -v regs:MSA_INDEX_WGMMA_TMA=0 -v tma4:MSA_INDEX_WGMMA_TMA=4 -v tma5:MSA_INDEX_WGMMA_TMA=5 \
    -- bench/bench_index_decode.py --no-corner --keys nvfp4 --heads 4,1 \
    --cases 8:100000,32:100000,8:200000,32:50000,8:50000,128:200000,64:10000,8:10000,4:32000
  # The full index suite (the bar's numbers), last: the longest.
  step index_suite env ${SUITE_ENV:-MSA_PDL=1} python3 bench/bench_index_decode.py --no-corner \
    --json "$OUT/index_suite.json"
fi

echo "==== device ===="; cat "$OUT/device.txt"
for log in tests memcheck; do [ -f "$OUT/$log.log" ] && { echo "==== $log (tail) ===="; tail -n 8 "$OUT/$log.log"; }; done
for log in ab_index_tma; do
  [ -f "$OUT/$log.log" ] && { echo "==== $log ===="; cat "$OUT/$log.log"; }
done
[ -f "$OUT/index_suite.log" ] && {
  echo "==== index_suite ===="; grep -i "summary\|variant\|---\| H " "$OUT/index_suite.log" | tail -n 40; }
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
