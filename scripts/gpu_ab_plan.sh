#!/usr/bin/env bash
# One device call of under 10 minutes (steps are cut at $DEADLINE s). Session 28's plan.
#   PART=1: what-if builds of the sparse-decode split kernel's plain loop (scripts/make_whatif.sh snodecode snomma
#     sloadonly; untracked trees under whatif/, results wrong on purpose, only the time counts) against HEAD on
#     one-wave cases, with FP8 S off and the warps / split count of each case pinned to what the default picks (the
#     what-if kernels use fewer registers, and the plan reads occupancy); then split-count knobs at 16/1 B8 (64
#     units: the worst weighted cases of the 16/1 suites) and BF16 64/4 B8 at large N (bimodal in session 27).
#   PART=2 (session 29): the index select tests and an A/B of a session-28 knob since removed; `SUITES=1`: the full
#   suites. Kept as a template; the A/B step now compares the defaults with themselves.
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
S=MSA_SPARSE_DECODE
AB=whatif/sbase/bench/ab.py  # PART=1: the working tree has no build; sbase's msa_ops drives the A/B
logs=()
if [ "${PART:-1}" = 3 ]; then
# Session 29: the V-scale hoists of the NVFP4 split loop (make_whatif.sh sbase svhoist svtables; results correct,
# so the benchmark's output check holds) against HEAD, defaults (no pins: the registers moved by 2 only).
VARIANTS=${VARIANTS:-"svhoist svtables"}
for v in sbase $VARIANTS; do
  (cd "whatif/$v" && MAX_JOBS=5 MSA_BUILD_DIR=build timeout 300 python3 setup.py -q build_ext --inplace) \
    > "$OUT/build_$v.log" 2>&1 &
done
wait
args=(-v "base:@root=whatif/sbase")
for v in sbase $VARIANTS; do
  if ls whatif/$v/msa_ops/_C*.so > /dev/null 2>&1; then summary+=("build_$v ok"); else summary+=("build_$v FAILED"); fi
done
for v in $VARIANTS; do ls whatif/$v/msa_ops/_C*.so > /dev/null 2>&1 && args+=(-v "$v:@root=whatif/$v"); done
logs+=(ab_vhoist ab_vhoist_16)
step ab_vhoist python3 $AB "${args[@]}" --repeat 1 --out "$OUT/ab_vhoist" --json "$OUT/ab_vhoist.json" -- \
  bench/bench_sparse_decode.py --no-sdpa --copy-mib 512 --kv nvfp4 --geometry 64/4 \
  --cases ${CASES64:-8:100000,8:10000,32:100000,4:32000,1:32000}
step ab_vhoist_16 python3 $AB "${args[@]}" --repeat 1 --out "$OUT/ab_vhoist_16" --json "$OUT/ab_vhoist_16.json" -- \
  bench/bench_sparse_decode.py --no-sdpa --copy-mib 512 --kv nvfp4 --geometry 16/1 --cases ${CASES16:-8:100000,32:100000}
elif [ "${PART:-1}" = 1 ]; then
# The base is whatif/sbase (HEAD as archived, no edits), not the working tree, which may hold unfinished work.
VARIANTS=${VARIANTS:-"snodecode snomma sloadonly"}
for v in sbase $VARIANTS; do  # all builds at once (three CUDA translation units each)
  (cd "whatif/$v" && MAX_JOBS=3 MSA_BUILD_DIR=build timeout 400 python3 setup.py -q build_ext --inplace) \
    > "$OUT/build_$v.log" 2>&1 &
done
wait
for v in sbase $VARIANTS; do
  ls whatif/$v/msa_ops/_C*.so > /dev/null 2>&1 && summary+=("build_$v ok") || summary+=("build_$v FAILED")
done
# Each group pins the warps and split count the default plan picks for its cases (sparse_decode.cu).
wi() {  # wi NAME WARPS SPLITS BENCH-ARGS...
  local name=$1 warps=$2 splits=$3; shift 3
  local pin="${S}_SPLIT_FP8S=0,${S}_WARPS=$warps,${S}_SPLITS=$splits"
  local args=(-v "base:$pin,@root=whatif/sbase")
  for v in $VARIANTS; do
    ls whatif/$v/msa_ops/_C*.so > /dev/null 2>&1 && args+=(-v "$v:$pin,@root=whatif/$v")
  done
  logs+=("$name")
  step "$name" python3 $AB "${args[@]}" --repeat 1 --out "$OUT/$name" --json "$OUT/$name.json" -- \
    bench/bench_sparse_decode.py --no-sdpa "$@"
}
C="--copy-mib 512"  # the ratios matter here, not the roofline
wi wi_6w1s 6 1 $C --kv nvfp4,fp8 --geometry 64/4 --cases 8:100000,8:10000
wi wi_4w4s 4 4 $C --kv nvfp4,fp8 --geometry 16/1 --cases 8:100000
logs+=(ab_16_b8 ab_bf16_b8)
B=@root=whatif/sbase
step ab_16_b8 python3 $AB -v base:$B -v fp8s:${S}_SPLIT_FP8S=1,$B -v s8:${S}_SPLITS=8,$B -v w6:${S}_WARPS=6,$B \
  --repeat 1 --out "$OUT/ab_16_b8" --json "$OUT/ab_16_b8.json" -- \
  bench/bench_sparse_decode.py --no-sdpa $C --kv nvfp4,fp8 --geometry 16/1 --cases 8:100000,8:50000
wi wi_6w2s 6 2 $C --kv nvfp4 --geometry 64/4 --cases 4:32000
step ab_bf16_b8 python3 $AB -v base:$B -v s2:${S}_SPLITS=2,$B --repeat 2 \
  --out "$OUT/ab_bf16_b8" --json "$OUT/ab_bf16_b8.json" -- \
  bench/bench_sparse_decode.py --no-sdpa $C --kv bf16 --geometry 64/4 --cases 8:100000,8:200000
wi wi_4w8s 4 8 $C --kv nvfp4 --geometry 64/4 --cases 1:32000
wi wi_6w1s_16 6 1 $C --kv nvfp4 --geometry 16/1 --cases 32:100000
else
if ! MAX_JOBS=16 step build bash scripts/install.sh; then tail -n 40 "$OUT/build.log"; printf '%s\n' "${summary[@]}"; exit 1; fi
logs=(tests_select ab_select suite_sparse suite_index)
step tests_select python3 -m pytest tests/test_index_decode.py -q -p no:logging -k "select or long_context"
step ab_select python3 bench/ab.py -v base -v again \
  --repeat 1 --out "$OUT/ab_select" --json "$OUT/ab_select.json" -- \
  bench/bench_index_decode.py --no-corner --keys nvfp4 --heads 4 \
  --cases 8:100000,8:200000,8:50000,32:100000,32:200000,128:200000,4:32000,4:8000,1:32000
if [ -n "${SUITES:-}" ]; then
step suite_sparse python3 bench/bench_sparse_decode.py --no-sdpa --kv nvfp4,fp8,bf16 --geometry 64/4,16/1 \
  --json "$OUT/sparse_suite.json"
step suite_index python3 bench/bench_index_decode.py --no-corner --json "$OUT/index_suite.json"
fi
fi

echo "==== device ===="; cat "$OUT/device.txt"
for f in "${logs[@]}"; do [ -f "$OUT/$f.log" ] && { echo "==== $f ===="; tail -n 14 "$OUT/$f.log"; }; done
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
