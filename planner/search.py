"""Plan search: enumerate -> check -> screen -> simulate -> rank, as pure functions.

1. `planner.candidates.enumerate_candidates`: the legal candidates of a `SearchSpace` and
   how many each rule of `specs.rules.check_plan` rejected.
2. Drop the candidates whose model state alone (`model_state_floor_bytes`) is over the
   memory limit, then screen the others with the closed-form estimate
   (`costmodel.runtimes.megatron.screen`, vectorized over the candidate table); a
   candidate fits when its peak memory is at most (1 - memory_headroom) of the device
   memory, the headroom covering what no model predicts exactly (allocator behaviour,
   library workspaces). The screen runs in rounds, the candidates with the smallest lower
   bound of iteration time (`costmodel.screen.screen_lower_bounds`) first, and skips those
   whose bound is above the ``top_k``-th fitting plan screened so far (`_screen_bounded`):
   they could not be simulated, so the result is that of screening every candidate.
3. Run the event simulator (`costmodel.estimate.estimate_plan`) on the ``top_k`` fitting
   candidates with the highest screened throughput, each re-checked with `check_plan`.
4. Rank by the simulator's tokens per second among the plans that still fit.

When nothing fits, the ``top_k`` candidates closest to fitting (smallest screened peak
memory) are simulated instead, for `planner.explain` to say what would make them fit.
The result is a frozen `SearchResult`; nothing is kept between calls.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from costmodel.estimate import Estimate, estimate_plan
from costmodel.execution import DEFAULT_OPTIONS, ExecutionOptions
from costmodel.memory import (
    FrameworkAllowance,
    GiB,
    bytes_per_param,
    stage_params,
)
from costmodel.schedules import plan_split
from costmodel.screen import screen_lower_bounds, screen_plans
from planner.candidates import CandidateSet, Progress, enumerate_candidates
from planner.space import DEGREE_COLUMNS, PLAN_COLUMNS, SearchSpace, plan_from_row
from planner.splits import SPLIT_COLUMNS
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules import check_plan

MEMORY_REJECTION = "memory"
"""Key of `SearchResult.rejected` for candidates over the memory limit."""
BOUND_REJECTION = "slower"
"""Key of `SearchResult.rejected` for candidates the time bound skipped: a lower bound of
their screened iteration time is above the ``top_k``-th screened plan's, so they could not
be among the plans handed to the simulator."""
FIRST_ROUND_ROWS = 20_000
"""Candidates screened in the first round of the bounded screen (the groups with the
smallest time bound); each later round may take four times as many."""
DEFAULT_HEADROOM = 0.05
CLOSEST_POOL = 2_000
"""When no candidate passes the model-state floor, this many with the smallest floor are
screened to find the closest ones."""
_PARAM_KEYS = ["tp", "pp", "vpp", "ep", "etp", *SPLIT_COLUMNS]
_PARALLEL_KEYS = ["tp", "pp", "cp", "ep", "etp"]
_BOUND_GROUP_KEYS = [
    *(c for c in DEGREE_COLUMNS if c != "micro_batch_size"),
    "sequence_parallel",
    "tp_comm_overlap",
    "cp_comm_type",
]
"""What a time bound is computed for (with the micro-batch size): the knobs the pipeline
phase depends on. A group (these keys, every micro-batch size) is screened whole or not at
all, so that `_screen_by_micro_batch` sees the smaller micro-batches of every row."""
_FINE_KEYS = [*_BOUND_GROUP_KEYS, "micro_batch_size", "distributed_optimizer"]
"""What the memory floor and the time bound depend on: grouped once over every candidate
(with `_FSDP_KEYS` where the table has them)."""
_FSDP_KEYS = ["use_megatron_fsdp", "data_parallel_sharding_strategy"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RankedPlan:
    """One plan with its detailed estimate."""

    plan: ParallelPlan
    """The candidate."""
    estimate: Estimate
    """The event simulator's prediction."""
    screen_tokens_per_s: float
    """The closed-form estimate that selected it for simulation."""
    fits: bool
    """Peak memory within the search's memory limit (device memory less the headroom)."""


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class SearchResult:
    """What a search found; `planner.explain` turns it into text."""

    model: ModelSpec
    """The model searched for."""
    cluster: ClusterSpec
    """The cluster searched on."""
    job: TrainingJob
    """The job searched for."""
    best: RankedPlan | None
    """The fitting plan with the highest simulated throughput; None when nothing fits."""
    top: tuple[RankedPlan, ...]
    """Simulated plans that fit, best first."""
    closest: tuple[RankedPlan, ...]
    """When nothing fits: the simulated candidates closest to fitting, smallest peak first."""
    rejected: Mapping[str, int]
    """Rule id (and "memory") -> candidates rejected."""
    rule_examples: Mapping[str, str]
    """Rule id -> one violation message with its fix."""
    candidates: pd.DataFrame
    """Every screened candidate (plan columns, screened metrics, ``fits``, ``rejected_by``,
    ``simulated_*`` columns for the simulated ones), then one representative row per
    rule-rejected group (``rejected_by`` = rule ids, ``represents`` = candidates)."""
    num_enumerated: int
    """Candidates before any check."""
    num_valid: int
    """Candidates that passed the rules."""
    num_screened: int
    """Candidates the closed-form estimate evaluated (valid ones under the model-state
    floor, less the larger micro-batches of plans that did not fit)."""
    memory_limit_bytes: float
    """Per-rank memory a plan may use: device memory x (1 - memory_headroom)."""
    memory_headroom: float
    """Fraction of device memory kept free."""
    elapsed_s: float
    """Wall time of the search."""


def memory_limit_bytes(profile: HardwareProfile, memory_headroom: float) -> float:
    """Device memory less the headroom fraction."""
    if not 0 <= memory_headroom < 1:
        raise SpecError(
            f"memory_headroom must be in [0, 1), got {memory_headroom}; e.g. 0.05 keeps 5% free"
        )
    return profile.device.memory_gib * GiB * (1 - memory_headroom)


def _floor_stages(model: ModelSpec, plan: ParallelPlan) -> set[int]:
    """The first and last stage and the middle stage with the most MoE layers, then the
    most layers: together they hold the most parameters of any stage."""
    split = plan_split(model, plan)
    mask = model.moe_layer_mask()
    middle = range(1, plan.pp - 1)
    stages = {0, plan.pp - 1}

    def weight(stage: int) -> tuple[int, int]:
        layers = split.rank_layers(stage)
        return sum(mask[i] for i in layers), len(layers)

    if len(middle):
        stages.add(max(middle, key=weight))
    return stages


def row_groups(table: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(first row position of each distinct ``keys`` combination, group of every row), by
    factorizing each column and `numpy.unique` over the combined codes: a join key for
    millions of rows without a pandas merge."""
    code = np.zeros(len(table), dtype=np.int64)
    for key in keys:
        values, uniques = pd.factorize(table[key], sort=False)
        code = code * (len(uniques) + 1) + values
        if code.max(initial=0) > 2**40:  # keep the mixed-radix code far from overflow
            code = np.unique(code, return_inverse=True)[1].reshape(-1).astype(np.int64)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _stage_param_table(model: ModelSpec, rows: pd.DataFrame) -> np.ndarray:
    """Per row of ``rows`` (distinct (tp, pp, vpp, ep, etp, split)): the dense and expert
    parameters one rank holds on each stage of `_floor_stages`, shape (rows, 2, 3): [:, 0]
    dense, [:, 1] expert, a repeated stage where fewer than three are distinct."""
    out = np.zeros((len(rows), 2, 3))
    for i, row in enumerate(rows.to_dict("records")):
        plan = plan_from_row(row | {"cp": 1, "dp": 1, "micro_batch_size": 1}, model)
        stages = sorted(_floor_stages(model, plan))
        stages += [stages[-1]] * (3 - len(stages))
        for j, stage in enumerate(stages):
            held = stage_params(model, plan, stage)
            out[i, :, j] = held.dense, held.expert
    return out


def model_state_floor_bytes(model: ModelSpec, job: TrainingJob, table: pd.DataFrame) -> np.ndarray:
    """Per row, a lower bound of the peak memory per rank: weights, gradients and optimizer
    state of the first, the last and the fullest middle pipeline stage
    (`costmodel.memory.stage_params`, the byte counts of `costmodel.memory`, the shards of
    `costmodel.memory.optimizer_shards`) plus the fixed framework allowance. Activations
    only add to it, so a row whose floor is over the limit cannot fit; the search drops it
    before the closed-form screen, which is the expensive step. Stage parameters are
    counted once per distinct (tp, pp, vpp, ep, etp, split); the sharding is numpy
    arithmetic over the rows. A row with ``use_megatron_fsdp`` (when the table has that
    column) is bounded by every byte sharded, which holds for each sharding strategy
    (`costmodel.runtimes.megatron.megatron_fsdp.fsdp_state_bytes` keeps at least that)."""
    weight, grad, state = bytes_per_param(job)
    first, group = row_groups(table, _PARAM_KEYS)
    params = _stage_param_table(model, table.iloc[first])[group]
    distopt = table["distributed_optimizer"].to_numpy(dtype=bool)
    fsdp = np.zeros(len(table), dtype=bool)
    if "use_megatron_fsdp" in table.columns:
        fsdp = table["use_megatron_fsdp"].to_numpy(dtype=bool)
    tp, pp, cp, dp = (table[k].to_numpy() for k in ("tp", "pp", "cp", "dp"))
    expert_dp = np.maximum(tp * pp * cp * dp // (table["etp"] * table["ep"] * pp).to_numpy(), 1)
    dense_shards = np.where(distopt | fsdp, dp * cp, 1)
    expert_shards = np.where(distopt | fsdp, expert_dp, 1)
    worst = np.zeros(len(table))
    for i in range(3):
        dense, expert = params[:, 0, i], params[:, 1, i]
        sharded = dense / dense_shards + expert / expert_shards
        whole = np.where(fsdp, sharded, dense + expert)
        worst = np.maximum(worst, (weight + grad) * whole + state * sharded)
    return worst + FrameworkAllowance().fixed_bytes


def _screen(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    table: pd.DataFrame,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> pd.DataFrame:
    """The closed-form metrics of every row: iteration_time_s, tokens_per_s, mfu and
    peak_memory_bytes, aligned with ``table`` by position."""
    plans = table.copy()
    for column in (
        "recompute_num_layers",
        "ddp_bucket_size",
        "decoder_first_pipeline_num_layers",
        "decoder_last_pipeline_num_layers",
    ):  # 0 means None here
        plans[column] = plans[column].where(plans[column] > 0)
    metrics = screen_plans(model, cluster, job, profile, plans, options=options)
    return metrics[["iteration_time_s", "tokens_per_s", "mfu", "peak_memory_bytes"]]


def _complexity(table: pd.DataFrame) -> pd.Series:
    """Knobs set away from Megatron's defaults, to prefer the simpler of equal plans."""
    return (
        table["sequence_parallel"].astype(int)
        + table["tp_comm_overlap"].astype(int)
        + table["distributed_optimizer"].astype(int)
        + table["overlap_grad_reduce"].astype(int)
        + table["overlap_param_gather"].astype(int)
        + (table["ddp_bucket_size"] != 0).astype(int)
        + (table["recompute"] != "none").astype(int)
        + (table["vpp"] > 1).astype(int)
        + (
            (table["decoder_first_pipeline_num_layers"] > 0)
            | table["account_for_embedding_in_pipeline_split"].astype(bool)
            | table["account_for_loss_in_pipeline_split"].astype(bool)
            | (table["pipeline_model_parallel_layout"] != "")
        ).astype(int)
    )


def _pick(table: pd.DataFrame, by: list[str], ascending: list[bool], top_k: int) -> pd.DataFrame:
    """The first ``top_k`` rows in the given order, made distinct: the bucket-size variants
    of one plan are represented by their best, and of rows the screen cannot tell apart
    (same iteration time and peak memory) only the simplest is kept."""
    ordered = table.assign(_complexity=_complexity(table)).sort_values(
        [*by, "_complexity"], ascending=[*ascending, True], kind="stable"
    )
    plans = [c for c in PLAN_COLUMNS if c != "ddp_bucket_size"]
    distinct = ordered.drop_duplicates(plans).drop_duplicates(
        ["iteration_time_s", "peak_memory_bytes"]
    )
    return distinct.head(top_k).drop(columns="_complexity")


def _simulate(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    rows: pd.DataFrame,
    limit_bytes: float,
    progress: Progress | None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[list[tuple[int, RankedPlan]], dict[str, int]]:
    """Detailed estimates of ``rows`` (index kept), and rules broken by any of them."""
    done: list[tuple[int, RankedPlan]] = []
    broken: dict[str, int] = {}
    for i, (index, row) in enumerate(rows.iterrows()):
        if progress is not None:
            progress("simulate", i, len(rows))
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
    return done, broken


def _candidates_frame(
    screened: pd.DataFrame, simulated: list[tuple[int, RankedPlan]], cands: CandidateSet
) -> pd.DataFrame:
    """The screened table with simulated columns, then the rule-rejected representatives.
    The new columns are built as arrays and added at once: the table has millions of rows
    on a large cluster."""
    fits = screened["fits"].to_numpy(dtype=bool)
    bounded = screened["bounded"].to_numpy(dtype=bool)
    codes = np.where(fits, 0, np.where(bounded, 1, 2))
    reasons = np.array(["", BOUND_REJECTION, MEMORY_REJECTION], dtype=object)
    columns = {
        f"simulated_{name}": np.full(len(screened), np.nan)
        for name in ("iteration_time_s", "tokens_per_s", "mfu", "peak_memory_gib")
    }
    positions = screened.index.get_indexer([index for index, _ in simulated])
    for position, (_, ranked) in zip(positions, simulated, strict=True):
        est = ranked.estimate
        columns["simulated_iteration_time_s"][position] = est.iteration_time_s
        columns["simulated_tokens_per_s"][position] = est.tokens_per_s
        columns["simulated_mfu"][position] = est.mfu
        columns["simulated_peak_memory_gib"][position] = est.peak_memory_gib
        if not ranked.fits:
            codes[position] = 2
    frame = screened.assign(rejected_by=reasons[codes], represents=1, **columns)
    if len(cands.rejected_rows):
        frame = pd.concat([frame, cands.rejected_rows], ignore_index=True)
    return frame


def _screen_by_micro_batch(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    rows: pd.DataFrame,
    limit_bytes: float,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> pd.DataFrame:
    """Screened metrics of ``rows`` (index kept), micro-batch size by micro-batch size,
    smallest first; a row is skipped when the same plan with the next smaller micro-batch
    does not fit. Peak memory never falls as the micro-batch grows: activations,
    recompute working set and communication buffers scale with it, and the microbatches
    in flight shrink at most in proportion (a stage holds min(pp - stage, m) microbatches
    of b sequences, m = global / (b·dp); megatron-facts.md §3.2-3.3)."""
    others = [c for c in rows.columns if c != "micro_batch_size"]
    parts = []
    failed = None
    for mbs in sorted(rows["micro_batch_size"].unique()):
        batch = rows[rows["micro_batch_size"] == mbs]
        if failed is not None and len(failed):
            keep = batch[others].merge(failed, on=others, how="left", indicator=True)
            batch = batch[(keep["_merge"] == "left_only").to_numpy()]
        if not len(batch):
            break
        metrics = _screen(model, cluster, job, profile, batch, options)
        metrics.index = batch.index
        parts.append(metrics)
        over = (metrics["peak_memory_bytes"] > limit_bytes).to_numpy()
        failed = batch.loc[over, others].drop_duplicates()
    if not parts:
        return pd.DataFrame(
            columns=["iteration_time_s", "tokens_per_s", "mfu", "peak_memory_bytes"]
        )
    return pd.concat(parts)


def _closest_pool(table: pd.DataFrame) -> pd.Series:
    """Rows to screen when none is under the floor: per combination of model-parallel
    degrees its rows with the smallest floor (at most `CLOSEST_POOL` // 10 of them), then
    the `CLOSEST_POOL` smallest of those, so several combinations are represented."""
    floor = table["model_state_floor_bytes"]
    order = table.assign(_floor=floor).sort_values("_floor", kind="stable")
    per_group = order.groupby(_PARALLEL_KEYS, sort=False).cumcount() < CLOSEST_POOL // 10
    kept = order[per_group.to_numpy()].head(CLOSEST_POOL).index
    return pd.Series(table.index.isin(kept), index=table.index)


def _group_bounds(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    rows: pd.DataFrame,
    fine: np.ndarray,
    options: ExecutionOptions,
) -> tuple[np.ndarray, np.ndarray] | None:
    """(time bound of every group of `_BOUND_GROUP_KEYS`, group of every row): the smallest
    `costmodel.screen.screen_lower_bounds` over the group's micro-batch sizes, computed
    once per distinct (group, micro-batch size). ``fine``: each row's group of
    `_FINE_KEYS`, so that the groupings are made on one row per fine group. None when the
    runtime has no bound."""
    _, first, fine_index = np.unique(fine, return_index=True, return_inverse=True)
    reps = rows.iloc[first]
    keys = [*_BOUND_GROUP_KEYS, "micro_batch_size"]
    sample_first, distinct = row_groups(reps, keys)
    sample = reps.iloc[sample_first][keys].reset_index(drop=True)
    for column in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
        sample[column] = sample[column].where(sample[column] > 0)  # 0 means None here
    bounds = screen_lower_bounds(model, cluster, job, profile, sample, options=options)
    if bounds is None:
        return None
    group_first, group = row_groups(reps, _BOUND_GROUP_KEYS)
    per_group = np.full(len(group_first), np.inf)
    np.minimum.at(per_group, group, bounds[distinct])
    return per_group, group[fine_index.reshape(-1)]


def _threshold_s(rows: pd.DataFrame, done: pd.DataFrame, limit_bytes: float, top_k: int) -> float:
    """Iteration time of the ``top_k``-th plan `_to_simulate` would pick from the screened
    rows so far; infinite while fewer than ``top_k`` distinct plans fit."""
    screened = rows.loc[done.index].assign(**{c: done[c] for c in done.columns})
    fitting = screened[screened["peak_memory_bytes"] <= limit_bytes]
    picked = _pick(fitting, ["tokens_per_s", "peak_memory_bytes"], [False, True], top_k)
    return float(picked["iteration_time_s"].max()) if len(picked) == top_k else np.inf


def _screen_bounded(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    rows: pd.DataFrame,
    fine: np.ndarray,
    limit_bytes: float,
    top_k: int,
    options: ExecutionOptions,
) -> tuple[pd.DataFrame, np.ndarray]:
    """Screened metrics of the rows that could be among the ``top_k`` picks, and a mask of
    the rows skipped by the time bound.

    Groups are screened in rounds, smallest bound first; after each round the threshold is
    the iteration time of the ``top_k``-th distinct fitting plan (`_pick`), and only groups
    whose bound is at most the threshold are screened later. A skipped row's screened time
    is above the threshold, so it sorts after the ``top_k`` picks and never displaces one:
    the picks, and so the best plan, are those of screening every row (tested against
    ``prune=False``)."""
    found = _group_bounds(model, cluster, job, profile, rows, fine, options)
    if found is None:
        done = _screen_by_micro_batch(model, cluster, job, profile, rows, limit_bytes, options)
        return done, np.zeros(len(rows), dtype=bool)
    bound, group = found
    order = np.argsort(bound, kind="stable")
    sizes = np.bincount(group, minlength=len(bound))
    taken = np.zeros(len(bound), dtype=bool)
    parts: list[pd.DataFrame] = []
    threshold, start, budget = np.inf, 0, FIRST_ROUND_ROWS
    while start < len(order) and bound[order[start]] <= threshold:
        cumulative = np.cumsum(sizes[order[start:]])
        stop = start + int(np.searchsorted(cumulative, budget)) + 1
        stop = min(stop, start + int(np.searchsorted(bound[order[start:]], threshold, "right")))
        taken[order[start:stop]] = True
        fresh = np.zeros(len(bound), dtype=bool)
        fresh[order[start:stop]] = True
        batch = rows[fresh[group]]
        parts.append(
            _screen_by_micro_batch(model, cluster, job, profile, batch, limit_bytes, options)
        )
        threshold = _threshold_s(rows, pd.concat(parts), limit_bytes, top_k)
        start, budget = stop, budget * 4
    return pd.concat(parts), ~taken[group]


def screen_candidates(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    table: pd.DataFrame,
    limit_bytes: float,
    options: ExecutionOptions = DEFAULT_OPTIONS,
    top_k: int | None = None,
) -> pd.DataFrame:
    """``table`` with ``model_state_floor_bytes``, the screened metrics (NaN where the
    floor alone is over the limit, or the time bound skipped the row, as those are not
    screened), ``screened``, ``bounded`` (skipped by the time bound) and ``fits``.

    With ``top_k``, only the rows that could be among the ``top_k`` fastest fitting ones are
    screened (`_screen_bounded`); None screens every row under the floor. When no row is
    under the floor, the `CLOSEST_POOL` rows with the smallest floor are screened anyway,
    so that the closest candidates can be found.
    """
    screened = table.copy(deep=False)  # copy-on-write: the columns added here stay here
    first, fine = row_groups(table, _FINE_KEYS + [k for k in _FSDP_KEYS if k in table.columns])
    screened["model_state_floor_bytes"] = (
        model_state_floor_bytes(model, job, table.iloc[first])[fine] if len(table) else 0.0
    )
    for column in ("iteration_time_s", "tokens_per_s", "mfu", "peak_memory_bytes"):
        screened[column] = np.nan
    under = screened["model_state_floor_bytes"] <= limit_bytes
    if len(table) and not under.any():
        under, top_k = _closest_pool(screened), None
    rows = table[under.to_numpy()]
    skipped = np.zeros(len(rows), dtype=bool)
    if top_k is None or not len(rows):
        done = _screen_by_micro_batch(model, cluster, job, profile, rows, limit_bytes, options)
    else:
        done, skipped = _screen_bounded(
            model, cluster, job, profile, rows, fine[under.to_numpy()], limit_bytes, top_k, options
        )
    screened.loc[done.index, list(done.columns)] = done.to_numpy()
    screened["screened"] = screened.index.isin(done.index)
    screened["bounded"] = screened.index.isin(rows.index[skipped])
    screened["fits"] = screened["peak_memory_bytes"] <= limit_bytes
    return screened


def _to_simulate(screened: pd.DataFrame, top_k: int) -> pd.DataFrame:
    """The fitting rows with the highest screened throughput; when none fits, the screened
    rows with the smallest peak memory, one per combination of model-parallel degrees."""
    fitting = screened[screened["fits"]]
    if len(fitting):
        return _pick(fitting, ["tokens_per_s", "peak_memory_bytes"], [False, True], top_k)
    pool = screened[screened["screened"]].sort_values(
        ["peak_memory_bytes", "tokens_per_s"], ascending=[True, False], kind="stable"
    )
    return pool.drop_duplicates(_PARALLEL_KEYS).head(top_k)


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
) -> SearchResult:
    """Search the plans of ``space`` (all knobs searched by default) for the fastest that
    fits on the runtime ``options`` names (`costmodel.execution`); see the module
    docstring for the steps. ``prune`` False screens every candidate under the memory
    floor instead of skipping those the time bound rules out (same result, slower)."""
    if top_k < 1:
        raise SpecError(f"top_k must be >= 1, got {top_k}; it is how many plans are simulated")
    start = time.perf_counter()
    limit = memory_limit_bytes(profile, memory_headroom)
    scale_up = min(profile.topology.scale_up_domain, cluster.num_gpus)
    space = space or SearchSpace()
    cands = enumerate_candidates(model, cluster, job, space, scale_up, progress=progress)
    if progress is not None:
        progress("screen", 0, len(cands.table))
    screened = screen_candidates(
        model, cluster, job, profile, cands.table, limit, options, top_k if prune else None
    )
    chosen = _to_simulate(screened, top_k)
    simulated, broken = _simulate(model, cluster, job, profile, chosen, limit, progress, options)
    rejected = dict(cands.rejected)
    for rule_id, count in broken.items():
        rejected[rule_id] = rejected.get(rule_id, 0) + count
    # A plan the screen let through but the simulator finds too large is a memory rejection too.
    late = sum(1 for i, r in simulated if not r.fits and screened.loc[i, "fits"])
    bounded = int(screened["bounded"].sum())
    rejected[MEMORY_REJECTION] = int((~screened["fits"]).sum()) - bounded + late
    if bounded:
        rejected[BOUND_REJECTION] = bounded
    ranked = [r for _, r in simulated]
    top = sorted(
        (r for r in ranked if r.fits),
        key=lambda r: (-r.estimate.tokens_per_s, r.estimate.peak_memory_bytes),
    )
    closest = () if top else tuple(sorted(ranked, key=lambda r: r.estimate.peak_memory_bytes))
    return SearchResult(
        model=model,
        cluster=cluster,
        job=job,
        best=top[0] if top else None,
        top=tuple(top),
        closest=closest,
        rejected=rejected,
        rule_examples=dict(cands.examples),
        candidates=_candidates_frame(screened, simulated, cands),
        num_enumerated=cands.num_enumerated,
        num_valid=len(screened),
        num_screened=int(screened["screened"].sum()),
        memory_limit_bytes=limit,
        memory_headroom=memory_headroom,
        elapsed_s=time.perf_counter() - start,
    )
