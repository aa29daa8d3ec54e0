#!/usr/bin/env bash
# The next GPU session's first device call, as written at the end of the last session without one (bench/NOTES.md,
# "Next GPU session", item 1): build, the CUDA tests of the unrun code, memcheck, then the A/Bs, in one call of
# under 10 minutes (steps are cut at $DEADLINE s). Logs and JSON under $OUT (./gpu-out when unset); a summary
# with exit codes prints last.
# Rewrite it when the plan changes; `STAGE=tests|bench` runs only that half.
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

step pipe_rates bash -c "nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o '$OUT/pipe_rates' \
  scripts/pipe_rates.cu && '$OUT/pipe_rates' && rm -f '$OUT/pipe_rates'"
if [ "$STAGE" != bench ]; then
  step tests timeout 240 python3 -m pytest -q -p no:logging -m cuda tests/test_index_decode.py tests/test_sparse_decode.py
fi

# Older code to compare against: a `git archive` tarball at $BASELINE (default ./baseline.tar, made before the call:
# `git archive -o baseline.tar be89312`, the last commit before v10 / v2.11), built in place in its own folder.
BASELINE=${BASELINE:-baseline.tar}
base_root=""
if [ "$STAGE" != tests ] && [ -f "$BASELINE" ]; then
  base_root=$PWD/.baseline  # git-ignored: a warm machine keeps its build for the next call
  [ -f "$base_root/setup.py" ] || { mkdir -p "$base_root" && tar -xf "$BASELINE" -C "$base_root"; }
  step build_base bash -c "cd '$base_root' && python3 setup.py -q build_ext --inplace" || base_root=""
fi

if [ "$STAGE" != tests ]; then
  # Indexer, heaviest cases first (the bar's weight): the baseline build (v9) against v10 (integer-pipe trims,
  # default) and v11's unrun knobs (bench/NOTES.md indexer v11): each slice's k16-steps in 2 / 4 commit groups,
  # 2 groups + the next slice's first group decoded early, 5 CTAs per SM (NVFP4, <= 32 rows).
  base_variant=()
  [ -n "$base_root" ] && base_variant=(-v base:@root="$base_root")
  step ab_index_groups python3 bench/ab.py --out "$OUT/ab_index_groups" --json "$OUT/ab_index_groups.json" \
    "${base_variant[@]}" -v v10:MSA_INDEX_WGMMA_GROUPS=1 -v g2:MSA_INDEX_WGMMA_GROUPS=2 \
    -v g4:MSA_INDEX_WGMMA_GROUPS=4 -v g2carry:MSA_INDEX_WGMMA_CARRY=1 -v ctas5:MSA_INDEX_WGMMA_CTAS=5 \
    -- bench/bench_index_decode.py --no-corner --heads 4,1 --cases 8:100000,32:100000,128:200000
  if [ -n "$base_root" ]; then
    step ab_sparse_v211 python3 bench/ab.py --out "$OUT/ab_sparse_v211" --json "$OUT/ab_sparse_v211.json" \
      -v base:@root="$base_root" -v v211 -- bench/bench_sparse_decode.py --no-sdpa --kv nvfp4 --geometry 64/4 \
      --cases 4:32000,8:10000,8:100000,8:200000,32:5000,32:100000,128:5000
  fi
  # Split kernel S: fp16 / FP8 waiting at once / FP8 pipelined (v2.10 item 4), the union pass off.
  cases=1:32000,4:32000,8:10000,8:100000,8:200000,32:5000,32:10000,32:100000,64:5000,64:10000,64:50000,128:5000,128:10000
  step ab_split_fp8s python3 bench/ab.py --out "$OUT/ab_split_fp8s" --json "$OUT/ab_split_fp8s.json" \
    -v fp16s:MSA_SPARSE_DECODE_UNION=0,MSA_SPARSE_DECODE_SPLIT_FP8S=0 \
    -v fp8s:MSA_SPARSE_DECODE_UNION=0,MSA_SPARSE_DECODE_SPLIT_FP8S=1,MSA_SPARSE_DECODE_SPLIT_FP8S_PIPE=0 \
    -v pipe:MSA_SPARSE_DECODE_UNION=0,MSA_SPARSE_DECODE_SPLIT_FP8S=1,MSA_SPARSE_DECODE_SPLIT_FP8S_PIPE=1 \
    -- bench/bench_sparse_decode.py --no-sdpa --kv nvfp4,fp8 --geometry 64/4,16/1 --cases "$cases"
  # B8 at large N with FP8 S at 2 splits (16 warps per SM) against the rule (item 2 of the plan).
  step ab_b8_splits python3 bench/ab.py --out "$OUT/ab_b8_splits" --json "$OUT/ab_b8_splits.json" \
    -v rule -v fp8s_s2:MSA_SPARSE_DECODE_SPLIT_FP8S=1,MSA_SPARSE_DECODE_SPLITS=2 \
    -v pipe_s2:MSA_SPARSE_DECODE_SPLIT_FP8S=1,MSA_SPARSE_DECODE_SPLIT_FP8S_PIPE=1,MSA_SPARSE_DECODE_SPLITS=2 \
    -- bench/bench_sparse_decode.py --no-sdpa --kv nvfp4,fp8 --geometry 64/4 --cases 8:50000,8:100000,8:200000
  # The union widths with FP8 S (item 3): forced union against the split kernel's rule.
  step ab_union python3 bench/ab.py --out "$OUT/ab_union" --json "$OUT/ab_union.json" \
    -v split:MSA_SPARSE_DECODE_UNION=0 -v union:MSA_SPARSE_DECODE_UNION=1 \
    -- bench/bench_sparse_decode.py --no-sdpa --kv nvfp4,fp8 --geometry 64/4 \
    --cases 32:5000,32:10000,64:5000,64:10000,128:5000,128:10000
  # The full index suite under the defaults (the bar's numbers; against v9's figures of record), last: the longest.
  step index_suite python3 bench/bench_index_decode.py --no-corner --json "$OUT/index_suite.json"
fi

if [ "$STAGE" != bench ]; then  # last: the slowest step, and only a check of code already tested above
  step memcheck timeout 200 compute-sanitizer --tool memcheck --error-exitcode 1 --target-processes all \
    python3 -m pytest -q -p no:logging -m cuda tests/test_sparse_decode.py tests/test_index_decode.py \
    -k "(fp8s and not union) or (test_index and not large and not compile)"
fi

echo "==== device ===="; cat "$OUT/device.txt"; cat "$OUT/pipe_rates.log"
for log in tests memcheck; do [ -f "$OUT/$log.log" ] && { echo "==== $log (tail) ===="; tail -n 8 "$OUT/$log.log"; }; done
for log in ab_index_groups ab_sparse_v211 ab_split_fp8s ab_b8_splits ab_union; do
  [ -f "$OUT/$log.log" ] && { echo "==== $log ===="; cat "$OUT/$log.log"; }
done
[ -f "$OUT/index_suite.log" ] && {
  echo "==== index_suite ===="; grep -i "summary\|variant\|---\| H " "$OUT/index_suite.log" | tail -n 40; }
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
