#!/usr/bin/env bash
# Create .venv and install tether with its dev tools, from nothing.
# On a host whose python3 already has a GPU build of torch (CUDA or ROCm), the venv sees the
# system site-packages and keeps that torch; elsewhere it takes the CPU build torch==2.13.0
# (an unpinned torch would pull a multi-GB CUDA build onto a machine with no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  if "$PYTHON" -c 'import torch, sys; sys.exit(0 if (torch.version.cuda or torch.version.hip) else 1)' 2>/dev/null; then
    "$PYTHON" -m venv --system-site-packages .venv
  else
    "$PYTHON" -m venv .venv
  fi
fi
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  .venv/bin/python -m pip install -q torch==2.13.0
fi
# The Triton the GPU evidence was measured under (the H200's 3.6; the kernels extra admits the
# releases the Gluon arm is compiled for, 3.6 to 3.9) where this venv owns its torch; a GPU
# build of torch keeps the Triton it was built with (a second one would shadow it).
pins=()
if ! .venv/bin/python -c 'import torch, sys; sys.exit(0 if (torch.version.cuda or torch.version.hip) else 1)' 2>/dev/null; then
  pins=('triton==3.6.*')
fi
.venv/bin/python -m pip install -q -e '.[dev]' "${pins[@]}"
.venv/bin/python -c 'import tether, torch, triton; print("tether", tether.__version__, "torch", torch.__version__, "triton", triton.__version__)'
