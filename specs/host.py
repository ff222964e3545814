"""Facts about the machine a job is launched on: cores, free memory, torchrun, and the
rule for how many ranks a CPU may host. Pure Python (no torch), shared by the executor's
launcher and the profiler's, which spawn ranks the same way."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

MAX_RANKS_PER_CPU = 4
"""Most ranks one CPU core hosts: 4 gloo ranks on 2 cores still finish a tiny GPT training
step in 174 ms (reference torch-distributed-on-cpu §7); far beyond that, contention
pushes collectives towards their timeout."""
RANK_RUNTIME_BYTES = 512 * 2**20
"""Memory one rank needs before any model state: the torch runtime is about 220 MiB
resident per process, doubled for the allocator and gloo buffers."""
TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""Environment variables whose presence means torchrun started this process."""


def under_torchrun(env: Mapping[str, str]) -> bool:
    """True when ``env`` is a torchrun (or equivalent) rank environment."""
    return all(key in env for key in TORCHRUN_KEYS)


def available_cpus() -> int:
    """CPU cores this process may run on (its affinity mask, not the machine's total)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def mem_available_bytes() -> int | None:
    """Memory the kernel could hand out now (``MemAvailable``); None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def stolen_cpu_s(stat: Path = Path("/proc/stat")) -> float | None:
    """CPU seconds the hypervisor has run other guests on this virtual machine's CPUs since
    boot, summed over the CPUs: the ``steal`` column (the eighth) of the ``cpu`` line of
    ``/proc/stat``, in ``USER_HZ`` ticks (proc(5)). None where the kernel does not report
    it (not Linux, or a kernel before 2.6.11)."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def steal_fraction(stolen_s: float, wall_s: float, cpus: int) -> float:
    """Share of the machine's CPU time the hypervisor took over ``wall_s`` seconds in which
    ``stolen_s`` CPU seconds were stolen from its ``cpus`` CPUs (0 with no wall time)."""
    if wall_s <= 0.0 or cpus < 1:
        return 0.0
    return stolen_s / (wall_s * cpus)


def exit_now(code: int) -> None:
    """End a spawned rank without interpreter teardown. After a failure, atexit hooks and
    gloo threads can block on dead peers. After success everything is already written and
    teardown can only lose it: gloo's worker threads may still hold work objects while the
    interpreter finalizes, which can abort the process (SIGABRT, "terminate called without
    an active exception") and turn a finished rank into a failed one; and unloading torch's
    modules costs a second or two per rank."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def threads_per_rank(num_cpus: int, local_world_size: int) -> int:
    """Fair share of intra-op threads: the cores divided among the local ranks, at least 1."""
    return max(1, num_cpus // max(1, local_world_size))


SPIN_WAIT = {"OMP_WAIT_POLICY": "ACTIVE"}
"""OpenMP setting for CPU ranks with several intra-op threads: the workers spin between
parallel regions instead of sleeping. A training step reaches its parallel kernels between
serial operators, and on the 2-core development VM waking sleeping workers cost what the
second thread gained: the tiny model's forward and backward at micro-batch 2 in one process
took 29.6-30.1 ms with two sleeping-policy threads against 21.7-22.2 ms with one, and
15.5-18.1 ms with two spinning ones (the profiler's kernel loops keep the workers awake
either way)."""


def spin_wait_env(threads: int, cuda: bool, environ: Mapping[str, str]) -> dict[str, str]:
    """The `SPIN_WAIT` variables a spawned rank's environment should gain: those the user has
    not set, for CPU ranks of more than one thread (a GPU rank's host threads mostly wait on
    the device, where spinning workers would only take cores from other work)."""
    if cuda or threads < 2:
        return {}
    return {k: v for k, v in SPIN_WAIT.items() if k not in environ}


@contextlib.contextmanager
def spawn_environment(extra: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``extra`` added while ranks are spawned (a spawned process takes
    the parent's environment when it starts; libraries such as OpenMP read it when they
    load), restored afterwards."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
