"""Runs each NVFP4 kernel a few times on 1 GiB of bf16-equivalent data, for ncu:

    ncu --clock-control none -k regex:nvfp4 --launch-skip 2 --launch-count 1 --section SpeedOfLight \\
        --section Occupancy --section WarpStateStats python3 scripts/profile_nvfp4.py quantize
"""
import sys

import torch

import msa_ops

op = sys.argv[1] if len(sys.argv) > 1 else "quantize"
x = torch.randn(1 << 22, 128, device="cuda", dtype=torch.bfloat16)
packed, scales = msa_ops.nvfp4_quantize(x)
for _ in range(3):
    if op == "quantize":
        msa_ops.nvfp4_quantize(x)
    else:
        msa_ops.nvfp4_dequantize(packed, scales, torch.float8_e4m3fn if op == "dequantize_e4m3" else torch.bfloat16)
torch.cuda.synchronize()
