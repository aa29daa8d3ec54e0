"""NVFP4 / E4M3 / E2M1 in plain PyTorch: the bit-exact reference the tests hold the kernels to.

Written for clarity and independence from the kernels: E2M1 rounding picks the nearest table entry (ties
to the even code) instead of the kernels' magic-number rounding, and division is a true fp32 division
(the kernels use a reciprocal with a correction step). Runs on any device; the tests run it on the CPU.
Formats are specified in shared/SPEC.md §2.
"""

from __future__ import annotations

import torch

__all__ = [
    "E2M1_VALUES", "E4M3_MAX", "GROUP",
    "e4m3_rne_satfinite", "e2m1_rne_satfinite_codes", "e2m1_values_of",
    "pack_e2m1", "unpack_e2m1", "quantize_nvfp4", "dequantize_nvfp4",
]

GROUP = 16
E4M3_MAX = 448.0
#: E2M1 magnitudes by code 0..7; codes 8..15 are the negatives (8 is -0).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def e4m3_rne_satfinite(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> float8_e4m3fn, round to nearest even, finite values and +-Inf saturate to +-448, NaN stays NaN."""
    x = x.float()
    return torch.where(x.isnan(), x, x.clamp(-E4M3_MAX, E4M3_MAX)).to(torch.float8_e4m3fn)


def e2m1_rne_satfinite_codes(q: torch.Tensor) -> torch.Tensor:
    """fp32 -> E2M1 codes (uint8 0..15): nearest of E2M1_VALUES, ties to the even code, |q| > 6 -> 6.

    The sign bit (code bit 3) is the sign bit of ``q``, so -0 and negatives that round to 0 give code 8.
    """
    q = q.float()
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=q.device)
    mag = q.abs().clamp(max=6.0)
    dist = (mag.unsqueeze(-1) - table).abs()
    nearest = dist == dist.amin(dim=-1, keepdim=True)  # one entry, or two adjacent ones on a tie
    even = torch.arange(8, device=q.device) % 2 == 0
    pick_even = (nearest & even).any(dim=-1, keepdim=True)
    chosen = torch.where(pick_even, nearest & even, nearest)
    code = chosen.to(torch.uint8).argmax(dim=-1).to(torch.uint8)
    return code | (torch.signbit(q).to(torch.uint8) << 3)


def e2m1_values_of(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8 0..15) -> fp32 values (code 8 -> -0.0)."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    mag = table[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -mag, mag)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """[..., D] codes -> [..., D/2] bytes; element 2i in the low nibble."""
    codes = codes.to(torch.uint8)
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """[..., D/2] bytes -> [..., D] codes."""
    low, high = packed & 0xF, packed >> 4
    return torch.stack([low, high], dim=-1).flatten(-2)


def _fp32(value: float, like: torch.Tensor) -> torch.Tensor:
    return torch.full_like(like, value, dtype=torch.float32)


def quantize_nvfp4(x: torch.Tensor, global_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference NVFP4 quantization (same contract as :func:`msa_ops.nvfp4_quantize`)."""
    d = x.shape[-1]
    if d % GROUP != 0:
        raise ValueError(f"last dimension must be a multiple of {GROUP}, got {d}")
    groups = x.float().reshape(*x.shape[:-1], d // GROUP, GROUP)
    g = torch.tensor(global_scale, dtype=torch.float32).item()  # G as an fp32 value
    finite = groups.isfinite().all(dim=-1)
    amax = torch.where(finite, groups.abs().amax(dim=-1), torch.zeros((), dtype=torch.float32))
    scales = e4m3_rne_satfinite((amax * _fp32(g, amax)) / _fp32(6.0, amax))
    s = scales.float().unsqueeze(-1).expand_as(groups)
    t = groups * _fp32(g, groups)
    codes = e2m1_rne_satfinite_codes(t / s)  # true fp32 division
    codes = torch.where((s == 0) | ~finite.unsqueeze(-1), torch.zeros_like(codes), codes)
    nan_scale = torch.full_like(scales, float("nan"))
    scales = torch.where(finite, scales, nan_scale)
    return pack_e2m1(codes.reshape(x.shape)), scales


def dequantize_nvfp4(packed: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16,
                     global_scale: float = 1.0) -> torch.Tensor:
    """Reference NVFP4 dequantization (same contract as :func:`msa_ops.nvfp4_dequantize`)."""
    codes = unpack_e2m1(packed)
    d = codes.shape[-1]
    values = e2m1_values_of(codes).reshape(*codes.shape[:-1], d // GROUP, GROUP)
    products = values * scales.float().unsqueeze(-1)  # exact in fp32
    products = products.reshape(codes.shape)
    if dtype == torch.float8_e4m3fn:
        return e4m3_rne_satfinite(products)
    g = torch.tensor(global_scale, dtype=torch.float32).item()
    return (products / _fp32(g, products)).to(dtype)
