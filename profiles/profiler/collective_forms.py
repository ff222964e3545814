"""The forms a training step issues its collectives in, against the plain call the
collective sweep (`profiles.profiler.comm`) times.

- functional collectives (``torch.distributed._functional_collectives``: DTensor's
  redistributions, the executor's context- and expert-parallel exchanges): for each op of
  `FUNCTIONAL_OPS`, over every rank at once (wall time) at `FUNCTIONAL_PROBE_BYTES`, the
  functional call and its ``wait_tensor`` against the plain ``torch.distributed`` call the
  collective sweep times, alternating for `FUNCTIONAL_ROUNDS` rounds (a slow spell of the
  host then hits both forms); ``functional_<op>`` is each functional sample less the plain
  call's mean, so its mean is the difference of the two means: what a training step pays
  per call on top of the plain call's typical cost.
- DTensor redistributions (tensor and sequence parallelism, `REDISTRIBUTIONS`): a
  ``(1, S, D)`` fp32 DTensor of `FUNCTIONAL_PROBE_BYTES` on a mesh over every rank,
  redistributed and its local result waited for, alternating with the same op's functional
  call: ``redistribute_<op>`` is each redistribution less the functional call's mean,
  what DTensor adds on top (its planning in Python, the layout copies a gather or scatter
  along the sequence dim needs, the result's ``to_local``). On the 2-core development VM
  (gloo, 2 ranks, 64 KiB, back to back) a redistribution cost 0.21 ms (all_reduce), 0.28
  ms (all_gather) and 0.39 ms (reduce_scatter) more than the functional call.

Left out on one rank.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from profiles.profiler.comm import collective_call, message_elements
from profiles.profiler.compute import Runner
from profiles.profiler.timing import WALL_CLOCK, OverheadTiming

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

FUNCTIONAL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
"""Collectives timed in functional and plain form (`costmodel.host_rates` reads them)."""
FUNCTIONAL_PROBE_BYTES = 1 << 16
"""Size of the functional-collective probe (nccl-tests convention): small enough that the
call's host cost, not the wire, dominates, as for the executor's per-layer exchanges."""
FUNCTIONAL_ROUNDS = 4
"""Alternating rounds of samples per op: every form's calls have heavy tails on a shared
host, and their means are what a training step pays."""
REDISTRIBUTIONS = ("all_reduce", "all_gather", "reduce_scatter")
"""Collectives timed as DTensor redistributions: Partial -> Replicate (a row-parallel
output), Shard(1) -> Replicate (a sequence-parallel block input) and Partial -> Shard(1)
(a sequence-parallel row-parallel output)."""
PROBE_WIDTH = 128
"""Hidden size D of the redistributed tensor; its sequence S fills `FUNCTIONAL_PROBE_BYTES`."""


def _functional_call(op: str, elements: int, group: dist.ProcessGroup, run: Runner):
    """One functional ``op`` over ``elements`` fp32 values (nccl-tests sizes), waited for."""
    from torch.distributed import _functional_collectives as funcol

    x = torch.zeros(elements, dtype=torch.float32, device=run.device)
    part = torch.zeros(elements // dist.get_world_size(group), device=run.device)
    calls = {
        "all_reduce": lambda: funcol.all_reduce(x, "sum", group),
        "all_gather": lambda: funcol.all_gather_single(part, 0, group),
        "reduce_scatter": lambda: funcol.reduce_scatter_single(x, "sum", 0, group),
        "all_to_all": lambda: funcol.all_to_all_single(x, None, None, group),
    }
    call = calls[op]
    return lambda: funcol.wait_tensor(call())


def _redistribution(
    op: str, elements: int, mesh: DeviceMesh, run: Runner
) -> Callable[[], torch.Tensor]:
    """One DTensor redistribution that issues ``op`` (`REDISTRIBUTIONS`) over ``elements``
    fp32 values on ``mesh`` (every rank), its local result waited for."""
    from torch.distributed import _functional_collectives as funcol
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    world = mesh.size()
    seq = max(elements // PROBE_WIDTH, world)
    source, target = {
        "all_reduce": ([Partial()], [Replicate()]),
        "all_gather": ([Shard(1)], [Replicate()]),
        "reduce_scatter": ([Partial()], [Shard(1)]),
    }[op]
    local_seq = seq // world if op == "all_gather" else seq
    local = torch.zeros(1, local_seq, PROBE_WIDTH, device=run.device)
    dt = DTensor.from_local(local, mesh, source, run_check=False)

    def call() -> torch.Tensor:
        out = dt.redistribute(mesh, target).to_local()
        return out.wait() if isinstance(out, funcol.AsyncCollectiveTensor) else out

    return call


def _alternating(
    run: Runner, form: Callable[[], object], base: Callable[[], object]
) -> tuple[float, ...]:
    """Samples of ``form`` less the mean of ``base``, the two alternating by rounds."""
    form_s: list[float] = []
    base_s: list[float] = []
    for _ in range(FUNCTIONAL_ROUNDS):
        base_s += run.time(base)
        form_s += run.time(form)
    mean = statistics.mean(base_s)
    return tuple(t - mean for t in form_s)


def time_collective_forms(run: Runner) -> tuple[OverheadTiming, ...]:
    """``functional_<op>`` and ``redistribute_<op>`` (module doc); empty without a process
    group of several ranks."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return ()
    from torch.distributed.device_mesh import init_device_mesh

    group, world = dist.group.WORLD, dist.get_world_size()
    members, rank = tuple(range(world)), dist.get_rank()
    run = dataclasses.replace(run, clock=WALL_CLOCK)
    elements = message_elements(FUNCTIONAL_PROBE_BYTES, world)
    mesh = init_device_mesh(run.device.type, (world,))
    timings = []
    for op in FUNCTIONAL_OPS:
        plain = collective_call(op, FUNCTIONAL_PROBE_BYTES, group, members, rank, run.device)
        functional = _functional_call(op, elements, group, run)
        timings.append(
            OverheadTiming(op=f"functional_{op}", times_s=_alternating(run, functional, plain))
        )
        if op in REDISTRIBUTIONS:
            redistribution = _redistribution(op, elements, mesh, run)
            timings.append(
                OverheadTiming(
                    op=f"redistribute_{op}",
                    times_s=_alternating(run, redistribution, functional),
                )
            )
    return tuple(timings)
