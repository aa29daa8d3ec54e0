"""Helpers shared by the tests and benchmarks: devices, bitwise comparison, output poisoning.

Submodules: :mod:`msa_ops.testing.paged` (paged-cache case generators: lengths, page-table layouts, index
keys, KV caches and queries in every format, TopK rows), :mod:`msa_ops.testing.indexer` (the decode-indexer
contract checks) and :mod:`msa_ops.testing.attention` (the sparse-attention contract checks).
"""

from __future__ import annotations

import pytest
import torch

__all__ = ["DEVICES", "assert_bitwise_equal", "poison_cuda_allocator", "requires_cuda", "skip_cuda_without_kernel"]

#: The devices every op test runs on: the CPU always, CUDA when present (CI has no GPU).
DEVICES = ["cpu"]
if torch.cuda.is_available():
    DEVICES.append(pytest.param("cuda", marks=pytest.mark.cuda))

_skip_without_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def requires_cuda(test):
    """Decorator of CUDA-only tests: skipped without a GPU, and marked ``cuda`` like the CUDA cases of
    ``DEVICES`` (so ``pytest -m cuda`` selects every GPU test)."""
    return pytest.mark.cuda(_skip_without_cuda(test))


def skip_cuda_without_kernel(request, op: str) -> None:
    """For an autouse fixture: skip (not fail) the CUDA cases of a test module while the build registers no CUDA
    kernel for ``msa::<op>``."""
    callspec = getattr(request.node, "callspec", None)
    device = callspec.params.get("device") if callspec else ("cuda" if "cuda" in request.node.name else None)
    if device == "cuda" and not torch._C._dispatch_has_kernel_for_dispatch_key(f"msa::{op}", "CUDA"):
        pytest.skip(f"msa::{op} has no CUDA kernel in this build")


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu().contiguous()
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(
        {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    """Equal bit patterns, except that any NaN matches any NaN (payload and sign of NaN are not specified)."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    a, e = _bits(actual), _bits(expected)
    same = a == e
    if actual.is_floating_point():
        both_nan = actual.detach().cpu().float().isnan() & expected.detach().cpu().float().isnan()
        same |= both_nan
    if not bool(same.all()):
        bad = (~same).nonzero()
        first = tuple(bad[0].tolist())
        raise AssertionError(
            f"{what}: {bad.shape[0]} of {same.numel()} elements differ; first at {first}: "
            f"got {actual.detach().cpu()[first]!r} (bits {a[first].item():#x}), "
            f"expected {expected.detach().cpu()[first]!r} (bits {e[first].item():#x})")


def poison_cuda_allocator(nbytes: int = 64 << 20, byte: int = 0xFF) -> None:
    """Fill a large block with a poison byte and hand it back to the caching allocator, so that the next
    outputs an op allocates start out poisoned (0xFF is a NaN in E4M3/bf16/fp32, and code 15 in E2M1)."""
    if torch.cuda.is_available():
        block = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        block.fill_(byte)
        del block
