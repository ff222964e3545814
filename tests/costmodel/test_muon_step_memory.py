"""Muon's optimizer step in memory and ``dist_muon``'s uneven all-gather
(`costmodel.optimizer_muon`, `costmodel.muon_sharding`, `costmodel.memory`): the
Newton-Schulz working set and the gather buffers at the step's peak, golden values computed
here from the shapes, and Adam jobs left as they were.

Sources of the hand counts: Emerging-Optimizers v0.1.0 ``OrthogonalizedOptimizer.step`` and
``newton_schulz`` (the Nesterov update held, two fp32 scale products on top of the
orthogonalized update: 16 bytes per element with bf16 Newton-Schulz tensors); Megatron-LM
d7288711 ``LayerWiseDistributedOptimizer.shard_params`` (ping-pong deal by size) and
``allgather_params`` (receive buffers of every other rank's share); PyTorch
``ProcessGroupNCCL::allgather`` (unequal outputs as coalesced broadcasts).
"""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.collectives import collective_time_s
from costmodel.memory import memory_per_stage
from costmodel.memory_allowances import FrameworkAllowance
from costmodel.muon_sharding import smallest_share_fractions, step_working_bytes
from costmodel.optimizer_muon import (
    layerwise_gather_buffer_bytes,
    layerwise_gather_s,
    muon_shards,
    newton_schulz_working_bytes,
    uneven_gather_bytes,
)
from costmodel.rank_params import stage_params
from costmodel.topology import GroupPlacement
from profiles.store import load_profile
from specs import ParallelPlan, TrainingJob
from specs.presets import get_preset

PROFILE = load_profile("h100-sxm-80gb")
LLAMA = get_preset("llama3-8b")
JOB = TrainingJob(seq_length=4096, global_batch_size=64)
MUON = dataclasses.replace(JOB, optimizer="muon")
DIST_MUON = dataclasses.replace(JOB, optimizer="dist_muon")
FIXED = FrameworkAllowance().fixed_bytes

# Llama 3 8B matrices at tp 2 (rows x cols on one rank): Q 2048 x 4096, K and V 512 x 4096
# (8 KV heads / 2 x 128), output 4096 x 2048, fc1 (both SwiGLU halves) 14336 x 4096,
# fc2 4096 x 7168; embedding and output layer 128256 x 4096 / 2; 65 norms of 4096.
Q = OUT = 2048 * 4096
KV = 512 * 4096
FC1 = 14336 * 4096
FC2 = 4096 * 7168
VOCAB = 128256 * 4096 // 2
NORMS = 65 * 4096
LLAMA_TP2_PARAMS = 32 * (Q + 2 * KV + OUT + FC1 + FC2) + 2 * VOCAB + NORMS


def test_newton_schulz_working_bytes_by_hand() -> None:
    # bf16 (2-byte) Newton-Schulz tensors: Nesterov update 4·e + scale products 12·e
    assert newton_schulz_working_bytes(14336, 4096, 2) == 16 * 14336 * 4096
    # fp32 square matrix: a step's X, A, B and new X (4·(e + m²)·2) exceed the scale's 12·e
    assert newton_schulz_working_bytes(1024, 1024, 4) == 4 * 1024**2 + 8 * (2 * 1024**2)
    # fp32 tall matrix (m = 1024, e = 4·m²): 8·(e + m²) = 10·m² < 12·e
    assert newton_schulz_working_bytes(4096, 1024, 4) == 16 * 4096 * 1024


def test_muon_step_peak_holds_the_largest_matrix_working_set() -> None:
    # tp 1, pp 4, full recompute: the middle stages' activations are small enough that the
    # step, with fc1 (28672 x 4096) orthogonalized, sets the peak
    plan = ParallelPlan.for_world(16, tp=1, pp=4, recompute="full")
    working = 16 * 28672 * 4096
    assert step_working_bytes(LLAMA, MUON, plan, 2, weight_bytes=2) == working
    stage = memory_per_stage(LLAMA, MUON, plan)[2]
    assert stage.optimizer_step_bytes > 0
    assert stage.total_bytes == pytest.approx(stage.model_state_bytes + working + FIXED)


def test_dist_muon_step_peak_holds_the_gather_buffers() -> None:
    plan = ParallelPlan.for_world(16, tp=2, recompute="full")
    assert stage_params(LLAMA, plan, 0).dense == LLAMA_TP2_PARAMS
    buffers = 2 * LLAMA_TP2_PARAMS  # a 16-bit copy of the stage's parameters
    assert layerwise_gather_buffer_bytes(DIST_MUON, plan, LLAMA_TP2_PARAMS, 0.0, 2) == buffers
    assert step_working_bytes(LLAMA, DIST_MUON, plan, 0, weight_bytes=2) == buffers
    stage = memory_per_stage(LLAMA, DIST_MUON, plan)[0]
    assert stage.total_bytes == pytest.approx(stage.model_state_bytes + buffers + FIXED)
    # gathered per bucket in the forward instead: only the Newton-Schulz working set
    overlapped = dataclasses.replace(plan, overlap_grad_reduce=True, overlap_param_gather=True)
    assert step_working_bytes(LLAMA, DIST_MUON, overlapped, 0, weight_bytes=2) == 16 * FC1
    # muon gathers nothing
    assert layerwise_gather_buffer_bytes(MUON, plan, LLAMA_TP2_PARAMS, 0.0, 2) == 0.0


def test_adam_jobs_take_no_step_working_set() -> None:
    for plan in (
        ParallelPlan.for_world(16, tp=1, pp=4, recompute="full"),
        ParallelPlan.for_world(16, tp=2, recompute="full"),
    ):
        for stage in memory_per_stage(LLAMA, JOB, plan):
            assert stage.optimizer_step_bytes == 0.0


def test_dist_muon_deals_nothing_over_one_dp_rank() -> None:
    # dp·cp = 1 with expert dp 4: shard_params returns before dealing the experts too
    plan = ParallelPlan.for_world(8, tp=8, ep=2, etp=1)
    assert (plan.dp * plan.cp, plan.expert_dp) == (1, 4)
    assert muon_shards(DIST_MUON, plan) == (1, 1)


def test_uneven_gather_size() -> None:
    # every rank receives the others' shares; the smallest share's rank receives the most
    assert uneven_gather_bytes(100.0, 0.1, 4) == pytest.approx(100 * 0.9 * 4 / 3)
    assert uneven_gather_bytes(100.0, 0.25, 4) == pytest.approx(100.0)  # an even deal
    assert uneven_gather_bytes(100.0, 1.0, 1) == 0.0


def test_dist_muon_gather_prices_the_smallest_share() -> None:
    # tp 2, dp 8: 194 tensors sorted by size and dealt ping-pong over 8 ranks (a loop of 16
    # positions gives each rank 2 of every 16): each rank gets 8 K/V, 8 Q/output, 4 fc2 and
    # 4 fc1; the two vocabulary matrices go to ranks 0 and 1, so ranks 2-7 hold the fewest,
    # plus 1/8 of the norms
    plan = ParallelPlan.for_world(16, tp=2)
    smallest = 8 * KV + 8 * Q + 4 * FC2 + 4 * FC1 + NORMS / 8
    dense, expert = smallest_share_fractions(LLAMA, DIST_MUON, plan, 0)
    assert dense == pytest.approx(smallest / LLAMA_TP2_PARAMS, rel=1e-12)
    assert expert == pytest.approx(1 / 8)  # no routed experts: an even (empty) deal
    assert smallest_share_fractions(LLAMA, MUON, plan, 0) == (1.0, 1.0)
    group = GroupPlacement(
        axes="dp-cp",
        size=8,
        num_nodes=1,
        num_domains=1,
        ranks_per_node=8,
        ranks_per_domain=8,
        nics_per_node=0,
    )
    total = 2.0 * LLAMA_TP2_PARAMS
    seconds = layerwise_gather_s(
        PROFILE, DIST_MUON, ((LLAMA_TP2_PARAMS, 0.0),), ((2.0, 2.0),), (group, group),
        (dense, expert),
    )  # fmt: skip
    size = total * (1 - smallest / LLAMA_TP2_PARAMS) * 8 / 7
    assert seconds == pytest.approx(collective_time_s(PROFILE, "all_gather", size, group))
    assert seconds > collective_time_s(PROFILE, "all_gather", total, group)
