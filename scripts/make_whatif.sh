#!/usr/bin/env bash
# make_whatif.sh [VARIANT...]: what-if source trees for scripts/gpu_ab_plan.sh under whatif/ (untracked; delete
# them after the device call). Each is `git archive` of HEAD (fedb: of fedb5e4) with edits to the wgmma index score
# kernel that make its results wrong but show what the removed work costs. Default: nodecode nomma loadonly.
#   fedb      fedb5e4 as it is (the score kernel before the out-of-range fix of 21451cb)
#   nof2fp    the four F2FP widenings per 8 codes skipped (E4M3 bytes go to the MMA as if fp16)
#   nosign    the sign gather skipped (magnitudes only: 5 integer instructions less per 8 codes)
#   nodecode  the raw code words go to the MMA (no table lookups, signs or widening)
#   nomma     no wgmma: each slice's fragments are XOR-folded into the accumulators (32 LOP3 per slice), the
#             fences, commits and waits stay
#   loadonly  nodecode + nomma: the loads, the ring, the per-slice max and the per-page combine and store only
set -euo pipefail
cd "$(dirname "$0")/.."
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(nodecode nomma loadonly)
rm -rf whatif
for v in "${variants[@]}"; do
  mkdir -p "whatif/$v"
  if [ "$v" = fedb ]; then git archive fedb5e4 | tar -x -C whatif/fedb; else git archive HEAD | tar -x -C "whatif/$v"; fi
done
python3 - "${variants[@]}" <<'PYEOF'
import pathlib
import sys

def sub(path, old, new):
    p = pathlib.Path(path)
    s = p.read_text()
    assert s.count(old) == 1, (path, old)
    p.write_text(s.replace(old, new))

widen = """          a[2 * s][kk] = e4m3_lo_to_f16x2(lo);
          a[2 * s][kk + 2] = e4m3_hi_to_f16x2(lo);
          a[2 * s + 1][kk] = e4m3_lo_to_f16x2(hi);
          a[2 * s + 1][kk + 2] = e4m3_hi_to_f16x2(hi);"""
nodecode = """          (void)t;  // WHATIF: no decode at all
          a[2 * s][kk] = codes[s];
          a[2 * s][kk + 2] = codes[s];
          a[2 * s + 1][kk] = codes[s];
          a[2 * s + 1][kk + 2] = codes[s];"""
mma = """            msa::cuda::wgmma_m64k16<kN, false, false>(acc, frag[s], desc0 + 16 * s, s > 0);"""
nomma = """#pragma unroll
            for (int i = 0; i < 4; ++i) {  // WHATIF: no wgmma
              float& c = acc[(4 * s + i) % (kN / 2)];
              c = __uint_as_float(__float_as_uint(c) ^ frag[s][i]);
            }"""
wgmma = "csrc/cuda/index/index_wgmma_kernels.cuh"
for v in sys.argv[1:]:
    root = f"whatif/{v}"
    if v == "nof2fp":
        sub(f"{root}/{wgmma}", widen, """          a[2 * s][kk] = lo;  // WHATIF: no F2FP
          a[2 * s][kk + 2] = lo;
          a[2 * s + 1][kk] = hi;
          a[2 * s + 1][kk + 2] = hi;""")
    if v in ("nodecode", "loadonly"):
        sub(f"{root}/{wgmma}", widen, nodecode)
    if v in ("nomma", "loadonly"):
        sub(f"{root}/{wgmma}", mma, nomma)
    if v == "nosign":
        sub(f"{root}/csrc/cuda/index/index_stream_kernels.cuh",
            """  out_lo = __byte_perm(lo, hi, w & 0x7777u) | (__byte_perm(w, w4, 0x1504u) & 0x80808080u);
  out_hi = __byte_perm(lo, hi, w_hi & 0x7777u) | (__byte_perm(w, w4, 0x3726u) & 0x80808080u);""",
            """  (void)w4;  // WHATIF: no signs
  out_lo = __byte_perm(lo, hi, w & 0x7777u);
  out_hi = __byte_perm(lo, hi, w_hi & 0x7777u);""")
PYEOF
echo "whatif/: $(ls whatif)"
