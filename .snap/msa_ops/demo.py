"""msa_ops demo: one MSA decode step over NVFP4 paged caches, checked against the references and timed.

    python -m msa_ops.demo [--device cpu|cuda] [--batch B] [--context N]

1. NVFP4: quantize a KV-cache-shaped tensor and back (bit-exact check, error, throughput).
2. Decode step, Q = 8 tokens per request (7 speculative): write random K, V and index keys into NVFP4 paged
   caches, run ``index_decode`` (top-16 pages per KV head and token), then ``sparse_decode`` over those pages;
   check both against the fp32 references, time them, and compare with dense BF16 attention over the whole
   context.

Runs on the GPU when there is one, on the CPU otherwise; an op without a CUDA kernel in this build runs on
the CPU, and the demo says so.
"""

from __future__ import annotations

import argparse
import time

import torch

import msa_ops
from msa_ops import formats as F
from msa_ops.reference.indexer import index_decode_reference
from msa_ops.reference.sparse_attention import sparse_decode_reference

KV_HEADS, Q_HEADS, PAGE, HEAD_DIM, Q_LEN, TOPK = 4, 64, 128, 128, 8, 16  # MiniMax-M3, TP1


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


def _has_kernel(op: str, device: torch.device) -> bool:
    if device.type != "cuda":
        return True
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"msa::{op}", "CUDA")


def nvfp4_round_trip(device: torch.device, pages: int, repeats: int) -> bool:
    gen = torch.Generator().manual_seed(0)
    k = torch.randn(pages, KV_HEADS, PAGE, HEAD_DIM, generator=gen).to(device=device, dtype=torch.bfloat16)
    print(f"[nvfp4] K cache {tuple(k.shape)} bf16 = {k.numel() * 2 / 2**20:.1f} MiB -> NVFP4 "
          f"{k.numel() * 0.5625 / 2**20:.1f} MiB ({F.GROUP} elements per E4M3 scale)")
    packed, scales = msa_ops.nvfp4_quantize(k)
    k_e4m3 = msa_ops.nvfp4_dequantize(packed, scales, torch.float8_e4m3fn)
    k_bf16 = msa_ops.nvfp4_dequantize(packed, scales, torch.bfloat16)
    sample = torch.randperm(pages, generator=gen)[: min(pages, 16)].to(device)
    ref_packed, ref_scales = F.quantize_nvfp4(k[sample].cpu())
    exact = (torch.equal(packed[sample].cpu(), ref_packed)
             and torch.equal(scales[sample].cpu().view(torch.uint8), ref_scales.view(torch.uint8))
             and torch.equal(k_e4m3[sample].cpu().view(torch.uint8),
                             F.dequantize_nvfp4(ref_packed, ref_scales, torch.float8_e4m3fn).view(torch.uint8)))
    err = k_bf16.float() - k.float()
    rel_rms = (err.pow(2).mean().sqrt() / k.float().pow(2).mean().sqrt()).item()
    print(f"[nvfp4] bit-exact vs reference on {sample.numel()} sampled pages: {'yes' if exact else 'NO'}; "
          f"round trip relative RMS {rel_rms:.4f}")
    n = k.numel()
    for name, fn, nbytes in [
        ("quantize bf16 -> NVFP4", lambda: msa_ops.nvfp4_quantize(k), n * (2 + 0.5625)),
        ("dequantize NVFP4 -> E4M3", lambda: msa_ops.nvfp4_dequantize(packed, scales, torch.float8_e4m3fn),
         n * (0.5625 + 1)),
        ("dequantize NVFP4 -> bf16", lambda: msa_ops.nvfp4_dequantize(packed, scales, torch.bfloat16),
         n * (0.5625 + 2)),
    ]:
        seconds = _time(fn, device, repeats)
        print(f"[nvfp4] {name:<26} {seconds * 1e6:10.1f} us  {nbytes / seconds / 1e9:8.1f} GB/s (read + written)")
    return exact


def decode_step(device: torch.device, batch: int, context: int, repeats: int) -> bool:
    gen = torch.Generator().manual_seed(1)
    seq_lens = torch.full((batch,), context, dtype=torch.int32)
    seq_lens[0] = max(Q_LEN, context // 2)  # requests of different lengths
    pages_per_request = [(int(n) - 1) // PAGE + 1 for n in seq_lens]
    max_pages = max(pages_per_request)
    physical = torch.randperm(sum(pages_per_request), generator=gen)  # pages scattered over the cache
    page_table = torch.zeros(batch, max_pages, dtype=torch.int32)
    offset = 0
    for b, n in enumerate(pages_per_request):
        page_table[b, :n] = physical[offset:offset + n].to(torch.int32)
        offset += n
    num_pages = offset

    # Write random K, V and index keys into NVFP4 paged caches (what the fused KV-insert op will do).
    k_bf16 = torch.randn(num_pages, KV_HEADS, PAGE, HEAD_DIM, generator=gen).to(torch.bfloat16)
    v_bf16 = torch.randn(num_pages, KV_HEADS, PAGE, HEAD_DIM, generator=gen).to(torch.bfloat16)
    idx_bf16 = torch.randn(num_pages, PAGE, HEAD_DIM, generator=gen).to(torch.bfloat16)
    k, k_scales = msa_ops.nvfp4_quantize(k_bf16.to(device))
    v, v_scales = msa_ops.nvfp4_quantize(v_bf16.to(device))
    index_k, index_k_scales = msa_ops.nvfp4_quantize(idx_bf16.to(device))
    q = torch.randn(batch * Q_LEN, Q_HEADS, HEAD_DIM, generator=gen).to(torch.float8_e4m3fn)
    q_idx = torch.randn(batch, Q_LEN, KV_HEADS, HEAD_DIM, generator=gen).to(torch.float8_e4m3fn)
    kv_bytes = 2 * num_pages * KV_HEADS * PAGE * 72
    print(f"\n[decode] {batch} requests x {Q_LEN} query tokens, contexts {seq_lens.tolist()}; "
          f"{Q_HEADS}/{KV_HEADS} heads x {HEAD_DIM}; NVFP4 K+V cache {kv_bytes / 2**20:.1f} MiB, "
          f"index keys {num_pages * PAGE * 72 / 2**20:.1f} MiB")

    index_dev = device if _has_kernel("index_decode", device) else torch.device("cpu")
    attn_dev = device if _has_kernel("sparse_decode", device) else torch.device("cpu")
    for op, dev in (("index_decode", index_dev), ("sparse_decode", attn_dev)):
        if dev != device:
            print(f"[decode] {op}: no CUDA kernel in this build yet -> runs on the CPU")

    # Inputs moved once to where each op runs (not inside the timed calls).
    ix = [t.to(index_dev) for t in (q_idx, index_k, page_table, seq_lens, index_k_scales)]

    def run_index():
        return msa_ops.index_decode(ix[0], ix[1], ix[2], ix[3], index_k_scales=ix[4])

    topk = run_index()
    at = [t.to(attn_dev) for t in (q, k, v, topk, page_table, seq_lens, k_scales, v_scales)]

    def run_attention():
        return msa_ops.sparse_decode(*at[:6], k_scales=at[6], v_scales=at[7])

    out = run_attention()

    # Check: TopK against the reference selection (sets of history pages), attention against the fp32
    # reference over the kernel's own TopK rows.
    ref_topk, _ = index_decode_reference(q_idx, index_k.cpu(), page_table, seq_lens,
                                         index_k_scales=index_k_scales.cpu())
    got = topk.cpu()
    same_sets = all(set(got[h, t].tolist()) == set(ref_topk[h, t].tolist())
                    for h in range(KV_HEADS) for t in range(batch * Q_LEN))
    ref_out, _ = sparse_decode_reference(q, k.cpu(), v.cpu(), got, page_table, seq_lens,
                                         k_scales=k_scales.cpu(), v_scales=v_scales.cpu())
    diff = out.cpu().float() - ref_out
    cosine = torch.nn.functional.cosine_similarity(out.cpu().float().flatten(), ref_out.flatten(), dim=0).item()
    attn_ok = bool((diff.abs() <= 5e-2 + 5e-2 * ref_out.abs()).all()) and cosine >= 0.999
    print(f"[decode] index_decode TopK equals the reference selection: {'yes' if same_sets else 'NO'}")
    print(f"[decode] sparse_decode vs fp32 reference: max abs error {diff.abs().max().item():.4f}, "
          f"cosine {cosine:.6f} -> {'ok' if attn_ok else 'FAIL'} (bar: atol = rtol = 5e-2, cosine >= 0.999)")

    t_index = _time(run_index, index_dev, repeats)
    t_attn = _time(run_attention, attn_dev, repeats)
    print(f"[decode] index_decode  {t_index * 1e6:10.1f} us on {index_dev.type}")
    print(f"[decode] sparse_decode {t_attn * 1e6:10.1f} us on {attn_dev.type} "
          f"(attends to at most {TOPK * PAGE} keys per token)")

    # Dense BF16 attention over every request's whole context, for scale.
    if device.type == "cuda" or context <= 8192:
        b0 = batch - 1
        n = int(seq_lens[b0])
        pages = page_table[b0, :pages_per_request[b0]].long()

        def dense(cache: torch.Tensor) -> torch.Tensor:  # request b0's [1, Hq, n, 128] keys or values
            per_head = cache[pages].transpose(0, 1).reshape(KV_HEADS, -1, HEAD_DIM)[:, :n]
            return per_head.repeat_interleave(Q_HEADS // KV_HEADS, 0).unsqueeze(0).to(device)

        keys, vals = dense(k_bf16), dense(v_bf16)
        qd = q[b0 * Q_LEN:(b0 + 1) * Q_LEN].to(torch.bfloat16).transpose(0, 1).unsqueeze(0).to(device)
        mask = torch.ones(Q_LEN, n, dtype=torch.bool, device=device).tril(n - Q_LEN)
        dense = lambda: torch.nn.functional.scaled_dot_product_attention(qd, keys, vals, attn_mask=mask)  # noqa: E731
        t_dense = _time(dense, device, repeats) * batch  # one request timed, times the batch
        print(f"[decode] dense BF16 attention (SDPA over the whole context, one request timed x {batch}): "
              f"{t_dense * 1e6:.1f} us; speedup of the sparse step (index + attention): "
              f"{t_dense / (t_index + t_attn):.2f}x")
    return same_sets and attn_ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=None, help="requests (default 8 GPU / 2 CPU)")
    parser.add_argument("--context", type=int, default=None, help="tokens per request (default 32768 GPU / 4096 CPU)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    where = torch.cuda.get_device_name(device) if gpu else "CPU"
    print(f"msa_ops {msa_ops.__version__} on {where}; CUDA targets built: {msa_ops.cuda_archs() or 'none'}")
    ok = nvfp4_round_trip(device, pages=4096 if gpu else 64, repeats=20 if gpu else 3)
    ok &= decode_step(device, batch=args.batch or (8 if gpu else 2), context=args.context or (32768 if gpu else 4096),
                      repeats=20 if gpu else 2)
    print("\ndemo: all checks passed" if ok else "\ndemo: a check FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
