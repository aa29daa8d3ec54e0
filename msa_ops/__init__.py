"""msa_ops: kernels for MiniMax Sparse Attention (MSA) and the MiniMax-M3 layer.

Importing the package loads the compiled library ``msa_ops._C``, which registers the ``torch.ops.msa.*``
custom ops (CPU kernels always; CUDA kernels when built with CUDA). The typed Python API is in
:mod:`msa_ops.ops` and re-exported here.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

__version__ = "0.1.0"


def _share_libstdcxx() -> None:
    """Put the process's libstdc++ in the global symbol scope before loading _C.

    On the H200 machine (GCC 13 headers, C++20) the compiled library carries weak copies of some libstdc++
    template instantiations (std::ostream::_M_insert<long> and friends). Loaded with RTLD_LOCAL, _C then
    bound to its own copies, and the first error message that formatted an integer crashed inside them.
    With libstdc++ global, every reference resolves to the one runtime copy. Set MSA_OPS_NO_LIBSTDCXX_PRELOAD=1
    to skip (for diagnosis).
    """
    if os.environ.get("MSA_OPS_NO_LIBSTDCXX_PRELOAD") == "1":
        return
    try:
        ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        pass  # not a glibc/libstdc++ system: nothing to share


def _load_library() -> None:
    _share_libstdcxx()
    here = Path(__file__).resolve().parent
    candidates = sorted(here.glob("_C*.so"))
    if not candidates:
        raise ImportError(
            "msa_ops: the compiled library msa_ops/_C*.so was not found. Build it from the repository root "
            "with `pip install --no-build-isolation -e .` (see README.md)."
        )
    try:
        torch.ops.load_library(str(candidates[0]))
    except OSError as err:  # e.g. built against another torch: undefined symbols
        raise ImportError(
            f"msa_ops: could not load {candidates[0].name} ({err}). It was probably built against another "
            f"torch than the installed {torch.__version__}; rebuild with "
            "`pip install --no-build-isolation -e .`."
        ) from err


_load_library()

from . import _fake  # noqa: E402,F401  (registers fake kernels for torch.compile)
from .ops import (cuda_archs, index_decode, index_decode_workspace_bytes, nvfp4_dequantize,  # noqa: E402
                  nvfp4_quantize, sparse_decode, topk_select)

__all__ = ["cuda_archs", "index_decode", "index_decode_workspace_bytes", "nvfp4_dequantize", "nvfp4_quantize",
           "sparse_decode", "topk_select", "__version__"]
