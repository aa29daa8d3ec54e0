#!/usr/bin/env python3
"""Static SASS instruction mix of the loops of a kernel (no GPU needed).

Compiles one .cu for sm_90a (or reads a cubin), disassembles it with cuobjdump and prints, for each loop of
the kernels whose demangled name contains PATTERN (a backward branch and its target bound a loop; nested
loops are listed separately), the instruction count per opcode and per issue pipe. Static counts include
both sides of every branch inside the loop, so they bound the dynamic work from above; compare two builds
with --diff to see what a source change did to the hot loop before spending device time on it.

The CUDA toolkit installed here has no cuobjdump; the PyPI wheels carry it:
    pip download --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm -d /tmp/w
    python3 -m zipfile -e /tmp/w/nvidia_cuda_cuobjdump-*.whl /tmp/sasstools
    export PATH=/tmp/sasstools/nvidia/cu13/bin:$PATH   (chmod +x the binary first)

Usage:
    python3 scripts/sass_mix.py csrc/cuda/index/index_decode.cu "index_scores_wgmma_kernel<(msa::index::KeyKind)0, 32, true>"
    python3 scripts/sass_mix.py --cubin a.cubin PATTERN --save a.json ; ... --diff a.json
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Issue pipes as Hopper's profiler names them (approximate: the opcode family decides).
PIPES = {
    "alu": ("LOP3", "PRMT", "SHF", "IADD3", "ISETP", "FMNMX", "SEL", "FSEL", "LEA", "FLO", "F2FP", "VIADDMNMX",
            "IMNMX", "PLOP3", "FSETP", "LOP", "SHL", "SHR", "BMSK", "VIADD", "F2I", "I2F", "POPC"),
    "fma": ("FFMA", "FMUL", "FADD", "IMAD", "HFMA2", "HMUL2", "HADD2", "IMUL", "FMNMX2"),
    "xu": ("MUFU",),
    "tensor": ("HMMA", "HGMMA", "QGMMA", "IMMA", "WARPGROUP"),
    "lsu": ("LDS", "STS", "LDG", "STG", "LDGSTS", "LDSM", "STSM", "SHFL", "ATOM", "RED", "LD", "ST", "LDC",
            "MOVM"),
    "uniform": ("U", "S2UR", "R2UR"),
}


def pipe_of(op: str) -> str:
    base = op.split(".")[0]
    if base.startswith("U") or base in ("S2UR", "R2UR"):
        return "uniform"
    for pipe, ops in PIPES.items():
        if pipe != "uniform" and base in ops:
            return pipe
    return "other"


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def disassemble(cubin: str) -> dict:
    tool = shutil.which("cuobjdump")
    if tool is None:
        sys.exit("cuobjdump not found: see this script's docstring for the PyPI wheel")
    text = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True, check=True).stdout
    blocks = text.split("Function : ")[1:]
    names = demangle([b.split("\n", 1)[0].strip() for b in blocks])
    return dict(zip(names, blocks))


LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_]+(?:\.[A-Z0-9_]+)*)([^;]*);")


def parse(block: str):
    code = []
    for line in block.split("\n"):
        m = LINE.match(line)
        if m:
            code.append((int(m.group(1), 16), m.group(3), m.group(4)))
    return code


def loops(code):
    found = []
    for addr, op, args in code:
        if op.startswith("BRA"):
            m = re.search(r"0x([0-9a-f]+)", args)
            if m and int(m.group(1), 16) < addr:
                found.append((int(m.group(1), 16), addr))
    return sorted(set(found))


def mix(code, lo, hi):
    ops = collections.Counter(op for addr, op, _ in code if lo <= addr <= hi)
    pipes = collections.Counter()
    for op, n in ops.items():
        pipes[pipe_of(op)] += n
    return ops, pipes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", nargs="?", help=".cu file to compile for sm_90a (omit with --cubin)")
    ap.add_argument("pattern", help="substring of the demangled kernel name")
    ap.add_argument("--cubin", help="read this cubin instead of compiling")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--min-size", type=int, default=40, help="skip loops shorter than this many instructions")
    ap.add_argument("--ops", type=int, default=25, help="opcodes listed per loop")
    ap.add_argument("--save", help="write the per-loop mixes as JSON")
    ap.add_argument("--diff", help="JSON from an earlier --save: print the change per loop and pipe")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cubin = args.cubin
        if cubin is None:
            try:  # the same include paths the build uses; the kernel sources themselves need no torch
                import torch.utils.cpp_extension as ext
                torch_incs = ext.include_paths()
            except ImportError:
                torch_incs = []
            cubin = os.path.join(tmp, "k.cubin")
            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            incs = [os.path.join(root, "csrc"), os.path.join(root, "csrc", "include")] + torch_incs
            cmd = ["nvcc", "-cubin", f"-arch={args.arch}", "-std=c++17", "-O3", "-DMSA_WITH_CUDA=1",
                   "--expt-relaxed-constexpr", "-Xcudafe=--diag_suppress=186", *[f"-I{i}" for i in incs],
                   args.source, "-o", cubin]
            subprocess.run(cmd, check=True)
        kernels = disassemble(cubin)

    report = {}
    for name, block in kernels.items():
        if args.pattern not in name:
            continue
        code = parse(block)
        print(f"== {name}: {len(code)} instructions")
        for lo, hi in loops(code):
            ops, pipes = mix(code, lo, hi)
            size = sum(ops.values())
            if size < args.min_size:
                continue
            key = f"{name} [{lo:#x}, {hi:#x}]"
            report[key] = {"ops": dict(ops), "pipes": dict(pipes), "size": size}
            print(f"  loop {lo:#06x}-{hi:#06x}: {size} instructions; pipes "
                  + ", ".join(f"{p} {n}" for p, n in pipes.most_common()))
            print("    " + ", ".join(f"{op} {n}" for op, n in ops.most_common(args.ops)))
    if not report:
        sys.exit(f"no loop of a kernel matching {args.pattern!r}")
    if args.save:
        with open(args.save, "w") as f:
            json.dump(report, f, indent=1)
    if args.diff:
        with open(args.diff) as f:
            old = json.load(f)
        # Loops move when code changes: match them by kernel and order.
        def by_kernel(rep):
            d = collections.defaultdict(list)
            for k, v in rep.items():
                d[k.rsplit(" [", 1)[0]].append(v)
            return d
        new_k, old_k = by_kernel(report), by_kernel(old)
        for name, new_loops in new_k.items():
            for i, (n, o) in enumerate(zip(new_loops, old_k.get(name, []))):
                delta = {p: n["pipes"].get(p, 0) - o["pipes"].get(p, 0) for p in set(n["pipes"]) | set(o["pipes"])}
                print(f"diff {name} loop {i}: {o['size']} -> {n['size']}; "
                      + ", ".join(f"{p} {d:+d}" for p, d in sorted(delta.items()) if d))


if __name__ == "__main__":
    main()
