"""Failures of a job in cause order, and the one line that names the root cause
(`launch.failures`)."""

from __future__ import annotations

import signal
from pathlib import Path

from launch.failures import (
    LaunchError,
    LaunchInterrupted,
    RankFailure,
    cause_order,
    describe,
    died,
    is_peer_loss,
    native_trace_path,
    oom_summary,
    read_native_trace,
)

# The text gloo raises on a rank whose peer was killed (torch 2.x, gloo's tcp/pair.cc).
GLOO_RESET = (
    "[third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:19684: "
    "Connection reset by peer"
)
# torch.OutOfMemoryError's message format (c10/cuda/CUDACachingAllocator.cpp).
CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 2.10 GiB. GPU 0 has a total capacity of 79.11 GiB "
    "of which 812.00 MiB is free. Including non-PyTorch memory, this process has 78.30 GiB "
    "memory in use. Of the allocated memory 76.02 GiB is allocated by PyTorch"
)


def _failure(rank: int, error_type: str, message: str, time_s: float) -> RankFailure:
    return RankFailure(
        rank=rank, error_type=error_type, message=message, traceback="tb", time_s=time_s
    )


def test_a_dead_rank_heads_the_report_even_when_its_peer_failed_first() -> None:
    peer = _failure(0, "RuntimeError", GLOO_RESET, 1.0)
    dead = died(1, -signal.SIGKILL, 2.0)
    err = LaunchError((peer, dead), stopped=(2,))
    assert err.original is dead
    assert str(err).startswith("rank 1 killed by signal 9 (SIGKILL)")
    assert err.context()[0].startswith("then rank 0: RuntimeError: [third_party")
    assert err.context()[0].endswith("(a consequence: the peer was lost)")
    assert err.context()[1] == "then rank 2: stopped by the launcher"
    report = err.full_report()
    assert report.splitlines()[0] == err.headline() and "---- rank 0: RuntimeError" in report


def test_a_python_error_outranks_the_connection_errors_it_caused() -> None:
    reset = _failure(0, "DistBackendError", GLOO_RESET, 1.0)
    cause = _failure(1, "ValueError", "bad shard\nsecond line", 3.0)
    assert sorted([reset, cause], key=cause_order) == [cause, reset]
    assert LaunchError((reset, cause)).headline() == "rank 1: ValueError: bad shard"
    # Among errors of one kind the earliest is the cause.
    early = _failure(2, "KeyError", "k", 0.5)
    assert LaunchError((cause, early)).original is early


def test_peer_loss_is_read_from_the_message_not_the_type() -> None:
    assert is_peer_loss(_failure(0, "RuntimeError", GLOO_RESET, 0))
    assert is_peer_loss(_failure(0, "DistBackendError", "Timed out waiting 3000ms", 0))
    assert not is_peer_loss(_failure(0, "RuntimeError", "shape mismatch", 0))
    assert not is_peer_loss(died(0, -signal.SIGKILL, 0))


def test_deaths_by_signal_and_by_exit_code() -> None:
    assert died(3, -signal.SIGSEGV, 0).message == "rank 3 killed by signal 11 (SIGSEGV)"
    assert died(3, -signal.SIGSEGV, 0).signal == "SIGSEGV"
    assert died(3, 7, 0).message == "rank 3 exited with code 7 without a Python error"
    assert died(3, 7, 0).signal is None


def test_a_native_crash_carries_the_python_stacks_it_left(tmp_path: Path) -> None:
    path = native_trace_path(tmp_path, 1)
    assert read_native_trace(path) == ""  # a rank that left nothing
    # faulthandler's format (CPython 3.11 Modules/faulthandler.c)
    path.write_text(
        "Fatal Python error: Aborted\n\nCurrent thread 0x00007f (most recent call first):\n"
        '  File "/repo/profiles/profiler/collective_forms.py", line 199 in time_p2p_post\n'
    )
    dead = died(1, -signal.SIGABRT, 0.0, read_native_trace(path))
    assert dead.message == (
        "rank 1 killed by signal 6 (SIGABRT); native code aborted: an uncaught C++ exception, "
        "a failed check, or a heap corruption the C library detected (its message is on the "
        "rank's stderr); the Python stack of each of its threads at the crash follows"
    )
    assert dead.traceback.endswith("line 199 in time_p2p_post")
    assert "line 199 in time_p2p_post" in LaunchError((dead,)).full_report()
    assert died(1, -signal.SIGABRT, 0.0).traceback == ""


def test_out_of_memory_line_keeps_the_sizes() -> None:
    line = describe(_failure(0, "OutOfMemoryError", CUDA_OOM, 0))
    assert line == (
        "rank 0: CUDA out of memory: tried to allocate 2.10 GiB with 78.30 GiB of 79.11 GiB in use"
    )
    assert oom_summary("CUDA out of memory.") == "CUDA out of memory"


def test_an_interruption_carries_the_shell_exit_code_of_its_signal() -> None:
    ctrl_c, term = LaunchInterrupted("SIGINT"), LaunchInterrupted("SIGTERM")
    assert (ctrl_c.exit_code, term.exit_code) == (128 + signal.SIGINT, 128 + signal.SIGTERM)
    assert (ctrl_c.exit_code, term.exit_code) == (130, 143)
    assert isinstance(ctrl_c, KeyboardInterrupt)
    assert ctrl_c.headline() == ("interrupted by SIGINT (Ctrl-C); the launcher stopped every rank")
    assert term.headline() == "interrupted by SIGTERM; the launcher stopped every rank"
    assert term.context() == [] and term.full_report() == term.headline() + "\n"
