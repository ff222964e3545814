"""Search sanity of the published-runs validation (issue item 5): for every trust A row
with a complete configuration, run the planner (`planner.search.search_plans`, top 10) on
the same model, cluster, sequence and batch, and compare its pick with the published recipe.

Both are priced by the same cost model with the row's execution options
(`published_rows.options_for_row`: Megatron-LM 2021 for SC21-era sources), and the planner
searches only the plan features those options implement (`SearchSpace.for_runtime`: no
sequence parallelism, distributed optimizer or selective recompute in 2021), so the
comparison is between plans the same software could run:
- claimed speedup: the pick's predicted tokens/s over the recipe's;
- recipe rank: 1 + the number of the planner's simulated plans predicted faster than the
  recipe (``top_k + 1`` when it falls behind the whole list).
Recipes tuned on the real machines should rank high; a large claimed speedup is more likely
a cost-model error than a better plan.
"""

from __future__ import annotations

import statistics

from published_rows import NotExpressible, case_for_row

from costmodel.estimate import estimate_plan
from planner.search import search_plans
from profiles.store import load_profile
from specs.errors import SpecError

TOP_K = 10


def sanity_row(raw: dict[str, str]) -> dict[str, object]:
    """Claimed speedup and recipe rank for one row (see the module docstring)."""
    case = case_for_row(raw)
    profile = load_profile(case.profile)
    recipe = estimate_plan(
        case.model, case.cluster, case.job, case.plan, profile, options=case.options
    )
    result = search_plans(
        case.model, case.cluster, case.job, profile, top_k=TOP_K, options=case.options
    )
    if result.best is None:
        raise NotExpressible("the planner found no fitting plan")
    faster = sum(1 for r in result.top if r.estimate.tokens_per_s > recipe.tokens_per_s)
    return {
        "row_id": raw["row_id"],
        "model": raw["model"],
        "recipe": case.plan.label(),
        "pick": result.best.plan.label(),
        "claimed_speedup": result.best.estimate.tokens_per_s / recipe.tokens_per_s,
        "recipe_rank": faster + 1,
        "recipe_fits": recipe.fits,
    }


def search_sanity(rows: list[dict[str, str]]) -> dict[str, object]:
    """Per trust A row: claimed speedup and recipe rank; the median speedup and the share
    of recipes within the planner's top 10."""
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
    speedups = [float(r["claimed_speedup"]) for r in results]
    in_top = [int(r["recipe_rank"]) <= TOP_K for r in results]
    return {
        "median_claimed_speedup": statistics.median(speedups) if speedups else None,
        "recipe_in_top10_fraction": sum(in_top) / len(in_top) if in_top else None,
        "rows": results,
        "not_run": apart,
    }
