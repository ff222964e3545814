"""Shared inputs of the executor-model tests: the synthetic CPU profile
(`tests.costmodel.cpu_fixture.cpu_profile`), its host rates, the ``tiny`` and ``tiny-moe``
presets, a rank's shape at 128 tokens, and a count of collectives by kind."""

from __future__ import annotations

from collections.abc import Iterable

from costmodel.runtimes.torch.ops import Comm
from costmodel.runtimes.torch.rates import host_rates
from costmodel.runtimes.torch.shapes import RankShape, rank_shape
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile

CPU = cpu_profile()
RATES = host_rates(CPU)
TINY = get_preset("tiny")
MOE = get_preset("tiny-moe")


def shape(**plan: object) -> RankShape:
    """The `RankShape` of ``ParallelPlan(**plan)`` at 128 tokens per sequence, 8 microbatches."""
    return rank_shape(ParallelPlan(**plan), 128, 8)


def count(comms: Iterable[Comm], op: str) -> float:
    """How many collectives of kind ``op`` ``comms`` holds (each weighted by its count)."""
    return sum(c.count for c in comms if c.op == op)
