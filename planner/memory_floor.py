"""The model-state memory floor of candidate plans: a lower bound of each candidate's peak
memory per rank, from its weights, gradients and optimizer state alone. The search
(`planner.screening`) drops the candidates whose floor is over the memory limit before the
closed-form screen, which is the expensive step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import fp8_weight_storage, optimizer_precision
from costmodel.memory_allowances import FrameworkAllowance
from costmodel.model_state import bytes_per_param, device_optimizer_bytes, trained_weights
from costmodel.optimizer_state import adam_state_bytes
from costmodel.rank_params import stage_params
from costmodel.schedules import plan_split
from planner.row_groups import row_groups
from planner.space import plan_from_row
from planner.splits import SPLIT_COLUMNS
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

_PARAM_KEYS = ["tp", "pp", "vpp", "ep", "etp", *SPLIT_COLUMNS]
"""What the parameters a rank holds on a stage depend on."""

FROZEN_FLOOR_BYTES = 1.0
"""Fewest bytes a frozen weight element takes in an fp8 or nvfp4 run: an FP8 parameter
without its transpose (`costmodel.memory_allowances.Fp8WeightStorage`; NVFP4 parameters
take 1.125, bf16 ones 2 and more)."""


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


def _stage_param_table(
    model: ModelSpec, rows: pd.DataFrame, lora: LoraSpec | None = None
) -> np.ndarray:
    """Per row of ``rows`` (distinct (tp, pp, vpp, ep, etp, split)): the parameters one
    rank holds on each stage of `_floor_stages`, shape (rows, 3, 3): [:, 0] trained dense,
    [:, 1] trained expert, [:, 2] frozen (a LoRA job's base, with ``lora``'s adapters
    trained: `costmodel.rank_params.StageParams`), a repeated stage where fewer than three
    are distinct."""
    out = np.zeros((len(rows), 3, 3))
    for i, row in enumerate(rows.to_dict("records")):
        plan = plan_from_row(row | {"cp": 1, "dp": 1, "micro_batch_size": 1}, model)
        stages = sorted(_floor_stages(model, plan))
        stages += [stages[-1]] * (3 - len(stages))
        for j, stage in enumerate(stages):
            held = stage_params(model, plan, stage, lora)
            out[i, :, j] = held.trained_dense, held.trained_expert, held.frozen_base
    return out


def smallest_adam_state_bytes(job: TrainingJob, options: ExecutionOptions) -> int:
    """The fewest bytes per parameter Adam's state takes under ``options`` on any plan:
    the smaller of `costmodel.optimizer_state.adam_state_bytes` without and with
    Megatron-FSDP (which keeps fp32 main weights), for the trained parameters' storage
    (`costmodel.model_state.trained_weights`)."""
    weights = trained_weights(job, fp8_weight_storage(options))
    return min(
        adam_state_bytes(
            job.precision,
            optimizer_precision(options),
            fp8_recipe=weights.recipe,
            fp8_param=weights.fp8_param,
            fp4_param=weights.fp4_param,
            megatron_fsdp=fsdp,
        ).total_bytes
        for fsdp in (False, True)
    )


def model_state_floor_bytes(
    model: ModelSpec,
    job: TrainingJob,
    table: pd.DataFrame,
    state_bytes: int | None = None,
    optimizer_offload_fraction: float = 0.0,
) -> np.ndarray:
    """Per row, a lower bound of the peak memory per rank: weights, gradients and optimizer
    state of the first, the last and the fullest middle pipeline stage
    (`costmodel.rank_params.stage_params`, the byte counts of `costmodel.model_state`, the shards of
    `costmodel.rank_params.optimizer_shards`) plus the fixed framework allowance. Activations
    only add to it, so a row whose floor is over the limit cannot fit; the search drops it
    before the closed-form screen, which is the expensive step. Stage parameters are
    counted once per distinct (tp, pp, vpp, ep, etp, split); the sharding is numpy
    arithmetic over the rows. A row with ``use_megatron_fsdp`` (when the table has that
    column) is bounded by every byte sharded, which holds for each sharding strategy
    (`costmodel.runtimes.megatron.megatron_fsdp.fsdp_state_bytes` keeps at least that).
    ``state_bytes``: Adam's state per parameter (`smallest_adam_state_bytes`; None: the
    default fp32 state); ``optimizer_offload_fraction`` of the optimizer state is on the
    host (`costmodel.model_state.device_optimizer_bytes`). A LoRA job's frozen base adds
    its weights alone, at least `FROZEN_FLOOR_BYTES` per element in an fp8 or nvfp4 run."""
    weight, grad, state = bytes_per_param(job)
    frozen_bytes = weight if job.precision in ("bf16", "fp32") else FROZEN_FLOOR_BYTES
    state = state if state_bytes is None else state_bytes
    first, group = row_groups(table, _PARAM_KEYS)
    params = _stage_param_table(model, table.iloc[first], job.lora)[group]
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
        dense, expert, frozen = params[:, 0, i], params[:, 1, i], params[:, 2, i]
        sharded = dense / dense_shards + expert / expert_shards
        whole = np.where(fsdp, sharded, dense + expert)
        optimizer = device_optimizer_bytes(state * sharded, optimizer_offload_fraction)
        worst = np.maximum(worst, (weight + grad) * whole + frozen_bytes * frozen + optimizer)
    return worst + FrameworkAllowance().fixed_bytes
