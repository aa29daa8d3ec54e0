"""NVFP4 quantize / dequantize: bit-exact against msa_ops.formats, on the CPU always and on CUDA when present."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

import msa_ops
from msa_ops import formats as F
from msa_ops.testing import DEVICES, assert_bitwise_equal, poison_cuda_allocator, requires_cuda

INPUT_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
OUTPUT_DTYPES = [torch.float8_e4m3fn, torch.bfloat16, torch.float32]
E4M3_FINITE_NONNEG = torch.arange(0x00, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn)  # 127 scales


def _quantize_and_check(x: torch.Tensor, global_scale: float = 1.0, what: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    poison_cuda_allocator()
    packed, scales = msa_ops.nvfp4_quantize(x, global_scale)
    ref_packed, ref_scales = F.quantize_nvfp4(x.cpu(), global_scale)
    assert packed.device == x.device and scales.device == x.device
    assert packed.is_contiguous() and scales.is_contiguous()
    assert_bitwise_equal(scales, ref_scales, f"{what} scales")
    assert_bitwise_equal(packed, ref_packed, f"{what} packed")
    return packed, scales


def _dequantize_and_check(packed, scales, dtype, global_scale=1.0, what=""):
    poison_cuda_allocator()
    out = msa_ops.nvfp4_dequantize(packed, scales, dtype, global_scale)
    ref = F.dequantize_nvfp4(packed.cpu(), scales.cpu(), dtype, global_scale)
    assert out.device == packed.device and out.is_contiguous()
    assert_bitwise_equal(out, ref, f"{what} dequantize->{dtype}")
    return out


def _random_rows(shape, dtype, device, seed):
    """Normal data with per-row magnitudes spread over 1e-4..1e4 (never zeros)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    row_scale = 10.0 ** (torch.rand(shape[:-1] + (1,), generator=g) * 8 - 4)
    return (x * row_scale).to(dtype).to(device)


# ---- the reference itself, against values built by construction ------------------------------------------

def test_reference_e4m3_and_e2m1_tables():
    # E2M1 decode and round trip of every code; ties go to the even code; saturation at 6.
    codes = torch.arange(16, dtype=torch.uint8)
    values = F.e2m1_values_of(codes)
    assert values.tolist() == [0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6]
    assert torch.signbit(values[8])
    assert torch.equal(F.e2m1_rne_satfinite_codes(values), codes)
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 1e30, -0.1, -0.0])
    assert F.e2m1_rne_satfinite_codes(ties).tolist() == [0, 2, 2, 4, 4, 6, 6, 7, 7, 8, 8]
    # E4M3: saturation, NaN, smallest subnormal ties to even (2^-10 -> 0, 3 * 2^-10 -> 2^-8).
    e = F.e4m3_rne_satfinite(torch.tensor([500.0, -1e9, float("inf"), 2.0 ** -10, 3 * 2.0 ** -10]))
    assert e.float().tolist() == [448.0, -448.0, 448.0, 0.0, 2.0 ** -8]
    assert F.e4m3_rne_satfinite(torch.tensor([float("nan")])).float().isnan().all()


# ---- quantize -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INPUT_DTYPES)
def test_quantize_every_code_at_every_scale(device, dtype):
    # Group i holds code_value(0..15) * s_i for each of the 127 finite non-negative E4M3 scales s_i; the
    # group's amax is 6 s_i, so its scale must be exactly s_i and its codes exactly 0..15 (all 0 when s = 0).
    s = E4M3_FINITE_NONNEG.float().unsqueeze(1)
    x = (F.e2m1_values_of(torch.arange(16, dtype=torch.uint8)).unsqueeze(0) * s).to(dtype)
    packed, scales = _quantize_and_check(x.to(device), what=f"{dtype}")
    assert_bitwise_equal(scales.cpu().squeeze(1), E4M3_FINITE_NONNEG, "scales by construction")
    expected_codes = torch.arange(16, dtype=torch.uint8).repeat(127, 1)
    expected_codes[0] = 0
    assert torch.equal(F.unpack_e2m1(packed.cpu()), expected_codes)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INPUT_DTYPES)
def test_quantize_rounding_ties_and_neighbours(device, dtype):
    # Quotients exactly on every E2M1 rounding threshold, and one fp32 ulp either side of it, at many scales.
    thresholds = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    scales = E4M3_FINITE_NONNEG[1:].float()
    rows = []
    for s in scales.tolist():
        t = thresholds * s
        # T * s is exact in every input dtype (at most 7 significant bits); its neighbours in the input dtype.
        t = t.to(dtype)
        row = torch.cat([t, torch.nextafter(t, torch.full_like(t, math.inf)),
                         torch.nextafter(t, torch.full_like(t, -math.inf))[:1]]).float()
        row = torch.cat([torch.tensor([6.0 * s]), row])  # amax = 6 s: the scale is s
        rows.append(torch.cat([row, -row]))
    x = torch.stack(rows).to(dtype)  # [126, 32]
    _quantize_and_check(x.to(device), what=f"ties {dtype}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INPUT_DTYPES)
@pytest.mark.parametrize("global_scale", [1.0, 0.37, 1024.0, 3.0])
def test_quantize_random(device, dtype, global_scale):
    x = _random_rows((97, 256), dtype, device, seed=11)
    _quantize_and_check(x, global_scale, what=f"random {dtype} G={global_scale}")


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_zero_tiny_huge_groups(device):
    x = torch.randn(6, 64)
    x[0, :16] = 0.0                      # zero group: scale 0, codes 0
    x[0, 16:32] = -0.0                   # negative zeros: still all code 0 (the scale is 0)
    x[1, :16] = torch.randn(16) * 1e-30  # scale underflows to 0: codes 0
    x[1, 16:32] = torch.randn(16) * 2.0 ** -8  # subnormal E4M3 scales
    x[2, :16] = torch.randn(16) * 1e30   # scale saturates at 448, codes at +-6
    x[2, 16:32] = torch.full((16,), 3.0e38)
    x[3, :] = torch.randn(64) * 1e-42    # fp32 subnormal inputs
    packed, scales = _quantize_and_check(x.to(device), what="special")
    assert scales.cpu()[0, 0].float() == 0 and (packed.cpu()[0, :16] == 0).all()
    assert scales.cpu()[2, 0].float() == 448.0
    # Overflow of G * x stays finite: saturated scale and codes, never NaN.
    packed, scales = _quantize_and_check(x[2:3].to(device), global_scale=1e10, what="G overflow")
    assert not scales.float().isnan().any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INPUT_DTYPES)
def test_quantize_nan_inf_poison_only_their_group(device, dtype):
    clean = _random_rows((4, 64), torch.float32, "cpu", seed=3).to(dtype)
    x = clean.clone()
    x[0, 5] = float("nan")
    x[1, 17] = float("inf")
    x[2, 63] = float("-inf")
    packed, scales = _quantize_and_check(x.to(device), what="nan/inf")
    clean_packed, clean_scales = F.quantize_nvfp4(clean)
    bad = torch.zeros(4, 4, dtype=torch.bool)
    bad[0, 0] = bad[1, 1] = bad[2, 3] = True
    s = scales.cpu()
    assert s.float()[bad].isnan().all(), "a group with NaN/Inf must get the NaN scale"
    assert s.view(torch.uint8)[bad].eq(0x7F).all()
    assert torch.equal(s.view(torch.uint8)[~bad], clean_scales.view(torch.uint8)[~bad]), "other groups disturbed"
    codes = F.unpack_e2m1(packed.cpu()).reshape(4, 4, 16)
    assert (codes[bad] == 0).all()
    assert torch.equal(codes[~bad], F.unpack_e2m1(clean_packed).reshape(4, 4, 16)[~bad])
    out = msa_ops.nvfp4_dequantize(packed, scales, torch.float32).cpu().reshape(4, 4, 16)
    assert out[bad].isnan().all() and not out[~bad].isnan().any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(16,), (3, 5, 7, 32), (2, 1, 2048), (1, 0, 16), (0, 64), (5, 16)])
def test_quantize_shapes(device, shape):
    x = _random_rows(shape, torch.bfloat16, device, seed=5)
    packed, scales = _quantize_and_check(x, what=f"shape {shape}")
    assert packed.shape == shape[:-1] + (shape[-1] // 2,)
    assert scales.shape == shape[:-1] + (shape[-1] // 16,)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INPUT_DTYPES)
def test_quantize_strided_views(device, dtype):
    kv = _random_rows((3, 2, 128, 256), dtype, device, seed=7)     # one K-then-V buffer
    k, v = kv[..., :128], kv[..., 128:]
    _quantize_and_check(k, what="K view")
    _quantize_and_check(v, what="V view (unaligned-to-row start)")
    base = _random_rows((64, 48), dtype, device, seed=8)
    _quantize_and_check(base[::3], what="row step")
    _quantize_and_check(base.t().contiguous().t(), what="transposed")  # inner stride != 1: copied
    _quantize_and_check(base[:, 16:], what="offset view, 16-element aligned")
    _quantize_and_check(_random_rows((4, 1, 32), dtype, device, seed=9).expand(4, 3, 32), what="expanded")
    odd = _random_rows((1, 16 * 9 + 1), dtype, device, seed=10)[:, 1:]  # misaligned base pointer
    _quantize_and_check(odd, what="misaligned")


# ---- dequantize -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", OUTPUT_DTYPES)
@pytest.mark.parametrize("global_scale", [1.0, 0.25, 3.7])
def test_dequantize_every_byte_at_every_scale(device, dtype, global_scale):
    # All 256 packed bytes (every pair of codes) at all 256 scale bytes, NaNs and negatives included.
    packed = torch.arange(256, dtype=torch.uint8).repeat(256, 1)            # [256 scales, 512 elements]
    scales = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).unsqueeze(1).repeat(1, 32)
    out = _dequantize_and_check(packed.to(device), scales.to(device), dtype, global_scale, what="all")
    if dtype != torch.float8_e4m3fn and global_scale == 1.0:
        # By construction: code value times scale, exactly (finite scales).
        values = F.e2m1_values_of(F.unpack_e2m1(packed)) * scales.float().repeat_interleave(16, dim=1)
        finite = values.isfinite()
        assert torch.equal(out.cpu().float()[finite], values[finite].to(dtype).float())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", OUTPUT_DTYPES)
def test_dequantize_round_trip_and_views(device, dtype):
    x = _random_rows((2, 4, 128, 128), torch.bfloat16, device, seed=21)
    packed, scales = msa_ops.nvfp4_quantize(x)
    _dequantize_and_check(packed, scales, dtype, what="contiguous")
    # Strided views: K/V halves of one [P, H, 128, 64 + 64] packed buffer, and a row subset.
    buf = torch.cat([packed, packed.flip(-1)], dim=-1)
    sbuf = torch.cat([scales, scales.view(torch.uint8).flip(-1).view(torch.float8_e4m3fn)], dim=-1)
    _dequantize_and_check(buf[..., 64:], sbuf[..., 8:], dtype, what="V half")
    _dequantize_and_check(packed[:, ::2], scales[:, ::2], dtype, what="row step")
    _dequantize_and_check(packed[..., 1:9], scales[..., :1], dtype, what="misaligned packed")
    # Round-trip error: at most half the widest E2M1 step (2, between 4 and 6) times s, plus the clipping of
    # amax / s up to 6.4 when s rounded down; a group whose scale underflowed to 0 has amax < 6 * 2^-10.
    deq = msa_ops.nvfp4_dequantize(packed, scales, torch.float32).cpu()
    s = scales.cpu().float().repeat_interleave(16, dim=-1)
    unsaturated = s < 448  # with G = 1, amax > 6 * 448 clips
    err = (deq - x.cpu().float()).abs()
    assert (err <= torch.clamp(s, min=6 * 2.0 ** -10))[unsaturated].all()


# ---- contract, errors, repeatability, compile ----------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_repeatable(device):
    x = _random_rows((33, 512), torch.bfloat16, device, seed=31)
    a = msa_ops.nvfp4_quantize(x)
    b = msa_ops.nvfp4_quantize(x)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1].view(torch.uint8), b[1].view(torch.uint8))
    d1 = msa_ops.nvfp4_dequantize(*a, torch.bfloat16)
    d2 = msa_ops.nvfp4_dequantize(*a, torch.bfloat16)
    assert torch.equal(d1, d2)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_raise_clear_errors(device):
    x = torch.randn(4, 32, device=device)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        msa_ops.nvfp4_quantize([1.0] * 16)
    with pytest.raises(TypeError, match="x must be bfloat16, float16 or float32"):
        msa_ops.nvfp4_quantize(x.to(torch.int32))
    with pytest.raises(ValueError, match="multiple of 16"):
        msa_ops.nvfp4_quantize(x[:, :24])
    with pytest.raises(ValueError, match="at least one dimension"):
        msa_ops.nvfp4_quantize(x[0, 0])
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="global_scale"):
            msa_ops.nvfp4_quantize(x, bad)
    with pytest.raises(TypeError, match="global_scale"):
        msa_ops.nvfp4_quantize(x, torch.tensor(1.0))
    packed, scales = msa_ops.nvfp4_quantize(x)
    with pytest.raises(TypeError, match="packed must be uint8"):
        msa_ops.nvfp4_dequantize(packed.to(torch.int8), scales)
    with pytest.raises(TypeError, match="scales must be float8_e4m3fn"):
        msa_ops.nvfp4_dequantize(packed, scales.float())
    with pytest.raises(TypeError, match="dtype must be"):
        msa_ops.nvfp4_dequantize(packed, scales, torch.float16)
    with pytest.raises(ValueError, match="leading shapes"):
        msa_ops.nvfp4_dequantize(packed, scales[:3])
    with pytest.raises(ValueError, match="entries in the last dimension"):
        msa_ops.nvfp4_dequantize(packed, scales[:, :1])
    with pytest.raises(ValueError, match="multiple of 8"):
        msa_ops.nvfp4_dequantize(packed[:, :4], scales[:, :1])
    # The C++ ops check too (for callers that use torch.ops.msa directly).
    with pytest.raises(RuntimeError, match="multiple of 16"):
        torch.ops.msa.nvfp4_quantize(x[:, :24], 1.0)
    with pytest.raises(RuntimeError, match="global_scale"):
        torch.ops.msa.nvfp4_quantize(x, -2.0)
    with pytest.raises(RuntimeError, match="scales must have"):
        torch.ops.msa.nvfp4_dequantize(packed, scales[:, :1], torch.bfloat16, 1.0)


@requires_cuda
def test_mixed_devices_rejected():
    packed, scales = msa_ops.nvfp4_quantize(torch.randn(4, 32, device="cuda"))
    with pytest.raises(ValueError, match="one device"):
        msa_ops.nvfp4_dequantize(packed, scales.cpu())
    with pytest.raises(RuntimeError, match="one device"):
        torch.ops.msa.nvfp4_dequantize(packed, scales.cpu(), torch.bfloat16, 1.0)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    x = _random_rows((8, 64), torch.bfloat16, device, seed=41)
    torch.library.opcheck(torch.ops.msa.nvfp4_quantize.default, (x, 1.0))
    packed, scales = msa_ops.nvfp4_quantize(x)
    # test_schema is left out for dequantize: torch's SchemaCheckMode compares inputs with a multiply that
    # float8 tensors lack ("mul_cpu_reduced_float"). Its point, no input mutation, is checked by hand.
    packed_before, scales_before = packed.clone(), scales.view(torch.uint8).clone()
    for dtype in OUTPUT_DTYPES:
        torch.library.opcheck(torch.ops.msa.nvfp4_dequantize.default, (packed, scales, dtype, 2.0),
                              test_utils=("test_autograd_registration", "test_faketensor",
                                          "test_aot_dispatch_dynamic"))
    assert torch.equal(packed, packed_before) and torch.equal(scales.view(torch.uint8), scales_before)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    def round_trip(x):
        packed, scales = msa_ops.nvfp4_quantize(x)
        return msa_ops.nvfp4_dequantize(packed, scales, torch.bfloat16) * 2

    torch._dynamo.reset()
    compiled = torch.compile(round_trip, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    x = _random_rows((16, 128), torch.bfloat16, device, seed=51)
    assert torch.equal(compiled(x), round_trip(x))


@requires_cuda
def test_cuda_graph_replay_sees_in_place_updates():
    x = _random_rows((64, 256), torch.bfloat16, "cuda", seed=61)
    msa_ops.nvfp4_quantize(x)  # warm up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        packed, scales = msa_ops.nvfp4_quantize(x)
    x.copy_(_random_rows((64, 256), torch.bfloat16, "cuda", seed=62))
    graph.replay()
    torch.cuda.synchronize()
    ref_packed, ref_scales = F.quantize_nvfp4(x.cpu())
    assert_bitwise_equal(packed, ref_packed, "graph packed")
    assert_bitwise_equal(scales, ref_scales, "graph scales")


@requires_cuda
@pytest.mark.slow
def test_cuda_large_tensor_int64_indexing():
    # > 2^31 elements in the output of dequantize -> E4M3 (2.1 GB): offsets must not wrap.
    rows = (2 ** 31) // 128 + 64
    packed = torch.randint(0, 256, (rows, 64), dtype=torch.uint8, device="cuda")
    scales = torch.randint(0, 0x7F, (rows, 8), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    out = msa_ops.nvfp4_dequantize(packed, scales, torch.float8_e4m3fn)
    tail = slice(rows - 64, rows)
    ref = F.dequantize_nvfp4(packed[tail].cpu(), scales[tail].cpu(), torch.float8_e4m3fn)
    assert_bitwise_equal(out[tail], ref, "tail beyond 2^31")


@requires_cuda
@pytest.mark.parametrize("knobs", [{"MSA_NVFP4_QUANTIZE_BULK": "0"},
                                   {"MSA_NVFP4_QUANTIZE_HALF2": "0"},
                                   {"MSA_NVFP4_QUANTIZE_PARTS": "2", "MSA_NVFP4_QUANTIZE_UNROLL": "4"},
                                   {"MSA_NVFP4_DEQUANT_UNROLL": "1"}],
                         ids=["no-bulk", "fp32-encode", "two-threads-per-group",
                              "dequant-unroll-1"])
def test_cuda_benchmark_knobs_stay_bit_exact(knobs):
    # The kernel-variant knobs (bench/NOTES.md) are read once per process: rerun the bit-exact CUDA cases in a
    # subprocess with them set.
    selection = "cuda and (every or ties or random or tiny or nan_inf or strided) and not knobs"
    result = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:logging", "-k", selection],
                            env={**os.environ, **knobs}, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
