"""Start one process per rank, set up torch.distributed in each, and fail fast together.

Two ways in:

- **local spawn** (no torchrun environment): the parent starts a TCP store, spawns
  ``world_size`` processes and watches them. The store lives in the parent, so no port is
  raced for. Callers check first that the machine can host the world (the executor's and
  the profiler's rules differ in wording, not in substance).
- **torchrun** (``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR`` set, possibly many
  nodes): this process is one rank; the process group comes from the environment, and
  torchrun's agent tears the job down when a rank exits with an error.

In every rank: NCCL with CUDA (one GPU per local rank), gloo otherwise; the fair share of
the CPU cores as intra-op threads (`specs.host.threads_per_rank`; two gloo ranks that each
use every core run about 4x slower, reference/torch-distributed-on-cpu.md §7); the same
timeout on every process group (`set_group_timeouts`), so a collective that one rank never
joins raises instead of hanging; progress lines of rank 0 reach the parent's ``progress``
callback through `RankInfo.emit`.

Failure contract: a rank that raises records its error (type, message, traceback, time)
in a file and exits; a rank that native code kills (a C-library heap check's SIGABRT, a
SIGSEGV) leaves the Python stack of each of its threads in another
(`launch.failures.record_native_crashes`), which becomes its failure's traceback; once any
rank has ended badly the parent gives the others ``grace_s`` seconds to finish or fail on
their own, stops the rest, and raises `LaunchError`, whose failures are ordered from root
cause to consequence (`launch.failures`). Interruption
contract: the ranks ignore SIGINT (inherited from the launcher while they are spawned); a
SIGINT (Ctrl-C) or SIGTERM that reaches the launcher while the ranks run stops every rank
and raises `LaunchInterrupted`, a `KeyboardInterrupt` carrying the signal's name.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue as queue_module
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from launch.failures import (
    LaunchError,
    LaunchInterrupted,
    RankFailure,
    died,
    native_trace_path,
    read_native_trace,
    record_native_crashes,
)
from specs.errors import SpecError
from specs.host import (
    available_cpus,
    exit_now,
    spawn_environment,
    spin_wait_env,
    threads_per_rank,
    under_torchrun,
)

PR_SET_PDEATHSIG = 1
"""prctl option: the signal a child gets when its parent dies (Linux)."""

Progress = Callable[[int, int, str], None]
"""``progress(done, total, label)``, called in the parent (or in torchrun's rank 0)."""


def _ignore(done: int, total: int, label: str) -> None:
    """The progress sink of a job without a ``progress`` callback."""


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
    emit: Progress = field(default=_ignore, compare=False)
    """Report progress to the launching process; only rank 0's calls are delivered."""


def backend_for(cuda_available: bool) -> str:
    """NCCL with CUDA, gloo otherwise."""
    return "nccl" if cuda_available else "gloo"


def set_group_timeouts(timeout_s: float) -> None:
    """Give every process group created so far the job's timeout.

    `dist.new_group` (and so DeviceMesh) defaults to 30 minutes whatever
    `init_process_group` was given; call this after the groups exist.
    """
    timeout = timedelta(seconds=timeout_s)
    for group in list(dist.distributed_c10d._world.pg_map):
        group.set_timeout(timeout)


def launch(
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    *,
    world_size: int,
    timeout_s: float = 60.0,
    grace_s: float = 2.0,
    progress: Progress | None = None,
    name: str = "paraplan",
    rank_env: Mapping[str, str] | None = None,
) -> dict[int, Any]:
    """Run ``fn(info: RankInfo, *args)`` on every rank; return ``{rank: result}``.

    Locally every rank's non-None result comes back (results must pickle); under torchrun
    only this process's. ``fn`` must be importable by name (a module-level function) because
    ranks are spawned, not forked; processes are named ``{name}-rank{r}``. ``rank_env``:
    environment variables each rank sets (where not set already) before its process group
    is created. Raises `SpecError`
    when torchrun's world differs from ``world_size``, `LaunchError` when a rank fails,
    `LaunchInterrupted` when SIGINT or SIGTERM reaches this process while the ranks run.
    """
    if under_torchrun(os.environ):
        return _run_under_torchrun(
            fn, args, world_size=world_size, timeout_s=timeout_s, progress=progress, env=rank_env
        )
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        world_size + 1,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
    )
    threads = threads_per_rank(available_cpus(), world_size)
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue() if progress is not None else None
    with tempfile.TemporaryDirectory(prefix=f"{name}-launch-") as tmp:
        procs = [
            ctx.Process(
                target=_spawned_rank,
                args=(fn, args, rank, world_size, store.port, tmp, timeout_s, threads, events),
                kwargs={"env": dict(rank_env or {}), "parent_pid": os.getpid()},
                name=f"{name}-rank{rank}",
            )
            for rank in range(world_size)
        ]
        try:
            spin = spin_wait_env(threads, torch.cuda.is_available(), os.environ)
            with spawn_environment(spin), _sigint_ignored():
                for proc in procs:
                    proc.start()
            with _sigterm_interrupts():
                stopped = _watch(procs, events, progress or _ignore, grace_s=grace_s)
        except LaunchInterrupted:
            raise
        except KeyboardInterrupt:
            raise LaunchInterrupted("SIGINT") from None
        finally:
            _stop(procs)
            if events is not None:
                events.close()
        return _collect(procs, Path(tmp), stopped)


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while ranks are spawned, so that they inherit the disposition.

    Python installs its `KeyboardInterrupt` handler at start-up only where SIGINT is not
    ignored, so the ranks never see Ctrl-C (a terminal sends it to the whole foreground
    process group): only the launching process reacts, stops the ranks itself and reports
    once, and no rank prints a traceback from the middle of its start-up imports.
    Outside the main thread signal handlers cannot be set, and nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises `LaunchInterrupted` while the ranks run (Python's default would end
    the launcher at once, leaving no report and its ranks to the parent-death signal)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise LaunchInterrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _drain(events: Any, progress: Progress, wait_s: float) -> None:
    """Relay the progress events queued so far (waiting up to ``wait_s`` for the first)."""
    try:
        progress(*events.get(timeout=wait_s))
        while True:
            progress(*events.get_nowait())
    except queue_module.Empty:
        return


def _watch(procs: list[Any], events: Any, progress: Progress, *, grace_s: float) -> set[int]:
    """Wait until every rank exits; once one fails, give the others ``grace_s`` seconds
    and return the ranks that had to be stopped."""
    failed_at: float | None = None
    while True:
        if events is not None:
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
        if events is None:
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
            failures.append(read_failure(rank, error_file, proc.exitcode))
        elif proc.exitcode != 0 and rank not in stopped:
            trace = read_native_trace(native_trace_path(tmp, rank))
            failures.append(died(rank, proc.exitcode, time.time(), trace))
    if failures:
        raise LaunchError(tuple(failures), stopped=tuple(stopped))
    results = {}
    for rank in range(len(procs)):
        path = tmp / f"rank{rank}.result.pkl"
        if path.exists():
            with path.open("rb") as f:
                results[rank] = pickle.load(f)
    return results


def read_failure(rank: int, error_file: Path, exitcode: int | None) -> RankFailure:
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


def _spawned_rank(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    rank: int,
    world_size: int,
    port: int,
    tmp: str,
    timeout_s: float,
    threads: int,
    events: Any,
    *,
    env: Mapping[str, str],
    parent_pid: int,
) -> None:
    """Entry point of a spawned rank: set up, run ``fn``, record the result or the error
    (a Python error in a file of its own, a native crash's Python stacks in another)."""
    die_with_parent(parent_pid)
    record_native_crashes(native_trace_path(Path(tmp), rank))
    for key, value in env.items():
        os.environ.setdefault(key, value)
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    emit = _ignore
    if events is not None and rank == 0:

        def emit(done: int, total: int, label: str) -> None:
            events.put((done, total, label))

    try:
        store = dist.TCPStore(
            "127.0.0.1", port, world_size + 1, is_master=False, timeout=timedelta(seconds=timeout_s)
        )
        info = _init_rank(rank, world_size, rank, world_size, threads, timeout_s, store, emit)
        result = fn(info, *args)
        if result is not None:
            with open(Path(tmp) / f"rank{rank}.result.pkl", "wb") as f:
                pickle.dump(result, f)
    except BaseException as exc:
        _record_error(Path(tmp) / f"rank{rank}.error.json", rank, exc)
        exit_now(1)
    if events is not None:
        events.close()
        events.join_thread()
    dist.destroy_process_group()
    exit_now(0)


def _run_under_torchrun(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    world_size: int,
    timeout_s: float,
    progress: Progress | None,
    env: Mapping[str, str] | None,
) -> dict[int, Any]:
    for key, value in (env or {}).items():
        os.environ.setdefault(key, value)
    env_world = int(os.environ["WORLD_SIZE"])
    if env_world != world_size:
        raise SpecError(
            f"torchrun started {env_world} ranks but the job needs {world_size}; set "
            f"--nnodes x --nproc-per-node to {world_size}"
        )
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    threads = threads_per_rank(available_cpus(), local_world)
    emit = progress if progress is not None and rank == 0 else _ignore
    try:
        info = _init_rank(rank, world_size, local_rank, local_world, threads, timeout_s, None, emit)
    except dist.DistError as exc:
        raise SpecError(rendezvous_refusal(os.environ, rank, world_size, exc)) from None
    try:
        return {rank: fn(info, *args)}
    finally:
        dist.destroy_process_group()


def rendezvous_refusal(
    env: Mapping[str, str], rank: int, world_size: int, exc: BaseException
) -> str:
    """One line for a rank of a torchrun (or ``RANK``/``MASTER_ADDR`` environment) job that
    could not join its process group: the address, torch's reason, and the fix (a port in
    use names a free port; a wait for ranks that never came names the ranks to start)."""
    address = f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}"
    reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    if "EADDRINUSE" in reason or "address already in use" in reason.lower():
        fix = (
            f"port {env.get('MASTER_PORT', '?')} is already in use on this host: choose a "
            "free one (torchrun --master-port P, or MASTER_PORT=P)"
        )
    else:
        fix = (
            f"start all {world_size} ranks with the same MASTER_ADDR and MASTER_PORT "
            "(torchrun --nnodes N --nproc-per-node P with N x P = "
            f"{world_size}), and check that rank 0's host is reachable"
        )
    return (
        f"rank {rank} of {world_size} could not join the process group at {address} "
        f"({type(exc).__name__}: {reason}); {fix}"
    )


def _init_rank(
    rank: int,
    world_size: int,
    local_rank: int,
    local_world_size: int,
    threads: int,
    timeout_s: float,
    store: Any,
    emit: Progress,
) -> RankInfo:
    torch.set_num_threads(threads)
    cuda = torch.cuda.is_available()
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
        device=f"cuda:{local_rank}" if cuda else "cpu",
        num_threads=threads,
        timeout_s=timeout_s,
        emit=emit,
    )


def _record_error(path: Path, rank: int, exc: BaseException) -> None:
    record = RankFailure(
        rank=rank,
        error_type=type(exc).__name__,
        message=str(exc),
        traceback="".join(traceback.format_exception(exc)),
        time_s=time.time(),
    )
    with contextlib.suppress(OSError):
        path.write_text(json.dumps(asdict(record)))


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this rank when the parent dies, so no rank outlives its job; a
    parent that died before the request (killed while the rank was still importing) is
    seen as a changed parent process id, and the rank exits at once."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        exit_now(1)
