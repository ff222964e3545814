"""Screening for the plan search (`planner.search`): the memory floor, the screen in
rounds, and the rows handed to the event simulator.

- `model_state_floor_bytes`: a lower bound of each candidate's peak memory (its model
  state); candidates over the limit are not screened.
- `screen_candidates`: the runtime's screen (`costmodel.screen.screen_plans`) of the
  others, micro-batch size by micro-batch size (candidates with the searched per-module
  recompute sets derived from the selective ones whose plan without recompute does not
  fit: where memory binds), in rounds of whole groups. On the megatron runtime the rounds
  follow a lower bound of iteration time (`costmodel.screen.screen_lower_bounds`); a
  round's threshold is the ``top_k``-th distinct fitting plan so far, and candidates whose
  bound is above it are skipped: they could not be among the plans simulated, so the
  simulated plans are those of screening every candidate. Without a bound (the torch
  runtime) the groups are visited in a seeded random order. After each round the search's
  `planner.pacing.SearchPace` reports progress and may stop the screen at its time limit.
- `rows_to_simulate`: the ``top_k`` distinct fitting rows with the highest screened
  throughput, or the closest to fitting when none fits.

Groupings over millions of rows use `row_groups` (factorized columns and `numpy.unique`)
rather than pandas merges.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel.execution import DEFAULT_OPTIONS, ExecutionOptions
from costmodel.memory import FrameworkAllowance, bytes_per_param, stage_params
from costmodel.plan_frame import DEFAULT_MODULES
from costmodel.schedules import plan_split
from costmodel.screen import screen_lower_bounds, screen_plans
from planner.pacing import FIRST_PACED_ROUND_ROWS, SearchPace, next_round_rows
from planner.space import DEGREE_COLUMNS, PLAN_COLUMNS, plan_from_row
from planner.splits import SPLIT_COLUMNS
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

FIRST_ROUND_ROWS = 20_000
"""Candidates screened in the first round of the bounded screen (the groups with the
smallest time bound); each later round may take four times as many."""

VISIT_SEED = 0
"""Seed of the order in which a screen without a time bound visits its groups."""

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
_RECOMPUTE_KEYS = ["recompute", "recompute_num_layers", "recompute_method", "recompute_modules"]
"""The knobs of a recompute choice; a per-module set is derived from a plan whose twin
without recompute does not fit (`_derive_sets`)."""


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
    """(first row position of each distinct ``keys`` combination, group of every row),
    groups numbered in order of first appearance, by factorizing each column into one
    mixed-radix code: a join key for millions of rows without a pandas merge."""
    code = np.zeros(len(table), dtype=np.int64)
    for key in keys:
        values, uniques = pd.factorize(table[key], sort=False)
        code = code * (len(uniques) + 1) + values
        if code.max(initial=0) > 2**40:  # keep the mixed-radix code far from overflow
            code = pd.factorize(code, sort=False)[0].astype(np.int64)
    return first_occurrences(code)


def first_occurrences(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position of the first occurrence of each distinct value, group of every value),
    groups numbered in order of first appearance; hashing, not sorting."""
    group = pd.factorize(values, sort=False)[0]
    if not len(group):
        return np.zeros(0, dtype=np.int64), group
    seen = np.maximum.accumulate(group)
    first = np.flatnonzero(np.concatenate(([True], group[1:] > seen[:-1])))
    return first, group


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
    columns = ["iteration_time_s", "tokens_per_s", "mfu", "peak_memory_bytes"]
    if not len(plans):
        return pd.DataFrame(columns=columns, dtype=float)
    metrics = screen_plans(model, cluster, job, profile, plans, options=options)
    return metrics[columns]


def _complexity(table: pd.DataFrame) -> pd.Series:
    """Knobs set away from Megatron's defaults, to prefer the simpler of equal plans."""
    return (
        table["sequence_parallel"].astype(int)
        + table["tp_comm_overlap"].astype(int)
        + table["distributed_optimizer"].astype(int)
        + table["use_megatron_fsdp"].astype(int)
        + table["overlap_grad_reduce"].astype(int)
        + table["overlap_param_gather"].astype(int)
        + (table["ddp_bucket_size"] != 0).astype(int)
        + (table["recompute"] != "none").astype(int)
        + (table["recompute_modules"] != DEFAULT_MODULES).astype(int)
        + (table["cpu_offloading_num_layers"] > 0).astype(int)
        + (table["offload_modules"] != DEFAULT_MODULES).astype(int)
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


def _screen_by_micro_batch(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    rows: pd.DataFrame,
    limit_bytes: float,
    options: ExecutionOptions = DEFAULT_OPTIONS,
    sets: tuple[str, ...] = (),
    first_label: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Screened metrics of ``rows`` and of the rows derived from them with a per-module
    recompute set of ``sets`` (`_derive_sets`, labelled from ``first_label`` up), and the
    derived rows, micro-batch size by micro-batch size, smallest first. A row is skipped
    when the same plan with the next smaller micro-batch does not fit. Peak memory never
    falls as the micro-batch grows: activations, recompute working set and communication
    buffers scale with it, and the microbatches in flight shrink at most in proportion (a
    stage holds min(pp - stage, m) microbatches of b sequences, m = global / (b·dp);
    megatron-facts.md §3.2-3.3).

    The rows derived at one micro-batch size are screened with the next size's rows: one
    screen call per size, plus one for the largest size's derived rows."""
    others = [c for c in rows.columns if c != "micro_batch_size"]
    parts: list[pd.DataFrame] = []
    derived: list[pd.DataFrame] = []
    failed = pending = rows.iloc[:0]
    label = first_label
    for mbs in sorted(rows["micro_batch_size"].unique()):
        size = rows[rows["micro_batch_size"] == mbs]
        batch = _without(size, failed, others)
        if not len(batch) and not len(pending):
            break
        todo = pd.concat([batch, pending])
        metrics = _screen(model, cluster, job, profile, todo, options)
        metrics.index = todo.index
        parts.append(metrics)
        over = metrics.index[(metrics["peak_memory_bytes"] > limit_bytes).to_numpy()]
        failed = batch.loc[batch.index.intersection(over), others].drop_duplicates()
        pending = _derive_sets(size, batch, metrics.loc[batch.index], limit_bytes, sets, label)
        label += len(pending)  # before filtering: labels stay unique
        # a set whose plan did not fit at the smaller micro-batch is not tried again
        failed_sets = derived[-1].loc[derived[-1].index.intersection(over)] if derived else None
        if failed_sets is not None and len(failed_sets):
            pending = _without(pending, failed_sets[others].drop_duplicates(), others)
        derived.append(pending)
    if len(pending):
        metrics = _screen(model, cluster, job, profile, pending, options)
        metrics.index = pending.index
        parts.append(metrics)
    made = pd.concat(derived) if derived else rows.iloc[:0]
    if not parts:
        columns = ["iteration_time_s", "tokens_per_s", "mfu", "peak_memory_bytes"]
        return pd.DataFrame(columns=columns), made
    return pd.concat(parts), made


def _without(rows: pd.DataFrame, failed: pd.DataFrame, others: list[str]) -> pd.DataFrame:
    """``rows`` less those whose ``others`` columns match a row of ``failed``."""
    if not len(failed) or not len(rows):
        return rows
    keep = rows[others].merge(failed, on=others, how="left", indicator=True)
    return rows[(keep["_merge"] == "left_only").to_numpy()]


def _derive_sets(
    rows: pd.DataFrame,
    screened: pd.DataFrame,
    metrics: pd.DataFrame,
    limit_bytes: float,
    sets: tuple[str, ...],
    first_label: int,
) -> pd.DataFrame:
    """Rows with a per-module recompute set where memory binds: for each row of ``rows``
    with selective recompute of Megatron's default modules whose plan without recompute is
    not among the ``screened`` rows or does not fit (``metrics``), one copy per set of
    ``sets`` (table form), labelled from ``first_label`` up. Where that plan fits, a set
    cannot be faster: recompute only adds to a stage's backward
    (`costmodel.runtimes.megatron.screen`)."""
    if not sets or not len(rows):
        return rows.iloc[:0]
    keys = [c for c in rows.columns if c not in _RECOMPUTE_KEYS]
    fits = (metrics["peak_memory_bytes"] <= limit_bytes).to_numpy()
    none = (screened["recompute"] == "none").to_numpy()
    fitting = screened[fits & none][keys].drop_duplicates()
    plain = (rows["recompute"] == "selective") & (rows["recompute_modules"] == DEFAULT_MODULES)
    base = _without(rows[plain.to_numpy()], fitting, keys)
    out = pd.concat([base.assign(recompute_modules=s) for s in sets], ignore_index=True)
    out.index = pd.RangeIndex(first_label, first_label + len(out))
    return out


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
    first, fine_index = first_occurrences(fine)
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
    return per_group, group[fine_index]


def _threshold_s(rows: pd.DataFrame, done: pd.DataFrame, limit_bytes: float, top_k: int) -> float:
    """Iteration time of the ``top_k``-th plan `rows_to_simulate` would pick from the screened
    rows so far; infinite while fewer than ``top_k`` distinct plans fit."""
    screened = rows.loc[done.index].assign(**{c: done[c] for c in done.columns})
    fitting = screened[screened["peak_memory_bytes"] <= limit_bytes]
    picked = _pick(fitting, ["tokens_per_s", "peak_memory_bytes"], [False, True], top_k)
    return float(picked["iteration_time_s"].max()) if len(picked) == top_k else np.inf


def _visit_order(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    rows: pd.DataFrame,
    fine: np.ndarray,
    options: ExecutionOptions,
) -> tuple[np.ndarray, np.ndarray, bool]:
    """(key of every group of `_BOUND_GROUP_KEYS`, group of every row, whether the key is a
    time bound). On a runtime with a bound (megatron) the key is the group's lower bound of
    iteration time (`_group_bounds`): groups are visited smallest bound first, the most
    promising first. Otherwise (torch) it is a seeded random permutation of the groups
    (`VISIT_SEED`): a screen cut short by the time limit has priced a uniform sample of the
    groups, every degree combination alike, and the same one on every run."""
    found = _group_bounds(model, cluster, job, profile, rows, fine, options) if len(rows) else None
    if found is not None:
        return (*found, True)
    first, group = row_groups(rows, _BOUND_GROUP_KEYS)
    rank = np.random.default_rng(VISIT_SEED).permutation(len(first)).astype(float)
    return rank, group, False


def _screen_rounds(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    rows: pd.DataFrame,
    fine: np.ndarray,
    limit_bytes: float,
    top_k: int | None,
    options: ExecutionOptions,
    sets: tuple[str, ...],
    first_label: int,
    pace: SearchPace,
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, pd.DataFrame]:
    """Screened metrics of the rows visited (and of the rows derived from them with
    recompute sets, `_screen_by_micro_batch`), a mask of the rows skipped by the time bound,
    a mask of the rows the time limit left unvisited, and the derived rows.

    Groups are screened whole, in rounds, in the order of `_visit_order`. With ``top_k`` and
    a time bound, after each round the threshold is the iteration time of the ``top_k``-th
    distinct fitting plan (`_pick`), and only groups whose bound is at most the threshold
    are screened later. A skipped row's screened time is above the threshold, so it sorts
    after the ``top_k`` picks and never displaces one: the picks, and so the best plan, are
    those of screening every row (tested against ``prune=False``). The bound of a group
    holds for the rows derived from it: recompute only adds time. Round sizes: see
    `planner.pacing`. Once ``pace`` says the time limit has passed, no round starts; the
    first always runs."""
    key, group, is_bound = _visit_order(model, cluster, job, profile, rows, fine, options)
    order = np.argsort(key, kind="stable")
    sizes = np.bincount(group, minlength=len(key))
    taken = np.zeros(len(key), dtype=bool)
    parts: list[pd.DataFrame] = []
    seen: list[pd.DataFrame] = []
    made: list[pd.DataFrame] = []
    threshold, start = np.inf, 0
    budget = FIRST_ROUND_ROWS if is_bound else FIRST_PACED_ROUND_ROWS
    while start < len(order) and key[order[start]] <= threshold:
        if start and pace.expired():
            break
        began = pace.clock()
        cumulative = np.cumsum(sizes[order[start:]])
        stop = start + int(np.searchsorted(cumulative, budget)) + 1
        stop = min(stop, start + int(np.searchsorted(key[order[start:]], threshold, "right")))
        taken[order[start:stop]] = True
        fresh = np.zeros(len(key), dtype=bool)
        fresh[order[start:stop]] = True
        batch = rows[fresh[group]]
        done, derived = _screen_by_micro_batch(
            model, cluster, job, profile, batch, limit_bytes, options, sets, first_label
        )
        first_label = (
            max(first_label, int(derived.index.max()) + 1) if len(derived) else first_label
        )
        parts.append(done)
        made.append(derived)
        pace.add(len(derived))
        pace.advance(len(batch) + len(derived))
        if is_bound and top_k is not None:
            seen += [batch, derived]
            threshold = _threshold_s(pd.concat(seen), pd.concat(parts), limit_bytes, top_k)
        start = stop
        budget = budget * 4 if is_bound else next_round_rows(len(batch), pace.clock() - began)
    out = ~taken & (key > threshold)
    unvisited = ~taken & ~out
    pace.advance(int(sizes[out].sum()))
    done = pd.concat(parts) if parts else pd.DataFrame(columns=list(METRIC_COLUMNS))
    return done, out[group], unvisited[group], pd.concat(made) if made else rows.iloc[:0]


def screen_candidates(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    table: pd.DataFrame,
    limit_bytes: float,
    options: ExecutionOptions = DEFAULT_OPTIONS,
    top_k: int | None = None,
    sets: tuple[str, ...] = (),
    pace: SearchPace | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(``table``, the rows derived from it with the per-module recompute ``sets`` (table
    form) where memory binds, `_derive_sets`), each with ``model_state_floor_bytes``, the
    screened metrics (NaN where the floor alone is over the limit, the time bound skipped
    the row or the time limit left it unvisited, as those are not screened), ``screened``,
    ``bounded`` (skipped by the time bound), ``unvisited`` (left by the time limit) and
    ``fits``. The two are returned apart so that the caller joins them with its own rows
    in one copy (`planner.search`); their labels do not overlap.

    With ``top_k``, only the rows that could be among the ``top_k`` fastest fitting ones are
    screened (`_screen_rounds`); None screens every row under the floor. When no row is
    under the floor, the `CLOSEST_POOL` rows with the smallest floor are screened anyway,
    so that the closest candidates can be found. ``pace`` (default: no limit, no report)
    counts the rows dealt with and stops the screen at its time limit.
    """
    pace = pace if pace is not None else SearchPace()
    screened = table.copy(deep=False)  # copy-on-write: the columns added here stay here
    first, fine = row_groups(table, _fine_keys(table))
    screened["model_state_floor_bytes"] = (
        model_state_floor_bytes(model, job, table.iloc[first])[fine] if len(table) else 0.0
    )
    under = screened["model_state_floor_bytes"] <= limit_bytes
    if len(table) and not under.any():
        under, top_k = _closest_pool(screened), None
    rows = table[under.to_numpy()]
    pace.advance(len(table) - len(rows))
    label = int(table.index.max()) + 1 if len(table) else 0
    done, skipped, unvisited, derived = _screen_rounds(
        model, cluster, job, profile, rows, fine[under.to_numpy()], limit_bytes, top_k,
        options, sets, label, pace,
    )  # fmt: skip
    extra = derived.assign(model_state_floor_bytes=_floor(model, job, derived))
    bounded, left = rows.index[skipped], rows.index[unvisited]
    return (
        _with_metrics(screened, done, bounded, left, limit_bytes),
        _with_metrics(extra, done, bounded, left, limit_bytes),
    )


METRIC_COLUMNS = ("iteration_time_s", "tokens_per_s", "mfu", "peak_memory_bytes")
"""The screened metrics `screen_candidates` adds."""


def _with_metrics(
    rows: pd.DataFrame,
    done: pd.DataFrame,
    bounded: pd.Index,
    unvisited: pd.Index,
    limit_bytes: float,
) -> pd.DataFrame:
    """``rows`` with the metrics of those among ``done`` (NaN for the others), ``screened``,
    ``bounded`` (labels in ``bounded``), ``unvisited`` (labels in ``unvisited``) and
    ``fits``, built as arrays and added at once."""
    positions = rows.index.get_indexer(done.index)
    hit = positions >= 0
    columns: dict[str, object] = {}
    for name in METRIC_COLUMNS:
        values = np.full(len(rows), np.nan)
        values[positions[hit]] = done[name].to_numpy(dtype=float)[hit]
        columns[name] = values
    screened = np.zeros(len(rows), dtype=bool)
    screened[positions[hit]] = True
    columns["screened"] = screened
    columns["bounded"] = rows.index.isin(bounded)
    columns["unvisited"] = rows.index.isin(unvisited)
    columns["fits"] = columns["peak_memory_bytes"] <= limit_bytes  # type: ignore[operator]
    return rows.assign(**columns)


def _fine_keys(table: pd.DataFrame) -> list[str]:
    return _FINE_KEYS + [k for k in _FSDP_KEYS if k in table.columns]


def _floor(model: ModelSpec, job: TrainingJob, table: pd.DataFrame) -> np.ndarray | float:
    """`model_state_floor_bytes` of every row, computed once per `_FINE_KEYS` group."""
    if not len(table):
        return 0.0
    first, fine = row_groups(table, _fine_keys(table))
    return model_state_floor_bytes(model, job, table.iloc[first])[fine]


def rows_to_simulate(screened: pd.DataFrame, top_k: int) -> pd.DataFrame:
    """The fitting rows with the highest screened throughput; when none fits, the screened
    rows with the smallest peak memory, one per combination of model-parallel degrees."""
    fitting = screened[screened["fits"]]
    if len(fitting):
        return _pick(fitting, ["tokens_per_s", "peak_memory_bytes"], [False, True], top_k)
    pool = screened[screened["screened"]].sort_values(
        ["peak_memory_bytes", "tokens_per_s"], ascending=[True, False], kind="stable"
    )
    return pool.drop_duplicates(_PARALLEL_KEYS).head(top_k)
