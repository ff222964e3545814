"""Order of the simulated plans: fastest first, the simpler plan first among near-ties.

A predicted gain smaller than the cost model's resolution is not evidence that a plan is
faster, while every extra parallel dimension (context parallelism, an interleaved schedule)
adds communication paths and failure modes the model prices only approximately. The order:

1. the fastest remaining plan leads a group of every remaining plan whose predicted
   tokens/s is within `RANK_TOLERANCE` of the leader's (``tokens/s * (1 + tol) >= leader``);
2. the group is ordered by `simplicity` (fewer context-parallel ranks, fewer virtual
   pipeline stages, fewer parallel dimensions above 1), then by tokens/s, then by peak memory;
3. repeat on the plans left.

Every plan lands in exactly one group, so the result is a total order of the input; a plan
more than the tolerance faster than another is never grouped after it (its group's leader is
at least as fast, so the slower plan is beyond the tolerance of that leader too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from specs.plan import ParallelPlan

RANK_TOLERANCE = 0.02
"""Relative predicted gain (tokens/s) up to which two plans tie and the simpler ranks first.
The cost model's signed errors on the SC21 published rows, which share model code, hardware
and software and differ only in their plans, spread over about ten percentage points
(docs/validation.md, per-row table); 2% is the narrowest such figure used by the search
sanity bench (`bench/search_sanity.py`), not a fit."""

T = TypeVar("T")


def simplicity(plan: ParallelPlan) -> tuple[int, int, int]:
    """Sort key of a plan's complexity, smaller is simpler: (context-parallel degree,
    virtual pipeline degree, number of the degrees tp, pp, cp, ep above 1)."""
    dims = sum(1 for d in (plan.tp, plan.pp, plan.cp, plan.ep) if d > 1)
    return (plan.cp, plan.vpp, dims)


def order_plans(
    items: Sequence[T],
    *,
    plan: Callable[[T], ParallelPlan],
    tokens_per_s: Callable[[T], float],
    peak_memory_bytes: Callable[[T], float],
    tolerance: float = RANK_TOLERANCE,
) -> list[T]:
    """``items`` in the planner's order (module docstring); ``tokens_per_s`` must be positive."""
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    left = sorted(items, key=lambda x: (-tokens_per_s(x), peak_memory_bytes(x)))
    ordered: list[T] = []
    while left:
        leader = tokens_per_s(left[0])
        group = [x for x in left if tokens_per_s(x) * (1 + tolerance) >= leader]
        left = [x for x in left if tokens_per_s(x) * (1 + tolerance) < leader]
        group.sort(key=lambda x: (simplicity(plan(x)), -tokens_per_s(x), peak_memory_bytes(x)))
        ordered.extend(group)
    return ordered
