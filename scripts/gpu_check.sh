#!/usr/bin/env bash
# On a CUDA machine: build, run the CUDA tests (and compute-sanitizer memcheck over them), the demo and
# the quick benchmarks; logs and JSON go to $OUT (./gpu-out when unset); a short summary prints last.
#   BENCH=quick|full|none (default quick)   SANITIZE=1|0 (default 1)   MSA_CUDA_ARCHS (default 9.0a)
#   PROFILE=1: also ncu (speed of light, occupancy, warp states) of one launch of each main kernel on its
#   heaviest quick case (ncu_*.log); about a minute more.
#   TRACE=1: also build the latency-trace harnesses (scripts/trace_*.cu) and run them on the low-latency cases
#   that miss the 12 µs bar and on the indexer's heaviest-weighted official case, B8 N100K (trace_*.log); about
#   half a minute more.
#   BUNDLE=1: leave only gpu-check.tgz (every log and JSON) and summary.txt under $OUT, for callers that fetch a
#   few files (the device tool brings back at most 8).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
BENCH=${BENCH:-quick}
SANITIZE=${SANITIZE:-1}
PROFILE=${PROFILE:-0}
TRACE=${TRACE:-0}
declare -a summary

step() {  # step NAME LOGFILE COMMAND...
  local name=$1 log=$2; shift 2
  local t0=$(date +%s)
  "$@" > "$OUT/$log" 2>&1
  local rc=$?
  summary+=("$(printf '%-22s %-5s %4ss  %s' "$name" "$([ $rc = 0 ] && echo ok || echo FAIL)" $(( $(date +%s) - t0 )) "$(tail -n 1 "$OUT/$log")")")
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/device.txt" 2>&1

export MSA_CUDA_ARCHS=${MSA_CUDA_ARCHS:-9.0a} MAX_JOBS=${MAX_JOBS:-16}
if ! step build build.log bash scripts/install.sh; then
  tail -n 60 "$OUT/build.log"; printf '%s\n' "${summary[@]}"; exit 1
fi
step tests tests.log python3 -m pytest tests -q -p no:logging -x
if [ "$SANITIZE" = 1 ] && command -v compute-sanitizer > /dev/null; then
  step memcheck memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 --target-processes all \
    python3 -m pytest tests -q -p no:logging -m cuda -k "not compile and not large and not knob"
fi
step demo demo.log python3 -m msa_ops.demo
case "$BENCH" in
  quick) step bench_nvfp4 bench_nvfp4.log python3 bench/bench_nvfp4.py --quick --json "$OUT/nvfp4.json"
         step bench_index bench_index.log python3 bench/bench_index_decode.py --quick --json "$OUT/index_decode.json"
         step bench_sparse bench_sparse.log python3 bench/bench_sparse_decode.py --quick --json "$OUT/sparse_decode.json" ;;
  full)  step bench_nvfp4 bench_nvfp4.log python3 bench/bench_nvfp4.py --json "$OUT/nvfp4.json" --plot "$OUT/nvfp4.png"
         step bench_index bench_index.log python3 bench/bench_index_decode.py --json "$OUT/index_decode.json"
         step bench_sparse bench_sparse.log python3 bench/bench_sparse_decode.py --json "$OUT/sparse_decode.json" ;;
esac

if [ "$PROFILE" = 1 ] && command -v ncu > /dev/null; then
  ncu_one() {  # ncu_one NAME KERNEL_REGEX COMMAND...: one launch (after 2 warm-up launches) of the kernel
    local name=$1 regex=$2; shift 2
    step "ncu_$name" "ncu_$name.log" ncu --clock-control none -k "regex:$regex" --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
      --section LaunchStats --section SourceCounters "$@"
  }
  ncu_one index_scores index_scores python3 bench/bench_index_decode.py --keys nvfp4 --heads 4 --cases 128:200000 --no-corner
  ncu_one topk_select topk_select python3 bench/bench_index_decode.py --keys nvfp4 --heads 4 --cases 128:200000 --no-corner
  ncu_one quantize nvfp4_quantize python3 bench/bench_nvfp4.py --ops quantize --sizes 1GiB
  ncu_one sparse_decode sparse_decode python3 bench/bench_sparse_decode.py --kv nvfp4 --geometry 64/4 --cases 1:32000
  ncu_one sparse_decode_fp8_large sparse_decode python3 bench/bench_sparse_decode.py --kv fp8 --geometry 64/4 \
    --cases 128:200000 --no-sdpa
fi

if [ "$TRACE" = 1 ] && command -v nvcc > /dev/null; then
  trace_one() {  # trace_one HARNESS ARGS...: one timeline per call, built once per harness
    local harness=$1; shift
    local bin="$OUT/$harness.bin" log="$OUT/$harness-$(echo "$*" | tr ' /' '__').log"
    [ -x "$bin" ] || nvcc -std=c++20 -O3 -DMSA_KERNEL_TRACE -Icsrc -Icsrc/include \
      -gencode arch=compute_90a,code=sm_90a "scripts/$harness.cu" -o "$bin" > "$OUT/$harness.build.log" 2>&1
    step "$harness $*" "$(basename "$log")" "$bin" "$@"
  }
  trace_one trace_index 4 32000 nvfp4 4
  trace_one trace_index 4 32000 fp8 4
  trace_one trace_index 8 100000 nvfp4 4
  trace_one trace_sparse_decode 1 32000 nvfp4 64/4
  trace_one trace_sparse_decode 4 32000 nvfp4 64/4
  trace_one trace_sparse_decode 4 32000 bf16 16/1
  rm -f "$OUT"/trace_*.bin
fi

echo "==== device ===="; cat "$OUT/device.txt"
for log in tests demo bench_nvfp4 bench_index bench_sparse; do
  [ -f "$OUT/$log.log" ] && { echo "==== $log (tail) ===="; tail -n 25 "$OUT/$log.log"; }
done
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
if [ "${BUNDLE:-0}" = 1 ]; then
  (cd "$OUT" && find . -maxdepth 1 -type f ! -name summary.txt ! -name gpu-check.tgz -printf '%P\n' \
     | tar czf gpu-check.tgz -T - && find . -maxdepth 1 -type f ! -name summary.txt ! -name gpu-check.tgz -delete)
fi
