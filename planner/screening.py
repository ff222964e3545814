"""Screening for the plan search (`planner.search`): the screen in rounds, and the rows
handed to the event simulator.

- `screen_candidates`: drop the candidates whose model-state floor
  (`planner.memory_floor.model_state_floor_bytes`) is over the limit, then the runtime's
  screen of the others in rounds of whole groups, each round micro-batch size by
  micro-batch size (`planner.micro_batch_screen`: candidates with the searched per-module
  recompute sets derived from the selective ones whose plan without recompute does not
  fit, where memory binds). On the megatron runtime the rounds follow a lower bound of
  iteration time (`costmodel.screen.screen_lower_bounds`); a round's threshold is the
  ``top_k``-th distinct fitting plan so far, and candidates whose bound is above it are
  skipped: they could not be among the plans simulated, so the simulated plans are those
  of screening every candidate. Without a bound (the torch runtime) the groups are
  visited in a seeded random order. After each round the search's
  `planner.pacing.SearchPace` reports progress and may stop the screen at its time limit.
- `rows_to_simulate`: the ``top_k`` distinct fitting rows with the highest screened
  throughput, or the closest to fitting when none fits.

Groupings over millions of rows use `planner.row_groups` (factorized columns and hashing)
rather than pandas merges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.plan_frame import DEFAULT_MODULES
from costmodel.screen import screen_lower_bounds
from planner.memory_floor import model_state_floor_bytes, smallest_adam_state_bytes
from planner.micro_batch_screen import METRIC_COLUMNS, ScreenChunk, screen_by_micro_batch
from planner.pacing import (
    FIRST_PACED_ROUND_ROWS,
    MIN_PACED_ROUND_ROWS,
    SearchPace,
    next_round_rows,
)
from planner.row_groups import first_occurrences, row_groups
from planner.space import DEGREE_COLUMNS, PLAN_COLUMNS
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec

FIRST_ROUND_ROWS = 20_000
"""Candidates screened in the first round of the bounded screen (the groups with the
smallest time bound); each later round may take four times as many."""

VISIT_SEED = 0
"""Seed of the order in which a screen without a time bound visits its groups."""

CLOSEST_POOL = 2_000
"""When no candidate passes the model-state floor, this many with the smallest floor are
screened to find the closest ones."""

_PARALLEL_KEYS = ["tp", "pp", "cp", "ep", "etp"]
_BOUND_GROUP_KEYS = [
    *(c for c in DEGREE_COLUMNS if c != "micro_batch_size"),
    "sequence_parallel",
    "tp_comm_overlap",
    "cp_comm_type",
]
"""What a time bound is computed for (with the micro-batch size): the knobs the pipeline
phase depends on. A group (these keys, every micro-batch size) is screened whole or not at
all, so that `planner.micro_batch_screen.screen_by_micro_batch` sees the smaller
micro-batches of every row."""
_FINE_KEYS = [*_BOUND_GROUP_KEYS, "micro_batch_size", "distributed_optimizer"]
"""What the memory floor and the time bound depend on: grouped once over every candidate
(with `_FSDP_KEYS` where the table has them)."""
_FSDP_KEYS = ["use_megatron_fsdp", "data_parallel_sharding_strategy"]


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


@dataclass(kw_only=True, slots=True)
class _RoundReport:
    """The progress of one round of the torch runtime's screen as its chunks are priced
    (`planner.micro_batch_screen.ScreenChunk`). Rows priced beyond the round's ``rows``
    candidates are rows derived with per-module recompute sets, which join the total as
    they are priced; the round's end counts the rest (rows skipped after a smaller
    micro-batch did not fit, derived rows not yet counted)."""

    pace: SearchPace
    rows: int
    done: int = 0
    added: int = 0

    def __call__(self, count: int) -> None:
        extra = max(0, self.done + count - max(self.rows, self.done))
        self.pace.add(extra)
        self.added += extra
        self.done += count
        self.pace.advance(count)


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
    recompute sets, `planner.micro_batch_screen.screen_by_micro_batch`), a mask of the rows
    skipped by the time bound, a mask of the rows the time limit left unvisited, and the
    derived rows.

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
        reported = _RoundReport(pace=pace, rows=len(batch))
        chunk = (
            None
            if is_bound
            else ScreenChunk(rows=MIN_PACED_ROUND_ROWS, report=reported, clock=pace.clock)
        )
        done, derived = screen_by_micro_batch(
            model, cluster, job, profile, batch, limit_bytes, options, sets, first_label, chunk
        )
        first_label = (
            max(first_label, int(derived.index.max()) + 1) if len(derived) else first_label
        )
        parts.append(done)
        made.append(derived)
        pace.add(len(derived) - reported.added)
        pace.advance(len(batch) + len(derived) - reported.done)
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
    form) where memory binds, `planner.micro_batch_screen`), each with
    ``model_state_floor_bytes``, the screened metrics (NaN where the floor alone is over the
    limit, the time bound skipped the row or the time limit left it unvisited, as those are
    not screened), ``screened``, ``bounded`` (skipped by the time bound), ``unvisited``
    (left by the time limit) and ``fits``. The two are returned apart so that the caller
    joins them with its own rows in one copy (`planner.search`); their labels do not overlap.

    With ``top_k``, only the rows that could be among the ``top_k`` fastest fitting ones are
    screened (`_screen_rounds`); None screens every row under the floor. When no row is
    under the floor, the `CLOSEST_POOL` rows with the smallest floor are screened anyway,
    so that the closest candidates can be found. ``pace`` (default: no limit, no report)
    counts the rows dealt with and stops the screen at its time limit.
    """
    pace = pace if pace is not None else SearchPace()
    screened = table.copy(deep=False)  # copy-on-write: the columns added here stay here
    first, fine = row_groups(table, _fine_keys(table))
    state = smallest_adam_state_bytes(job, options)
    offload = options.optimizer_cpu_offload_fraction
    screened["model_state_floor_bytes"] = (
        model_state_floor_bytes(model, job, table.iloc[first], state, offload)[fine]
        if len(table)
        else 0.0
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
    extra = derived.assign(model_state_floor_bytes=_floor(model, job, derived, state, offload))
    bounded, left = rows.index[skipped], rows.index[unvisited]
    return (
        _with_metrics(screened, done, bounded, left, limit_bytes),
        _with_metrics(extra, done, bounded, left, limit_bytes),
    )


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


def _floor(
    model: ModelSpec,
    job: TrainingJob,
    table: pd.DataFrame,
    state_bytes: int,
    offload_fraction: float,
) -> np.ndarray | float:
    """`model_state_floor_bytes` of every row, computed once per `_FINE_KEYS` group, with
    ``state_bytes`` of Adam's state per parameter and ``offload_fraction`` of it on the
    host."""
    if not len(table):
        return 0.0
    first, fine = row_groups(table, _fine_keys(table))
    return model_state_floor_bytes(model, job, table.iloc[first], state_bytes, offload_fraction)[
        fine
    ]


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
