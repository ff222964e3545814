"""Launching ranks: capacity checks, thread shares, and the fail-fast contract.

The spawning tests are grouped: each starts one small world (2 ranks, about 2 s each on
2 cores) and checks one behaviour of `executor.launch.launch`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from executor.launch import (
    LaunchError,
    RankFailure,
    RankInfo,
    backend_for,
    check_world_fits,
    host_capacity,
    launch,
    set_group_timeouts,
    threads_per_rank,
    under_torchrun,
)
from launch.world import read_failure
from specs.errors import SpecError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _ranks_can_import_this_module(monkeypatch: pytest.MonkeyPatch) -> None:
    # Spawned ranks import the rank functions by module name (``tests.executor...``);
    # with pytest's importlib mode that needs the repository root on sys.path.
    monkeypatch.syspath_prepend(str(REPO))


# ---- rank functions (module level: spawned ranks import them by name) ------------------


def _sum_ranks(info: RankInfo, scale: int) -> dict[str, object]:
    x = torch.tensor([float(info.rank)])
    dist.all_reduce(x)
    return {
        "sum": x.item() * scale,
        "threads": torch.get_num_threads(),
        "backend": info.backend,
        "env_rank": os.environ["RANK"],
    }


def _wait_policy(info: RankInfo) -> tuple[int, str | None]:
    return torch.get_num_threads(), os.environ.get("OMP_WAIT_POLICY")


def _rank1_raises(info: RankInfo) -> None:
    if info.rank == 1:
        raise ValueError("bad shard 7 on rank one")
    # Rank 0 waits in a collective its peer never joins: it must not hang the job.
    dist.all_reduce(torch.ones(4))


def _mismatched_collectives(info: RankInfo) -> None:
    group = dist.new_group([0, 1])
    set_group_timeouts(info.timeout_s)
    if info.rank == 0:
        dist.all_reduce(torch.ones(3), group=group)
    else:
        time.sleep(3 * info.timeout_s)


# ---- pure helpers ------------------------------------------------------------------------


def test_threads_are_a_fair_share_of_the_cores() -> None:
    assert threads_per_rank(16, 4) == 4
    assert threads_per_rank(2, 2) == 1
    assert threads_per_rank(2, 4) == 1  # never zero
    assert threads_per_rank(3, 2) == 1


def test_capacity_counts_gpus_else_cores_and_memory() -> None:
    assert host_capacity(num_cpus=2, cuda_devices=8, mem_bytes=None) == 8
    assert host_capacity(num_cpus=2, cuda_devices=0, mem_bytes=None) == 8
    # 1 GiB of free memory hosts 2 ranks of 512 MiB, fewer than the 8 the cores allow.
    assert host_capacity(num_cpus=2, cuda_devices=0, mem_bytes=2**30) == 2


def test_world_too_large_is_a_spec_error_with_a_fix() -> None:
    check_world_fits(8, capacity=8, cuda=False)
    with pytest.raises(SpecError, match=r"world size tp·pp·cp·dp = 16 exceeds .* 8 ranks"):
        check_world_fits(16, capacity=8, cuda=False)
    with pytest.raises(SpecError, match="torchrun"):
        check_world_fits(2, capacity=1, cuda=True)


def test_torchrun_environment_and_backend() -> None:
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h"}
    assert not under_torchrun(env)
    assert under_torchrun(env | {"MASTER_PORT": "1"})
    assert backend_for(True) == "nccl"
    assert backend_for(False) == "gloo"


def test_launch_error_reports_the_earliest_error_first() -> None:
    late = RankFailure(
        rank=0, error_type="DistBackendError", message="closed", traceback="", time_s=2
    )
    early = RankFailure(
        rank=1, error_type="ValueError", message="bad", traceback="Traceback ...", time_s=1
    )
    err = LaunchError((late, early))
    assert err.original is early
    assert str(err) == "rank 1: ValueError: bad"
    assert err.context() == ["then rank 0: DistBackendError: closed"]


def test_local_launch_refuses_a_world_the_machine_cannot_host() -> None:
    start = time.monotonic()
    with pytest.raises(SpecError, match="exceeds what this machine can host"):
        launch(_sum_ranks, (1,), world_size=10_000)
    assert time.monotonic() - start < 1.0  # nothing was spawned


# ---- spawned worlds ----------------------------------------------------------------------


@pytest.mark.slow
def test_two_ranks_run_and_return_their_results() -> None:
    results = launch(_sum_ranks, (10,), world_size=2, timeout_s=30)
    assert sorted(results) == [0, 1]
    for rank, result in results.items():
        assert result["sum"] == 10.0  # (0 + 1) * 10 on both ranks
        assert result["backend"] == "gloo"
        assert result["env_rank"] == str(rank)
        assert result["threads"] == threads_per_rank(len(os.sched_getaffinity(0)), 2)


@pytest.mark.slow
def test_a_raising_rank_ends_the_job_with_its_original_error() -> None:
    timeout_s = 60.0
    start = time.monotonic()
    with pytest.raises(LaunchError) as info:
        launch(_rank1_raises, world_size=2, timeout_s=timeout_s, grace_s=1.0)
    # Rank 0 is stopped, not left waiting for its timeout (spawning takes a few seconds).
    assert time.monotonic() - start < timeout_s
    err = info.value
    assert err.original.rank == 1
    assert err.original.error_type == "ValueError"
    assert err.original.message == "bad shard 7 on rank one"
    assert "_rank1_raises" in err.original.traceback


@pytest.mark.slow
def test_a_collective_that_one_rank_never_joins_times_out() -> None:
    timeout_s = 3.0
    start = time.monotonic()
    with pytest.raises(LaunchError) as info:
        launch(_mismatched_collectives, world_size=2, timeout_s=timeout_s, grace_s=0.5)
    # Rank 0 raises at its 3 s timeout, not at the 30 min default of new groups.
    assert time.monotonic() - start < 60
    assert info.value.original.rank == 0
    assert "Timed out waiting 3000ms" in info.value.original.message


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_torchrun_environment_runs_in_process_and_checks_the_world() -> None:
    script = (
        "from executor.launch import launch\n"
        "from tests.executor.test_launch import _sum_ranks\n"
        "print(launch(_sum_ranks, (3,), world_size=1))\n"
        "try:\n"
        "    launch(_sum_ranks, (3,), world_size=2)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    env = os.environ | {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "PYTHONPATH": str(REPO),
    }
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "{0: {'sum': 0.0" in out.stdout
    assert "SpecError torchrun started 1 ranks but the plan needs tp·pp·cp·dp = 2" in out.stdout


def test_an_unreadable_error_report_is_reported_as_such(tmp_path: Path) -> None:
    # A full disk leaves a rank's error file empty: the launcher says so, it does not
    # fail on the parse.
    empty = tmp_path / "rank1.error.json"
    empty.write_text("")
    failure = read_failure(1, empty, 1)
    assert failure.rank == 1 and failure.error_type == "UnreadableErrorReport"
    assert str(empty) in failure.message and "disk" in failure.message
    good = tmp_path / "rank0.error.json"
    good.write_text(
        '{"rank": 0, "error_type": "ValueError", "message": "m", "traceback": "t", "time_s": 1.0}'
    )
    assert read_failure(0, good, 1).error_type == "ValueError"


@pytest.mark.slow
def test_cpu_ranks_of_several_threads_spin_their_openmp_workers(monkeypatch) -> None:
    from specs.host import available_cpus

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    if torch.cuda.is_available() or available_cpus() < 2:
        pytest.skip("needs a CPU-only machine of at least two cores")
    ((threads, policy),) = launch(_wait_policy, world_size=1, timeout_s=30).values()
    assert threads >= 2 and policy == "ACTIVE"
    assert "OMP_WAIT_POLICY" not in os.environ  # the parent's environment is restored
    # ranks of one thread keep OpenMP's default; a user's own setting is kept
    if available_cpus() == 2:
        assert {p for _, p in launch(_wait_policy, world_size=2, timeout_s=30).values()} == {None}
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    ((_, policy),) = launch(_wait_policy, world_size=1, timeout_s=30).values()
    assert policy == "PASSIVE"
