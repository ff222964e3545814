"""Fixtures shared across the test packages."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import torch.distributed as dist


@pytest.fixture()
def one_rank_group() -> Iterator[None]:
    """A one-rank gloo process group on a free local port, torn down afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()
