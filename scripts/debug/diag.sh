#!/usr/bin/env bash
# One-off diagnosis of the CUDA-path exception crash (kept for the record; see bench/NOTES.md).
cd "$(dirname "$0")/../.."
g++ --version | head -1; which g++ c++ cc
rm -rf build; MSA_DEBUG=1 MSA_CUDA_ARCHS=9.0a MAX_JOBS=16 bash scripts/install.sh > /tmp/b.log 2>&1 || tail -30 /tmp/b.log
grep -o "\-lcudart[_a-z]*\|cudart_static[^ ]*\|libstdc[^ ]*\|-static[^ ]*" build/build.ninja | sort | uniq -c
python3 -c "import torch;print(torch._C._GLIBCXX_USE_CXX11_ABI, torch.__config__.show()[:600])"
nm -DC msa_ops/_C*.so | grep -E "_M_insert|do_unshift"
ldd msa_ops/_C*.so | grep -E "stdc|cudart"
python3 scripts/debug/throw_check.py cpu 2>&1 | tail -3
cuda-gdb -batch -ex run -ex bt -ex "frame 2" -ex "info locals" --args python3 scripts/debug/throw_check.py cuda 2>&1 | grep -v "^\[New Thread\|^\[Thread\|Detaching\|warning: Cuda" | grep -E "^#|SIG|stdc|calling|raised" | head -30
rm -rf build
