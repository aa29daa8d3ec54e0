#!/usr/bin/env bash
# The next GPU session's second device call (bench/NOTES.md, "Next GPU session", item 2): ncu of the two hot
# loops, to learn which pipe is full and what the warps wait on. One launch of each kernel (after 2 warm-up
# launches), clocks left alone; logs under $OUT (./gpu-out when unset), a summary with exit codes prints last.
# `SUITES=1` adds the full index suite and both sparse suites (JSON with per-case rows) after the profiles;
# `SPARSE_ONLY=1` profiles only the sparse split kernel.
# Builds first (a warm machine keeps the first call's build). `KNOBS="MSA_INDEX_FLAT_BALANCE=0 ..."` profiles the
# index score kernel once more under those settings (e.g. the best variant of the first call's ab_index_groups).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MSA_CUDA_ARCHS=${MSA_CUDA_ARCHS:-9.0a} MAX_JOBS=${MAX_JOBS:-16}
# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh
ncu_one() {  # ncu_one NAME KERNEL_REGEX COMMAND...
  local name=$1 regex=$2; shift 2
  step "ncu_$name" ncu --clock-control none -k "regex:$regex" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section LaunchStats --section SourceCounters "$@"
}

if ! step build bash scripts/install.sh; then tail -n 40 "$OUT/build.log"; printf '%s\n' "${summary[@]}"; exit 1; fi
index=(python3 bench/bench_index_decode.py --keys nvfp4 --heads 4 --no-corner --cases)
if [ -z "${SPARSE_ONLY:-}" ]; then  # SPARSE_ONLY=1: skip the index profiles (session 20 has them)
ncu_one index_b128_n200k index_scores "${index[@]}" 128:200000
ncu_one index_b8_n100k index_scores "${index[@]}" 8:100000
fi
if [ -n "${KNOBS:-}" ]; then
  ncu_one index_b128_n200k_knobs index_scores env $KNOBS "${index[@]}" 128:200000
fi
ncu_one sparse_split_b8_n100k sparse_decode_split python3 bench/bench_sparse_decode.py --kv nvfp4 --geometry 64/4 \
  --no-sdpa --cases 8:100000
if [ -n "${SUITES:-}" ]; then  # SUITES=1: then the full suites under the defaults (figures of record, per-case rows)
  step index_suite python3 bench/bench_index_decode.py --no-corner --json "$OUT/index_suite.json"
  step sparse_suite python3 bench/bench_sparse_decode.py --no-sdpa --geometry 64/4,16/1 --json "$OUT/sparse_suite.json"
fi

for log in "$OUT"/ncu_*.log; do
  echo "==== $(basename "$log") ===="
  grep -E "index_scores|sparse_decode_split|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Issued Ipc|\
Eligible Warps|Active Warps Per|No Eligible|Warp Cycles Per Issued|Executed Ipc|Pipe|ALU|FMA|Tensor|Stall" "$log" \
    | head -n 60
done
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
