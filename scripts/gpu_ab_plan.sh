#!/usr/bin/env bash
# One device call of under 10 minutes (steps are cut at $DEADLINE s). Session 25's second plan: what-if builds of
# the NVFP4 index score kernel (scripts/make_whatif.sh, untracked trees under whatif/: `nodecode` no decode,
# `nomma` no wgmma, `loadonly` neither; results wrong, only the time counts) against HEAD, on the heavy NVFP4 H4
# cases: which of the loads, the decode and the MMA chain sets the per-SM page rate.
# Logs and JSON under $OUT (./gpu-out when unset); a summary with exit codes prints last.
# Rewrite it when the plan changes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MSA_CUDA_ARCHS=${MSA_CUDA_ARCHS:-9.0a}
VARIANTS=${VARIANTS:-"nodecode nomma loadonly"}
# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
# All builds at once (three CUDA translation units each).
for v in $VARIANTS; do
  (cd "whatif/$v" && MAX_JOBS=3 MSA_BUILD_DIR=build timeout 400 python3 setup.py -q build_ext --inplace) \
    > "$OUT/build_$v.log" 2>&1 &
done
if ! MAX_JOBS=4 step build bash scripts/install.sh; then tail -n 40 "$OUT/build.log"; printf '%s\n' "${summary[@]}"; exit 1; fi
wait
for v in $VARIANTS; do
  ls whatif/$v/msa_ops/_C*.so > /dev/null 2>&1 && summary+=("build_$v ok") || summary+=("build_$v FAILED")
done

args=(-v base)
for v in $VARIANTS; do ls whatif/$v/msa_ops/_C*.so > /dev/null 2>&1 && args+=(-v "$v:@root=whatif/$v"); done
step ab_index python3 bench/ab.py "${args[@]}" --repeat 1 --out "$OUT/ab" --json "$OUT/ab_index.json" -- \
  bench/bench_index_decode.py --no-corner --keys nvfp4 --heads 4 \
  --cases 8:100000,32:100000,8:200000,128:200000,8:50000,32:50000,8:10000,4:32000

echo "==== device ===="; cat "$OUT/device.txt"
[ -f "$OUT/ab_index.log" ] && { echo "==== ab_index ===="; tail -n 40 "$OUT/ab_index.log"; }
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
