"""Checks of the sparse attention contract (shared/SPEC.md §5 and §6), shared by the CPU and CUDA tests.

* :func:`assert_attention_close`: the output against the fp32 reference on the same quantized inputs with
  ``atol = rtol = 5e-2`` and cosine similarity >= 0.999 (the public MSA v1 bar); the LSE within
  ``lse_atol + lse_rtol * |lse|``;
  no-key rows exactly (out 0, LSE -inf); NaN nowhere the reference has none (so a NaN-poisoned, unwritten
  output fails). ``bf16_exact=True`` adds the bar an fp32-accumulating kernel meets: every output element
  within one bfloat16 rounding of the reference (the CPU kernel is held to it).
"""

from __future__ import annotations

import math

import torch

__all__ = ["poison_attention_out", "poison_lse", "assert_attention_close"]


def poison_attention_out(tokens: int, heads: int, device, head_dim: int = 128) -> torch.Tensor:
    """A bfloat16 ``[T, Hq, head_dim]`` output buffer full of NaN (every element must be written)."""
    return torch.full((tokens, heads, head_dim), math.nan, dtype=torch.bfloat16, device=device)


def poison_lse(tokens: int, heads: int, device) -> torch.Tensor:
    """A float32 ``[T, Hq]`` LSE buffer full of NaN (every element must be written)."""
    return torch.full((tokens, heads), math.nan, dtype=torch.float32, device=device)


def _first(mask: torch.Tensor) -> tuple:
    return tuple(mask.nonzero()[0].tolist())


def assert_attention_close(out: torch.Tensor, ref_out: torch.Tensor, lse: torch.Tensor | None = None,
                           ref_lse: torch.Tensor | None = None, *, atol: float = 5e-2, rtol: float = 5e-2,
                           min_cosine: float = 0.999, lse_atol: float = 1e-3, lse_rtol: float = 0.0,
                           bf16_exact: bool = False,
                           what: str = "out") -> None:
    """``out`` bfloat16 ``[T, Hq, D]`` (and ``lse`` float32 ``[T, Hq]``) against the reference (float32)."""
    out = out.detach().cpu().float()
    ref_out = ref_out.detach().cpu().float()
    assert out.shape == ref_out.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref_out.shape)}"
    nan = out.isnan() & ~ref_out.isnan()
    if bool(nan.any()):
        raise AssertionError(f"{what}: {int(nan.sum())} elements are NaN (unwritten?), first at {_first(nan)}")
    lost_nan = ref_out.isnan() & ~out.isnan()
    if bool(lost_nan.any()):
        raise AssertionError(f"{what}: {int(lost_nan.sum())} elements should be NaN, first at {_first(lost_nan)}")
    finite = ref_out.isfinite()
    diff = (out - ref_out).abs()
    bad = finite & ~(diff <= atol + rtol * ref_out.abs())
    if bool(bad.any()):
        first = _first(bad)
        raise AssertionError(f"{what}: {int(bad.sum())} of {int(finite.sum())} elements off by more than atol {atol} "
                             f"+ rtol {rtol}; max abs diff {diff[finite].max().item():.3g}; first at {first}: got "
                             f"{out[first].item()!r}, expected {ref_out[first].item()!r}")
    a, e = out[finite].double(), ref_out[finite].double()
    if a.numel() and bool(e.abs().max() > 0):
        cosine = (a @ e / (a.norm() * e.norm()).clamp_min(1e-300)).item()
        assert cosine >= min_cosine, f"{what}: cosine similarity {cosine:.6f} < {min_cosine}"
    if bf16_exact:
        # fp32 accumulation then one rounding to bf16: within half a bf16 ulp plus fp32 noise; 2^-8 covers it.
        bad = finite & ~(diff <= 1e-5 + 2.0 ** -8 * ref_out.abs())
        if bool(bad.any()):
            first = _first(bad)
            raise AssertionError(f"{what}: {int(bad.sum())} elements further than one bf16 rounding from the "
                                 f"reference; first at {first}: got {out[first].item()!r}, expected "
                                 f"{ref_out[first].item()!r}")
    if ref_lse is None:
        return
    assert lse is not None, f"{what}: no lse to compare"
    lse = lse.detach().cpu()
    ref_lse = ref_lse.detach().cpu()
    assert lse.shape == ref_lse.shape and lse.dtype == torch.float32, (
        f"{what} lse: {tuple(lse.shape)} {lse.dtype} vs {tuple(ref_lse.shape)}")
    nan = lse.isnan() & ~ref_lse.isnan()
    if bool(nan.any()):
        raise AssertionError(f"{what} lse: {int(nan.sum())} entries are NaN (unwritten?), first at {_first(nan)}")
    no_key = ref_lse == -math.inf
    mismatch = (lse == -math.inf) != no_key
    if bool(mismatch.any()):
        first = _first(mismatch)
        raise AssertionError(f"{what} lse: {int(mismatch.sum())} rows differ in having no key (-inf), first at "
                             f"{first}: got {lse[first].item()}, expected {ref_lse[first].item()}")
    if bool(no_key.any()):
        zero = out[no_key] == 0
        assert bool(zero.all()), f"{what}: rows without a key must be 0, first bad row {_first(no_key)}"
    finite = ref_lse.isfinite()
    diff = (lse - ref_lse).abs()
    bad = finite & ~(diff <= lse_atol + lse_rtol * ref_lse.abs())
    if bool(bad.any()):
        first = _first(bad)
        raise AssertionError(f"{what} lse: {int(bad.sum())} of {int(finite.sum())} off by more than {lse_atol} + "
                             f"{lse_rtol} |lse|; "
                             f"max diff {diff[finite].max().item():.3g}; first at {first}: got {lse[first].item()!r}, "
                             f"expected {ref_lse[first].item()!r}")
