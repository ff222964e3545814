#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
