#!/usr/bin/env bash
# One-GPU kernel check of the cost model's fitted constants (bench/device_kernels.py), as the
# device tool runs it from the repository root:  bash scripts/device_check.sh [FLAGS]
# FLAGS go to the script after the defaults here (--budget-s 330; --hardware from the GPU's
# name: h200-sxm-141gb on an H200, else h100-sxm-80gb). Writes $OUT/device_kernels.json and
# the tables to $OUT/device_kernels.txt, progress to stderr, then prints the JSON's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder for device_kernels.json}"
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}"
HARDWARE=h100-sxm-80gb
if nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H200; then
  HARDWARE=h200-sxm-141gb
fi
"$PY" bench/device_kernels.py --out "$OUT" --budget-s 330 --hardware "$HARDWARE" "$@" \
  > "$OUT/device_kernels.txt"
"$PY" - "$OUT/device_kernels.json" <<'PYEOF'
import json
import sys

data = json.load(open(sys.argv[1]))
print(json.dumps({"meta": data["meta"], "summary": data["summary"]}, indent=1))
PYEOF
