#!/usr/bin/env bash
# Install what msa_ops needs into the current python3 environment, then build msa_ops in place.
# Keeps an already-installed torch (e.g. the GPU machine's); otherwise installs torch 2.14.1 (a CUDA 13.0
# build, which also runs on machines without a GPU). CUDA kernels are built when nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q "torch==2.14.1"
fi
missing=$("$PY" - <<'PYEOF'
import importlib.util
need = {"numpy": "numpy", "pytest": "pytest", "ninja": "ninja", "cmake": "cmake", "setuptools": "setuptools>=64"}
print(" ".join(spec for mod, spec in need.items() if importlib.util.find_spec(mod) is None))
PYEOF
)
if [ -n "$missing" ]; then "$PY" -m pip install -q $missing; fi
"$PY" -m pip install -q --no-build-isolation --no-deps -e .
