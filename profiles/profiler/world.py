"""The profiling world: the shared launcher (`launch.world`) with the profiler's rules.

`run_world` checks that the machine can host ``nproc`` ranks (`check_nproc`), then runs
the worker on every rank through `launch.world.launch` (spawned ranks, or the ranks
torchrun started); rank 0 streams progress to the parent, and its result comes back.

Failure contract: when a rank fails (a Python error, or a death such as SIGKILL) the
launcher gives the others ``grace_s`` to fail on their own, stops the rest and reports the
failures from root cause to consequence (`launch.failures.cause_order`); `run_world` turns
that into a one-line `ProfilingError`, followed, when the root cause is a rank that native
code killed, by the Python stack each of its threads was in.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from launch.failures import LaunchError, RankFailure, cause_order, died, first_line
from launch.world import Progress, RankInfo, launch
from specs.errors import SpecError
from specs.host import (
    MAX_RANKS_PER_CPU,
    RANK_RUNTIME_BYTES,
    available_cpus,
    mem_available_bytes,
    threads_per_rank,
    under_torchrun,
)

__all__ = [
    "MAX_RANKS_PER_CPU",
    "NATIVE_CRASH_SIGNALS",
    "ProfilingError",
    "Progress",
    "RankEnv",
    "check_local_world",
    "check_nproc",
    "run_world",
    "threads_per_rank",
]

RankEnv = RankInfo
"""What a rank knows about itself (the launcher's `launch.world.RankInfo`)."""

NATIVE_CRASH_SIGNALS = frozenset({"SIGABRT", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL"})
"""Signals of a rank that crashed in native code (the C library's heap checks abort; a bad
access faults); such a crash can be transient, so running again may succeed."""


class ProfilingError(RuntimeError):
    """A profiling run whose ranks did not all finish; ``crashed``: the root cause is a
    rank killed by one of `NATIVE_CRASH_SIGNALS` (running again may succeed)."""

    def __init__(self, message: str, *, crashed: bool = False) -> None:
        super().__init__(message)
        self.crashed = crashed


def check_nproc(nproc: int, *, cuda_devices: int, num_cpus: int, mem_bytes: int | None) -> None:
    """Raise `SpecError` unless this machine can host ``nproc`` profiling ranks.

    Rule: with CUDA, one rank per GPU (``nproc <= cuda_devices``); on CPU at most
    `MAX_RANKS_PER_CPU` ranks per core and `RANK_RUNTIME_BYTES` of free memory per rank.
    """
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise SpecError(f"--nproc must be a positive integer, got {nproc!r}; try --nproc 2")
    if cuda_devices > 0:
        if nproc > cuda_devices:
            raise SpecError(
                f"--nproc {nproc} exceeds the {cuda_devices} CUDA devices of this machine (one "
                f"rank per GPU); use --nproc {cuda_devices}, or torchrun across nodes"
            )
        return
    by_cpu = MAX_RANKS_PER_CPU * num_cpus
    if nproc > by_cpu:
        raise SpecError(
            f"--nproc {nproc} exceeds {MAX_RANKS_PER_CPU} ranks per CPU core x {num_cpus} "
            f"cores = {by_cpu}; oversubscribed ranks measure the scheduler, not the machine; "
            f"use --nproc {min(num_cpus, by_cpu)} (one rank per core) or at most {by_cpu}"
        )
    if mem_bytes is not None and nproc * RANK_RUNTIME_BYTES > mem_bytes:
        most = max(1, mem_bytes // RANK_RUNTIME_BYTES)
        raise SpecError(
            f"--nproc {nproc} needs about {nproc * RANK_RUNTIME_BYTES >> 20} MiB "
            f"({RANK_RUNTIME_BYTES >> 20} MiB per rank) but {mem_bytes >> 20} MiB is free; "
            f"use --nproc {most} or free memory"
        )


def check_local_world(nproc: int) -> None:
    """`check_nproc` with this machine's GPUs, cores and free memory."""
    cuda = torch.cuda.is_available()
    check_nproc(
        nproc,
        cuda_devices=torch.cuda.device_count() if cuda else 0,
        num_cpus=available_cpus(),
        mem_bytes=mem_available_bytes(),
    )


Worker = Callable[..., Any]
"""``worker(env: RankEnv, emit: Progress, *args)``; a module-level function (ranks are
spawned, not forked, and import it by name)."""


def run_world(
    worker: Worker,
    args: tuple[Any, ...],
    *,
    nproc: int | None,
    timeout_s: float,
    progress: Progress,
    grace_s: float = 3.0,
) -> Any:
    """Run ``worker`` on every rank; return rank 0's result (this rank's under torchrun).

    ``nproc`` None is only allowed under torchrun, whose world it then takes.
    Raises `SpecError` before starting anything when the machine cannot host ``nproc``
    ranks (or torchrun's world differs), and `ProfilingError` when a rank fails.
    """
    torchrun = under_torchrun(os.environ)
    if torchrun:
        world = int(os.environ["WORLD_SIZE"])
        if nproc is not None and nproc != world:
            raise SpecError(
                f"--nproc {nproc} differs from torchrun's WORLD_SIZE {world}; drop --nproc "
                "under torchrun (the world is --nnodes x --nproc-per-node)"
            )
        nproc = world
    elif nproc is None:
        raise SpecError("--nproc is required outside torchrun, e.g. --nproc 2")
    else:
        check_local_world(nproc)
    try:
        results = launch(
            _profiling_rank,
            (worker, args),
            world_size=nproc,
            timeout_s=timeout_s,
            grace_s=grace_s,
            progress=progress,
            name="paraplan-profile",
        )
    except LaunchError as exc:
        failures = [dataclasses.asdict(f) for f in exc.failures]
        raise ProfilingError(
            _failure_message(failures, set(exc.stopped)), crashed=_crashed(failures)
        ) from None
    return next(iter(results.values())) if torchrun else results[0]


def _profiling_rank(env: RankEnv, worker: Worker, args: tuple[Any, ...]) -> Any:
    """A rank of the profiling world: the worker's result on rank 0, None elsewhere (only
    rank 0's result travels back)."""
    result = worker(env, env.emit, *args)
    return result if env.rank == 0 or under_torchrun(os.environ) else None


def _death(rank: int, exitcode: int | None) -> dict[str, Any]:
    """`launch.failures.died` as the dict `_failure_message` reads."""
    return dataclasses.asdict(died(rank, exitcode, time.time()))


def _as_failure(record: dict[str, Any]) -> RankFailure:
    return RankFailure(
        rank=record["rank"],
        error_type=record["error_type"],
        message=record["message"],
        traceback=record.get("traceback", ""),
        time_s=record["time_s"],
        signal=record.get("signal"),
    )


def _crashed(failures: list[dict[str, Any]]) -> bool:
    """Whether the root cause is a native crash (`NATIVE_CRASH_SIGNALS`)."""
    root = min(failures, key=lambda r: cause_order(_as_failure(r)))
    return root.get("signal") in NATIVE_CRASH_SIGNALS


def _failure_message(failures: list[dict[str, Any]], stopped: set[int]) -> str:
    """One line: the root cause first, then the other failed and stopped ranks; under it,
    for a root cause that died in native code, the Python stacks it left at the crash
    (`launch.failures.record_native_crashes`)."""
    ordered = sorted(failures, key=lambda r: cause_order(_as_failure(r)))
    root = ordered[0]
    text = (
        f"profiling failed: rank {root['rank']} {root['error_type']}: "
        f"{first_line(root['message'])}; no profile was written"
    )
    others = [f"rank {f['rank']} ({f['error_type']})" for f in ordered[1:]]
    others += [f"rank {r} (stopped)" for r in sorted(stopped)]
    if others:
        text += f"; then: {', '.join(others)}"
    if root["error_type"] == "ProcessDied" and root.get("traceback"):
        text += "\n" + root["traceback"]
    return text
