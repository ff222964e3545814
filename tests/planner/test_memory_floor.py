"""`planner.memory_floor`: the model-state floor equals the per-plan count and holds under
Megatron-FSDP."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.memory import memory_per_stage
from costmodel.memory_allowances import FrameworkAllowance
from costmodel.rank_params import optimizer_shards, stage_params
from planner.candidates import enumerate_candidates
from planner.memory_floor import model_state_floor_bytes
from planner.space import SearchSpace, plan_from_row
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.presets import get_preset

H100 = "h100-sxm-80gb"


def _inputs(name: str, gpus: int, seq: int, batch: int):
    return (
        get_preset(name),
        ClusterSpec(hardware=H100, num_gpus=gpus),
        TrainingJob(seq_length=seq, global_batch_size=batch),
    )


def test_model_state_floor_matches_the_per_plan_count():
    """The vectorized floor equals weights, gradients and optimizer state of the fullest of
    every stage, counted plan by plan with `costmodel.memory` (plus the fixed allowance)."""
    model, cluster, job = _inputs("deepseek-v3", 1024, 4096, 8192)
    table = enumerate_candidates(model, cluster, job, SearchSpace(), 8).table
    rows = table.sample(n=40, random_state=1)
    floors = model_state_floor_bytes(model, job, rows)
    fixed = FrameworkAllowance().fixed_bytes
    for floor, row in zip(floors, rows.to_dict("records"), strict=True):
        plan = plan_from_row(row, model)
        dense_shards, expert_shards = optimizer_shards(model, plan)
        if plan.use_megatron_fsdp:  # every byte sharded over the data-parallel ranks
            dense_shards, expert_shards = plan.dp * plan.cp, max(plan.expert_dp, 1)
        per_stage = []
        for stage in range(plan.pp):
            held = stage_params(model, plan, stage)
            sharded = held.dense / dense_shards + held.expert / expert_shards
            whole = sharded if plan.use_megatron_fsdp else held.total
            per_stage.append(4 * whole + 2 * whole + 12 * sharded)
        assert floor == pytest.approx(max(per_stage) + fixed, rel=1e-12)
    assert np.all(floors > 0)


def peak_model_state_bytes(model, job, plan) -> float:
    """The largest weights + gradients + optimizer state over the plan's stages
    (`costmodel.memory.memory_per_stage`)."""
    return max(
        s.weights_bytes + s.gradients_bytes + s.optimizer_bytes
        for s in memory_per_stage(model, job, plan)
    )


@pytest.mark.parametrize("strategy", ["no_shard", "optim", "optim_grads", "optim_grads_params"])
def test_model_state_floor_holds_under_megatron_fsdp(strategy):
    """Rows with ``use_megatron_fsdp`` get a floor below the model state
    `costmodel.memory.memory_per_stage` gives their plan, whatever the strategy."""
    model, cluster, job = _inputs("llama3-8b", 8, 4096, 64)
    table = enumerate_candidates(model, cluster, job, SearchSpace(), 8).table
    rows = table[~table["distributed_optimizer"]].sample(n=30, random_state=2)
    rows = rows.assign(use_megatron_fsdp=True, data_parallel_sharding_strategy=strategy)
    floors = model_state_floor_bytes(model, job, rows)
    fixed = FrameworkAllowance().fixed_bytes
    for floor, row in zip(floors, rows.to_dict("records"), strict=True):
        plan = plan_from_row(row, model).replace(
            use_megatron_fsdp=True, data_parallel_sharding_strategy=strategy
        )
        assert floor <= peak_model_state_bytes(model, job, plan) + fixed
