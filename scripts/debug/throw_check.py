import faulthandler, sys, torch
faulthandler.enable()
import msa_ops
x = torch.randn(4, 32, device=sys.argv[1] if len(sys.argv) > 1 else "cuda")
for name, fn in [("width", lambda: torch.ops.msa.nvfp4_quantize(x[:, :24], 1.0)),
                 ("gscale", lambda: torch.ops.msa.nvfp4_quantize(x, -2.0))]:
    print("calling", name, flush=True)
    try:
        fn()
    except RuntimeError as e:
        print(name, "raised", str(e).splitlines()[0], flush=True)
