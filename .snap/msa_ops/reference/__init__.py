"""fp32 pure-PyTorch references, one module per op family, written for clarity (the tests' ground truth).

The NVFP4 format reference lives in :mod:`msa_ops.formats` (it is also the user-facing plain-torch codec).
"""

from .. import formats as nvfp4  # noqa: F401
from . import indexer  # noqa: F401
from . import sparse_attention  # noqa: F401
