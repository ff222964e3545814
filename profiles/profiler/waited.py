"""Collectives as a training step calls them: right after some compute, and waited for.

The collective sweep (`profiles.profiler.comm`) times calls back to back, and its α-β fits
describe each point's fastest sample: the wire time. A training step calls a collective
after a stretch of compute and waits for it; on a shared host the call then also pays for
the two ranks' scheduling (one reaches the call later, or its communication thread is woken
later). On the 2-core development VM (gloo, 2 ranks, 16-128 KiB, 0.7-1.2 ms of GEMMs before
each call, means over 140 calls) a waited functional call cost 1.3-2.0 ms (all_reduce),
0.9-1.7 (all_gather), 1.1-1.8 (reduce_scatter) and 0.8-1.4 (all_to_all), against fastest
back-to-back calls of 0.2-0.6 ms: per op, an excess the sweep's own spread (mean less
minimum of back-to-back samples) put at 0.18 ms for all_to_all and 1.65 ms for all_reduce.

For each op of `FUNCTIONAL_OPS`, over every rank at once (wall time) at
`FUNCTIONAL_PROBE_BYTES`, alternating for `FUNCTIONAL_ROUNDS` rounds (a slow spell of the
host then hits every form): the plain ``torch.distributed`` call back to back, the same
call right after a `BETWEEN_GEMM`-square GEMM, the functional call
(``torch.distributed._functional_collectives``, what DTensor's redistributions and the
executor's context- and expert-parallel exchanges use) and its ``wait_tensor`` right after
the same GEMM, and the GEMM alone. Recorded, per sample:

- ``waited_<op>.<ranks>``: a plain call after the GEMM, less the GEMM's mean and the
  fastest back-to-back call: what a waited-for call costs beyond the wire time the fits
  describe (`costmodel.host_rates` reads its mean as the call's excess in a group of
  ``<ranks>`` ranks);
- ``functional_<op>``: a functional call after the GEMM, less the mean of the plain call
  after the GEMM: the functional form's extra cost per call.

Left out on one rank (no process group, or a world of one).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable

import torch
import torch.distributed as dist

from profiles.profiler.comm import collective_call, message_elements
from profiles.profiler.compute import Runner
from profiles.profiler.timing import WALL_CLOCK, OverheadTiming

FUNCTIONAL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
"""Collectives timed in functional and plain form (`costmodel.host_rates` reads them)."""
FUNCTIONAL_PROBE_BYTES = 1 << 16
"""Size of the probe (nccl-tests convention): small enough that the call's host cost, not
the wire, dominates, as for the executor's per-layer exchanges."""
FUNCTIONAL_ROUNDS = 4
"""Alternating rounds per op: every form's calls have heavy tails on a shared host, and
their means are what a training step pays."""
BETWEEN_GEMM = 256
"""Rows, columns and inner size of the GEMM run before each waited call: about a
millisecond on one core of the development VM, a layer's stretch of compute there."""


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


def _after(gemm: Callable[[], object], call: Callable[[], object]) -> Callable[[], None]:
    """``call`` right after ``gemm``, as a training step issues it."""

    def both() -> None:
        gemm()
        call()

    return both


def _less(samples: list[float], base_s: float) -> tuple[float, ...]:
    return tuple(t - base_s for t in samples)


def time_waited_collectives(run: Runner) -> tuple[OverheadTiming, ...]:
    """``waited_<op>.<ranks>`` and ``functional_<op>`` of every op (module doc); empty
    without a process group of several ranks."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return ()
    group, world = dist.group.WORLD, dist.get_world_size()
    members, rank = tuple(range(world)), dist.get_rank()
    run = dataclasses.replace(run, clock=WALL_CLOCK)
    elements = message_elements(FUNCTIONAL_PROBE_BYTES, world)
    a, b = run.randn(BETWEEN_GEMM, BETWEEN_GEMM), run.randn(BETWEEN_GEMM, BETWEEN_GEMM)

    def gemm() -> torch.Tensor:
        return a @ b

    timings = []
    for op in FUNCTIONAL_OPS:
        plain = collective_call(op, FUNCTIONAL_PROBE_BYTES, group, members, rank, run.device)
        functional = _functional_call(op, elements, group, run)
        back_to_back, waited, waited_functional, alone = [], [], [], []
        for _ in range(FUNCTIONAL_ROUNDS):
            back_to_back += run.time(plain)
            waited += run.time(_after(gemm, plain))
            waited_functional += run.time(_after(gemm, functional))
            alone += run.time(gemm)
        plain_s = statistics.mean(waited)
        wire_s = min(back_to_back)
        timings += [
            OverheadTiming(
                op=f"waited_{op}.{world}", times_s=_less(waited, statistics.mean(alone) + wire_s)
            ),
            OverheadTiming(op=f"functional_{op}", times_s=_less(waited_functional, plain_s)),
        ]
    return tuple(timings)
