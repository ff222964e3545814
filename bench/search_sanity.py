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
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from published_rows import NotExpressible, RowCase, case_for_row
from sanity_problems import (
    KINDS,
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

from costmodel.estimate import Estimate, estimate_plan
from costmodel.memory_allowances import FrameworkAllowance
from planner.ranking import RANK_TOLERANCE, order_plans
from planner.search import search_plans
from planner.search_result import RankedPlan
from planner.space import SearchSpace
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from specs.errors import SpecError
from specs.plan import ParallelPlan

TOP_K = 10
TIE_TOLERANCE = RANK_TOLERANCE
"""Predicted speedup over the recipe up to which a plan ties with it in the
``*_rank_within_error`` ranks: the planner's own tie band (`planner.ranking.RANK_TOLERANCE`,
which gives its evidence)."""


def _claim(
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


def with_recipe_vpp(case: RowCase, vpp: int) -> RowCase:
    """``case`` with its recipe on the interleaved schedule at ``vpp`` model chunks per
    pipeline rank, when it is pipelined and published without interleaving; else as is."""
    plan = case.plan
    if vpp <= 1 or plan.pp == 1 or plan.vpp > 1:
        return case
    return dataclasses.replace(
        case, plan=dataclasses.replace(plan, vpp=vpp, schedule="interleaved")
    )


SearchKey = tuple[ProblemKey, tuple[tuple[str, object], ...]]
"""One search: the problem (`sanity_problems.problem_key`) and the knobs held fixed."""


def recipe_features(plan: ParallelPlan) -> frozenset[str]:
    """The plan features (`costmodel.execution_rules.PLAN_FEATURES`) that ``plan`` uses, but
    ``ddp_bucket_size``: a recipe's bucket is its framework's fixed default (PyTorch DDP's
    25 MB on the SC21 rows), not a searched ``--ddp-bucket-size``."""
    used = {
        "sequence_parallel": plan.sequence_parallel,
        "tp_comm_overlap": plan.tp_comm_overlap,
        "selective_recompute": plan.recompute == "selective",
        "recompute_modules": plan.recompute == "selective" and plan.recompute_modules is not None,
        "context_parallel": plan.cp > 1,
        "distributed_optimizer": plan.distributed_optimizer,
        "uneven_pipeline_split": plan.has_uneven_split,
        "interleaved_two_stages": plan.pp == 2 and plan.vpp > 1,
        "pipelined_grad_overlap": plan.overlap_grad_reduce and plan.pp > 1,
        "megatron_fsdp": plan.use_megatron_fsdp,
    }
    return frozenset(name for name, on in used.items() if on)


def searched_case(case: RowCase) -> RowCase:
    """``case`` with the plan features of its options widened by those its recipe uses
    (`recipe_features`), so that the search may use what the recipe's software ran: BLOOM's
    Megatron-DeepSpeed is priced as Megatron-LM 2021 (no distributed optimizer, even
    splits) but ran ZeRO-1 and an embedding-aware split. Plan features steer the search
    only; no price reads them (`ExecutionOptions.plan_features`)."""
    features = case.options.plan_features | recipe_features(case.plan)
    if features == case.options.plan_features:
        return case
    options = dataclasses.replace(case.options, plan_features=features)
    return dataclasses.replace(case, options=options)


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
    recipe = estimate_plan(
        case.model, case.cluster, case.job, case.plan, profile, options=case.options
    )
    searched = searched_case(case)
    result = cached_search(searched, profile, {}, searches)
    pick, speedup, rank, rank_tied = _claim(result, case.plan, recipe)
    held: dict[str, object] = {
        "recompute": case.plan.recompute,
        "recompute_num_layers": case.plan.recompute_num_layers,
        "recompute_method": case.plan.recompute_method,
    }
    same = cached_search(searched, profile, held, searches)
    same_pick, same_speedup, same_rank, same_rank_tied = _claim(same, case.plan, recipe)
    device_gib = profile.device.memory_gib
    allowance = FrameworkAllowance()
    breakdowns = {
        "recipe_breakdown": recipe.breakdown.as_dict(),
        "pick_breakdown": pick.estimate.breakdown.as_dict(),
        "same_recompute_breakdown": same_pick.estimate.breakdown.as_dict(),
    }
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
        **breakdowns,
        "pick_gain_by_phase": gain_by_phase(
            breakdowns["recipe_breakdown"], breakdowns["pick_breakdown"]
        ),
        "same_recompute_gain_by_phase": gain_by_phase(
            breakdowns["recipe_breakdown"], breakdowns["same_recompute_breakdown"]
        ),
        "pick_overflow_fragmentation": overflow_fragmentation(pick.estimate, allowance),
        "assumed_fragmentation": (
            case.options.allocator_fragmentation
            if case.options.allocator_fragmentation is not None
            else allowance.fragmentation(case.options.expandable_segments)
        ),
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


def main_phases(gains: dict[str, float], count: int = 3) -> str:
    """The ``count`` phases with the largest shares of `gain_by_phase`, as text."""
    top = sorted(gains.items(), key=lambda kv: -abs(kv[1]))[:count]
    return ", ".join(f"{phase} {share:+.0%}" for phase, share in top if share)


CLAIM_DETAIL = 1.10
"""Claimed speedup above which the text output lists every phase of `gain_by_phase`."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Search sanity: the planner's pick against every published recipe of the "
        "chosen trust levels with a complete configuration, each distinct problem searched once."
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--rows",
        default="",
        help="only the rows whose source id, model or row id contains one of these "
        "comma-separated texts (case-insensitive); rows of the --trust levels only either way",
    )
    parser.add_argument(
        "--trust",
        default="A",
        help="trust levels of the rows, comma-separated (default A: the SC21 rows; A,B adds "
        "the production recipes)",
    )
    parser.add_argument(
        "--kinds", choices=KINDS, default="all", help="rows of dense models, MoE models or both"
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="search only the first N distinct problems"
    )
    parser.add_argument(
        "--recipe-vpp",
        type=int,
        default=1,
        help="price pipelined recipes published without interleaving with this many model "
        "chunks per pipeline rank (1: as published)",
    )
    return parser


def _print_recipe(r: dict) -> None:
    print(
        f"{','.join(r['row_ids'])} {r['model']} on {r['num_gpus']} {r['hardware']}: "
        f"{r['claimed_speedup']:.2f}x rank {r['recipe_rank']} ({r['recipe_rank_within_error']} "
        f"within error); held to its recompute {r['same_recompute_speedup']:.2f}x rank "
        f"{r['same_recompute_rank']} ({r['same_recompute_rank_within_error']})\n"
        f"    recipe {r['recipe']}\n    pick   {r['pick']}\n"
        f"    free {r['pick_memory_free']:.0%}, overflow at fragmentation "
        f"{r['pick_overflow_fragmentation']:.0%} ({r['assumed_fragmentation']:.0%} assumed); "
        f"gain: {main_phases(r['pick_gain_by_phase'])}"
    )
    if r["claimed_speedup"] > CLAIM_DETAIL:
        print(f"    gain by phase: {main_phases(r['pick_gain_by_phase'], count=99)}")


def _summary_line(name: str, s: dict) -> str:
    return (
        f"{name}: {s['num_recipes']} recipes, median claimed speedup "
        f"{s['median_claimed_speedup']:.2f}x, recipe in top 10 {s['recipe_in_top10_fraction']:.0%} "
        f"({s['recipe_in_top10_within_error_fraction']:.0%} within error); held to the "
        f"recipe's recompute {s['median_same_recompute_speedup']:.2f}x, "
        f"{s['same_recompute_in_top10_fraction']:.0%}"
    )


def main(argv: list[str] | None = None) -> int:
    from published_csv import default_csv, read_rows, select_rows

    parser = _parser()
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
        return 0
    for r in result["rows"]:
        _print_recipe(r)
    if not result["rows"]:
        print("no recipe with a complete configuration among the selected rows")
        return 0
    print(
        f"{len(result['rows'])} recipes of {result['num_problems']} distinct problems, "
        f"{result['num_searches']} searches"
    )
    print(_summary_line("all", result))
    for name, group in result["by_group"].items():
        print(_summary_line(name, group))
    return 0


if __name__ == "__main__":
    sys.exit(main())
