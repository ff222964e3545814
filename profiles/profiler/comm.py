"""Collective sweeps: every op, message size, group size and placement, on gloo or NCCL.

Group layouts (`group_layouts`) follow how a training job's groups run: for a group size
g, every disjoint group of g ranks that fits runs the same collective at the same time
(as all TP groups, or all DP groups, of a step do), and the recorded time of each sample
is the slowest rank's. `intra` groups are consecutive ranks of one node; `inter` groups
take one rank per node, and every local rank forms such a group at once, so the NICs
carry the traffic of a whole node, as data-parallel traffic does.

Sizes follow nccl-tests (`profiles.schema_network.BUS_FACTOR_DOC`): the full array per rank for
all_reduce, the total over the group for all_gather, reduce_scatter and all_to_all, the
message for send_recv. send_recv is timed as a ping-pong between the two ranks of a pair
and recorded as half the round trip (one transfer).

Each point costs exactly two collectives on the control group for every rank, members or
not (the agreed repeat plan, then the max of the samples), so no rank waits on another's
sweep longer than one point and a rank that stops answering fails the others within the
process-group timeout. The sweep runs several passes over all points (`timing.COMM_PASSES`)
and pools each point's samples, so a burst of other load on a shared host spoils a few
samples of many points rather than all samples of a few.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from profiles.profiler.timing import Budget, CollectiveTiming, repeat_plan, time_calls

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
"""Schema names of the measured collectives, in sweep order."""
ELEMENT_BYTES = 4
"""Messages are fp32 tensors of zeros (sums stay zero: no overflow, no denormals)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupLayout:
    """The disjoint groups of one size and placement that run at the same time."""

    placement: str
    """`intra` or `inter`."""
    group_size: int
    """Ranks per group."""
    groups: tuple[tuple[int, ...], ...]
    """Global ranks of each group; the first holds rank 0's node."""


def group_layouts(world_size: int, local_world_size: int) -> tuple[GroupLayout, ...]:
    """Every (placement, group size) of a world of ``world_size`` ranks, with
    ``local_world_size`` consecutive ranks per node: intra sizes 2..local world, inter
    sizes 2..number of nodes (module docstring)."""
    nodes = world_size // local_world_size
    layouts = []
    for g in range(2, local_world_size + 1):
        groups = tuple(
            tuple(node * local_world_size + j * g + i for i in range(g))
            for node in range(nodes)
            for j in range(local_world_size // g)
        )
        layouts.append(GroupLayout(placement="intra", group_size=g, groups=groups))
    for g in range(2, nodes + 1):
        groups = tuple(
            tuple((j * g + i) * local_world_size + local for i in range(g))
            for j in range(nodes // g)
            for local in range(local_world_size)
        )
        layouts.append(GroupLayout(placement="inter", group_size=g, groups=groups))
    return tuple(layouts)


def ops_for(layout: GroupLayout) -> tuple[str, ...]:
    """Collectives measured on ``layout``: send_recv only between pairs."""
    return COLLECTIVE_OPS if layout.group_size == 2 else COLLECTIVE_OPS[:-1]


def comm_point_count(layouts: tuple[GroupLayout, ...], sizes: tuple[int, ...], passes: int) -> int:
    """Progress units of `run_comm_sweep`."""
    return sum(len(ops_for(layout)) for layout in layouts) * len(sizes) * passes


def collective_call(
    op: str,
    size_bytes: int,
    group: dist.ProcessGroup,
    members: tuple[int, ...],
    rank: int,
    device: torch.device,
) -> Callable[[], None]:
    """One call of ``op`` over ``size_bytes`` (nccl-tests convention) in ``group``."""
    g = len(members)
    elements = message_elements(size_bytes, g)

    def zeros(n: int) -> torch.Tensor:
        return torch.zeros(n, dtype=torch.float32, device=device)

    if op == "all_reduce":
        t = zeros(elements)
        return lambda: dist.all_reduce(t, group=group)
    # torch 2.13 renamed all_gather_into_tensor and reduce_scatter_tensor to *_single; the
    # old names warn (a FutureWarning on the user's terminal) and add a call to every timing
    if op == "all_gather":
        part, whole = zeros(elements // g), zeros(elements)
        all_gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
        return lambda: all_gather(whole, part, group=group)
    if op == "reduce_scatter":
        whole, part = zeros(elements), zeros(elements // g)
        reduce_scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
        return lambda: reduce_scatter(part, whole, group=group)
    if op == "all_to_all":
        src, dst = zeros(elements), zeros(elements)
        return lambda: dist.all_to_all_single(dst, src, group=group)
    message = zeros(elements)
    first, second = members
    peer = second if rank == first else first

    def ping_pong() -> None:
        if rank == first:
            dist.send(message, dst=peer, group=group)
            dist.recv(message, src=peer, group=group)
        else:
            dist.recv(message, src=peer, group=group)
            dist.send(message, dst=peer, group=group)

    return ping_pong


def message_elements(size_bytes: int, group_size: int) -> int:
    """fp32 elements of a ``size_bytes`` message, a multiple of the group size."""
    return max(group_size, size_bytes // ELEMENT_BYTES // group_size * group_size)


@dataclass(frozen=True, kw_only=True, slots=True)
class CommContext:
    """What a rank's collective sweep needs to know about the world."""

    rank: int
    """Global rank."""
    world_size: int
    """Ranks in the world."""
    local_world_size: int
    """Ranks per node."""
    device: torch.device
    """Device of the message tensors."""
    control: dist.ProcessGroup
    """gloo group of every rank, for repeat plans and sample maxima (CPU tensors)."""
    timeout_s: float
    """Timeout of the measurement groups."""
    budget: Budget
    """Samples per point."""


def _world_max(values: list[float], control: dist.ProcessGroup) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=control)
    return t.tolist()


def _time_point(ctx: CommContext, fn: Callable[[], None] | None, halve: bool) -> list[float]:
    """Samples of one point; a rank outside every group passes ``fn`` None and only
    joins the two control collectives."""
    cuda = ctx.device.type == "cuda"
    estimate = 0.0
    if fn is not None:
        for _ in range(ctx.budget.warmup_calls):
            fn()
        estimate = min(time_calls(fn, inner=1, repeats=2, cuda=cuda))
    inner, repeats = repeat_plan(_world_max([estimate], ctx.control)[0], ctx.budget)
    samples = [0.0] * repeats
    if fn is not None:
        samples = time_calls(fn, inner=inner, repeats=repeats, cuda=cuda)
    if halve:
        samples = [s / 2 for s in samples]
    return _world_max(samples, ctx.control)


MyGroup = tuple[dist.ProcessGroup, tuple[int, ...]] | None
"""This rank's group in a layout and its members, or None where it is in none."""


def _my_groups(ctx: CommContext, layouts: tuple[GroupLayout, ...]) -> list[MyGroup]:
    """Create every group of every layout (all ranks must, in the same order) and keep
    this rank's: (group, members) per layout, or None where it is in none."""
    mine: list[MyGroup] = []
    for layout in layouts:
        own: MyGroup = None
        for members in layout.groups:
            group = dist.new_group(list(members), timeout=timedelta(seconds=ctx.timeout_s))
            if ctx.rank in members:
                own = (group, members)
        mine.append(own)
    return mine


def run_comm_sweep(
    ctx: CommContext, sizes: tuple[int, ...], tick: Callable[[str], None], *, passes: int
) -> list[CollectiveTiming]:
    """Time every (layout, op, size) point in ``passes`` passes and pool each point's
    samples; every rank returns the same records."""
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
    layouts = group_layouts(ctx.world_size, ctx.local_world_size)
    mine = _my_groups(ctx, layouts)
    samples: dict[tuple[int, str, int], list[float]] = defaultdict(list)
    for _ in range(passes):
        for index, layout in enumerate(layouts):
            for op in ops_for(layout):
                for size in sizes:
                    fn = None
                    if mine[index] is not None:
                        group, members = mine[index]
                        fn = collective_call(op, size, group, members, ctx.rank, ctx.device)
                    point = _time_point(ctx, fn, halve=op == "send_recv")
                    samples[(index, op, size)].extend(point)
                    tick(f"{op} {layout.placement} x{layout.group_size} {size >> 10} KiB")
    return [
        CollectiveTiming(
            op=op,
            group_size=layouts[index].group_size,
            placement=layouts[index].placement,
            size_bytes=message_elements(size, layouts[index].group_size) * ELEMENT_BYTES,
            concurrent_groups=len(layouts[index].groups),
            times_s=tuple(times),
        )
        for (index, op, size), times in samples.items()
    ]
