"""Fixtures shared across the test packages."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import torch.distributed as dist
from hypothesis import settings

# Property tests check values, not speed: no per-example deadline (a loaded 2-core machine
# can take a few hundred milliseconds for an example that usually takes tens).
settings.register_profile("paraplan", deadline=None)
settings.load_profile("paraplan")


@pytest.fixture()
def one_rank_group() -> Iterator[None]:
    """A one-rank gloo process group on a free local port, torn down afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture()
def python_sigint() -> Iterator[None]:
    """SIGINT raising KeyboardInterrupt in this process for the test, as in a terminal.

    A process started in the background of a non-interactive shell (``cmd &``, as CI
    runners and ``nohup`` start it) inherits SIGINT ignored, so a test of what Ctrl-C does
    installs Python's own handler first and puts the inherited one back afterwards."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
