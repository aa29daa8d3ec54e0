# Sourced by the scripts/gpu_*_plan.sh device-call scripts (not run on its own): the deadline-cut step runner and
# the summary it fills. Needs $OUT; $DEADLINE (default 570) is counted in seconds from the sourcing.
declare -a summary
T0=$(date +%s) DEADLINE=${DEADLINE:-570}  # seconds from the start: steps are cut there so the summary still prints
step() {  # step NAME COMMAND...: output to $OUT/NAME.log, killed at the deadline
  local name=$1; shift
  local t0=$(date +%s) left=$(( DEADLINE - $(date +%s) + T0 ))
  if [ "$left" -le 5 ]; then summary+=("$(printf '%-22s skipped (deadline)' "$name")"); return 1; fi
  timeout "$left" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" $(( $(date +%s) - t0 )) "$(tail -n 1 "$OUT/$name.log")")")
  return $rc
}
