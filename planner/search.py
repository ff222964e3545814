"""Plan search: enumerate -> check -> screen -> simulate -> rank, as pure functions.

1. `planner.candidates.enumerate_candidates`: the legal candidates of a `SearchSpace` and
   how many each rule of `specs.rules.check_plan` rejected.
2. `planner.screening.screen_candidates`: drop the candidates whose model state alone is
   over the memory limit, then screen the others with the closed-form estimate
   (`costmodel.runtimes.megatron.screen`, vectorized over the candidate table), skipping
   those a lower bound of iteration time shows slower than the ``top_k``-th fitting plan
   screened; a candidate fits when its peak memory is at most (1 - memory_headroom) of the
   device memory, the headroom covering what no model predicts exactly (allocator
   behaviour, library workspaces). Where a selective-recompute candidate's plan without
   recompute does not fit, the screen adds it with each per-module recompute set of the
   space (`planner.knob_generators.recompute_module_sets`).
3. Run the event simulator (`costmodel.estimate.estimate_plan`) on the ``top_k`` fitting
   candidates with the highest screened throughput, each re-checked with `check_plan`;
   where some turn out too large for the simulator, the next screened-fitting candidates
   follow (`REFILL_ROUNDS`).
4. Order the plans that still fit by the simulator's tokens per second, the simpler plan
   first among those within the model's resolution of each other (`planner.ranking`).

When nothing fits, the ``top_k`` candidates closest to fitting (smallest screened peak
memory) are simulated instead, for `planner.explain` to say what would make them fit.
The result is a frozen `SearchResult`; nothing is kept between calls.

A time limit (``time_limit_s``) stops step 2 between rounds and step 3 once fitting plans
of `planner.pacing.SIMULATED_PAST_LIMIT` distinct labels have been simulated (a best and a
runner-up that differs from it); the result then
says how many candidates were left unscreened and how many picks unsimulated, and ranks the
best of those priced. The screen visits candidates in rounds of
whole groups: on the megatron runtime smallest lower bound of time first, on the torch
runtime in a seeded random order (`planner.screening`), so that a search cut short has
seen the most promising groups, or a uniform sample of them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
import pandas as pd

from costmodel.estimate import estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.memory_allowances import GiB
from costmodel.scale_up import RankPacking
from costmodel.topology import cluster_shape
from planner.candidates import CandidateSet, Progress, enumerate_candidates
from planner.defaults import DEFAULT_HEADROOM
from planner.finetune_space import space_for_lora
from planner.fp8_space import space_for_fp8_recipe
from planner.knob_generators import recompute_module_sets
from planner.optimizer_space import space_for_optimizer
from planner.pacing import SIMULATED_PAST_LIMIT, Clock, SearchPace
from planner.ranking import order_plans
from planner.screening import rows_to_simulate, screen_candidates
from planner.search_result import (
    BOUND_REJECTION,
    MEMORY_REJECTION,
    TIME_LIMIT_REJECTION,
    RankedPlan,
    SearchResult,
)
from planner.space import SearchSpace, plan_from_row
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.rules import check_plan


def memory_limit_bytes(profile: HardwareProfile, memory_headroom: float) -> float:
    """Device memory less the headroom fraction."""
    if not 0 <= memory_headroom < 1:
        raise SpecError(
            f"memory_headroom must be in [0, 1), got {memory_headroom}; e.g. 0.05 keeps 5% free"
        )
    return profile.device.memory_gib * GiB * (1 - memory_headroom)


def _simulate(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    rows: pd.DataFrame,
    limit_bytes: float,
    pace: SearchPace,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[list[tuple[int, RankedPlan]], dict[str, int], int]:
    """Detailed estimates of ``rows`` (index kept), rules broken by any of them, and the
    rows left unsimulated. Once the time limit of ``pace`` has passed, the rows left are
    simulated only until fitting plans of `SIMULATED_PAST_LIMIT` distinct labels
    (`ParallelPlan.label`) are simulated, so that a search cut short still ranks a best plan
    and a runner-up that differs from it (`planner.explain.runner_up_of`) when the priced
    ones allow."""
    done: list[tuple[int, RankedPlan]] = []
    broken: dict[str, int] = {}
    for i, (index, row) in enumerate(rows.iterrows()):
        labels = {ranked.plan.label() for _, ranked in done if ranked.fits}
        if pace.expired() and len(labels) >= SIMULATED_PAST_LIMIT:
            return done, broken, len(rows) - i
        if pace.progress is not None:
            pace.progress("simulate", i, len(rows))
        plan = plan_from_row(row, model)
        violations = check_plan(model, cluster, job, plan)
        if violations:
            for v in violations:
                broken[v.rule] = broken.get(v.rule, 0) + 1
            continue
        est = estimate_plan(model, cluster, job, plan, profile, options=options)
        ranked = RankedPlan(
            plan=plan,
            estimate=est,
            screen_tokens_per_s=float(row["tokens_per_s"]),
            fits=est.peak_memory_bytes <= limit_bytes,
        )
        done.append((int(index), ranked))
    return done, broken, 0


REFILL_ROUNDS = 8
"""Further rounds of simulation when plans the screen let through turn out too large for the
simulator (the screen's memory agrees with the simulator's for most plans, the worst rank of
Megatron-core's Muon included, but can fall short where it averages over layers: MoE models
with leading dense layers, non-default recompute layer counts, fine-grained activation
offloading; `costmodel.runtimes.megatron.screen`): each round simulates the next
screened-fitting plans whose screened peak plus the largest underestimate the simulated ones
showed still fits, as many as fitting ones are missing from ``top_k``, until ``top_k`` fit,
no such plan is left, the time limit has passed or this many rounds ran."""


def _simulate_fitting(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    screened: pd.DataFrame,
    top_k: int,
    limit_bytes: float,
    pace: SearchPace,
    options: ExecutionOptions,
) -> tuple[list[tuple[int, RankedPlan]], dict[str, int], int]:
    """`_simulate` on `rows_to_simulate`'s picks, refilled in `REFILL_ROUNDS` rounds with the
    next screened-fitting rows while fewer than ``top_k`` simulated plans fit."""
    chosen = rows_to_simulate(screened, top_k)
    simulated, broken, unsimulated = _simulate(
        model, cluster, job, profile, chosen, limit_bytes, pace, options
    )
    tried = set(chosen.index)
    fits = screened["fits"].to_numpy(dtype=bool)
    screened_peak = screened["peak_memory_bytes"]
    for _ in range(REFILL_ROUNDS):
        missing = top_k - sum(1 for _, ranked in simulated if ranked.fits)
        # the largest screen underestimate seen so far, taken off the limit for the refill
        gap = max(
            (r.estimate.peak_memory_bytes - float(screened_peak.loc[i]) for i, r in simulated),
            default=0.0,
        )
        room = (screened_peak + max(gap, 0.0) <= limit_bytes).to_numpy(dtype=bool)
        left = screened[fits & room & ~screened.index.isin(list(tried))]
        if missing <= 0 or unsimulated or pace.expired() or left.empty:
            break
        chosen = rows_to_simulate(left, missing)
        tried.update(chosen.index)
        more, more_broken, unsimulated = _simulate(
            model, cluster, job, profile, chosen, limit_bytes, pace, options
        )
        simulated += more
        for rule_id, count in more_broken.items():
            broken[rule_id] = broken.get(rule_id, 0) + count
    return simulated, broken, unsimulated


def _with_simulated(
    screened: pd.DataFrame, simulated: list[tuple[int, RankedPlan]]
) -> pd.DataFrame:
    """``screened`` with ``rejected_by``, ``represents`` and the simulated columns of the
    plans of ``simulated`` among its rows. The new columns are built as arrays and added at
    once: the table has millions of rows on a large cluster."""
    fits = screened["fits"].to_numpy(dtype=bool)
    bounded = screened["bounded"].to_numpy(dtype=bool)
    unvisited = screened["unvisited"].to_numpy(dtype=bool)
    codes = np.where(fits, 0, np.where(bounded, 1, np.where(unvisited, 3, 2)))
    reasons = np.array(["", BOUND_REJECTION, MEMORY_REJECTION, TIME_LIMIT_REJECTION], dtype=object)
    columns = {
        f"simulated_{name}": np.full(len(screened), np.nan)
        for name in ("iteration_time_s", "tokens_per_s", "mfu", "peak_memory_gib")
    }
    positions = screened.index.get_indexer([index for index, _ in simulated])
    for position, (_, ranked) in zip(positions, simulated, strict=True):
        if position < 0:  # a row of the other part
            continue
        est = ranked.estimate
        columns["simulated_iteration_time_s"][position] = est.iteration_time_s
        columns["simulated_tokens_per_s"][position] = est.tokens_per_s
        columns["simulated_mfu"][position] = est.mfu
        columns["simulated_peak_memory_gib"][position] = est.peak_memory_gib
        if not ranked.fits:
            codes[position] = 2
    return screened.assign(rejected_by=reasons[codes], represents=1, **columns)


def _candidates_frame(
    parts: tuple[pd.DataFrame, pd.DataFrame],
    simulated: list[tuple[int, RankedPlan]],
    cands: CandidateSet,
) -> pd.DataFrame:
    """The screened table and the rows derived from it, with simulated columns, then the
    rule-rejected representatives, joined in one copy."""
    table, derived = (_with_simulated(part, simulated) for part in parts)
    rejected = cands.rejected_rows
    if not len(derived) and not len(rejected):
        return table
    joined = pd.concat([table, *([derived] if len(derived) else []), rejected])
    return joined.reset_index(drop=True) if len(rejected) else joined


def search_domain(profile: HardwareProfile, cluster: ClusterSpec) -> int:
    """Ranks of one scale-up domain as the job is placed, capped at the job: the NVLink
    segment of a rack-scale domain (`costmodel.topology.cluster_shape`: 64 GPUs for
    128 or 256 GB200 under Megatron-Bridge's launcher rule, whose TP 16, 32 and 64 groups then
    stay inside one domain), else the server's fabric. TP and expert-TP degrees are generated
    within it unless `SearchSpace.tp_beyond_scale_up`."""
    shape = cluster_shape(profile, cluster.num_gpus, RankPacking.of(cluster))
    return min(shape.scale_up_domain, cluster.num_gpus)


def _screened_candidates(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    space: SearchSpace,
    limit_bytes: float,
    options: ExecutionOptions,
    bound_top_k: int | None,
    pace: SearchPace,
) -> tuple[CandidateSet, tuple[pd.DataFrame, pd.DataFrame]]:
    """Steps 1 and 2 of the module docstring: the legal candidates of ``space`` and the
    screened table with the rows derived from it (`planner.screening.screen_candidates`;
    ``bound_top_k`` None screens every candidate under the memory floor)."""
    scale_up = search_domain(profile, cluster)
    cands = enumerate_candidates(model, cluster, job, space, scale_up, progress=pace.progress)
    pace.add(len(cands.table))
    pace.report()
    sets = () if space.is_fixed("recompute_modules") else recompute_module_sets(model, space)
    parts = screen_candidates(
        model, cluster, job, profile, cands.table, limit_bytes, options, bound_top_k, sets, pace
    )
    return cands, parts


def _flagged(parts: tuple[pd.DataFrame, pd.DataFrame], column: str) -> int:
    """Rows of both screened parts whose boolean ``column`` is set."""
    return sum(int(p[column].sum()) for p in parts)


def _rejections(
    cands: CandidateSet,
    broken: Mapping[str, int],
    parts: tuple[pd.DataFrame, pd.DataFrame],
    screened: pd.DataFrame,
    simulated: list[tuple[int, RankedPlan]],
) -> dict[str, int]:
    """`SearchResult.rejected`: the rules' rejections at enumeration and at the simulator's
    re-check, the candidates over the memory limit (at the screen, or at the simulator for a
    plan the screen let through) and those the time bound skipped."""
    rejected = dict(cands.rejected)
    for rule_id, count in broken.items():
        rejected[rule_id] = rejected.get(rule_id, 0) + count
    late = sum(1 for i, r in simulated if not r.fits and screened.loc[i, "fits"])
    bounded = _flagged(parts, "bounded")
    over = sum(int((~p["fits"]).sum()) for p in parts)
    rejected[MEMORY_REJECTION] = over - bounded - _flagged(parts, "unvisited") + late
    if bounded:
        rejected[BOUND_REJECTION] = bounded
    return rejected


def _ranked(
    simulated: list[tuple[int, RankedPlan]],
) -> tuple[list[RankedPlan], tuple[RankedPlan, ...]]:
    """Step 4 and the nothing-fits path of the module docstring: the simulated plans that
    fit, best first (`planner.ranking.order_plans`), and, when none fits, every simulated
    plan, smallest peak memory first."""
    ranked = [r for _, r in simulated]
    top = order_plans(
        [r for r in ranked if r.fits],
        plan=lambda r: r.plan,
        tokens_per_s=lambda r: r.estimate.tokens_per_s,
        peak_memory_bytes=lambda r: r.estimate.peak_memory_bytes,
    )
    closest = () if top else tuple(sorted(ranked, key=lambda r: r.estimate.peak_memory_bytes))
    return top, closest


def search_plans(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    *,
    space: SearchSpace | None = None,
    top_k: int = 10,
    memory_headroom: float = DEFAULT_HEADROOM,
    progress: Progress | None = None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
    prune: bool = True,
    time_limit_s: float | None = None,
    clock: Clock = time.perf_counter,
) -> SearchResult:
    """Search the plans of ``space`` (all knobs searched by default) for the fastest that
    fits on the runtime ``options`` names (`costmodel.execution`), among the plans that use
    only the features that runtime implements (`SearchSpace.for_runtime`); see the module
    docstring for the steps. ``prune`` False screens every candidate under the memory
    floor instead of skipping those the time bound rules out (same result, slower).

    ``time_limit_s`` bounds the search's wall time on ``clock``: once it has passed, the
    screen starts no new round and the simulator no new plan once fitting plans of
    `planner.pacing.SIMULATED_PAST_LIMIT` distinct labels are simulated; the result ranks what
    was priced and counts what was not (`SearchResult.num_unvisited`,
    `SearchResult.num_unsimulated`).
    Enumeration, the rule check and the first round of the screen always run, so the limit
    can be overrun by them, by one round and by those simulations. A limit that is not
    > 0 is a SpecError (`planner.pacing.SearchPace`)."""
    if top_k < 1:
        raise SpecError(f"top_k must be >= 1, got {top_k}; it is how many plans are simulated")
    start = time.perf_counter()
    pace = SearchPace(progress=progress, time_limit_s=time_limit_s, clock=clock)
    limit = memory_limit_bytes(profile, memory_headroom)
    space = space_for_optimizer((space or SearchSpace()).for_runtime(options), job)
    space = space_for_lora(space, model, cluster, job)
    space = space_for_fp8_recipe(space, model, job, options)
    cands, parts = _screened_candidates(
        model, cluster, job, profile, space, limit, options, top_k if prune else None, pace
    )
    # only screened rows can be simulated: the rest of the table is not copied here
    screened = pd.concat([p[p["screened"].to_numpy()] for p in parts])
    simulated, broken, unsimulated = _simulate_fitting(
        model, cluster, job, profile, screened, top_k, limit, pace, options
    )
    rejected = _rejections(cands, broken, parts, screened, simulated)
    top, closest = _ranked(simulated)
    return SearchResult(
        model=model,
        cluster=cluster,
        job=job,
        best=top[0] if top else None,
        top=tuple(top),
        closest=closest,
        rejected=rejected,
        rule_examples=dict(cands.examples),
        candidates=_candidates_frame(parts, simulated, cands),
        num_enumerated=cands.num_enumerated + len(parts[1]),
        num_valid=len(parts[0]) + len(parts[1]),
        num_screened=len(screened),
        memory_limit_bytes=limit,
        memory_headroom=memory_headroom,
        elapsed_s=time.perf_counter() - start,
        time_limit_s=time_limit_s,
        num_unvisited=_flagged(parts, "unvisited"),
        num_simulated=len(simulated),
        num_unsimulated=unsimulated,
    )
