"""The figures of one search sanity claim (`search_sanity.py`): how a planner's pick compares
with a published recipe, both priced by the same cost model.

- `claim`: the pick, its claimed speedup (predicted tokens/s over the recipe's), the
  recipe's rank in the planner's order (`planner.ranking.order_plans`) and the same rank
  counting only the plans more than `TIE_TOLERANCE` faster;
- `gain_by_phase` and `breakdown_figures`: where a claimed speedup comes from, per phase of
  the predicted breakdowns, as shares of the recipe's iteration;
- `overflow_fragmentation` and `fragmentation_figures`: the allocator fragmentation share
  at which the pick would no longer fit, against the share the row's options assume.
"""

from __future__ import annotations

from published_rows import NotExpressible

from costmodel.estimate import Estimate
from costmodel.execution import ExecutionOptions
from costmodel.memory_allowances import FrameworkAllowance
from planner.ranking import RANK_TOLERANCE, order_plans
from planner.search_result import RankedPlan
from specs.plan import ParallelPlan

TIE_TOLERANCE = RANK_TOLERANCE
"""Predicted speedup over the recipe up to which a plan ties with it in the
``*_rank_within_error`` ranks: the planner's own tie band (`planner.ranking.RANK_TOLERANCE`,
which gives its evidence)."""


def claim(
    top: tuple[RankedPlan, ...], recipe_plan: ParallelPlan, recipe: Estimate
) -> tuple[RankedPlan, float, int, int]:
    """(the pick, its tokens/s over the recipe's, the recipe's place in the planner's order,
    its rank counting only plans more than `TIE_TOLERANCE` faster) of one search's ``top``
    plans (`SearchResult.top`, in the planner's order)."""
    if not top:
        raise NotExpressible("the planner found no fitting plan")
    entries: list[tuple[ParallelPlan, Estimate]] = [(recipe_plan, recipe)]
    entries += [(r.plan, r.estimate) for r in top]
    ordered = order_plans(
        entries,
        plan=lambda e: e[0],
        tokens_per_s=lambda e: e[1].tokens_per_s,
        peak_memory_bytes=lambda e: e[1].peak_memory_bytes,
    )
    rank = next(i for i, e in enumerate(ordered) if e is entries[0]) + 1
    speedups = [r.estimate.tokens_per_s / recipe.tokens_per_s for r in top]
    beyond = sum(1 for x in speedups if x > 1 + TIE_TOLERANCE)
    return top[0], speedups[0], rank, beyond + 1


def gain_by_phase(recipe: dict[str, float], pick: dict[str, float]) -> dict[str, float]:
    """Seconds the pick saves in each phase of `costmodel.iteration.Breakdown` (critical
    stage), as shares of the recipe's iteration; negative where the pick spends more. The
    shares sum to 1 - 1 / claimed speedup, both plans running one global batch."""
    total_s = sum(recipe.values())
    return {phase: (recipe[phase] - pick[phase]) / total_s for phase in recipe}


def overflow_fragmentation(estimate: Estimate, allowance: FrameworkAllowance) -> float:
    """The allocator fragmentation share (`FrameworkAllowance.fraction`, a share of the
    dynamic bytes: activations, recompute working set, communication buffers) at which the
    first stage of ``estimate`` exceeds device memory during the backward, with
    ``allowance``'s fixed bytes; the smallest over the stages. 0 when a stage's optimizer
    step alone exceeds the device (`costmodel.memory.StageMemory.optimizer_step_bytes`,
    which no share changes); infinite when no stage has dynamic bytes."""
    shares = []
    for stage in estimate.memory:
        if stage.optimizer_step_bytes and stage.total_bytes > estimate.device_memory_bytes:
            return 0.0
        dynamic = stage.activation_total_bytes + stage.comm_buffers_bytes
        backward = stage.total_bytes - stage.optimizer_step_bytes
        static = backward - stage.framework_bytes + allowance.fixed_bytes
        if dynamic > 0:
            shares.append((estimate.device_memory_bytes - static) / dynamic)
    return min(shares, default=float("inf"))


def breakdown_figures(
    recipe: Estimate, pick: Estimate, same_pick: Estimate
) -> dict[str, dict[str, float]]:
    """The predicted breakdowns (`costmodel.iteration.Breakdown`, seconds per phase on the
    critical stage) of the recipe, the pick and the pick held to the recipe's recompute,
    then the two picks' `gain_by_phase` over the recipe."""
    breakdowns = {
        "recipe_breakdown": recipe.breakdown.as_dict(),
        "pick_breakdown": pick.breakdown.as_dict(),
        "same_recompute_breakdown": same_pick.breakdown.as_dict(),
    }
    return {
        **breakdowns,
        "pick_gain_by_phase": gain_by_phase(
            breakdowns["recipe_breakdown"], breakdowns["pick_breakdown"]
        ),
        "same_recompute_gain_by_phase": gain_by_phase(
            breakdowns["recipe_breakdown"], breakdowns["same_recompute_breakdown"]
        ),
    }


def fragmentation_figures(pick: Estimate, options: ExecutionOptions) -> dict[str, float]:
    """The pick's `overflow_fragmentation` with the default framework allowance, and the
    fragmentation share the row's execution ``options`` assume (their
    ``allocator_fragmentation``, else the allowance's share for their
    ``expandable_segments``)."""
    allowance = FrameworkAllowance()
    return {
        "pick_overflow_fragmentation": overflow_fragmentation(pick, allowance),
        "assumed_fragmentation": (
            options.allocator_fragmentation
            if options.allocator_fragmentation is not None
            else allowance.fragmentation(options.expandable_segments)
        ),
    }
