"""The test suite's gloo world (`tests.executor.spawn_utils`): a rank that native code kills
reports the Python line each of its threads was on."""

from __future__ import annotations

import os

import pytest
import torch.distributed as dist

from tests.executor.spawn_utils import run_world


def _abort_after_saving(rank: int, save) -> None:
    save(rank)
    dist.barrier()  # both ranks past their rendezvous
    if rank == 1:
        os.abort()  # as glibc does on a heap check ("malloc(): unaligned tcache chunk ...")


@pytest.mark.slow
def test_a_rank_that_native_code_aborts_names_the_python_line_it_was_on():
    results, error = run_world(2, _abort_after_saving)
    assert results == [0, 1]
    assert error is not None and "SIGABRT" in error
    # faulthandler's stack of rank 1, at the end of the text (tests show its tail)
    assert "---- rank 1, native crash:" in error and "---- rank 0" not in error
    assert "in _abort_after_saving" in error[-2500:]
