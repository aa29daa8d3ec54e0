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
#   fp8mma    nof2fp, and the 32-row NVFP4 kernel's 8 fp16 wgmma m64n32k16 per slice become 4 E4M3 m64n32k32 on
#             the E4M3 bytes (no widening, half the tensor instructions): the speed of an FP8-MMA score pass
#   sbase     (or any other name) HEAD as it is, e.g. a base build that ignores the working tree's changes
# Sparse decode (the split kernel's plain loop, S = Q K^T by mma.sync fp16; run them with
# MSA_SPARSE_DECODE_SPLIT_FP8S=0 so that every case takes that loop):
#   snodecode the NVFP4 K and V code words go to the MMAs as they are (no table lookups, signs, pairing or widening)
#   snomma    no mma.sync: S and O take an XOR fold of the fragments (one LOP3 per MMA), S is then squeezed into
#             [0.5, 1) so that the softmax sees finite scores
#   sloadonly snodecode + snomma: the loads, the ring, the softmax, the merges and the stores only
#   svhoist   (results correct) the plain loop's 4 NVFP4 V scale bytes per chunk loaded right after the stage
#             lands, before the S MMAs, instead of inside value_fragments after the softmax's shuffles
#   svtables  (results correct) svhoist, and the 4 V table entries (8 registers) looked up there too
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
mma = """          msa::cuda::wgmma_m64k16<kN, false, false>(acc, frag[s], desc0 + 16 * s, s > 0);"""
nomma = """#pragma unroll
          for (int i = 0; i < 4; ++i) {  // WHATIF: no wgmma
            float& c = acc[(4 * s + i) % (kN / 2)];
            c = __uint_as_float(__float_as_uint(c) ^ frag[s][i]);
          }"""
wgmma = "csrc/cuda/index/index_wgmma_kernels.cuh"
for v in sys.argv[1:]:
    root = f"whatif/{v}"
    if v in ("nof2fp", "fp8mma"):
        sub(f"{root}/{wgmma}", widen, """          a[2 * s][kk] = lo;  // WHATIF: no F2FP
          a[2 * s][kk + 2] = lo;
          a[2 * s + 1][kk] = hi;
          a[2 * s + 1][kk + 2] = hi;""")
    if v == "fp8mma":
        sub(f"{root}/{wgmma}", mma, """          if constexpr (kN == 32 && kKeys == KeyKind::kNvfp4) {  // WHATIF: E4M3 m64n32k32
            if (s % 2 == 0) {
              const uint32_t f8[4] = {frag[s][0], frag[s][1], frag[s + 1][0], frag[s + 1][1]};
              msa::cuda::wgmma_m64n32k32_e4m3(acc, f8, desc0 + 8 * s, s > 0);
            }
          } else {
            msa::cuda::wgmma_m64k16<kN, false, false>(acc, frag[s], desc0 + 16 * s, s > 0);
          }""")
        sub(f"{root}/csrc/cuda/common/wgmma.cuh", "#undef MSA_WGMMA_SHAPE\n", """// WHATIF: E4M3 m64n32k32, A from registers.
__device__ __forceinline__ void wgmma_m64n32k32_e4m3(float (&d)[16], const uint32_t (&a)[4], uint64_t b_desc,
                                                     int accumulate) {
#if MSA_WGMMA
  asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %21, 0;\\n"
               "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 " MSA_WGMMA_D16
               ", {%16, %17, %18, %19}, %20, p, 1, 1;\\n}\\n"
               : MSA_WGMMA_OUT16(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
#else
  (void)d, (void)a, (void)b_desc, (void)accumulate;
  __trap();
#endif
}

#undef MSA_WGMMA_SHAPE
""")
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
split = "csrc/cuda/attention/sparse_decode_split_kernels.cuh"
kdecode = """      const uint2 t = table[s >> 1];
      uint32_t lo, hi;
      index::e2m1x8_to_e4m3x8(words[s], t.x, t.y, lo, hi);
      kb[2 * s][0] = e4m3_lo_to_f16x2(lo), kb[2 * s][1] = e4m3_hi_to_f16x2(lo);
      kb[2 * s + 1][0] = e4m3_lo_to_f16x2(hi), kb[2 * s + 1][1] = e4m3_hi_to_f16x2(hi);"""
knodecode = """      (void)table;  // WHATIF: no decode
      kb[2 * s][0] = kb[2 * s][1] = kb[2 * s + 1][0] = kb[2 * s + 1][1] = words[s];"""
vdecode = """        index::e2m1x8_to_e4m3x8(c.x, t.x, t.y, e[k][0], e[k][1]);
        index::e2m1x8_to_e4m3x8(c.y, t.x, t.y, e[k][2], e[k][3]);
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) pair_e4m3(e[0][w], e[1][w], vb, 4 * w, pair);"""
vnodecode = """        (void)t;  // WHATIF: no decode
        e[k][0] = e[k][1] = c.x, e[k][2] = e[k][3] = c.y;
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) {
#pragma unroll
        for (int m = 0; m < 4; ++m) vb[4 * w + m][pair] = e[m & 1][w];
      }"""
smma = """        msa::cuda::mma_m16n8k16<kBF16>(s[n], qa[k], kb[k][0], kb[k][1]);
        msa::cuda::mma_m16n8k16<kBF16>(s2, qa[k + 1], kb[k + 1][0], kb[k + 1][1]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] += s2[e];"""
snomma = """        // WHATIF: no mma.sync
        s[n][k / 2] = __uint_as_float(__float_as_uint(s[n][k / 2]) ^ kb[k][0] ^ kb[k][1]);
        s2[k / 2] = __uint_as_float(__float_as_uint(s2[k / 2]) ^ kb[k + 1][0] ^ kb[k + 1][1]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = __uint_as_float(((__float_as_uint(s[n][e]) ^ __float_as_uint(s2[e])) & 0x007FFFFFu) | 0x3F000000u);
      }"""
pvmma = """    for (int j = 0; j < 16; ++j) msa::cuda::mma_m16n8k16<kBF16>(o[j], pa, vb[j][0], vb[j][1]);
  }"""
pvnomma = """    for (int j = 0; j < 16; ++j) {  // WHATIF: no mma.sync
      o[j][j & 3] = __uint_as_float(__float_as_uint(o[j][j & 3]) ^ vb[j][0] ^ vb[j][1] ^ (j < 4 ? pa[j] : 0u));
    }
  }"""
vscale_old = """        const uint2 t = tables[scale_byte(stage + F::kVsOff + 8 * key + g8)];  // scale of dims 16 g8 + [0, 16)"""
vscale_new = """        const uint2 t = tables[vsb != nullptr ? vsb[i] : scale_byte(stage + F::kVsOff + 8 * key + g8)];  // WHATIF"""
vsig_old = """__device__ __forceinline__ void value_fragments(const uint8_t* stage, const uint2* tables, uint32_t (&vb)[16][2]) {"""
vsig_new = """__device__ __forceinline__ void value_fragments(const uint8_t* stage, const uint2* tables, uint32_t (&vb)[16][2],
                                                const uint32_t* vsb = nullptr) {  // WHATIF: hoisted V scale bytes"""
stage_old = """    const ChunkRef c = chunk_ref(slots, warp + kWarps * i);
    const uint8_t* stage = ring + (i % kStages) * F::kStageBytes;
"""
stage_new = """    const ChunkRef c = chunk_ref(slots, warp + kWarps * i);
    const uint8_t* stage = ring + (i % kStages) * F::kStageBytes;
    uint32_t vsb[4] = {0u, 0u, 0u, 0u};  // WHATIF: V scale bytes before the S MMAs
    if constexpr (kKv == KvKind::kNvfp4) {
#pragma unroll
      for (int vi = 0; vi < 4; ++vi) {
        vsb[vi] = scale_byte(stage + F::kVsOff + 8 * (2 * quad + (vi & 1) + 8 * (vi >> 1)) + g8);
      }
    }
"""
vcall_old = """    uint32_t vb[16][2];
    value_fragments<kKv>(stage, tables, vb);
#pragma unroll
    for (int j = 0; j < 16; ++j) msa::cuda::mma_m16n8k16<kBF16>(o[j], pa, vb[j][0], vb[j][1]);"""
vcall_new = """    uint32_t vb[16][2];
    value_fragments<kKv>(stage, tables, vb, kKv == KvKind::kNvfp4 ? vsb : nullptr);
#pragma unroll
    for (int j = 0; j < 16; ++j) msa::cuda::mma_m16n8k16<kBF16>(o[j], pa, vb[j][0], vb[j][1]);"""
for v in sys.argv[1:]:
    root = f"whatif/{v}"
    if v in ("svhoist", "svtables"):
        for old, new in ((vscale_old, vscale_new), (vsig_old, vsig_new), (stage_old, stage_new), (vcall_old, vcall_new)):
            sub(f"{root}/{split}", old, new)
    if v == "svtables":
        sub(f"{root}/{split}", vscale_new, """        const uint2 t = vtab != nullptr ? vtab[i] : tables[scale_byte(stage + F::kVsOff + 8 * key + g8)];  // WHATIF""")
        sub(f"{root}/{split}", "                                                const uint32_t* vsb = nullptr) {",
            "                                                const uint2* vtab = nullptr) {")
        sub(f"{root}/{split}", "        vsb[vi] = scale_byte(", "        vtab[vi] = tables[scale_byte(")
        sub(f"{root}/{split}", "+ 8 * (vi >> 1)) + g8);", "+ 8 * (vi >> 1)) + g8)];")
        sub(f"{root}/{split}", "    uint32_t vsb[4] = {0u, 0u, 0u, 0u};  // WHATIF", "    uint2 vtab[4] = {};  // WHATIF")
        sub(f"{root}/{split}", "kKv == KvKind::kNvfp4 ? vsb : nullptr);", "kKv == KvKind::kNvfp4 ? vtab : nullptr);")
    if v in ("snodecode", "sloadonly"):
        sub(f"{root}/{split}", kdecode, knodecode)
        sub(f"{root}/{split}", vdecode, vnodecode)
    if v in ("snomma", "sloadonly"):
        sub(f"{root}/{split}", smma, snomma)
        sub(f"{root}/{split}", pvmma, pvnomma)
PYEOF
echo "whatif/: $(ls whatif)"
