"""The executor's side of the launcher: which worlds this machine can host.

Starting the ranks, the process-group conventions and the failure contract live in the
shared launcher `launch.world` (also used by the profiler); this module re-exports its
names for the executor and adds the capacity rule of a local training launch
(`check_local_launch`), checked by `launch` before anything starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from launch import world as shared
from launch.failures import LaunchError, LaunchInterrupted, RankFailure
from launch.world import Progress, RankInfo, backend_for, set_group_timeouts
from specs.errors import SpecError
from specs.host import (
    MAX_RANKS_PER_CPU,
    RANK_RUNTIME_BYTES,
    available_cpus,
    mem_available_bytes,
    threads_per_rank,
    under_torchrun,
)

FLIGHT_RECORDER_ENTRIES = 20_000
"""Collectives the flight recorder keeps per process (a ring buffer of small records)."""
TRAINING_RANK_ENV = {
    # Kineto prints profiler_start/stop lines on stderr below this level (reference §6).
    "KINETO_LOG_LEVEL": "6",
    # The flight recorder logs each collective's group and sizes (read by
    # executor.trace_collectives); it is sized when the first process group is created.
    "TORCH_FR_BUFFER_SIZE": str(FLIGHT_RECORDER_ENTRIES),
}
"""Environment of a training rank (`launch.world.launch` ``rank_env``)."""

__all__ = [
    "LaunchError",
    "LaunchInterrupted",
    "Progress",
    "RankFailure",
    "RankInfo",
    "backend_for",
    "check_local_launch",
    "check_world_fits",
    "host_capacity",
    "launch",
    "set_group_timeouts",
    "threads_per_rank",
    "under_torchrun",
]


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


def launch(
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    *,
    world_size: int,
    timeout_s: float = 60.0,
    grace_s: float = 2.0,
    progress: Progress | None = None,
) -> dict[int, Any]:
    """`launch.world.launch` after `check_local_launch` (outside torchrun): a world this
    machine cannot host, or a torchrun world of another size, is a `SpecError` before any
    process starts."""
    if not under_torchrun(os.environ):
        check_local_launch(world_size)
    elif int(os.environ["WORLD_SIZE"]) != world_size:
        raise SpecError(
            f"torchrun started {os.environ['WORLD_SIZE']} ranks but the plan needs "
            f"tp·pp·cp·dp = {world_size}; set --nnodes x --nproc-per-node to {world_size}"
        )
    return shared.launch(
        fn,
        args,
        world_size=world_size,
        timeout_s=timeout_s,
        grace_s=grace_s,
        progress=progress,
        rank_env=TRAINING_RANK_ENV,
    )
