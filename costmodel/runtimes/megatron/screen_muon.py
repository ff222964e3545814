"""Megatron-core's Muon in the closed-form screen (`costmodel.runtimes.megatron.screen`):
the optimizer state and step of the rank with the most state, and ``dist_muon``'s
all-gather of the updated weights, over the screen's per-plan columns (numpy arrays).

The worst rank depends on the whole-parameter deal of `costmodel.muon_sharding`, which no
closed form captures; it depends only on the degrees (tp, dp, cp, ep, etp, which fix
``expert_dp``) and the pipeline split (`costmodel.plan_frame.SPLIT_COLUMNS`), so the
simulator's functions run once per distinct such layout and stage and their results are
broadcast onto the rows (`costmodel.plan_frame.per_distinct_row`):

- state: `costmodel.muon_sharding.worst_rank_state_bytes`, as `costmodel.model_state` counts
  it;
- the step's working bytes: `costmodel.muon_sharding.step_working_bytes` (Newton-Schulz
  temporaries, ``dist_muon``'s gather buffers), which the screen's memory adds to the
  step's peak through `costmodel.model_state.step_peak_bytes`, as
  `costmodel.model_state.stage_step_bytes` does;
- step: `costmodel.runtimes.megatron.muon_step.muon_optimizer_step_s` (Adam's passes over
  the rank's Adam parameters plus Muon's passes and Newton-Schulz GEMMs over its matrices),
  as `costmodel.runtimes.megatron.pricing` prices it;
- gather: `costmodel.optimizer_muon.layerwise_gather_s`, one all-gather of the stage's
  updated weights over dp·cp and one of its routed experts over expert-dp after the step,
  in the screen's affine form of the two groups, each at the size
  `costmodel.optimizer_muon.uneven_gather_bytes` gives the uneven deal
  (`costmodel.muon_sharding.smallest_share_fractions`); the screen takes the smallest such
  size over its stages for every stage, which keeps its time a lower bound.

Per layout the screen prices stages 0, the heaviest middle stage and p-1 (columns ``s1``
and ``p{0,1,l}{d,e}`` of `costmodel.runtimes.megatron.screen_parts`); Adam jobs get no
Muon columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import fp8_weight_storage, optimizer_precision
from costmodel.memory_allowances import model_weight_bytes
from costmodel.muon_sharding import (
    smallest_share_fractions,
    step_working_bytes,
    worst_rank_state_bytes,
)
from costmodel.optimizer_muon import muon_shards, uneven_gather_bytes
from costmodel.optimizer_state import adam_state_bytes, with_offload
from costmodel.plan_frame import SPLIT_COLUMNS, per_distinct_row, row_plan
from costmodel.runtimes.megatron.muon_step import muon_optimizer_step_s
from costmodel.runtimes.megatron.screen_parts import affine_s
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.pipeline_split_checks import split_problem

MUON_LAYOUT_KEY = ["tp", "dp", "cp", "ep", "etp", *SPLIT_COLUMNS]
"""The plan columns the worst rank's Muon state and step depend on."""
STAGE_TAGS = ("0", "1", "l")
"""The screen's stages: 0, the heaviest middle stage (column ``s1``), p-1."""


def muon_adam_bytes(job: TrainingJob, options: ExecutionOptions) -> float:
    """Adam's state bytes per parameter of the Adam part of a Muon rank (embedding, output
    layer, norms, biases) under the options' dtypes, FP8 weight fields and CPU offload, as
    `costmodel.memory.memory_per_stage` takes it (`costmodel.model_state.plan_adam_state`
    without Megatron-FSDP, which Muon does not run with)."""
    fp8 = fp8_weight_storage(options)
    optimizer = with_offload(optimizer_precision(options), options.optimizer_cpu_offload_fraction)
    return adam_state_bytes(
        job.precision,
        optimizer,
        fp8_recipe=fp8.recipe,
        fp8_param=fp8.fp8_param,
        fp4_param=fp8.fp4_param,
    ).total_bytes


def _layout_columns(
    model: ModelSpec, job: TrainingJob, profile: HardwareProfile, options: ExecutionOptions
):
    """Per distinct layout: ``muon_state{tag}`` (bytes), ``muon_step{tag}`` (seconds) and
    ``muon_work{tag}`` (the step's working bytes) of the worst rank of each of the screen's
    stages, and ``muon_gather_d`` and ``muon_gather_e``, the smallest over those stages of
    the uneven all-gather's size per gathered byte over dp·cp and expert-dp; zeros for a
    split that does not work (the screen marks the row invalid)."""
    adam_bytes = muon_adam_bytes(job, options)
    weight_bytes = model_weight_bytes(job)

    def fn(row: Mapping[str, Any]) -> dict[str, float]:
        stages = {"0": 0, "1": int(row["s1"]), "l": int(row["pp"]) - 1}
        plan = row_plan({k: row[k] for k in MUON_LAYOUT_KEY})
        out = {f"muon_{part}{tag}": 0.0 for part in ("state", "step", "work") for tag in STAGE_TAGS}
        out["muon_gather_d"] = out["muon_gather_e"] = 0.0
        if split_problem(model, plan) is not None:
            return out
        shards = muon_shards(job, plan)
        for kind, index in (("d", 0), ("e", 1)):
            out[f"muon_gather_{kind}"] = min(
                uneven_gather_bytes(
                    1.0, smallest_share_fractions(model, job, plan, s)[index], shards[index]
                )
                for s in stages.values()
            )
        for tag, stage in stages.items():
            out[f"muon_state{tag}"] = worst_rank_state_bytes(
                model, job, plan, stage, adam_bytes=adam_bytes
            )
            out[f"muon_work{tag}"] = step_working_bytes(
                model, job, plan, stage, weight_bytes=weight_bytes
            )
            dense, expert = float(row[f"p{tag}d"]), float(row[f"p{tag}e"])
            out[f"muon_step{tag}"] = muon_optimizer_step_s(
                model,
                job,
                plan,
                profile,
                stage,
                dense=dense,
                expert=expert,
                main_grad_bytes=options.main_grad_bytes,
            )
        return out

    return fn


def muon_columns(
    model: ModelSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    options: ExecutionOptions,
    c: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """The Muon columns of the screen's rows ``c`` (`_layout_columns`, evaluated once per
    distinct `MUON_LAYOUT_KEY`), as arrays aligned to the rows."""
    # the stages and their parameters follow from the layout: keys that add no group
    derived = ["s1", *(f"p{tag}{kind}" for tag in STAGE_TAGS for kind in ("d", "e"))]
    keys = [*MUON_LAYOUT_KEY, *derived]
    frame = pd.DataFrame({k: c[k] for k in keys})
    part = per_distinct_row(frame, keys, _layout_columns(model, job, profile, options))
    return {k: v.to_numpy() for k, v in part.items()}


def worst_step_s(c: dict[str, np.ndarray], tag: str) -> np.ndarray:
    """The optimizer step of stage ``tag``'s worst rank (`muon_columns`); the data-parallel
    wrapper's gradient-buffer passes are the screen's, as for Adam. A fresh array, which the
    screen adds to in place."""
    return np.array(c[f"muon_step{tag}"], dtype=float)


def worst_state_bytes(c: dict[str, np.ndarray], tag: str) -> np.ndarray:
    """Optimizer-state bytes of stage ``tag``'s worst rank (`muon_columns`), before the
    offloaded share is taken off (`costmodel.model_state.device_optimizer_bytes`)."""
    return c[f"muon_state{tag}"]


def worst_working_bytes(c: dict[str, np.ndarray], tag: str) -> np.ndarray:
    """The step's working bytes of stage ``tag``'s worst rank (`muon_columns`), 0 on
    Megatron-FSDP rows (which Muon does not run with), as
    `costmodel.model_state.stage_step_bytes` takes them."""
    return np.where(c["use_megatron_fsdp"].astype(bool), 0.0, c[f"muon_work{tag}"])


def layerwise_gather_s(
    c: dict[str, np.ndarray], dense_bytes: np.ndarray, expert_bytes: np.ndarray
) -> np.ndarray:
    """``dist_muon``'s all-gather of a stage's updated weights after the step
    (`costmodel.optimizer_muon.layerwise_gather_s`): one all-gather of ``dense_bytes`` over
    dp·cp and one of ``expert_bytes`` over expert-dp, each at the uneven deal's size
    (``muon_gather_d`` and ``muon_gather_e`` of `muon_columns`) and the groups' affine
    costs (``ag`` and ``age`` of `costmodel.runtimes.megatron.screen_parts`)."""
    return affine_s(c["ag_a"], c["ag_b"], dense_bytes * c["muon_gather_d"]) + affine_s(
        c["age_a"], c["age_b"], expert_bytes * c["muon_gather_e"]
    )
