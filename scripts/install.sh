#!/usr/bin/env bash
# Create .venv and install paraplan with its test tools. Idempotent.
# TORCH_SPEC picks the PyTorch build: the default is the CPU wheel used by CI; on a GPU
# machine run `TORCH_SPEC=torch bash scripts/install.sh` to take the CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/pip install --quiet "${TORCH_SPEC:-torch==2.13.0}"
fi
.venv/bin/pip install --quiet -e ".[dev]"
