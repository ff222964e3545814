"""A spawned rank's exit without interpreter teardown (`specs.host.exit_now`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import atexit, sys
from specs.host import exit_now
atexit.register(lambda: print("teardown ran"))
print("written", end="")
sys.stderr.write("error text")
exit_now(3)
"""


def test_exit_now_keeps_what_was_written_and_skips_teardown():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3
    # buffered output reaches its pipe; the atexit hooks of a normal exit never run
    assert done.stdout == "written"
    assert done.stderr == "error text"
