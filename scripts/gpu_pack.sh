#!/usr/bin/env bash
# gpu_pack.sh SCRIPT [ARGS...]: run one scripts/gpu_*_plan.sh with its logs in a scratch folder, then pack that
# folder into $OUT/results.tgz (the device tool returns at most 8 files; the plans write more). The plan's own
# output (its summary last) goes to stdout as usual. Locally, unpack with `tar xzf results.tgz`.
set -uo pipefail
cd "$(dirname "$0")/.."
final=${OUT:-./gpu-out}
mkdir -p "$final"
work=$(mktemp -d /tmp/gpu-run.XXXXXX)
OUT=$work bash "$@"
rc=$?
tar czf "$final/results.tgz" -C "$work" .
exit $rc
