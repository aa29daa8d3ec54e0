#!/usr/bin/env bash
# One-off diagnosis of the CUDA-path exception crash: where does a static libstdc++ come from?
cd "$(dirname "$0")/../.."
env | grep -i -E "flags|^CC=|^CXX=|LD_" ; g++ --version | head -1; cmake --version | head -1
MSA_CUDA_ARCHS=9.0a MAX_JOBS=16 bash scripts/install.sh > /tmp/b.log 2>&1 || tail -30 /tmp/b.log
grep "msa_ops:" /tmp/b.log | head
grep -B2 -A6 "^build _C" build/build.ninja | grep -E "LINK_FLAGS|LINK_LIBRARIES|FLAGS" | cut -c1-600
nm -C msa_ops/_C*.so | grep -c "W std::ostream& std::ostream::_M_insert"
python3 scripts/debug/throw_check.py cuda 2>&1 | tail -3
