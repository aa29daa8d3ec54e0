"""The typed Python API: one documented function per op.

Each function checks its arguments (raising ``TypeError`` / ``ValueError`` that name the argument), then
calls ``torch.ops.msa.<op>``, which dispatches to the CPU or CUDA kernel by the tensors' device. Checks
here never read device memory, so they add no host-device synchronisation.
"""

from __future__ import annotations

import math

import torch

__all__ = ["cuda_archs", "nvfp4_quantize", "nvfp4_dequantize"]

_QUANT_INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_DEQUANT_OUTPUT_DTYPES = (torch.float8_e4m3fn, torch.bfloat16, torch.float32)


def cuda_archs() -> list[str]:
    """CUDA targets compiled into this build (e.g. ``["9.0a", "10.0a"]``); empty for a CPU-only build."""
    archs = torch.ops.msa.cuda_archs()
    return [a for a in archs.split(",") if a]


def _require_tensor(name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def _check_global_scale(global_scale) -> float:
    if isinstance(global_scale, bool) or not isinstance(global_scale, (int, float)):
        raise TypeError(f"global_scale must be a Python float, got {type(global_scale).__name__}")
    g = float(global_scale)
    if not math.isfinite(g) or g <= 0.0:
        raise ValueError(f"global_scale must be a finite positive number, got {global_scale}")
    return g


def nvfp4_quantize(x: torch.Tensor, global_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to NVFP4 along its last dimension (shared/SPEC.md §2).

    Args:
        x: bfloat16, float16 or float32 tensor ``[..., D]``, ``D`` a positive multiple of 16, on the CPU
            or a CUDA device. Any strides: leading dims that cannot be viewed as rows of one stride (and an
            inner stride other than 1) cost one contiguous copy.
        global_scale: fp32 global scale ``G`` (finite, > 0); the scales encode ``G * amax / 6``.

    Returns:
        ``(packed, scales)``: ``packed`` uint8 ``[..., D/2]`` (element ``2i`` in the low nibble of byte
        ``i``), ``scales`` float8_e4m3fn ``[..., D/16]``, both contiguous on ``x``'s device.

    Numerics, per 16-element group ``g`` (all arithmetic in fp32, each step rounded as written):
        ``s = e4m3_rne_satfinite(G * amax(|x_g|) / 6)``; ``q = e2m1_rne_satfinite(x * G / s)``.
        A negative value whose quotient rounds to zero keeps its sign (code 8, -0), as the Blackwell
        converter does. A group whose scale rounds to 0 encodes as all code 0. **NaN/Inf:** a group that
        holds any NaN or +-Inf gets the NaN scale (0x7F) and all-zero codes, so it dequantizes to NaN
        everywhere and never disturbs other groups. Finite inputs never produce NaN: ``G * amax``
        overflowing fp32 saturates the scale to 448 and the codes to +-6.
    """
    x = _require_tensor("x", x)
    if x.dtype not in _QUANT_INPUT_DTYPES:
        raise TypeError(f"x must be bfloat16, float16 or float32, got {x.dtype}")
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension")
    if x.shape[-1] <= 0 or x.shape[-1] % 16 != 0:
        raise ValueError(f"the last dimension of x must be a positive multiple of 16, got {x.shape[-1]}")
    g = _check_global_scale(global_scale)
    return torch.ops.msa.nvfp4_quantize(x, g)


def nvfp4_dequantize(packed: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16,
                     global_scale: float = 1.0) -> torch.Tensor:
    """Expand NVFP4 ``(packed, scales)`` to ``dtype`` along the last dimension (shared/SPEC.md §2).

    Args:
        packed: uint8 ``[..., D/2]``; scales: float8_e4m3fn ``[..., D/16]``, same leading shape and device.
            Any strides with the same copy rule as :func:`nvfp4_quantize`.
        dtype: ``torch.float8_e4m3fn`` gives ``e4m3_rne_satfinite(e2m1 * s)`` (the MSA Q8KV4 dequant; the
            global scale is NOT applied); ``torch.bfloat16`` / ``torch.float32`` give ``e2m1 * s / G``
            computed in fp32 (exact for G = 1), then rounded once to the output type.
        global_scale: the ``G`` used at quantization (finite, > 0).

    Returns:
        ``[..., D]`` tensor of ``dtype``, contiguous. A NaN scale gives NaN for its whole group; ``-0``
        codes give ``-0``.
    """
    packed = _require_tensor("packed", packed)
    scales = _require_tensor("scales", scales)
    if packed.dtype != torch.uint8:
        raise TypeError(f"packed must be uint8, got {packed.dtype}")
    if scales.dtype != torch.float8_e4m3fn:
        raise TypeError(f"scales must be float8_e4m3fn, got {scales.dtype}")
    if dtype not in _DEQUANT_OUTPUT_DTYPES:
        raise TypeError(f"dtype must be torch.float8_e4m3fn, torch.bfloat16 or torch.float32, got {dtype}")
    if packed.dim() < 1 or packed.dim() != scales.dim():
        raise ValueError(f"packed {tuple(packed.shape)} and scales {tuple(scales.shape)} must have the same "
                         "number of dimensions (>= 1)")
    if packed.shape[:-1] != scales.shape[:-1]:
        raise ValueError(f"leading shapes of packed {tuple(packed.shape)} and scales {tuple(scales.shape)} differ")
    if packed.shape[-1] <= 0 or packed.shape[-1] % 8 != 0:
        raise ValueError(f"the last dimension of packed must be a positive multiple of 8, got {packed.shape[-1]}")
    if scales.shape[-1] * 8 != packed.shape[-1]:
        raise ValueError(f"scales must have packed.shape[-1] / 8 = {packed.shape[-1] // 8} entries in the last "
                         f"dimension, got {scales.shape[-1]}")
    if packed.device != scales.device:
        raise ValueError(f"packed and scales must be on one device, got {packed.device} and {scales.device}")
    g = _check_global_scale(global_scale)
    return torch.ops.msa.nvfp4_dequantize(packed, scales, dtype, g)
