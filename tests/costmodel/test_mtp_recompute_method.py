"""Which full-recompute methods checkpoint a multi-token-prediction depth, and what the
simulator, the screen, the activation count and HFU make of it.

Megatron-core ``MultiTokenPredictionLayer._checkpointed_forward``
(megatron/core/transformer/multi_token_prediction.py, NVIDIA/Megatron-LM d98e8a64):
``uniform`` checkpoints ``_proj_and_transformer_layer`` (and asserts
``recompute_num_layers == 1``); ``block`` warns "not supported for MTP yet. Skipping
recompute." and runs the depth without a checkpoint."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel.activation_shard import activation_shard
from costmodel.activations import stage_activations
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.hardware_flops import (
    mtp_recompute_forward_flops_per_token,
    recompute_forward_flops_per_token,
)
from costmodel.layer_activations import shard_layer_activations
from costmodel.mtp_activations import mtp_depth_tensors
from costmodel.passes import comm_groups
from costmodel.runtimes.megatron.pricing import chunk_costs
from costmodel.topology import plan_placements
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.test_screen import compare, valid_plans

H100 = load_profile("h100-sxm-80gb")
DSV3 = get_preset("deepseek-v3").replace(num_layers=8)  # 3 dense, 5 MoE, one MTP depth
JOB = TrainingJob(seq_length=4096, global_batch_size=128)
PLAN = ParallelPlan(tp=2, pp=2, dp=16, ep=8, sequence_parallel=True, distributed_optimizer=True)
UNIFORM = PLAN.replace(recompute="full", recompute_method="uniform")
BLOCK = PLAN.replace(recompute="full", recompute_method="block")  # every layer of the chunk


@pytest.mark.parametrize(
    ("recompute", "method", "checkpointed"),
    [
        ("full", "uniform", True),
        ("full", "block", False),
        ("selective", "uniform", False),
        ("none", "uniform", False),
    ],
)
def test_only_full_uniform_recompute_checkpoints_a_depth(
    recompute: str, method: str, checkpointed: bool
) -> None:
    plan = ParallelPlan(recompute=recompute, recompute_method=method)
    assert plan.checkpoints_mtp_depths is checkpointed


def _last_chunk_recompute_s(model, plan: ParallelPlan) -> float:
    groups = comm_groups(plan_placements(H100, plan))
    return chunk_costs(model, JOB, plan, H100, groups, DEFAULT_OPTIONS)[-1][-1].recompute.compute_s


def test_block_recompute_reruns_nothing_of_the_depth() -> None:
    # block recomputes every decoder layer of the chunk (recompute_num_layers None) and
    # neither the depth's layer nor its eh_proj
    without = DSV3.replace(mtp_num_layers=0)
    block_extra = _last_chunk_recompute_s(DSV3, BLOCK) - _last_chunk_recompute_s(without, BLOCK)
    assert block_extra == 0.0
    assert _last_chunk_recompute_s(without, BLOCK) > 0.0
    uniform_extra = _last_chunk_recompute_s(DSV3, UNIFORM) - _last_chunk_recompute_s(
        without, UNIFORM
    )
    assert uniform_extra > 0.0


def test_block_recompute_keeps_every_tensor_of_the_depth() -> None:
    plan = ParallelPlan(tp=2, dp=4, sequence_parallel=True)
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    x = activation_shard(job, plan, dropout=False)
    (kind,) = DSV3.mtp_depth_kinds()
    layer = shard_layer_activations(DSV3, x, plan, kind, "flash")
    outside = sum(mtp_depth_tensors(DSV3, job, plan, dropout=False).values())
    none = stage_activations(DSV3, job, plan, 0, dropout=False)
    block = stage_activations(
        DSV3, job, plan.replace(recompute="full", recompute_method="block"), 0, dropout=False
    )
    assert block.mtp_bytes == pytest.approx(layer.full_bytes + outside, rel=1e-12)
    assert block.mtp_bytes == none.mtp_bytes
    uniform = stage_activations(DSV3, job, plan.replace(recompute="full"), 0, dropout=False)
    assert uniform.mtp_bytes < block.mtp_bytes


def test_block_recompute_adds_no_depth_to_the_hardware_flops() -> None:
    model = get_preset("deepseek-v3")
    without = model.replace(mtp_num_layers=0)
    block = ParallelPlan(recompute="full", recompute_method="block")
    uniform = ParallelPlan(recompute="full")
    assert recompute_forward_flops_per_token(model, block, 4096) == (
        recompute_forward_flops_per_token(without, block, 4096)
    )
    assert recompute_forward_flops_per_token(model, uniform, 4096) == pytest.approx(
        recompute_forward_flops_per_token(without, uniform, 4096)
        + mtp_recompute_forward_flops_per_token(model, 4096)
    )


def test_delayed_scaling_counts_two_regions_per_depth_under_block() -> None:
    # without _checkpointed_forward's outer fp8 context each depth keeps the two regions of
    # _proj_and_transformer_layer, as without recompute
    job = dataclasses.replace(JOB, precision="fp8")
    delayed = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="delayed")
    mxfp8 = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="mxfp8")

    def amax_tp_s(plan: ParallelPlan) -> float:
        # without SP, where the two recipes' TP collectives agree (linear_pairs)
        plan = plan.replace(sequence_parallel=False)
        groups = comm_groups(plan_placements(H100, plan))
        kept = chunk_costs(DSV3, job, plan, H100, groups, delayed)[1][0]
        bare = chunk_costs(DSV3, job, plan, H100, groups, mxfp8)[1][0]
        return kept.forward.tp_s - bare.forward.tp_s

    none = amax_tp_s(PLAN)
    assert amax_tp_s(BLOCK) == pytest.approx(none, rel=1e-12)
    assert amax_tp_s(UNIFORM) == pytest.approx(none * 2 / 3, rel=1e-12)  # 1 + 1 of 1 + 2


def test_screen_agrees_with_the_simulator_under_block_recompute() -> None:
    model = get_preset("mixtral-8x7b").replace(num_layers=8, mtp_num_layers=1)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    grid = {
        "tp": [2, 4],
        "pp": [1, 2],
        "ep": [1, 4],
        "recompute": ["full"],
        "recompute_method": ["block"],
        "recompute_num_layers": [None],  # every layer: the screen's block memory is exact
    }
    plans = valid_plans(model, cluster, job, grid)
    assert len(plans) == 7
    time_err, mem_err = compare(model, cluster, job, plans)
    assert np.max(time_err) < 1e-3
    assert np.max(mem_err) < 1e-6
