#!/usr/bin/env python3
"""Which kernels' machine code a source change left byte-for-byte the same (no GPU needed).

A refactor or the removal of a measured-and-dropped variant must not move the kernels that stay: their
timings in bench/NOTES.md then still hold. This script compiles the CUDA sources (the library's three .cu
files by default) for each target into cubins, disassembles them with cuobjdump, and keeps, per kernel, the
SASS text with addresses and encodings stripped. `--save DIR` writes that, `--against DIR` compares a new
build with it and prints, per kernel, same / CHANGED / gone / new, and "renamed" for a kernel whose name
changed (a template parameter removed, say) but whose code equals a vanished one's. It exits 1 when a kernel
present in both differs, or when one vanished without a renamed twin (`--allow-gone`: the variants a change
removes on purpose).

cuobjdump is not in the CUDA toolkit installed here; see scripts/sass_mix.py for the PyPI wheel that
carries it (set CUOBJDUMP or put it on PATH).

    python3 scripts/sass_same.py --save /tmp/sass-before           # on the old tree
    python3 scripts/sass_same.py --against /tmp/sass-before         # on the new tree
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = ("csrc/cuda/index/index_decode.cu", "csrc/cuda/attention/sparse_decode.cu", "csrc/cuda/nvfp4/nvfp4.cu")
ARCHS = ("90a", "100a")


def tool(name: str, env: str) -> str:
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        sys.exit(f"{name} not found: set {env} or put it on PATH (scripts/sass_mix.py says where to get it)")
    return path


def compile_cubin(nvcc: str, source: str, arch: str, out: pathlib.Path) -> None:
    cmd = [nvcc, "-std=c++20", "-cubin", "-o", str(out), str(ROOT / source), f"-I{ROOT / 'csrc'}",
           f"-I{ROOT / 'csrc' / 'include'}", f"-gencode=arch=compute_{arch},code=sm_{arch}",
           "--expt-relaxed-constexpr", "-Xcudafe=--diag_suppress=186"]
    subprocess.run(cmd, check=True)


_FUNCTION = re.compile(r"^\s*Function : (\S+)")
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s*(.*?);")


def digests(sass_text: str) -> dict[str, str]:
    """Mangled kernel name -> sha256 of its instruction text (addresses and encodings stripped), from the
    output of `cuobjdump -sass`."""
    found: dict[str, list[str]] = {}
    current = None
    for line in sass_text.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = m.group(1)
            found[current] = []
            continue
        m = _INSTRUCTION.search(line)
        if m and current is not None:
            found[current].append(" ".join(m.group(1).split()))
    return {name: hashlib.sha256("\n".join(body).encode()).hexdigest() for name, body in found.items()}


def kernels_of(cuobjdump: str, cubin: pathlib.Path) -> dict[str, str]:
    text = subprocess.run([cuobjdump, "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
    return digests(text)


def build(sources: list[str], archs: list[str]) -> dict[str, str]:
    nvcc = tool("nvcc", "NVCC")
    cuobjdump = tool("cuobjdump", "CUOBJDUMP")
    result: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for source in sources:
            for arch in archs:
                cubin = pathlib.Path(tmp) / f"{pathlib.Path(source).stem}.sm_{arch}.cubin"
                compile_cubin(nvcc, source, arch, cubin)
                for name, digest in kernels_of(cuobjdump, cubin).items():
                    result[f"sm_{arch} {name}"] = digest
    return result


def compare(before: dict[str, str], now: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    """Per kernel of `before` and `now` ("target mangled-name" -> digest): (state, twin). State is same / CHANGED
    for a name in both, gone / new for a name in one, and renamed for a vanished kernel whose exact code
    reappears under a new name on the same target (keyed by the old name, twin = the new one; the new name is
    not listed again). Kernels of identical code (e.g. empty bodies on a target) pair up in name order."""
    names = sorted(set(before) | set(now))
    new_by_code: dict[tuple[str, str], list[str]] = {}
    for n in names:
        if n not in before:
            new_by_code.setdefault((n.split(" ", 1)[0], now[n]), []).append(n)
    states: dict[str, tuple[str, str | None]] = {}
    taken: set[str] = set()
    for name in names:
        if name in before and name in now:
            states[name] = ("same" if before[name] == now[name] else "CHANGED", None)
        elif name in before:
            twins = new_by_code.get((name.split(" ", 1)[0], before[name]), [])
            if twins:
                twin = twins.pop(0)
                taken.add(twin)
                states[name] = ("renamed", twin)
            else:
                states[name] = ("gone", None)
    for name in names:
        if name not in before and name not in taken:
            states[name] = ("new", None)
    return states


def demangle(names: list[str]) -> dict[str, str]:
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return {n: n for n in names}
    mangled = [n.split(" ", 1)[1] for n in names]
    out = subprocess.run([cxxfilt], input="\n".join(mangled), capture_output=True, text=True).stdout.splitlines()
    return {n: f"{n.split(' ', 1)[0]} {d}" for n, d in zip(names, out)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--save", type=pathlib.Path, help="write the per-kernel digests to DIR/sass.json")
    p.add_argument("--against", type=pathlib.Path, help="compare with DIR/sass.json")
    p.add_argument("--sources", nargs="+", default=list(SOURCES))
    p.add_argument("--archs", nargs="+", default=list(ARCHS))
    p.add_argument("--allow-gone", action="store_true", help="kernels that vanished do not fail the check")
    args = p.parse_args()
    if not args.save and not args.against:
        p.error("give --save DIR and/or --against DIR")
    now = build(args.sources, args.archs)
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        (args.save / "sass.json").write_text(json.dumps(now, indent=1, sort_keys=True))
        print(f"saved {len(now)} kernels to {args.save / 'sass.json'}")
    if not args.against:
        return 0
    before = json.loads((args.against / "sass.json").read_text())
    states = compare(before, now)
    pretty = demangle(sorted(set(before) | set(now)))
    counts = {"same": 0, "renamed": 0, "CHANGED": 0, "gone": 0, "new": 0}
    for name, (state, twin) in sorted(states.items()):
        counts[state] += 1
        if state == "renamed":
            print(f"renamed  {pretty[name]}\n      -> {pretty[twin]}")
        elif state != "same":
            print(f"{state:8s} {pretty[name]}")
    print(", ".join(f"{v} {k}" for k, v in counts.items()))
    failed = counts["CHANGED"] > 0 or (counts["gone"] > 0 and not args.allow_gone)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
