#!/usr/bin/env bash
# One-off diagnosis (2026-12-02): the CUDA-path exception crash, and quantize unroll variants.
cd "$(dirname "$0")/../.."
MSA_CUDA_ARCHS=9.0a MAX_JOBS=16 bash scripts/install.sh > /tmp/b.log 2>&1 || tail -30 /tmp/b.log
grep "LINK_LIBRARIES" build/build.ninja | cut -c1-400
echo "weak _M_insert copies in _C: $(nm -C msa_ops/_C*.so | grep -c 'W std::ostream& std::ostream::_M_insert')"
python3 scripts/debug/throw_check.py cuda 2>&1 | grep -E "raised|Fatal"
python3 -c "import torch, msa_ops; print([l.split()[-1] for l in open('/proc/self/maps') if 'stdc++' in l][:1])"
if ! python3 scripts/debug/throw_check.py cuda > /dev/null 2>&1; then
  echo "== retry with the system compiler"; rm -rf build
  CC=/usr/bin/gcc CXX=/usr/bin/g++ MSA_CUDA_ARCHS=9.0a MAX_JOBS=16 bash scripts/install.sh > /tmp/b2.log 2>&1 || tail -20 /tmp/b2.log
  echo "weak _M_insert copies in _C: $(nm -C msa_ops/_C*.so | grep -c 'W std::ostream& std::ostream::_M_insert')"
  python3 scripts/debug/throw_check.py cuda 2>&1 | grep -E "raised|Fatal"
fi
ncu --clock-control none -k regex:quantize --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats python3 scripts/profile_nvfp4.py quantize 2>&1 | grep -v "^==PROF==" | grep -E "Throughput|Duration|Occupancy|Registers|Stall|Warp Cycles|Issued|Block Limit|Eligible|Active Warps" | head -40
for v in "1 2 1" "1 2 2" "1 2 4" "1 2 8" "1 1 2" "1 1 4" "0 2 4" "0 1 4"; do set -- $v
  echo "== quantize half2 $1 parts $2 unroll $3: $(MSA_NVFP4_QUANTIZE_HALF2=$1 MSA_NVFP4_QUANTIZE_PARTS=$2 MSA_NVFP4_QUANTIZE_UNROLL=$3 python3 bench/bench_nvfp4.py --sizes 1G --ops quantize 2>&1 | grep -E '^quantize')"
done
