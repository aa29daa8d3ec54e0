#!/usr/bin/env bash
# make_whatif.sh: what-if source trees for scripts/gpu_ab_plan.sh under whatif/ (untracked; delete them after
# the device call). Each is `git archive` of a commit, some with one edit to the NVFP4 index decode that makes
# its results wrong but shows what the removed instructions cost:
#   fedb      fedb5e4 as it is (the score kernel before the out-of-range fix of 21451cb)
#   nof2fp    HEAD, the four F2FP widenings per 8 codes skipped (E4M3 bytes go to the MMA as if fp16)
#   nosign    HEAD, the sign gather skipped (magnitudes only: 5 integer instructions less per 8 codes)
#   nodecode  HEAD, the raw code words go to the MMA (no table lookups, signs or widening)
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf whatif
for v in fedb nof2fp nosign nodecode; do mkdir -p "whatif/$v"; done
git archive fedb5e4 | tar -x -C whatif/fedb
for v in nof2fp nosign nodecode; do git archive HEAD | tar -x -C "whatif/$v"; done
python3 - <<'PYEOF'
import pathlib

def sub(path, old, new):
    p = pathlib.Path(path)
    s = p.read_text()
    assert s.count(old) == 1, (path, old)
    p.write_text(s.replace(old, new))

widen = """          a[2 * s][kk] = e4m3_lo_to_f16x2(lo);
          a[2 * s][kk + 2] = e4m3_hi_to_f16x2(lo);
          a[2 * s + 1][kk] = e4m3_lo_to_f16x2(hi);
          a[2 * s + 1][kk + 2] = e4m3_hi_to_f16x2(hi);"""
wgmma = "csrc/cuda/index/index_wgmma_kernels.cuh"
sub(f"whatif/nof2fp/{wgmma}", widen, """          a[2 * s][kk] = lo;  // WHATIF: no F2FP
          a[2 * s][kk + 2] = lo;
          a[2 * s + 1][kk] = hi;
          a[2 * s + 1][kk + 2] = hi;""")
sub(f"whatif/nodecode/{wgmma}", widen, """          (void)t;  // WHATIF: no decode at all
          a[2 * s][kk] = codes[s];
          a[2 * s][kk + 2] = codes[s];
          a[2 * s + 1][kk] = codes[s];
          a[2 * s + 1][kk + 2] = codes[s];""")
sub("whatif/nosign/csrc/cuda/index/index_stream_kernels.cuh",
    """  out_lo = __byte_perm(lo, hi, w & 0x7777u) | (__byte_perm(w, w4, 0x1504u) & 0x80808080u);
  out_hi = __byte_perm(lo, hi, w_hi & 0x7777u) | (__byte_perm(w, w4, 0x3726u) & 0x80808080u);""",
    """  (void)w4;  // WHATIF: no signs
  out_lo = __byte_perm(lo, hi, w & 0x7777u);
  out_hi = __byte_perm(lo, hi, w_hi & 0x7777u);""")
PYEOF
echo "whatif/: $(ls whatif)"
