"""One batch of the screen (`planner.screening`), micro-batch size by micro-batch size: the
runtime's closed-form metrics (`costmodel.screen.screen_plans`) of candidate rows, a row
skipped when the same plan with the next smaller micro-batch does not fit, and the rows
with a per-module recompute set derived where memory binds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.plan_frame import DEFAULT_MODULES
from costmodel.screen import screen_plans
from planner.pacing import next_chunk_rows
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec


@dataclass(kw_only=True, slots=True)
class ScreenChunk:
    """How `screen_by_micro_batch` prices a batch whose rows are slow to price (the torch
    runtime's screen prices each row's schedule, 0.1 to over 1 s a row of a 70B model on
    512 GPUs, so that one group of a few hundred rows takes a minute): in chunks, calling
    ``report`` with each chunk's row count once it is priced; each next chunk is sized by
    the last one's rate (`planner.pacing.next_chunk_rows`)."""

    rows: int
    """Rows of the next chunk (> 0)."""
    report: Callable[[int], None]
    """Called with the number of rows just priced."""
    clock: Callable[[], float]
    """Seconds, for the chunks' rate."""


METRIC_COLUMNS = ("iteration_time_s", "tokens_per_s", "mfu", "peak_memory_bytes")
"""The screened metrics of a row, as `_screen_rows` returns them."""
_RECOMPUTE_KEYS = ["recompute", "recompute_num_layers", "recompute_method", "recompute_modules"]
"""The knobs of a recompute choice; a per-module set is derived from a plan whose twin
without recompute does not fit (`_derive_sets`)."""


def _screen_rows(
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
    columns = list(METRIC_COLUMNS)
    if not len(plans):
        return pd.DataFrame(columns=columns, dtype=float)
    metrics = screen_plans(model, cluster, job, profile, plans, options=options)
    return metrics[columns]


def _screen_chunks(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    table: pd.DataFrame,
    options: ExecutionOptions,
    chunk: ScreenChunk | None,
) -> pd.DataFrame:
    """`_screen_rows` of ``table`` in the chunks of ``chunk``, reporting each (without
    ``chunk``: at once); a row's metrics depend on that row alone, so the chunks change no
    figure."""
    if chunk is None or not len(table):
        return _screen_rows(model, cluster, job, profile, table, options)
    parts, start = [], 0
    while start < len(table):
        began = chunk.clock()
        part = table.iloc[start : start + chunk.rows]
        parts.append(_screen_rows(model, cluster, job, profile, part, options))
        chunk.report(len(part))
        chunk.rows = next_chunk_rows(len(part), chunk.clock() - began)
        start += len(part)
    return pd.concat(parts, ignore_index=True)


def screen_by_micro_batch(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    rows: pd.DataFrame,
    limit_bytes: float,
    options: ExecutionOptions = DEFAULT_OPTIONS,
    sets: tuple[str, ...] = (),
    first_label: int = 0,
    chunk: ScreenChunk | None = None,
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
    screen call per size, plus one for the largest size's derived rows; with ``chunk``,
    each call in chunks of ``chunk.rows`` rows, reported as they are priced."""
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
        metrics = _screen_chunks(model, cluster, job, profile, todo, options, chunk)
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
        metrics = _screen_chunks(model, cluster, job, profile, pending, options, chunk)
        metrics.index = pending.index
        parts.append(metrics)
    made = pd.concat(derived) if derived else rows.iloc[:0]
    if not parts:
        return pd.DataFrame(columns=list(METRIC_COLUMNS)), made
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
