"""The collective calls the profiler times: each runs without a deprecation warning (a
warning reaches the user's terminal during `paraplan profile` and `paraplan demo`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from profiles.profiler.comm import COLLECTIVE_OPS

pytestmark = pytest.mark.slow  # imports torch in a fresh interpreter

SCRIPT = """
import sys, tempfile, warnings
import torch
import torch.distributed as dist
from profiles.profiler.comm import collective_call

warnings.simplefilter("error")
store = dist.FileStore(tempfile.mktemp(), 1)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
try:
    for op in sys.argv[1:]:
        collective_call(op, 1 << 12, dist.group.WORLD, (0,), 0, torch.device("cpu"))()
finally:
    dist.destroy_process_group()
print("ok")
"""


def test_collective_calls_raise_no_warning() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *(op for op in COLLECTIVE_OPS if op != "send_recv")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
