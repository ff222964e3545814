"""`profile_machine`: measure this machine (or a torchrun world) into a `HardwareProfile`.

Order of a run: check the world fits the machine; spawn the ranks (or join torchrun's);
in every rank time the host probe, the compute sweep, the framework's host costs, then the
collective sweep and the host probe again (the host probes on CPU ranks only,
`runs_host_probes`); gather every rank's samples on rank 0 and share the merged records; fit
and assemble the profile (`profiles.profiler.assemble`). Only measuring happens in the
ranks: fitting is cheap and runs once.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from profiles.profiler.assemble import RunRecords, fit_profile
from profiles.profiler.collective_forms import time_sync_moment
from profiles.profiler.comm import CommContext, comm_point_count, group_layouts, run_comm_sweep
from profiles.profiler.compute import ComputeResults, Runner
from profiles.profiler.compute_sweep import compute_point_count, run_compute_sweep
from profiles.profiler.device import describe_device, host_memory_bytes
from profiles.profiler.framework import (
    time_framework_overheads,
    time_host_probe,
    with_moment_samples,
)
from profiles.profiler.shapes import SweepPlan, sweep_plan
from profiles.profiler.timing import (
    COMM_PASSES,
    FULL_BUDGET,
    FULL_COMM_BUDGET,
    QUICK_BUDGET,
    QUICK_COMM_BUDGET,
    THREAD_CLOCK,
    Budget,
    clock_for,
)
from profiles.profiler.world import (
    Progress,
    RankEnv,
    available_cpus,
    run_world,
    under_torchrun,
)
from profiles.schema import HardwareProfile
from specs.model import ModelSpec

QUICK_TIMEOUT_S = 120.0
"""Process-group timeout of a `--quick` run: the longest point takes well under a second,
so a peer silent this long is stuck, not slow."""
FULL_TIMEOUT_S = 900.0
"""Process-group timeout of a full run (256 MiB collectives over many oversubscribed
ranks take tens of seconds per point)."""
MEMORY_SHARE = 4
"""A rank's sweeps use at most 1/MEMORY_SHARE of its share of the device memory."""


def _pool(records: list[Any]) -> Any:
    """One record whose samples are those of every rank's copy of it."""
    times = tuple(t for r in records for t in r.times_s)
    return dataclasses.replace(records[0], times_s=times)


def merge_compute(per_rank: list[ComputeResults]) -> ComputeResults:
    """Pool the samples of each point over the ranks (all ranks ran the same points)."""
    first = per_rank[0]
    return ComputeResults(
        gemms=[_pool(list(rs)) for rs in zip(*(r.gemms for r in per_rank), strict=True)],
        misaligned=[
            (_pool([p[0] for p in ps]), _pool([p[1] for p in ps]))
            for ps in zip(*(r.misaligned for r in per_rank), strict=True)
        ],
        attention=[_pool(list(rs)) for rs in zip(*(r.attention for r in per_rank), strict=True)],
        memory=[_pool(list(rs)) for rs in zip(*(r.memory for r in per_rank), strict=True)],
        overhead=[_pool(list(rs)) for rs in zip(*(r.overhead for r in per_rank), strict=True)],
        transcendental=[
            _pool(list(rs)) for rs in zip(*(r.transcendental for r in per_rank), strict=True)
        ],
        skipped=list(first.skipped),
    )


def memory_limit_bytes(device: torch.device, local_world_size: int) -> int:
    """Bytes one rank's largest sweep tensors may take (`MEMORY_SHARE`)."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        return int(total) // MEMORY_SHARE
    return host_memory_bytes() // max(1, local_world_size) // MEMORY_SHARE


def runs_host_probes(device: torch.device) -> bool:
    """Whether the host-cost probes run (the host probe, the ranks' arrival skew, the
    autograd chain and the framework's probes of `profiles.profiler.framework`): on CPU
    ranks only, whose profile carries the host section the ``torch`` runtime reads; on a
    GPU the host runs ahead of the kernels and the runtime is priced kernel-bound."""
    return device.type == "cpu"


def _max_agree(group: Any) -> Callable[[float], float]:
    def agree(value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return float(t.item())

    return agree


def _merge_on_rank0_and_share(
    env: RankEnv, control: Any, compute: ComputeResults, device: torch.device
) -> tuple[ComputeResults, Any]:
    """Rank 0 pools every rank's compute samples and describes its device; all ranks get
    the result, so under torchrun each can build the same profile."""
    gathered: list[Any] | None = [None] * env.world_size if env.rank == 0 else None
    dist.gather_object(compute, gathered, dst=0, group=control)
    shared: list[Any] = [None]
    if gathered is not None:
        shared = [(merge_compute(gathered), describe_device(device, available_cpus()))]
    dist.broadcast_object_list(shared, src=0, group=control)
    return shared[0]


def profile_rank(
    env: RankEnv, emit: Progress, plan: SweepPlan, budget: Budget, comm_budget: Budget
) -> RunRecords:
    """The work of one rank (a `world.Worker`): both sweeps, then gather and share."""
    device = torch.device(env.device)
    control = dist.group.WORLD
    if env.backend != "gloo":
        control = dist.new_group(backend="gloo", timeout=timedelta(seconds=env.timeout_s))
    limit = memory_limit_bytes(device, env.local_world_size)
    sizes = tuple(s for s in plan.message_bytes if 3 * s <= limit)
    layouts = group_layouts(env.world_size, env.local_world_size)
    host = runs_host_probes(device)
    total = compute_point_count(plan, host_probes=host) + comm_point_count(
        layouts, sizes, COMM_PASSES
    )
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        done += 1
        emit(done, total, label)

    clock = clock_for(
        cuda=device.type == "cuda",
        threads=env.num_threads,
        ranks_per_node=env.local_world_size,
        cores=available_cpus(),
    )
    runner = Runner(device=device, budget=budget, agree=_max_agree(control), clock=clock)
    early = (*time_host_probe(runner), *time_sync_moment(runner)) if host else ()
    compute = run_compute_sweep(plan, runner, tick, memory_limit_bytes=limit, host_probes=host)
    if host:
        compute.overhead.extend(time_framework_overheads(runner))
    comm = CommContext(
        rank=env.rank,
        world_size=env.world_size,
        local_world_size=env.local_world_size,
        device=device,
        control=control,
        timeout_s=env.timeout_s,
        budget=comm_budget,
    )
    collectives = run_comm_sweep(comm, sizes, tick, passes=COMM_PASSES)
    late = (*time_host_probe(runner), *time_sync_moment(runner)) if host else ()
    compute.overhead = with_moment_samples(compute.overhead, early + late)
    merged, info = _merge_on_rank0_and_share(env, control, compute, device)
    return RunRecords(
        plan=plan,
        compute=merged,
        collectives=tuple(collectives),
        device=info,
        backend=env.backend,
        world_size=env.world_size,
        local_world_size=env.local_world_size,
        num_threads=env.num_threads,
        compute_clock="thread" if clock is THREAD_CLOCK else "wall",
    )


def default_nproc() -> int:
    """One rank per GPU with CUDA; else one per core, at least 2 (to time collectives)."""
    if torch.cuda.is_available():
        return torch.cuda.device_count()
    return max(2, available_cpus())


def default_command(quick: bool, nproc: int | None, model: ModelSpec | None) -> str:
    """The command line that reproduces a run."""
    parts = ["paraplan profile"]
    if quick:
        parts.append("--quick")
    if nproc is not None:
        parts.append(f"--nproc {nproc}")
    if model is not None:
        parts.append(f"--model {model.name}")
    return " ".join(parts)


def measure_machine(
    quick: bool,
    nproc: int | None,
    model: ModelSpec | None,
    progress: Progress | None = None,
    *,
    timeout_s: float | None = None,
) -> RunRecords:
    """Run both sweeps on ``nproc`` spawned ranks (or torchrun's world) and return the
    merged records. Raises `SpecError` when the machine cannot host the world and
    `world.ProfilingError` when a rank fails."""
    torchrun = under_torchrun(os.environ)
    if torchrun:
        world = int(os.environ["WORLD_SIZE"])
    else:
        world = default_nproc() if nproc is None else nproc
    plan = sweep_plan(cuda=torch.cuda.is_available(), quick=quick, model=model, world_size=world)
    budgets = (QUICK_BUDGET, QUICK_COMM_BUDGET) if quick else (FULL_BUDGET, FULL_COMM_BUDGET)
    return run_world(
        profile_rank,
        (plan, *budgets),
        nproc=nproc if torchrun else world,
        timeout_s=timeout_s or (QUICK_TIMEOUT_S if quick else FULL_TIMEOUT_S),
        progress=progress or (lambda done, total, label: None),
    )


def profile_machine(
    quick: bool,
    nproc: int | None,
    model: ModelSpec | None,
    progress: Progress | None = None,
    *,
    name: str | None = None,
    command: str | None = None,
    timeout_s: float | None = None,
) -> HardwareProfile:
    """Measure the machine and return its profile (the same on every rank under torchrun).

    ``nproc`` None means one rank per GPU, or per CPU core (at least 2); ``model`` adds
    its exact GEMM shapes under the candidate TP degrees; ``progress(done, total, label)``
    is called as points complete. ``name`` defaults to ``measured-<device>``.
    """
    records = measure_machine(quick, nproc, model, progress, timeout_s=timeout_s)
    command = command or default_command(quick, nproc, model)
    profile, _ = fit_profile(records, model=model, name=name, command=command)
    return profile
