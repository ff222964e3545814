"""Bad input and failures of `paraplan profile`: clear errors, before measuring where the
input is at fault, and never a hang when a rank dies or stops answering.

Rule for --nproc on CPU (documented in `profiles.profiler.world.check_nproc`): at most
4 ranks per CPU core, and 512 MiB of free memory per rank; with CUDA one rank per GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from launch.failures import died
from paraplan.commands import profile as profile_command
from profiles.profiler import ProfilingError, profile_machine, world
from profiles.profiler import run as profiler_run
from profiles.profiler.world import RankEnv, run_world
from specs.errors import SpecError

HANG_LIMIT_S = 45.0
"""A failed world must be reported well within this (spawn is 2-10 s on 2 busy cores)."""
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _ranks_can_import_this_module(monkeypatch: pytest.MonkeyPatch) -> None:
    # Spawned ranks import the rank functions by module name (``tests.profiles...``);
    # with pytest's importlib mode that needs the repository root on sys.path.
    monkeypatch.syspath_prepend(str(REPO))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    profile_command.add_arguments(parser)
    return parser.parse_args(list(argv))


def _never_measure(*args: object, **kwargs: object) -> None:
    raise AssertionError("measured although the input was bad")


# ---- rank functions (module level: spawned ranks import them by name) --------------------


def _rank1_dies(env: RankEnv, emit: object) -> None:
    if env.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(4))  # rank 0 waits for a peer that is gone


def _rank1_goes_silent(env: RankEnv, emit: object) -> None:
    if env.rank == 1:
        time.sleep(10 * env.timeout_s)
    dist.all_reduce(torch.ones(4))  # rank 0 times out after env.timeout_s


# ---- bad input: refused before any rank starts ---------------------------------------------


def test_nproc_beyond_four_per_core_is_refused_before_measuring(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    too_many = 4 * (len(os.sched_getaffinity(0))) + 1
    with pytest.raises(SpecError, match="ranks per CPU core") as info:
        profile_command.run(parse("--quick", "--nproc", str(too_many), "--out", str(out)))
    assert f"--nproc {too_many}" in str(info.value)
    assert not out.exists()


def test_unwritable_out_is_refused_before_measuring(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(profiler_run, "measure_machine", _never_measure)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(SpecError, match="not writable"):
        profile_command.run(parse("--quick", "--out", str(blocker / "p.json")))
    with pytest.raises(SpecError, match="is a directory"):
        profile_command.run(parse("--quick", "--out", str(tmp_path)))


def test_writability_check_creates_folders_and_leaves_no_file(tmp_path: Path) -> None:
    out = tmp_path / "new" / "folder" / "p.json"
    assert profile_command.check_writable(str(out)) == out
    assert out.parent.is_dir() and not out.exists()
    out.write_text("{}")
    profile_command.check_writable(str(out))
    assert out.read_text() == "{}"  # an existing file is probed, never truncated


def test_unknown_model_is_refused_before_measuring(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(profiler_run, "measure_machine", _never_measure)
    with pytest.raises(SpecError, match="unknown model preset"):
        profile_command.run(parse("--model", "tinyy", "--out", str(tmp_path / "p.json")))


# ---- failures while measuring: fail fast, never hang ---------------------------------------


@pytest.mark.slow
def test_a_killed_peer_fails_the_world_fast() -> None:
    start = time.monotonic()
    with pytest.raises(ProfilingError) as info:
        run_world(_rank1_dies, (), nproc=2, timeout_s=60.0, progress=lambda *a: None)
    assert time.monotonic() - start < HANG_LIMIT_S
    text = str(info.value)
    assert text.startswith(
        "profiling failed: rank 1 ProcessDied: rank 1 killed by signal 9 (SIGKILL)"
    )
    assert "no profile was written" in text


@pytest.mark.slow
def test_a_silent_peer_hits_the_process_group_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(ProfilingError) as info:
        run_world(_rank1_goes_silent, (), nproc=2, timeout_s=3.0, progress=lambda *a: None)
    assert time.monotonic() - start < HANG_LIMIT_S
    assert "rank 0" in str(info.value) and "rank 1 (stopped)" in str(info.value)


@pytest.mark.slow
def test_killing_a_rank_mid_profile_stops_the_run(tmp_path: Path) -> None:
    killed: list[int] = []

    def kill_rank1(done: int, total: int, label: str) -> None:
        for child in multiprocessing.active_children():
            if child.name.endswith("rank1") and not killed and child.pid:
                os.kill(child.pid, signal.SIGKILL)
                killed.append(child.pid)

    start = time.monotonic()
    with pytest.raises(ProfilingError, match=r"rank 1 killed by signal 9 \(SIGKILL\)"):
        profile_machine(True, 2, None, kill_rank1)
    assert killed and time.monotonic() - start < 2 * HANG_LIMIT_S
    assert not any(c.name.startswith("paraplan-profile") for c in multiprocessing.active_children())


def test_only_a_rank_killed_by_a_native_crash_signal_marks_the_error_as_a_crash() -> None:
    def died(rank: int, sig: signal.Signals, at: float) -> dict:
        return world._death(rank, -sig.value) | {"time_s": at}

    python_error = {"rank": 0, "error_type": "RuntimeError", "message": "boom", "time_s": 0.0}
    # the root is the rank that died without a Python error, whatever its peers raised
    assert world._crashed([python_error, died(1, signal.SIGABRT, 1.0)])
    assert world._crashed([died(0, signal.SIGSEGV, 2.0), died(1, signal.SIGKILL, 3.0)])
    assert not world._crashed([died(1, signal.SIGKILL, 1.0)])  # e.g. the OOM killer
    assert not world._crashed([python_error])
    assert not world._crashed([{**died(1, signal.SIGABRT, 1.0), "signal": None}])
    text = world._failure_message([python_error, died(1, signal.SIGABRT, 1.0)], set())
    assert text.startswith(
        "profiling failed: rank 1 ProcessDied: rank 1 killed by signal 6 (SIGABRT)"
    )
    assert text.endswith("then: rank 0 (RuntimeError)")
    assert world.ProfilingError("x", crashed=True).crashed and not world.ProfilingError("x").crashed


def test_a_native_crash_shows_the_python_line_each_thread_of_the_rank_was_on() -> None:
    # faulthandler's format (CPython 3.11 Modules/faulthandler.c), as the rank left it
    stack = (
        "Fatal Python error: Aborted\n\nCurrent thread 0x00007f (most recent call first):\n"
        '  File "/repo/profiles/profiler/collective_forms.py", line 199 in time_p2p_post'
    )
    root = dataclasses.asdict(died(1, -signal.SIGABRT, 1.0, stack))
    python_error = {"rank": 0, "error_type": "RuntimeError", "message": "boom", "time_s": 2.0}
    line, *trace = world._failure_message([python_error, root], set()).splitlines()
    assert line.startswith("profiling failed: rank 1 ProcessDied: rank 1 killed by signal 6")
    assert line.endswith("no profile was written; then: rank 0 (RuntimeError)")
    assert trace == stack.splitlines()
    # a Python error's traceback stays in the run's log, out of the one-line message
    assert "\n" not in world._failure_message([{**python_error, "traceback": "tb"}], set())
