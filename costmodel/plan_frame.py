"""Plans as DataFrame rows: the input of the screen (`costmodel.screen.screen_plans`).

One row per plan, one column per `ParallelPlan` field (`PLAN_COLUMNS`); `plans_frame`
builds the frame from plans, `normalized_frame` completes a partial one and `row_plan`
turns a row back into a plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

import pandas as pd

from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.plan import ParallelPlan

SAVER_FIELDS = ("recompute_modules", "cpu_offloading_num_layers", "offload_modules")
"""`ParallelPlan` fields the screen does not price (per-module recompute and activation
offloading): its rows keep the plan defaults, Megatron's default selective recompute and
no offloading; `costmodel.estimate` prices them."""
PLAN_COLUMNS = tuple(f.name for f in fields(ParallelPlan) if f.name not in SAVER_FIELDS)
"""Accepted columns: `ParallelPlan` field names but `SAVER_FIELDS`. Missing ones take the
plan defaults; dp, when missing, is derived as num_gpus / (tp·pp·cp)."""


def plans_frame(plans: Iterable[ParallelPlan]) -> pd.DataFrame:
    """One row per plan, one column per `ParallelPlan` field."""
    return pd.DataFrame([{name: getattr(p, name) for name in PLAN_COLUMNS} for p in plans])


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
        if name not in df.columns:
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
    values.update(changes)
    return ParallelPlan(**values)
