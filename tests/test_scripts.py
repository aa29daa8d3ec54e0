"""CPU checks of the developer scripts' own logic (no GPU, no CUDA toolkit): scripts/sass_same.py."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

_ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sass_same():
    spec = importlib.util.spec_from_file_location("sass_same", _ROOT / "scripts" / "sass_same.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _listing(functions: dict[str, list[str]], base: int = 0) -> str:
    """A `cuobjdump -sass` listing in its real layout: an address and an encoding on each instruction line, a second
    encoding line, a header line per function."""
    lines = ["", "\tcode for sm_90a", "\t.target\tsm_90a", ""]
    for name, body in functions.items():
        lines += [f"\t\tFunction : {name}", '\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90"']
        for i, ins in enumerate(body):
            lines.append(f"        /*{base + 16 * i:04x}*/                   {ins} ;"
                         f"                    /* 0x{(base + i) * 7919:016x} */")
            lines.append(f"{' ' * 100}/* 0x000fe40000000{i:03x} */")
        lines.append("        ..........")
    return "\n".join(lines)


def test_digests_keep_instructions_only(sass_same):
    body = ["LDC R1, c[0x0][0x28]", "@P0 BRA 0x80", "EXIT"]
    a = sass_same.digests(_listing({"_Z1av": body, "_Z1bv": body[:2]}))
    # other addresses, encodings and spacing: the same digests
    b = sass_same.digests(_listing({"_Z1av": [" ".join(x.split(" ")) for x in body], "_Z1bv": body[:2]}, base=64))
    assert set(a) == {"_Z1av", "_Z1bv"}
    assert a == b
    assert a["_Z1av"] != a["_Z1bv"]
    c = sass_same.digests(_listing({"_Z1av": ["LDC R2, c[0x0][0x28]"] + body[1:]}))
    assert c["_Z1av"] != a["_Z1av"]  # one register differs


def test_compare_states(sass_same):
    before = {"sm_90a keep": "k", "sm_90a moved": "m", "sm_90a edit": "e1", "sm_90a drop": "d",
              "sm_100a empty<0>": "z", "sm_100a empty<1>": "z", "sm_100a empty<2>": "z"}
    now = {"sm_90a keep": "k", "sm_90a moved2": "m", "sm_90a edit": "e2", "sm_90a added": "a",
           "sm_100a empty<0,x>": "z", "sm_100a empty<1,x>": "z",
           "sm_100a other": "m"}  # same code as "moved" but another target: not its twin
    states = sass_same.compare(before, now)
    assert states["sm_90a keep"] == ("same", None)
    assert states["sm_90a edit"] == ("CHANGED", None)
    assert states["sm_90a moved"] == ("renamed", "sm_90a moved2")
    assert states["sm_90a drop"] == ("gone", None)
    assert states["sm_90a added"] == ("new", None)
    assert states["sm_100a other"] == ("new", None)
    assert "sm_90a moved2" not in states  # listed once, under its old name
    # three identical empty kernels, two left under new names: two renamed, one gone
    empties = [states[f"sm_100a empty<{i}>"][0] for i in range(3)]
    assert sorted(empties) == ["gone", "renamed", "renamed"]
    assert {states[f"sm_100a empty<{i}>"][1] for i in range(3)} - {None} == {"sm_100a empty<0,x>", "sm_100a empty<1,x>"}
