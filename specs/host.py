"""Facts about the machine a job is launched on: cores, free memory, torchrun, and the
rule for how many ranks a CPU may host. Pure Python (no torch), shared by the executor's
launcher and the profiler's, which spawn ranks the same way."""

from __future__ import annotations

import os
from collections.abc import Mapping
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


def threads_per_rank(num_cpus: int, local_world_size: int) -> int:
    """Fair share of intra-op threads: the cores divided among the local ranks, at least 1."""
    return max(1, num_cpus // max(1, local_world_size))
