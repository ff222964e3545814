"""Start one process per rank, set up torch.distributed in each, and fail fast together.

Two ways in:

- **local spawn** (no torchrun environment): the parent checks that this machine can host
  the world, starts a TCP store, spawns ``world_size`` processes and watches them. The
  store lives in the parent, so no port is raced for.
- **torchrun** (``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR`` set, possibly many
  nodes): this process is one rank; the process group comes from the environment, and
  torchrun's agent tears the job down when a rank exits with an error.

Conventions in every rank: the backend is NCCL when CUDA is available, gloo otherwise;
each rank gets its fair share of the CPU threads (``torch.set_num_threads``; two gloo ranks
that each use every core run about 4x slower, reference/torch-distributed-on-cpu.md §7);
every process group gets the same timeout (`set_group_timeouts`), so a collective that one
rank never joins raises instead of hanging.

Failure contract of `launch`: when a rank raises, it records the error (type, message,
traceback, time) in a file and exits; the parent gives the other ranks ``grace_s`` seconds
to finish or fail on their own, stops the rest, and raises `LaunchError` whose
``original`` is the earliest recorded error, the root cause, not the "connection closed"
errors it caused on the peers.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from specs.errors import SpecError
from specs.host import (
    MAX_RANKS_PER_CPU,
    RANK_RUNTIME_BYTES,
    available_cpus,
    exit_now,
    mem_available_bytes,
    spawn_environment,
    spin_wait_env,
    threads_per_rank,
    under_torchrun,
)

FLIGHT_RECORDER_ENTRIES = 20_000
"""Collectives the flight recorder keeps per process (a ring buffer of small records)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankInfo:
    """What a rank function learns about its own process."""

    rank: int
    """Global rank."""
    world_size: int
    """Number of ranks in the job."""
    local_rank: int
    """Rank on this machine (selects the GPU)."""
    local_world_size: int
    """Ranks on this machine."""
    backend: str
    """Process-group backend: ``nccl`` or ``gloo``."""
    device: str
    """Torch device of this rank: ``cuda:<local_rank>`` or ``cpu``."""
    num_threads: int
    """Intra-op CPU threads this rank was given."""
    timeout_s: float
    """Process-group timeout in seconds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankFailure:
    """One rank's error, as it recorded it (or as the parent saw the process end)."""

    rank: int
    """Global rank that failed."""
    error_type: str
    """Exception class name, e.g. ``ValueError``; ``ProcessDied`` without a Python error."""
    message: str
    """The exception message."""
    traceback: str
    """Formatted traceback in the rank, empty when the process died without one."""
    time_s: float
    """Wall-clock time (``time.time()``) of the failure."""


class LaunchError(RuntimeError):
    """A job whose ranks did not all finish; ``original`` is the root-cause error."""

    def __init__(self, failures: tuple[RankFailure, ...]) -> None:
        self.failures = tuple(sorted(failures, key=lambda f: f.time_s))
        self.original = self.failures[0]
        super().__init__(self._message())

    def _message(self) -> str:
        o = self.original
        text = f"rank {o.rank} failed: {o.error_type}: {o.message}"
        if o.traceback:
            text += f"\n{o.traceback.rstrip()}"
        others = [f"rank {f.rank} ({f.error_type})" for f in self.failures[1:]]
        if others:
            text += f"\nthen stopped: {', '.join(others)}"
        return text


# ---- facts about this machine ----------------------------------------------------------


def backend_for(cuda_available: bool) -> str:
    """NCCL with CUDA, gloo otherwise."""
    return "nccl" if cuda_available else "gloo"


def host_capacity(*, num_cpus: int, cuda_devices: int, mem_bytes: int | None) -> int:
    """Most ranks this machine can host: one per GPU with CUDA; on CPU the smaller of
    `MAX_RANKS_PER_CPU` per core and the memory over `RANK_RUNTIME_BYTES` per rank."""
    if cuda_devices > 0:
        return cuda_devices
    by_cpu = MAX_RANKS_PER_CPU * num_cpus
    if mem_bytes is None:
        return by_cpu
    return max(1, min(by_cpu, mem_bytes // RANK_RUNTIME_BYTES))


def check_world_fits(world_size: int, *, capacity: int, cuda: bool) -> None:
    """Raise `SpecError` when a local launch of ``world_size`` ranks exceeds ``capacity``."""
    if world_size <= capacity:
        return
    unit = "GPUs" if cuda else "ranks (CPU processes)"
    raise SpecError(
        f"world size tp·pp·cp·dp = {world_size} exceeds what this machine can host: "
        f"{capacity} {unit}; choose a plan with at most {capacity} ranks, or start it on "
        "more machines with torchrun (`torchrun --nnodes N --nproc-per-node P -m paraplan "
        "execute PLAN.json`)"
    )


def check_local_launch(world_size: int) -> None:
    """`check_world_fits` with this machine's GPUs, cores and free memory."""
    cuda = torch.cuda.is_available()
    capacity = host_capacity(
        num_cpus=available_cpus(),
        cuda_devices=torch.cuda.device_count() if cuda else 0,
        mem_bytes=mem_available_bytes(),
    )
    check_world_fits(world_size, capacity=capacity, cuda=cuda)


def set_group_timeouts(timeout_s: float) -> None:
    """Give every process group created so far the job's timeout.

    `dist.new_group` (and so DeviceMesh) defaults to 30 minutes whatever
    `init_process_group` was given; call this after the groups exist.
    """
    timeout = timedelta(seconds=timeout_s)
    for group in list(dist.distributed_c10d._world.pg_map):
        group.set_timeout(timeout)


# ---- the launch itself -------------------------------------------------------------------


def launch(
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    *,
    world_size: int,
    timeout_s: float = 60.0,
    grace_s: float = 2.0,
) -> dict[int, Any]:
    """Run ``fn(info: RankInfo, *args)`` on every rank; return ``{rank: result}``.

    Locally every rank's result comes back (results must pickle); under torchrun only this
    process's. ``fn`` must be importable by name (a module-level function) because ranks are
    spawned, not forked. Raises `SpecError` before starting anything when this machine
    cannot host the world (or torchrun's world differs), and `LaunchError` when a rank fails.
    """
    if under_torchrun(os.environ):
        return _run_under_torchrun(fn, args, world_size=world_size, timeout_s=timeout_s)
    check_local_launch(world_size)
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        world_size + 1,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
    )
    threads = threads_per_rank(available_cpus(), world_size)
    with tempfile.TemporaryDirectory(prefix="paraplan-launch-") as tmp:
        ctx = multiprocessing.get_context("spawn")
        procs = [
            ctx.Process(
                target=_spawned_rank,
                args=(fn, args, rank, world_size, store.port, tmp, timeout_s, threads),
                name=f"paraplan-rank{rank}",
            )
            for rank in range(world_size)
        ]
        try:
            spin = spin_wait_env(threads, torch.cuda.is_available(), os.environ)
            with spawn_environment(spin):
                for proc in procs:
                    proc.start()
            stopped = _watch(procs, grace_s=grace_s)
        finally:
            _stop(procs)
        return _collect(procs, Path(tmp), stopped)


def _watch(procs: list[Any], *, grace_s: float) -> set[int]:
    """Wait until every rank exits; once one fails, give the others ``grace_s`` seconds
    and return the ranks that had to be stopped."""
    failed_at: float | None = None
    while True:
        codes = [p.exitcode for p in procs]
        if all(c is not None for c in codes):
            return set()
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > grace_s:
            running = {r for r, p in enumerate(procs) if p.exitcode is None}
            _stop(procs)
            return running
        waiting = [p.sentinel for p in procs if p.exitcode is None]
        multiprocessing.connection.wait(waiting, timeout=0.1)


def _stop(procs: list[Any]) -> None:
    """Terminate the ranks still running, then kill those that ignore SIGTERM."""
    alive = [p for p in procs if p.exitcode is None and p.pid is not None]
    for proc in alive:
        proc.terminate()
    deadline = time.monotonic() + 2.0
    for proc in alive:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.exitcode is None:
            proc.kill()
            proc.join()


def _collect(procs: list[Any], tmp: Path, stopped: set[int]) -> dict[int, Any]:
    failures = []
    for rank, proc in enumerate(procs):
        error_file = tmp / f"rank{rank}.error.json"
        if error_file.exists():
            failures.append(_recorded(rank, error_file, proc.exitcode))
        elif proc.exitcode != 0 and rank not in stopped:
            failures.append(_died(rank, proc.exitcode))
    if failures:
        raise LaunchError(tuple(failures))
    results = {}
    for rank in range(len(procs)):
        with (tmp / f"rank{rank}.result.pkl").open("rb") as f:
            results[rank] = pickle.load(f)
    return results


def _recorded(rank: int, error_file: Path, exitcode: int | None) -> RankFailure:
    """The failure a rank wrote to ``error_file``; if the file cannot be read back (a full
    disk leaves it empty), a failure that says so instead of a parse error."""
    try:
        return RankFailure(**json.loads(error_file.read_text()))
    except (OSError, ValueError, TypeError) as exc:
        return RankFailure(
            rank=rank,
            error_type="UnreadableErrorReport",
            message=(
                f"rank {rank} failed (exit code {exitcode}) and its error report "
                f"{error_file} could not be read back ({type(exc).__name__}: {exc}); "
                "check that the disk holding the temporary folder is not full"
            ),
            traceback="",
            time_s=time.time(),
        )


def _died(rank: int, exitcode: int | None) -> RankFailure:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        why = f"killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    else:
        why = f"exited with code {exitcode}"
    return RankFailure(
        rank=rank,
        error_type="ProcessDied",
        message=f"rank {rank} {why} without recording a Python error",
        traceback="",
        time_s=time.time(),
    )


def _spawned_rank(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    rank: int,
    world_size: int,
    port: int,
    tmp: str,
    timeout_s: float,
    threads: int,
) -> None:
    """Entry point of a spawned rank: set up, run ``fn``, record the result or the error."""
    _die_with_parent()
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    try:
        store = dist.TCPStore(
            "127.0.0.1", port, world_size + 1, is_master=False, timeout=timedelta(seconds=timeout_s)
        )
        info = _init_rank(rank, world_size, rank, world_size, threads, timeout_s, store=store)
        result = fn(info, *args)
        with open(Path(tmp) / f"rank{rank}.result.pkl", "wb") as f:
            pickle.dump(result, f)
    except BaseException as exc:
        _record_error(Path(tmp) / f"rank{rank}.error.json", rank, exc)
        exit_now(1)
    dist.destroy_process_group()
    exit_now(0)


def _run_under_torchrun(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    world_size: int,
    timeout_s: float,
) -> dict[int, Any]:
    env = os.environ
    env_world = int(env["WORLD_SIZE"])
    if env_world != world_size:
        raise SpecError(
            f"torchrun started {env_world} ranks but the plan needs tp·pp·cp·dp = "
            f"{world_size}; set --nnodes x --nproc-per-node to {world_size}"
        )
    rank, local_rank = int(env["RANK"]), int(env["LOCAL_RANK"])
    local_world = int(env.get("LOCAL_WORLD_SIZE", world_size))
    threads = threads_per_rank(available_cpus(), local_world)
    info = _init_rank(rank, world_size, local_rank, local_world, threads, timeout_s, store=None)
    try:
        return {rank: fn(info, *args)}
    finally:
        dist.destroy_process_group()


def _init_rank(
    rank: int,
    world_size: int,
    local_rank: int,
    local_world_size: int,
    threads: int,
    timeout_s: float,
    *,
    store: Any,
) -> RankInfo:
    # Kineto prints profiler_start/stop lines on stderr below this level (reference §6).
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    # The flight recorder logs each collective's group and sizes (read by executor.measure);
    # it is sized when the first process group is created.
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", str(FLIGHT_RECORDER_ENTRIES))
    torch.set_num_threads(threads)
    cuda = torch.cuda.is_available()
    device = f"cuda:{local_rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(local_rank)
    backend = backend_for(cuda)
    dist.init_process_group(
        backend,
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    return RankInfo(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_world_size,
        backend=backend,
        device=device,
        num_threads=threads,
        timeout_s=timeout_s,
    )


def _record_error(path: Path, rank: int, exc: BaseException) -> None:
    record = {
        "rank": rank,
        "error_type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
        "time_s": time.time(),
    }
    with contextlib.suppress(OSError):
        path.write_text(json.dumps(record))


def _die_with_parent() -> None:
    """Ask Linux to kill this rank when the parent dies, so no rank outlives its job."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
