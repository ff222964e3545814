"""Search sanity of the published-runs validation (issue item 5): for every trust A row
with a complete configuration, run the planner (`planner.search.search_plans`, top 10) on
the same model, cluster, sequence and batch, and compare its pick with the published recipe.

Both are priced by the same cost model with the row's execution options
(`published_rows.options_for_row`: Megatron-LM 2021 for SC21-era sources), and the planner
searches only the plan features those options implement (`SearchSpace.for_runtime`: no
sequence parallelism, distributed optimizer or selective recompute in 2021), so the
comparison is between plans the same software could run:
- claimed speedup: the pick's predicted tokens/s over the recipe's;
- recipe rank: the recipe's place when it is put into the planner's own order of its
  simulated plans (`planner.ranking.order_plans`: fastest first, the simpler plan first
  among plans within `RANK_TOLERANCE` of each other; ``top_k + 1`` when it falls behind the
  whole list);
- the same rank counting only the plans predicted more than `TIE_TOLERANCE` faster
  (``*_rank_within_error``): a plan within the cost model's own error of the recipe is not
  shown to be faster, so it ties with the recipe; the plain rank stays beside it;
- the same figures for a search held to the recipe's own recompute setting
  (``same_recompute_*``), which separates what the pick gains by recomputing less from what
  it gains by its degrees and micro-batch size;
- the pick's peak memory and the share of device memory it leaves free, as a pick that
  fits only within the search's headroom rests on the memory model's last few percent;
- the predicted breakdowns (`costmodel.iteration.Breakdown`, seconds per phase on the
  critical stage) of the recipe, the pick and the held pick, which say where a claimed
  speedup comes from (recompute, bubble, exposed TP, PP or DP communication).
Recipes tuned on the real machines should rank high; a large claimed speedup is more likely
a cost-model error than a better plan.
"""

from __future__ import annotations

import statistics

from published_rows import NotExpressible, case_for_row

from costmodel.estimate import Estimate, estimate_plan
from planner.ranking import RANK_TOLERANCE, order_plans
from planner.search import RankedPlan, SearchResult, search_plans
from planner.space import SearchSpace
from profiles.store import load_profile
from specs.errors import SpecError
from specs.plan import ParallelPlan

TOP_K = 10
TIE_TOLERANCE = RANK_TOLERANCE
"""Predicted speedup over the recipe up to which a plan ties with it in the
``*_rank_within_error`` ranks: the planner's own tie band (`planner.ranking.RANK_TOLERANCE`,
which gives its evidence)."""


def _claim(
    result: SearchResult, recipe_plan: ParallelPlan, recipe: Estimate
) -> tuple[RankedPlan, float, int, int]:
    """(the pick, its tokens/s over the recipe's, the recipe's place in the planner's order,
    its rank counting only plans more than `TIE_TOLERANCE` faster) of one search."""
    if result.best is None:
        raise NotExpressible("the planner found no fitting plan")
    entries: list[tuple[ParallelPlan, Estimate]] = [(recipe_plan, recipe)]
    entries += [(r.plan, r.estimate) for r in result.top]
    ordered = order_plans(
        entries,
        plan=lambda e: e[0],
        tokens_per_s=lambda e: e[1].tokens_per_s,
        peak_memory_bytes=lambda e: e[1].peak_memory_bytes,
    )
    rank = next(i for i, e in enumerate(ordered) if e is entries[0]) + 1
    speedups = [r.estimate.tokens_per_s / recipe.tokens_per_s for r in result.top]
    beyond = sum(1 for x in speedups if x > 1 + TIE_TOLERANCE)
    return result.best, speedups[0], rank, beyond + 1


def sanity_row(raw: dict[str, str]) -> dict[str, object]:
    """Claimed speedup and recipe rank for one row, over the whole search space and over
    the recipe's recompute setting (see the module docstring)."""
    case = case_for_row(raw)
    profile = load_profile(case.profile)
    recipe = estimate_plan(
        case.model, case.cluster, case.job, case.plan, profile, options=case.options
    )
    args = (case.model, case.cluster, case.job, profile)
    result = search_plans(*args, top_k=TOP_K, options=case.options)
    pick, speedup, rank, rank_tied = _claim(result, case.plan, recipe)
    held = {
        "recompute": case.plan.recompute,
        "recompute_num_layers": case.plan.recompute_num_layers,
        "recompute_method": case.plan.recompute_method,
    }
    same = search_plans(*args, space=SearchSpace(fixed=held), top_k=TOP_K, options=case.options)
    same_pick, same_speedup, same_rank, same_rank_tied = _claim(same, case.plan, recipe)
    device_gib = profile.device.memory_gib
    return {
        "row_id": raw["row_id"],
        "model": raw["model"],
        "recipe": case.plan.label(),
        "pick": pick.plan.label(),
        "claimed_speedup": speedup,
        "recipe_rank": rank,
        "recipe_fits": recipe.fits,
        "pick_peak_gib": pick.estimate.peak_memory_gib,
        "pick_memory_free": 1 - pick.estimate.peak_memory_gib / device_gib,
        "same_recompute_pick": same_pick.plan.label(),
        "same_recompute_speedup": same_speedup,
        "same_recompute_rank": same_rank,
        "recipe_rank_within_error": rank_tied,
        "same_recompute_rank_within_error": same_rank_tied,
        "recipe_peak_gib": recipe.peak_memory_gib,
        "recipe_breakdown": recipe.breakdown.as_dict(),
        "pick_breakdown": pick.estimate.breakdown.as_dict(),
        "same_recompute_breakdown": same_pick.estimate.breakdown.as_dict(),
    }


def search_sanity(rows: list[dict[str, str]]) -> dict[str, object]:
    """Per trust A row: claimed speedup and recipe rank (also held to the recipe's
    recompute setting, and counting only plans beyond `TIE_TOLERANCE`); the median
    speedups and the shares of recipes within the planner's top 10."""
    results, apart = [], []
    for raw in rows:
        if raw["trust"] != "A":
            continue
        try:
            results.append(sanity_row(raw))
        except (NotExpressible, SpecError) as err:
            lines = str(err).splitlines()
            reason = lines[-1].strip(" -") if len(lines) > 1 else lines[0]
            apart.append({"row_id": raw["row_id"], "reason": reason})

    def median(key: str) -> float | None:
        values = [float(r[key]) for r in results]  # type: ignore[arg-type]
        return statistics.median(values) if values else None

    def top_share(key: str) -> float | None:
        in_top = [int(r[key]) <= TOP_K for r in results]  # type: ignore[call-overload]
        return sum(in_top) / len(in_top) if in_top else None

    return {
        "median_claimed_speedup": median("claimed_speedup"),
        "recipe_in_top10_fraction": top_share("recipe_rank"),
        "median_same_recompute_speedup": median("same_recompute_speedup"),
        "same_recompute_in_top10_fraction": top_share("same_recompute_rank"),
        "tie_tolerance": TIE_TOLERANCE,
        "recipe_in_top10_within_error_fraction": top_share("recipe_rank_within_error"),
        "same_recompute_in_top10_within_error_fraction": top_share(
            "same_recompute_rank_within_error"
        ),
        "rows": results,
        "not_run": apart,
    }
