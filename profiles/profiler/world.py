"""The profiling world: spawned local ranks, or the ranks torchrun started.

- **Spawned** (no torchrun environment): the parent checks that the machine can host
  ``nproc`` ranks (`check_nproc`), starts a TCP store, spawns the ranks and watches them.
  Rank 0 streams progress to the parent through a queue; its result comes back as a file.
- **torchrun** (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``
  set, possibly across nodes): this process is one rank and torchrun's agent handles a
  rank that dies.

In every rank: NCCL with CUDA (one GPU per local rank), gloo otherwise; the fair share of
the CPU cores as intra-op threads (oversubscribed gloo ranks run 4-8x slower,
reference/torch-distributed-on-cpu.md §7); one timeout on every process group, so a
collective that a peer never joins raises instead of hanging.

Failure contract: when a rank fails (a Python error, or a death such as SIGKILL) the
parent gives the others ``grace_s`` to fail on their own, stops the rest and raises
`ProfilingError` naming the root cause: a rank that died without a Python error first
(its peers' "connection closed" errors are consequences), else the earliest error.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pickle
import queue as queue_module
import signal
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
import torch.multiprocessing as mp

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

PR_SET_PDEATHSIG = 1
"""prctl option: the signal a child gets when its parent dies (Linux)."""

Progress = Callable[[int, int, str], None]
"""``progress(done, total, label)``, called on the parent (or torchrun rank 0)."""


NATIVE_CRASH_SIGNALS = frozenset({"SIGABRT", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL"})
"""Signals of a rank that crashed in native code (the C library's heap checks abort; a bad
access faults): on the 2-core VM a gloo rank aborted now and then with "malloc():
unaligned tcache chunk detected" (once in three demos' profiles, once in ninety bench
runs of one day) while the same command succeeded when run again."""


class ProfilingError(RuntimeError):
    """A profiling run whose ranks did not all finish; ``crashed``: the root cause is a
    rank killed by one of `NATIVE_CRASH_SIGNALS` (running again may succeed)."""

    def __init__(self, message: str, *, crashed: bool = False) -> None:
        super().__init__(message)
        self.crashed = crashed


@dataclass(frozen=True, kw_only=True, slots=True)
class RankEnv:
    """What a rank knows about itself."""

    rank: int
    """Global rank."""
    world_size: int
    """Ranks in the world."""
    local_rank: int
    """Rank on this node (selects the GPU)."""
    local_world_size: int
    """Ranks on this node."""
    backend: str
    """``nccl`` or ``gloo``."""
    device: str
    """``cuda:<local_rank>`` or ``cpu``."""
    num_threads: int
    """Intra-op CPU threads of this rank."""
    timeout_s: float
    """Process-group timeout, seconds."""


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
    if under_torchrun(os.environ):
        return _run_under_torchrun(
            worker, args, nproc=nproc, timeout_s=timeout_s, progress=progress
        )
    if nproc is None:
        raise SpecError("--nproc is required outside torchrun, e.g. --nproc 2")
    check_local_world(nproc)
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        nproc + 1,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
    )
    ctx = mp.get_context("spawn")
    events = ctx.Queue()
    threads = threads_per_rank(available_cpus(), nproc)
    with tempfile.TemporaryDirectory(prefix="paraplan-profile-") as tmp:
        procs = [
            ctx.Process(
                target=_spawned_rank,
                args=(worker, args, rank, nproc, store.port, tmp, timeout_s, threads, events),
                name=f"paraplan-profile-rank{rank}",
                daemon=True,
            )
            for rank in range(nproc)
        ]
        try:
            spin = spin_wait_env(threads, torch.cuda.is_available(), os.environ)
            with spawn_environment(spin):
                for proc in procs:
                    proc.start()
            stopped = _watch(procs, events, progress, grace_s=grace_s)
        finally:
            _stop(procs)
            events.close()
        return _collect(procs, Path(tmp), stopped)


def _drain(events: Any, progress: Progress, wait_s: float) -> None:
    try:
        done, total, label = events.get(timeout=wait_s)
        progress(done, total, label)
        while True:
            done, total, label = events.get_nowait()
            progress(done, total, label)
    except queue_module.Empty:
        return


def _watch(procs: list[Any], events: Any, progress: Progress, *, grace_s: float) -> set[int]:
    """Relay progress until every rank exits; after a failure give the others
    ``grace_s`` and return the ranks that had to be stopped."""
    failed_at: float | None = None
    while True:
        _drain(events, progress, 0.05)
        codes = [p.exitcode for p in procs]
        if all(c is not None for c in codes):
            return set()
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > grace_s:
            running = {r for r, p in enumerate(procs) if p.exitcode is None}
            _stop(procs)
            return running


def _stop(procs: list[Any]) -> None:
    """Terminate the ranks still running; kill those that ignore SIGTERM."""
    alive = [p for p in procs if p.exitcode is None and p.pid is not None]
    for proc in alive:
        proc.terminate()
    deadline = time.monotonic() + 2.0
    for proc in alive:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.exitcode is None:
            proc.kill()
            proc.join()


def _collect(procs: list[Any], tmp: Path, stopped: set[int]) -> Any:
    failures = []
    for rank, proc in enumerate(procs):
        error_file = tmp / f"rank{rank}.error.json"
        if error_file.exists():
            failures.append(json.loads(error_file.read_text()))
        elif proc.exitcode != 0 and rank not in stopped:
            failures.append(_death(rank, proc.exitcode))
    if failures:
        raise ProfilingError(_failure_message(failures, stopped), crashed=_crashed(failures))
    with (tmp / "rank0.result.pkl").open("rb") as f:
        return pickle.load(f)


def _death(rank: int, exitcode: int | None) -> dict[str, Any]:
    signal_name = None
    if exitcode is not None and exitcode < 0:
        signal_name = signal.Signals(-exitcode).name
        why = f"was killed by {signal_name}"
    else:
        why = f"exited with code {exitcode}"
    return {
        "rank": rank,
        "error_type": "ProcessDied",
        "message": f"rank {rank} {why}",
        "signal": signal_name,
        "time_s": time.time(),
    }


def _cause_order(failure: dict[str, Any]) -> tuple[bool, float]:
    """Failures in causal order: ranks that died without a Python error first, then by
    time; the first is the root cause (module doc)."""
    return failure["error_type"] != "ProcessDied", failure["time_s"]


def _crashed(failures: list[dict[str, Any]]) -> bool:
    """Whether the root cause is a native crash (`NATIVE_CRASH_SIGNALS`)."""
    return min(failures, key=_cause_order).get("signal") in NATIVE_CRASH_SIGNALS


def _failure_message(failures: list[dict[str, Any]], stopped: set[int]) -> str:
    ordered = sorted(failures, key=_cause_order)
    root = ordered[0]
    first_line = (root["message"].strip().splitlines() or [""])[0]
    text = (
        f"profiling failed: rank {root['rank']} {root['error_type']}: {first_line}; "
        "no profile was written"
    )
    others = [f"rank {f['rank']} ({f['error_type']})" for f in ordered[1:]]
    others += [f"rank {r} (stopped)" for r in sorted(stopped)]
    if others:
        text += f"; then: {', '.join(others)}"
    return text


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this rank when its parent dies, so no rank outlives a
    killed profiler; elsewhere the parent's `_stop` is the only guard."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _spawned_rank(
    worker: Worker,
    args: tuple[Any, ...],
    rank: int,
    world_size: int,
    port: int,
    tmp: str,
    timeout_s: float,
    threads: int,
    events: Any,
) -> None:
    """Entry point of a spawned rank: set up, run, record the result or the error."""
    _die_with_parent()
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )

    def emit(done: int, total: int, label: str) -> None:
        if rank == 0:
            events.put((done, total, label))

    try:
        store = dist.TCPStore(
            "127.0.0.1",
            port,
            world_size + 1,
            is_master=False,
            timeout=timedelta(seconds=timeout_s),
        )
        env = _init_rank(rank, world_size, rank, world_size, threads, timeout_s, store=store)
        result = worker(env, emit, *args)
        if rank == 0:
            with open(Path(tmp) / "rank0.result.pkl", "wb") as f:
                pickle.dump(result, f)
    except BaseException as exc:
        record = {
            "rank": rank,
            "error_type": type(exc).__name__,
            "message": str(exc),
            "traceback": "".join(traceback.format_exception(exc)),
            "time_s": time.time(),
        }
        with contextlib.suppress(OSError):
            (Path(tmp) / f"rank{rank}.error.json").write_text(json.dumps(record))
        exit_now(1)
    events.close()
    events.join_thread()
    dist.destroy_process_group()
    exit_now(0)


def _run_under_torchrun(
    worker: Worker,
    args: tuple[Any, ...],
    *,
    nproc: int | None,
    timeout_s: float,
    progress: Progress,
) -> Any:
    world = int(os.environ["WORLD_SIZE"])
    if nproc is not None and nproc != world:
        raise SpecError(
            f"--nproc {nproc} differs from torchrun's WORLD_SIZE {world}; drop --nproc under "
            "torchrun (the world is --nnodes x --nproc-per-node)"
        )
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    threads = threads_per_rank(available_cpus(), local_world)
    env = _init_rank(rank, world, local_rank, local_world, threads, timeout_s, store=None)

    def emit(done: int, total: int, label: str) -> None:
        if rank == 0:
            progress(done, total, label)

    try:
        return worker(env, emit, *args)
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
) -> RankEnv:
    torch.set_num_threads(threads)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(
        backend,
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    return RankEnv(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_world_size,
        backend=backend,
        device=f"cuda:{local_rank}" if cuda else "cpu",
        num_threads=threads,
        timeout_s=timeout_s,
    )
