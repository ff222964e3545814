"""Search sanity of the published-runs validation (issue item 5): for every trust A row
with a complete configuration, run the planner (`planner.search.search_plans`, top 10) on
the same model, cluster, sequence and batch, and compare its pick with the published recipe.

Both are priced by the same cost model with the row's execution options
(`row_options.options_for_row`: Megatron-LM 2021 for SC21-era sources), and the planner
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
  speedup comes from (recompute, bubble, exposed TP, PP or DP communication), and the same
  as shares of the recipe's iteration (`gain_by_phase`);
- the allocator fragmentation share at which the pick would no longer fit
  (`overflow_fragmentation`), against the share the row's execution options assume
  (`costmodel.execution_presets.MEGATRON_2021_FRAGMENTATION` for SC21 rows): how far a claim that
  rests on a larger memory footprint is from not fitting.
Recipes tuned on the real machines should rank high; a large claimed speedup is more likely
a cost-model error than a better plan.

Run alone (``python bench/search_sanity.py --help``) it prints these figures per row, or
JSON with ``--json``; ``--recipe-vpp`` prices recipes published without interleaving with a
given virtual pipeline degree instead (what the claim would be had the recipe interleaved).

This module runs the searches (`cached_search`, once per problem and held knobs) and
assembles the figures per recipe and over all recipes; `sanity_claims.py` computes each
claim's figures, `sanity_cases.py` the recipe's case as priced and as searched,
`sanity_problems.py` groups the rows into problems and recipes and summarizes them, and
`sanity_text.py` holds the command line's parser and text output.
"""

from __future__ import annotations

import json
import sys
import time

from published_rows import NotExpressible, RowCase, case_for_row
from row_figures import case_estimate
from sanity_cases import searched_case, with_recipe_vpp
from sanity_claims import TIE_TOLERANCE, breakdown_figures, claim, fragmentation_figures
from sanity_problems import (
    ProblemKey,
    Recipe,
    failure_reason,
    first_problems,
    parse_trusts,
    problem_key,
    recipes_of,
    summaries,
    summary,
)
from sanity_text import build_parser, print_result

from planner.search import search_plans
from planner.search_result import RankedPlan
from planner.space import SearchSpace
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from specs.errors import SpecError

TOP_K = 10
"""Plans each search keeps (`search_plans` ``top_k``): the recipe ranks among these."""


SearchKey = tuple[ProblemKey, tuple[tuple[str, object], ...]]
"""One search: the problem (`sanity_problems.problem_key`) and the knobs held fixed."""


def cached_search(
    case: RowCase,
    profile: HardwareProfile,
    fixed: dict[str, object],
    searches: dict[SearchKey, tuple[RankedPlan, ...]],
) -> tuple[RankedPlan, ...]:
    """The fitting plans of `search_plans` (top `TOP_K`, the case's options, in the
    planner's order) over the case's problem with the knobs ``fixed``, searched once per
    problem and knobs: ``searches`` keeps them (only them: a MoE search's candidate table
    holds millions of rows)."""
    key = (problem_key(case), tuple(sorted(fixed.items())))
    if key not in searches:
        space = SearchSpace(fixed=fixed) if fixed else None
        searches[key] = search_plans(
            case.model,
            case.cluster,
            case.job,
            profile,
            space=space,
            top_k=TOP_K,
            options=case.options,
        ).top
    return searches[key]


def sanity_case(
    case: RowCase, searches: dict[SearchKey, tuple[RankedPlan, ...]] | None = None
) -> dict[str, object]:
    """Claimed speedup and recipe rank for one recipe, over the whole search space and over
    the recipe's recompute setting (see the module docstring); ``searches`` as
    `cached_search` (a fresh one when None)."""
    searches = {} if searches is None else searches
    profile = load_profile(case.profile)
    recipe = case_estimate(case, profile=profile)
    searched = searched_case(case)
    result = cached_search(searched, profile, {}, searches)
    pick, speedup, rank, rank_tied = claim(result, case.plan, recipe)
    held: dict[str, object] = {
        "recompute": case.plan.recompute,
        "recompute_num_layers": case.plan.recompute_num_layers,
        "recompute_method": case.plan.recompute_method,
    }
    same = cached_search(searched, profile, held, searches)
    same_pick, same_speedup, same_rank, same_rank_tied = claim(same, case.plan, recipe)
    device_gib = profile.device.memory_gib
    return {
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
        **breakdown_figures(recipe, pick.estimate, same_pick.estimate),
        **fragmentation_figures(pick.estimate, case.options),
    }


def sanity_recipe(
    recipe: Recipe,
    recipe_vpp: int = 1,
    searches: dict[SearchKey, tuple[RankedPlan, ...]] | None = None,
) -> dict[str, object]:
    """`sanity_case` of a recipe (its plan as `with_recipe_vpp`), with the recipe's rows
    (``row_id``: the first; ``row_ids``: all), model, trust, dense/MoE kind, GPU generation,
    stored profile and GPU count, and its problem's index."""
    case = with_recipe_vpp(recipe.case, recipe_vpp)
    first = recipe.rows[0]
    return {
        "row_id": first["row_id"],
        "row_ids": list(recipe.row_ids),
        "model": first["model"],
        "trust": first["trust"],
        "kind": recipe.kind,
        "generation": case.generation,
        "hardware": case.profile,
        "num_gpus": case.cluster.num_gpus,
        "problem": recipe.problem,
        **sanity_case(case, searches),
    }


def sanity_row(raw: dict[str, str], recipe_vpp: int = 1) -> dict[str, object]:
    """`sanity_recipe` of one row alone."""
    return sanity_recipe(Recipe(case=case_for_row(raw), rows=(raw,), problem=0), recipe_vpp)


def search_sanity(
    rows: list[dict[str, str]],
    recipe_vpp: int = 1,
    *,
    trusts: tuple[str, ...] = ("A",),
    kind: str = "all",
    limit: int | None = None,
    progress: bool = False,
) -> dict[str, object]:
    """Per distinct recipe of the rows of the ``trusts`` levels and model ``kind`` with a
    complete configuration (`sanity_problems.recipes_of`; the first ``limit`` problems):
    claimed speedup and recipe rank (also held to the recipe's recompute setting, and
    counting only plans beyond `TIE_TOLERANCE`), each problem searched once; the median
    speedups and the shares of recipes within the planner's top 10, over all recipes and
    per group (`sanity_problems.summaries`); ``recipe_vpp`` as `with_recipe_vpp`;
    ``progress`` prints one line per recipe to stderr (its index, rows, seconds)."""
    recipes, apart = recipes_of(rows, trusts, kind)
    recipes = first_problems(recipes, limit)
    searches: dict[SearchKey, tuple[RankedPlan, ...]] = {}
    results = []
    start = time.perf_counter()
    for i, recipe in enumerate(recipes, 1):
        tick = time.perf_counter()
        try:
            results.append(sanity_recipe(recipe, recipe_vpp, searches))
        except (NotExpressible, SpecError) as err:
            apart += [{"row_id": rid, "reason": failure_reason(err)} for rid in recipe.row_ids]
        if progress:
            print(
                f"recipe {i} of {len(recipes)} (rows {','.join(recipe.row_ids)}, "
                f"problem {recipe.problem + 1}): {time.perf_counter() - tick:.1f} s, "
                f"{time.perf_counter() - start:.0f} s in all",
                file=sys.stderr,
                flush=True,
            )
    return {
        **summary(results, TOP_K),
        "tie_tolerance": TIE_TOLERANCE,
        "trusts": list(trusts),
        "num_problems": len({r.problem for r in recipes}),
        "num_searches": len(searches),
        "by_group": summaries(results, TOP_K),
        "rows": results,
        "not_run": apart,
    }


def main(argv: list[str] | None = None) -> int:
    from published_csv import default_csv, read_rows, select_rows

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        trusts = parse_trusts(args.trust)
    except SpecError as err:
        parser.error(str(err))
    path = default_csv()
    if path is None:
        print("published-runs CSV not found", file=sys.stderr)
        return 2
    rows = select_rows(read_rows(path), args.rows)
    try:
        result = search_sanity(
            rows,
            args.recipe_vpp,
            trusts=trusts,
            kind=args.kinds,
            limit=args.limit,
            progress=True,
        )
    except SpecError as err:
        parser.error(str(err))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
