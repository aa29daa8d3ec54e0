"""msa_ops demo: quantize a KV-cache-shaped tensor to NVFP4 and back, check it, time it.

    python -m msa_ops.demo [--pages N] [--device cpu|cuda]

Runs on the GPU when there is one, on the CPU otherwise. Later issues grow this into a full MSA decode step
(indexer + top-16 sparse attention over NVFP4 paged caches).
"""

from __future__ import annotations

import argparse
import time

import torch

import msa_ops
from msa_ops import formats as F

KV_HEADS, PAGE, HEAD_DIM = 4, 128, 128  # MiniMax-M3, TP1


def _time(fn, device: torch.device, repeats: int) -> float:
    """Median seconds per call (CUDA events on the GPU, perf_counter on the CPU)."""
    fn()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return sorted(samples)[len(samples) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--pages", type=int, default=None, help="KV pages of 128 tokens (default 4096 GPU / 64 CPU)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    pages = args.pages or (4096 if device.type == "cuda" else 64)

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"msa_ops {msa_ops.__version__} on {where}; CUDA targets built: {msa_ops.cuda_archs() or 'none'}")
    gen = torch.Generator().manual_seed(0)
    k = torch.randn(pages, KV_HEADS, PAGE, HEAD_DIM, generator=gen).to(device=device, dtype=torch.bfloat16)
    print(f"K cache: {tuple(k.shape)} bf16 = {k.numel() * 2 / 2**20:.1f} MiB -> NVFP4 "
          f"{k.numel() * 0.5625 / 2**20:.1f} MiB ({F.GROUP} elements per E4M3 scale)")

    packed, scales = msa_ops.nvfp4_quantize(k)
    k_e4m3 = msa_ops.nvfp4_dequantize(packed, scales, torch.float8_e4m3fn)
    k_bf16 = msa_ops.nvfp4_dequantize(packed, scales, torch.bfloat16)

    # Bit-exact check against the pure-PyTorch reference on a sample of pages.
    sample = torch.randperm(pages, generator=gen)[: min(pages, 16)].to(device)
    ref_packed, ref_scales = F.quantize_nvfp4(k[sample].cpu())
    exact = (torch.equal(packed[sample].cpu(), ref_packed)
             and torch.equal(scales[sample].cpu().view(torch.uint8), ref_scales.view(torch.uint8))
             and torch.equal(k_e4m3[sample].cpu().view(torch.uint8),
                             F.dequantize_nvfp4(ref_packed, ref_scales, torch.float8_e4m3fn).view(torch.uint8)))
    err = (k_bf16.float() - k.float())
    rel_rms = (err.pow(2).mean().sqrt() / k.float().pow(2).mean().sqrt()).item()
    print(f"bit-exact vs reference on {sample.numel()} sampled pages: {'yes' if exact else 'NO'}")
    print(f"round-trip error (bf16 -> NVFP4 -> bf16): relative RMS {rel_rms:.4f}, max abs {err.abs().max().item():.3f}")

    repeats = 20 if device.type == "cuda" else 3
    n = k.numel()
    for name, fn, nbytes in [
        ("quantize bf16 -> NVFP4", lambda: msa_ops.nvfp4_quantize(k), n * (2 + 0.5625)),
        ("dequantize NVFP4 -> E4M3", lambda: msa_ops.nvfp4_dequantize(packed, scales, torch.float8_e4m3fn),
         n * (0.5625 + 1)),
        ("dequantize NVFP4 -> bf16", lambda: msa_ops.nvfp4_dequantize(packed, scales, torch.bfloat16),
         n * (0.5625 + 2)),
    ]:
        seconds = _time(fn, device, repeats)
        print(f"{name:<26} {seconds * 1e6:10.1f} us  {nbytes / seconds / 1e9:8.1f} GB/s (bytes read + written)")
    return 0 if exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
