#!/usr/bin/env bash
# Set up (if needed) and run the whole loop on this machine: profile, plan, execute, report.
# Arguments go to `paraplan demo` (e.g. --out DIR, --reduced).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/paraplan demo "$@"
