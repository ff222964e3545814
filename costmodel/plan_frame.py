"""Plans as DataFrame rows: the input of the screen (`costmodel.screen.screen_plans`).

One row per plan, one column per `ParallelPlan` field (`PLAN_COLUMNS`); `plans_frame`
builds the frame from plans, `normalized_frame` completes a partial one and `row_plan`
turns a row back into a plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

import numpy as np
import pandas as pd

from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.plan import ParallelPlan

MODULE_COLUMNS = ("recompute_modules", "offload_modules")
"""`ParallelPlan` module-tuple fields, kept in a frame as one string each
(`modules_column`), so that every column can be a merge and grouping key."""
DEFAULT_MODULES = ""
"""Table form of ``recompute_modules`` None (Megatron's default, ``core_attn``) and of an
empty ``offload_modules``."""
NO_MODULES = "none"
"""Table form of an empty ``recompute_modules`` (selective recompute of no module)."""
PLAN_COLUMNS = tuple(f.name for f in fields(ParallelPlan))
"""Accepted columns: `ParallelPlan` field names. Missing ones take the plan defaults; dp,
when missing, is derived as num_gpus / (tp·pp·cp); `MODULE_COLUMNS` in table form."""


def modules_column(modules: tuple[str, ...] | None) -> str:
    """A module tuple in table form: comma-joined names; `DEFAULT_MODULES` for None,
    `NO_MODULES` for an empty tuple."""
    if modules is None:
        return DEFAULT_MODULES
    return ",".join(modules) if modules else NO_MODULES


def modules_from_column(text: str, name: str) -> tuple[str, ...] | None:
    """The `ParallelPlan` value of module column ``name`` (`MODULE_COLUMNS`) from its table
    form (inverse of `modules_column`; ``offload_modules`` has no None: empty instead)."""
    if text == NO_MODULES:
        return ()
    if text == DEFAULT_MODULES:
        return None if name == "recompute_modules" else ()
    return tuple(text.split(","))


def plans_frame(plans: Iterable[ParallelPlan]) -> pd.DataFrame:
    """One row per plan, one column per `ParallelPlan` field (`MODULE_COLUMNS` in table
    form)."""
    rows = [{name: getattr(p, name) for name in PLAN_COLUMNS} | module_cells(p) for p in plans]
    return pd.DataFrame(rows)


def module_cells(plan: ParallelPlan) -> dict[str, str]:
    """The plan's `MODULE_COLUMNS` in table form."""
    return {
        "recompute_modules": modules_column(plan.recompute_modules),
        "offload_modules": modules_column(plan.offload_modules or None),
    }


def normalized_frame(frame: pd.DataFrame, cluster: ClusterSpec) -> pd.DataFrame:
    """``frame`` with every `PLAN_COLUMNS` column (plan defaults where missing; dp derived
    from the cluster), etp resolved, optional counts as 0 for None, switches as bools;
    unknown columns raise `SpecError`."""
    unknown = sorted(set(frame.columns) - set(PLAN_COLUMNS))
    if unknown:
        raise SpecError(f"screen: unknown plan columns {unknown}; valid: {', '.join(PLAN_COLUMNS)}")
    df = frame.reset_index(drop=True).copy()
    defaults = ParallelPlan()
    for name in PLAN_COLUMNS:
        if name in MODULE_COLUMNS:
            df[name] = _module_column(df[name], name) if name in df.columns else DEFAULT_MODULES
        elif name not in df.columns:
            df[name] = getattr(defaults, name)
    if "dp" not in frame.columns:
        df["dp"] = cluster.num_gpus // (df["tp"] * df["pp"] * df["cp"])
    df["etp"] = df["etp"].where(df["etp"].notna(), df["tp"]).astype(int)
    for name in _OPTIONAL_COUNTS:  # None becomes 0 so that the column can be a merge key
        df[name] = df[name].where(df[name].notna(), 0).astype(int)
    layout = df["pipeline_model_parallel_layout"]
    df["pipeline_model_parallel_layout"] = layout.where(layout.notna(), "").astype(str)
    for name in (
        "sequence_parallel",
        "distributed_optimizer",
        "overlap_grad_reduce",
        "overlap_param_gather",
        "tp_comm_overlap",
        "account_for_embedding_in_pipeline_split",
        "account_for_loss_in_pipeline_split",
        "use_megatron_fsdp",
    ):
        df[name] = df[name].astype(bool)
    df["sequence_parallel"] &= df["tp"] > 1
    return df


def _module_column(values: pd.Series, name: str) -> pd.Series:
    """Module column ``name`` in table form: strings kept, tuples and missing values
    converted (`modules_column`)."""
    if pd.api.types.infer_dtype(values, skipna=False) == "string":
        return values

    def cell(value: Any) -> str:
        if isinstance(value, str):
            return value
        modules = tuple(value) if isinstance(value, (tuple, list)) else None
        return modules_column(modules if name == "recompute_modules" else modules or None)

    return values.map(cell)


_OPTIONAL_COUNTS = (
    "recompute_num_layers",
    "ddp_bucket_size",
    "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers",
)
SPLIT_COLUMNS = [
    "pp",
    "vpp",
    "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "pipeline_model_parallel_layout",
]
"""The columns that decide the pipeline split (`specs.pipeline_split`)."""


def row_plan(row: Mapping[str, Any], **changes: object) -> ParallelPlan:
    """The `ParallelPlan` of one (partial) row; missing fields take the plan defaults."""
    defaults = ParallelPlan()
    values = {name: getattr(defaults, name) for name in PLAN_COLUMNS}
    values.update({k: v.item() if hasattr(v, "item") else v for k, v in row.items()})
    for name in _OPTIONAL_COUNTS:
        values[name] = int(values[name]) if values[name] else None
    values["pipeline_model_parallel_layout"] = values["pipeline_model_parallel_layout"] or None
    for name in MODULE_COLUMNS:
        if isinstance(values[name], str):
            values[name] = modules_from_column(values[name], name)
    values["cpu_offloading_num_layers"] = int(values["cpu_offloading_num_layers"])
    values.update(changes)
    return ParallelPlan(**values)


def per_distinct_row(df: pd.DataFrame, keys: list[str], fn) -> pd.DataFrame:
    """Evaluate ``fn(row) -> dict`` once per distinct ``keys`` of ``df`` (``row``: a dict of
    those keys, distinct rows in order of first appearance) and align the results to
    ``df`` by position, in a frame with a fresh range index: each row takes its group's
    result by one take, not by a join on the keys."""
    group = df.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()
    first = np.unique(group, return_index=True)[1]
    unique = df[keys].iloc[first]
    rows = [
        fn(dict(zip(keys, values, strict=True)))
        for values in unique.itertuples(index=False, name=None)
    ]
    return pd.DataFrame(rows).iloc[group].reset_index(drop=True)
