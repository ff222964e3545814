"""The shared launcher's interruption contract (`launch.world`): SIGINT and SIGTERM that
reach the launching process stop every rank and raise `LaunchInterrupted`; the ranks
themselves ignore SIGINT; a rank of a torchrun environment that cannot join its process
group gets one line naming the address and the fix.

The spawning tests start one world of 2 ranks each (a few seconds on 2 cores)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from launch.failures import LaunchError, LaunchInterrupted
from launch.world import RankInfo, launch, rendezvous_refusal

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60.0
"""Longest wait for the ranks to start on a loaded 2-core machine."""


@pytest.fixture(autouse=True)
def _ranks_can_import_this_module(monkeypatch: pytest.MonkeyPatch) -> None:
    # Spawned ranks import the rank functions by module name (``tests.launch.test_world``).
    monkeypatch.syspath_prepend(str(REPO))


# ---- rank functions (module level: spawned ranks import them by name) ------------------


def _sigint_disposition(info: RankInfo) -> bool:
    return signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def _abort_inside_a_collective_probe(info: RankInfo) -> None:
    dist.barrier()  # both ranks past their rendezvous
    if info.rank == 1:
        os.abort()  # as glibc does on a heap check ("malloc(): unaligned tcache chunk ...")


def _announce_then_wait(info: RankInfo, folder: str) -> None:
    (Path(folder) / f"rank{info.rank}.started").write_text("")
    time.sleep(WAIT_S)


# ---- tests -----------------------------------------------------------------------------


def _signal_once_started(folder: Path, signum: int) -> threading.Thread:
    """A thread that sends ``signum`` to this process once both ranks have started."""

    def send() -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if len(list(folder.glob("rank*.started"))) == 2:
                os.kill(os.getpid(), signum)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
@pytest.mark.usefixtures("python_sigint")
def test_ranks_ignore_sigint_so_only_the_launcher_answers_ctrl_c() -> None:
    assert launch(_sigint_disposition, world_size=2, timeout_s=30) == {0: True, 1: True}
    # the launcher's own handler is back once the ranks have started
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.usefixtures("python_sigint")
def test_a_signal_to_the_launcher_stops_every_rank_and_names_itself(
    tmp_path: Path, signum: int
) -> None:
    previous_term = signal.getsignal(signal.SIGTERM)
    sender = _signal_once_started(tmp_path, signum)
    start = time.monotonic()
    with pytest.raises(LaunchInterrupted) as caught:
        launch(_announce_then_wait, (str(tmp_path),), world_size=2, timeout_s=30)
    sender.join()
    assert caught.value.signal_name == signal.Signals(signum).name
    assert caught.value.exit_code == 128 + signum
    assert time.monotonic() - start < WAIT_S  # the ranks were stopped, not waited for
    assert multiprocessing.active_children() == []
    assert signal.getsignal(signal.SIGTERM) is previous_term


@pytest.mark.slow
def test_a_rank_that_native_code_aborts_names_the_python_line_it_was_on() -> None:
    with pytest.raises(LaunchError) as caught:
        launch(_abort_inside_a_collective_probe, world_size=2, timeout_s=WAIT_S)
    root, report = caught.value.original, caught.value.full_report()
    assert (root.rank, root.error_type, root.signal) == (1, "ProcessDied", "SIGABRT"), report
    assert root.message.startswith("rank 1 killed by signal 6 (SIGABRT); native code aborted")
    # the stack of the rank's main thread, as faulthandler writes it
    assert "in _abort_inside_a_collective_probe" in root.traceback
    assert "in _abort_inside_a_collective_probe" in report


def test_a_port_in_use_is_named_with_a_free_port_as_the_fix() -> None:
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    # torch's message for a store that cannot bind (c10d TCPStore, torch 2.x)
    exc = dist.DistNetworkError(
        "The server socket has failed to listen on any local network address. port: 29500, "
        "useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
    )
    line = rendezvous_refusal(env, 0, 2, exc)
    assert line.startswith("rank 0 of 2 could not join the process group at 127.0.0.1:29500")
    assert "port 29500 is already in use on this host: choose a free one" in line
    assert "\n" not in line


def test_ranks_that_never_came_are_named_with_the_world_to_start() -> None:
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    exc = dist.DistStoreError("Timed out after 61 seconds waiting for clients. 1/2 clients joined.")
    line = rendezvous_refusal(env, 0, 2, exc)
    assert "(DistStoreError: Timed out after 61 seconds waiting for clients. 1/2" in line
    assert line.endswith(
        "start all 2 ranks with the same MASTER_ADDR and MASTER_PORT (torchrun --nnodes N "
        "--nproc-per-node P with N x P = 2), and check that rank 0's host is reachable"
    )


@pytest.mark.slow
def test_a_rank_whose_launcher_already_died_exits_instead_of_waiting_for_it() -> None:
    # A launcher killed (SIGKILL) while its ranks still import never delivers the
    # parent-death signal to them: they must see the changed parent and leave.
    code = "import os; from launch.world import die_with_parent as d; d({}); print('alive')"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    gone = subprocess.run(
        [sys.executable, "-c", code.format("os.getppid() + 1")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert (gone.returncode, gone.stdout) == (1, "")
    alive = subprocess.run(
        [sys.executable, "-c", code.format("os.getppid()")], capture_output=True, text=True, env=env
    )
    assert (alive.returncode, alive.stdout) == (0, "alive\n")
