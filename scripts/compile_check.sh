#!/usr/bin/env bash
# Compile every torch-free CUDA header on its own for each target (default sm_90a and sm_100a), so a
# header that stops compiling for one architecture fails here even if no .cu includes that path yet.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ARCHS=${MSA_CHECK_ARCHS:-"90a 100a"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for header in $(find csrc/cuda -name '*.cuh' | sort); do
  for arch in $ARCHS; do
    printf '#include "%s"\n__global__ void msa_compile_check_kernel() {}\n' "${header#csrc/}" > "$tmp/check.cu"
    if "$NVCC" -std=c++20 -c "$tmp/check.cu" -o "$tmp/check.o" -Icsrc -Icsrc/include \
        -gencode "arch=compute_${arch},code=sm_${arch}" 2> "$tmp/err.txt"; then
      echo "ok    sm_${arch}  ${header}"
    else
      echo "FAIL  sm_${arch}  ${header}"; cat "$tmp/err.txt"; status=1
    fi
  done
done
# The latency-trace harnesses (scripts/trace_*.cu) with their trace points compiled in.
for harness in scripts/trace_*.cu; do
  for arch in $ARCHS; do
    if "$NVCC" -std=c++20 -c "$harness" -o "$tmp/trace.o" -DMSA_KERNEL_TRACE -Icsrc -Icsrc/include \
        -gencode "arch=compute_${arch},code=sm_${arch}" 2> "$tmp/err.txt"; then
      echo "ok    sm_${arch}  ${harness} (MSA_KERNEL_TRACE)"
    else
      echo "FAIL  sm_${arch}  ${harness} (MSA_KERNEL_TRACE)"; cat "$tmp/err.txt"; status=1
    fi
  done
done
exit $status
